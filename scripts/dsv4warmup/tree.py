"""Apply, check, revert and inspect the patch series on a vLLM source tree.

The tree may be a git checkout or a plain source tree (an unpacked sdist).
Every operation is planned in a scratch copy of the files it touches first;
the tree is written only once the whole series and overlay are known to go
in (or out) cleanly, so a refusal leaves it byte-identical. The writes
themselves are journaled (journal.py): a write the OS refuses is rolled back,
and a run that was killed is rolled back by the next apply or revert. One run
at a time per tree (a lock file beside the journal).

Standard library only, plus git: ``make apply`` needs no test environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import journal, sources
from . import series as series_mod
from .paths import PATCHES
from .series import Patch, Series

FINGERPRINTS = PATCHES / "fingerprints.json"


class TreeError(RuntimeError):
    """A refusal or a failed write: the message says which file and why, and
    whether the tree is unchanged (a refusal always leaves it so)."""


# --------------------------------------------------------------------------
# Base detection


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_fingerprints() -> dict[str, dict[str, str | None]]:
    return json.loads(FINGERPRINTS.read_text())


def tree_fingerprint(tree: Path, paths: Iterable[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for rel in paths:
        f = tree / rel
        out[rel] = _sha256(f.read_bytes()) if f.is_file() else None
    return out


def declared_version(tree: Path) -> str | None:
    """The version the tree says it is: PKG-INFO, vllm/_version.py or a git tag."""
    pkg_info = tree / "PKG-INFO"
    if pkg_info.is_file():
        m = re.search(r"^Version: (\S+)$", pkg_info.read_text(errors="replace"), re.M)
        if m:
            return m.group(1)
    version_py = tree / "vllm" / "_version.py"
    if version_py.is_file():
        m = re.search(r"version = ['\"]([^'\"]+)['\"]", version_py.read_text())
        if m:
            return m.group(1)
    if (tree / ".git").exists():
        res = subprocess.run(
            ["git", "-C", str(tree), "describe", "--tags", "--abbrev=0"],
            capture_output=True,
            text=True,
        )
        if res.returncode == 0:
            return res.stdout.strip().removeprefix("v")
    return None


@dataclass
class Nearest:
    """The known base closest to a tree whose release has no series: the base
    with the fewest differing files among those any series touches or adds
    (the paths of fingerprints.json)."""

    base: str
    known: int  # how many files were compared
    differ: dict[str, str]  # path -> how it differs ("" when only its content does)
    own: list[str]  # the differing files the base's own series patches (sorted)


@dataclass
class Detection:
    base: str | None  # the supported base whose series applies, if any
    state: str  # pristine | applied | modified | unsupported | unknown
    version: str | None = None  # what the tree is, if known
    drift: list[str] = field(default_factory=list)  # files that differ from pristine
    note: str = ""
    # state "applied": the touched files with the series reverse-applied (what
    # revert writes), kept so that revert does not reverse-apply it twice
    reverted: dict[str, bytes | None] | None = field(default=None, repr=False)
    nearest: Nearest | None = None  # state "unsupported" / "unknown"


_FROM_SDIST: dict[str, dict[str, str | None]] = {}


def base_fingerprint(table: dict[str, dict[str, str | None]], base: str) -> dict[str, str | None]:
    """``base``'s entry of fingerprints.json; read from its sdist when the table
    predates the base's series (``make fingerprints`` writes it)."""
    if base in table:
        return table[base]
    if base in _FROM_SDIST:
        return _FROM_SDIST[base]
    paths = set(next(iter(table.values()), {}))
    s = series_mod.load(base, check_overlay=False)
    paths.update(s.touched_files, s.overlay_files)
    try:
        members = sources.read_members(base, sorted(paths))
    except sources.SourceError as e:
        raise TreeError(
            f"{FINGERPRINTS.name} has no entry for vLLM {base} and its sdist cannot be read "
            f"({e}); run `make fingerprints`"
        ) from None
    fp = {rel: _sha256(d) if d is not None else None for rel, d in members.items()}
    _FROM_SDIST[base] = fp
    return fp


def detect(tree: Path) -> Detection:
    table = load_fingerprints()
    bases = series_mod.available_bases()
    for version, fp in table.items():
        if tree_fingerprint(tree, fp) == fp:
            if version in bases:
                return Detection(version, "pristine", version)
            return _unsupported(tree, table, version)
    version = declared_version(tree)
    # The base the tree says it is first: each try reverse-applies a series.
    said = version.split("+")[0] if version else None
    for base in sorted(bases, key=lambda b: b != said):
        reverted = _reverted(tree, series_mod.load(base))
        if reverted is not None:
            return Detection(base, "applied", base, reverted=reverted)
    if version is None:
        return _unsupported(tree, table, None)
    base_version = version.split("+")[0]
    if base_version not in bases:
        return _unsupported(tree, table, version)
    fp = base_fingerprint(table, base_version)
    current = tree_fingerprint(tree, fp)
    drift = sorted(p for p in fp if current[p] != fp[p])
    return Detection(base_version, "modified", version, drift)


def _unsupported(
    tree: Path, table: dict[str, dict[str, str | None]], version: str | None
) -> Detection:
    near = nearest_base(tree, table)
    return Detection(
        None,
        "unsupported" if version else "unknown",
        version,
        sorted(near.differ) if near else [],
        nearest=near,
    )


def nearest_base(
    tree: Path, table: dict[str, dict[str, str | None]] | None = None
) -> Nearest | None:
    """The supported base with the fewest files differing from ``tree``
    (the newer one on a tie); None when no series exists or the tree holds
    none of any base's files as that base has it (nothing to compare)."""
    table = load_fingerprints() if table is None else table
    best: Nearest | None = None
    for base in reversed(series_mod.available_bases()):  # newest first: it wins a tie
        fp = base_fingerprint(table, base)
        current = tree_fingerprint(tree, fp)
        if not any(h is not None and current[p] == h for p, h in fp.items()):
            continue
        differ = {
            p: "not in this tree"
            if current[p] is None
            else f"not in vLLM {base}"
            if fp[p] is None
            else ""
            for p in sorted(fp)
            if current[p] != fp[p]
        }
        if best is None or len(differ) < len(best.differ):
            own = series_mod.load(base, check_overlay=False).touched_files
            best = Nearest(base, len(fp), differ, sorted(p for p in own if p in differ))
    return best


def _port_advice(near: Nearest, version: str | None) -> list[str]:
    """What to do about a release the series does not know."""
    release = (version or "").split("+")[0]
    to = release if re.fullmatch(r"\d+\.\d+\.\d+", release) else "<x.y.z>"
    port = f"`make port FROM_BASE={near.base} BASE={to}`"
    how = (
        f"  it replays the v{near.base} series onto pristine vLLM {to} in build/dev/v{to} "
        f"with three-way merges and writes patches/v{to}/; where a patch does not merge it "
        f"stops, the patches before it committed there: carry the rest over by hand, then "
        f"`make regen BASE={to}`"
    )
    if not version:
        first = f"to port the series: find which vLLM release this tree is, then {port}"
    elif to != release:
        first = f"to port the series: {port}, with the vLLM release this tree is built on"
    elif release not in sources.SDIST_SHA256:
        first = (
            f"to port the series: add the sha256 of vllm-{release}.tar.gz (from the package "
            f"index) to SDIST_SHA256 in scripts/dsv4warmup/sources.py, then {port}"
        )
    else:
        first = f"to port the series: {port}"
    return [first, how]


def _listed(paths: list[str], near: Nearest) -> list[str]:
    return [f"    {p} ({near.differ[p]})" if near.differ[p] else f"    {p}" for p in paths]


def unsupported_lines(det: Detection, tree: Path, list_all: bool = False) -> list[str]:
    """Why a tree is refused, the closest known base and what to do: the
    files of that base's own series first, all of them; the rest counted
    (or, ``list_all``, listed too)."""
    have = ", ".join(series_mod.available_bases()) or "none"
    if det.version:
        head = f"this patch set has no series for vLLM {det.version} (series exist for: {have})"
    else:
        head = (
            "cannot tell which vLLM release this tree is (its files match no supported base "
            f"and it declares no version); series exist for: {have}"
        )
    near = det.nearest
    if near is None:
        return [head]
    lines = [
        head,
        f"closest known base: vLLM {near.base}; {len(near.differ)} of the {near.known} files "
        f"the series touch or add {'differs' if len(near.differ) == 1 else 'differ'} from it",
    ]
    if near.own:
        lines.append(f"  files the v{near.base} series patches ({len(near.own)}):")
        lines += _listed(near.own, near)
    else:
        lines.append(f"  none of them is a file the v{near.base} series patches")
    rest = [p for p in near.differ if p not in near.own]
    if rest and list_all:
        lines.append(f"  files only other series touch ({len(rest)}):")
        lines += _listed(rest, near)
    elif rest:
        lines.append(
            f"  and {len(rest)} file{'s' if len(rest) > 1 else ''} only other series touch "
            f"(`make status VLLM_DIR={shlex.quote(str(tree))}` lists them)"
        )
    lines += _port_advice(near, det.version)
    return lines


def _unsupported_message(det: Detection, tree: Path) -> str:
    lines = unsupported_lines(det, tree)
    lines.append(f"{tree} is unchanged")
    return "\n  ".join(lines)


# --------------------------------------------------------------------------
# Planning in a scratch copy


class _Scratch:
    """Copies of the files a series touches, where `git apply` is tried."""

    def __init__(self, tree: Path, paths: Iterable[str]) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="dsv4-warmup-")
        self.root = Path(self._tmp.name) / "tree"
        self.root.mkdir()
        self.paths = list(paths)
        for rel in self.paths:
            src = tree / rel
            if src.is_file():
                dst = self.root / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)

    def close(self) -> None:
        self._tmp.cleanup()

    def __enter__(self) -> _Scratch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def git_apply(self, patch: Patch, reverse: bool = False) -> str | None:
        """None if the patch went in; otherwise git's complaint."""
        cmd = ["git", "apply", "--whitespace=nowarn"]
        if reverse:
            cmd.append("--reverse")
        env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(self.root.parent))
        env.pop("GIT_DIR", None)
        env.pop("GIT_WORK_TREE", None)
        res = subprocess.run(
            [*cmd, str(patch.path)], cwd=self.root, capture_output=True, text=True, env=env
        )
        return None if res.returncode == 0 else (res.stderr or res.stdout)

    def contents(self) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        for rel in self.paths:
            f = self.root / rel
            out[rel] = f.read_bytes() if f.is_file() else None
        return out


def _explain(patch: Patch, complaint: str, reverse: bool = False) -> str:
    """Turn git apply's complaint into: which patch, file and hunk."""
    hunks = patch.hunks()
    m = re.search(r"patch failed: (\S+):(\d+)", complaint)
    if m:
        path, line = m.group(1), int(m.group(2))
        hunk = next(
            (h for h in hunks if h.path == path and h.old_start == line),
            next((h for h in hunks if h.path == path), None),
        )
        where = f" hunk {hunk.header.split(' @@')[0]} @@" if hunk else ""
        what = "does not reverse-apply to" if reverse else "does not apply to"
        return f"{patch.name} {what} {path}:{where} (the file's local content conflicts)"
    m = re.search(r"error: (\S+): (No such file or directory|does not exist in index)", complaint)
    if m:
        return f"{patch.name} needs {m.group(1)}, which the tree does not have"
    m = re.search(r"error: (\S+): already exists", complaint)
    if m:
        return f"{patch.name} creates {m.group(1)}, which the tree already has"
    return f"{patch.name}: {complaint.strip()}"


def _reverted(tree: Path, series: Series) -> dict[str, bytes | None] | None:
    """If the series is applied (overlay in place, every patch reverse-applies):
    the touched files with it taken out; else None."""
    for rel in series.overlay_files:
        f = tree / rel
        if not f.is_file() or f.read_bytes() != series.overlay_bytes(rel):
            return None
    with _Scratch(tree, series.touched_files) as scratch:
        if any(scratch.git_apply(p, reverse=True) is not None for p in reversed(series.patches)):
            return None
        return scratch.contents()


def plan_apply(tree: Path, series: Series) -> dict[str, bytes | None]:
    """The new content of every file the series writes; raises TreeError."""
    with _Scratch(tree, series.touched_files) as scratch:
        for patch in series.patches:
            complaint = scratch.git_apply(patch)
            if complaint is not None:
                raise TreeError(_explain(patch, complaint))
        result = scratch.contents()
    for rel in series.overlay_files:
        f = tree / rel
        data = series.overlay_bytes(rel)
        if f.exists() and (not f.is_file() or f.read_bytes() != data):
            raise TreeError(f"overlay file {rel} already exists in the tree with other content")
        result[rel] = data
    return result


def plan_revert(
    tree: Path, series: Series, reverted: dict[str, bytes | None] | None = None
) -> dict[str, bytes | None]:
    """What revert writes; ``reverted``: detect()'s result for this tree, if any."""
    if reverted is not None:
        result = dict(reverted)
    else:
        with _Scratch(tree, series.touched_files) as scratch:
            for patch in reversed(series.patches):
                complaint = scratch.git_apply(patch, reverse=True)
                if complaint is not None:
                    raise TreeError(_explain(patch, complaint, reverse=True))
            result = scratch.contents()
    for rel in series.overlay_files:
        f = tree / rel
        if f.is_file() and f.read_bytes() != series.overlay_bytes(rel):
            raise TreeError(f"overlay file {rel} was edited in the tree; revert it by hand first")
        result[rel] = None
    return result


def _write(
    tree: Path, contents: dict[str, bytes | None], base: str = "", direction: str = "write"
) -> list[str]:
    """All or nothing, journaled (see journal.py); TreeError names the file."""
    try:
        return journal.write(tree, contents, base, direction)
    except journal.JournalError as e:
        raise TreeError(str(e)) from None


# --------------------------------------------------------------------------
# Operations


@dataclass
class Outcome:
    message: str
    warnings: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # recovery of an interrupted run


def _require_vllm(tree: Path) -> None:
    if not (tree / "vllm").is_dir():
        raise TreeError(f"{tree} is not a vLLM source tree (no vllm/ package folder)")


def _resolve(tree: Path) -> tuple[Detection, Series]:
    _require_vllm(tree)
    det = detect(tree)
    if det.state in ("unsupported", "unknown") or det.base is None:
        raise TreeError(_unsupported_message(det, tree))
    return det, series_mod.load(det.base)


@contextmanager
def _exclusive(tree: Path) -> Iterator[list[str]]:
    """The tree's lock, held; what an interrupted run left is rolled back
    first. Yields the notes saying so."""
    _require_vllm(tree)
    try:
        with journal.locked(tree):
            notes = journal.recover(tree)
            yield notes
    except journal.JournalError as e:
        raise TreeError(str(e)) from None


def _pending_check(tree: Path) -> Outcome | None:
    """Dry run over a tree a killed run left: what apply would do (no writes)."""
    state, pid = journal.lock_state(tree)
    if state == "held":
        raise TreeError(f"another dsv4warmup run (pid {pid}) is changing {tree}; check again later")
    try:
        pend = journal.pending(tree)
    except journal.JournalError as e:
        raise TreeError(str(e)) from None
    if pend.journal is None:
        return None
    j = pend.journal
    then = (
        f"apply the v{j.base} series"
        if j.direction == "apply"
        else f"find the v{j.base} series applied (nothing to do)"
        if j.direction == "revert"
        else "carry on"
    )
    try:
        said = journal.describe(tree, j)
        for e in j.entries:
            if journal.file_state(tree, e) == "other":
                raise TreeError(
                    f"{tree} holds an {said}, and {e.path} changed since: apply would refuse"
                )
    except OSError as e:
        raise TreeError(f"cannot read {tree}: {e}") from None
    return Outcome(f"check: {tree} holds an {said}; apply first rolls it back, then would {then}")


def apply(tree: Path, dry_run: bool = False) -> Outcome:
    if dry_run:
        _require_vllm(tree)
        return _pending_check(tree) or _apply(tree, dry_run=True)
    with _exclusive(tree) as notes:
        outcome = _apply(tree)
    outcome.notes = notes
    return outcome


def _apply(tree: Path, dry_run: bool = False) -> Outcome:
    det, series = _resolve(tree)
    if det.state == "applied":
        return Outcome(f"already applied: the v{det.base} series is in {tree}; nothing changed")
    try:
        contents = plan_apply(tree, series)
    except TreeError as e:
        raise TreeError(
            f"refusing to apply the v{det.base} series: {e}; {tree} is unchanged"
        ) from None
    warnings = [
        f"{rel} differs from pristine vLLM {det.base}; the series still applies cleanly"
        for rel in det.drift
        if rel in series.touched_files
    ]
    if dry_run:
        return Outcome(
            f"check: the v{det.base} series ({len(series.patches)} patches, "
            f"{len(series.overlay_files)} overlay files) applies cleanly to {tree}",
            warnings,
        )
    changed = _write(tree, contents, series.base, "apply")
    return Outcome(
        f"applied the v{det.base} series ({len(series.patches)} patches, "
        f"{len(series.overlay_files)} overlay files) to {tree}",
        warnings,
        changed,
    )


def revert(tree: Path, dry_run: bool = False) -> Outcome:
    if dry_run:
        _require_vllm(tree)
        return _pending_check(tree) or _revert(tree, dry_run=True)
    with _exclusive(tree) as notes:
        outcome = _revert(tree)
    outcome.notes = notes
    return outcome


def _revert(tree: Path, dry_run: bool = False) -> Outcome:
    det, series = _resolve(tree)
    if det.state == "pristine":
        return Outcome(f"not applied: {tree} is pristine vLLM {det.base}; nothing changed")
    try:
        contents = plan_revert(tree, series, det.reverted)
    except TreeError as e:
        raise TreeError(
            f"refusing to revert the v{det.base} series: {e}; {tree} is unchanged"
        ) from None
    if dry_run:
        return Outcome(f"check: the v{det.base} series reverts cleanly from {tree}")
    changed = _write(tree, contents, series.base, "revert")
    return Outcome(f"reverted the v{det.base} series from {tree}", changed=changed)


def _interrupted_status(tree: Path) -> tuple[list[str], bool]:
    """Status lines for a busy tree or what a killed run left, and whether
    that is the whole story (the tree's files are mid-change)."""
    state, pid = journal.lock_state(tree)
    if state == "held":
        who = f" (pid {pid})" if pid else ""
        return [f"state:   busy: another dsv4warmup run{who} is changing this tree"], True
    try:
        pend = journal.pending(tree)
    except journal.JournalError as e:
        return [f"state:   {e}"], True
    if pend.journal is not None:
        j = pend.journal
        before = {"apply": "not applied", "revert": "applied"}.get(j.direction, "unchanged")
        return [
            f"base:    vLLM {j.base}",
            f"state:   {journal.describe(tree, j)} (the run was killed or failed)",
            "         `make apply` or `make revert` rolls it back first, to the tree as it "
            f"was before that run ({before})",
            f"journal: {tree / journal.JOURNAL} (the originals of its files)",
        ], True
    return [
        f"note:    {name} was left by an interrupted run that changed no file; "
        "the next apply or revert removes it"
        for name in pend.leftovers
    ], False


def status(tree: Path) -> str:
    _require_vllm(tree)
    lines = [f"tree:    {tree}"]
    notes, whole = _interrupted_status(tree)
    if whole:
        return "\n".join(lines + notes)
    det = detect(tree)
    if det.state in ("unsupported", "unknown"):
        head, *rest = unsupported_lines(det, tree, list_all=True)
        lines.append(f"state:   {det.state}: {head}")
        lines += [f"         {line}" for line in rest]
        return "\n".join(lines + notes)
    series = series_mod.load(det.base or "")
    lines.append(f"base:    vLLM {det.base} ({det.version or '?'})")
    if det.state == "modified":
        try:
            plan_apply(tree, series)
            state = "not applied; the series applies cleanly"
        except TreeError as e:
            state = f"not applied; the series does not apply: {e}"
        lines.append(f"state:   {state}")
        if det.drift:
            lines.append("differs from pristine: " + ", ".join(det.drift))
    else:
        lines.append(
            f"state:   {'applied' if det.state == 'applied' else 'pristine (not applied)'}"
        )
    lines.extend(notes)
    mark = "+" if det.state == "applied" else " "
    for patch in series.patches:
        lines.append(f"  [{mark}] {patch.name}")
        for rel in patch.overlay:
            lines.append(f"        + {rel}")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# MODE=am: one commit per patch on a new branch of a git checkout


def _git(
    tree: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, env=env)


def _committer_env(tree: Path, patch: Patch) -> dict[str, str]:
    env = dict(os.environ)
    if _git(tree, "config", "user.email").returncode != 0:
        m = re.search(r"^From: (.*) <([^>]+)>$", patch.text, re.M)
        if m:
            env.setdefault("GIT_COMMITTER_NAME", m.group(1))
            env.setdefault("GIT_COMMITTER_EMAIL", m.group(2))
    return env


def apply_am(tree: Path, branch: str | None = None) -> Outcome:
    with _exclusive(tree) as notes:
        outcome = _apply_am(tree, branch)
    outcome.notes = notes
    return outcome


def _apply_am(tree: Path, branch: str | None = None) -> Outcome:
    top = _git(tree, "rev-parse", "--show-toplevel")
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != tree.resolve():
        raise TreeError(f"MODE=am needs a git checkout at the top of {tree}")
    det, series = _resolve(tree)
    if det.state == "applied":
        return Outcome(f"already applied: the v{det.base} series is in {tree}; nothing changed")
    dirty = _git(tree, "status", "--porcelain", "--", *series.touched_files, *series.overlay_files)
    if dirty.stdout.strip():
        raise TreeError(
            f"refusing MODE=am: uncommitted changes in {tree}:\n{dirty.stdout.rstrip()}"
        )
    try:
        plan_apply(tree, series)
    except TreeError as e:
        raise TreeError(
            f"refusing to apply the v{det.base} series: {e}; {tree} is unchanged"
        ) from None
    branch = branch or f"dsv4-warmup/v{det.base}"
    if _git(tree, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}").returncode == 0:
        raise TreeError(f"branch {branch} already exists in {tree}; pass another BRANCH")
    head = (
        _git(tree, "symbolic-ref", "--quiet", "--short", "HEAD").stdout.strip()
        or _git(tree, "rev-parse", "HEAD").stdout.strip()
    )
    res = _git(tree, "checkout", "-q", "-b", branch)
    if res.returncode != 0:
        raise TreeError(f"cannot create branch {branch}: {res.stderr.strip()}")
    for patch in series.patches:
        env = _committer_env(tree, patch)
        res = _git(tree, "am", "--quiet", "--keep-cr", "--keep-non-patch", str(patch.path), env=env)
        if res.returncode != 0:
            _git(tree, "am", "--abort")
            _git(tree, "checkout", "-q", head)
            _git(tree, "branch", "-D", branch)
            raise TreeError(
                f"git am of {patch.name} failed: {res.stderr.strip()}; {tree} is unchanged"
            )
        if patch.overlay:
            _write(tree, {rel: patch.overlay_bytes(rel) for rel in patch.overlay})
            _git(tree, "add", "-f", "--", *patch.overlay)
            _git(tree, "commit", "--quiet", "--amend", "--no-edit", env=env)
    return Outcome(
        f"created branch {branch} in {tree} with {len(series.patches)} commits (one per patch)"
    )
