"""A pip-installable vLLM wheel that carries the patch set, built without CUDA.

Input: an official vLLM wheel of a supported base (a path, or the official
x86_64 wheel fetched through the package index pip is configured with and
sha256-verified against the table below). The wheel is unpacked with
``wheel unpack``; the ``vllm/`` part of every patch is applied to its Python
files (the patches' ``vllm/...`` paths are the wheel's layout) and the
overlay's ``vllm/`` files are added (its ``tests/`` files, and patch hunks on
other files outside ``vllm/``, are not part of a wheel). A patch's change to a
requirement line of ``requirements/common.txt`` or ``requirements/cuda.txt``
(what setup.py makes a CUDA wheel's install requirements of) is made to the
wheel's ``Requires-Dist``, so ``pip install`` gets what the series pins
(0.34.0's TileLang bump). ``wheel pack
--local-version`` renames the ``.dist-info`` folder, rewrites ``METADATA``'s
version and writes a fresh ``RECORD``; the result is checked by
:func:`verify_record` before it lands in ``dist/``.

Version: ``<base>+dsv4warmup.<n>.g<digest>``, with ``n`` the number of patches
and ``digest`` the first 8 hex digits of the series digest (patch bytes and
overlay files, ``trees.series_digest``), so a revised series with the same
number of patches still gets a new version. An existing local label of the
input (e.g. ``+cu129``) is kept in front.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from . import series as series_mod
from . import sources, trees
from .paths import BUILD, REPO
from .tree import FINGERPRINTS, _explain, _write, load_fingerprints

DIST = REPO / "dist"
LOCAL_PREFIX = "dsv4warmup"

# The official x86_64 wheels on the package index (read from its JSON simple
# API, PEP 691). Other wheels of these releases can be given with --wheel.
OFFICIAL_WHEELS: dict[str, tuple[str, str]] = {
    "0.25.1": (
        "vllm-0.25.1-cp38-abi3-manylinux_2_28_x86_64.whl",
        "16fc7a28df1576eb6f7ca0455026551b8f9adb674c19c66059359ef3e964bd1e",
    ),
    "0.26.0": (
        "vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        "adb1e4c9b46d0dfdb094121ae5aad670a42412dd813ed4e5db069ed6a15006de",
    ),
    "0.33.0": (
        "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa",
    ),
    "0.34.0": (
        "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl",
        "79ca4b3cd74aec08c4bf476bdf0cb15735b605ae5368526a2faae1e30f044ca2",
    ),
}


class WheelError(RuntimeError):
    """A refusal or a failed build; the message says why."""


# --------------------------------------------------------------------------
# The official wheel


def official_wheel(base: str) -> Path:
    """Path to the verified official x86_64 wheel of ``base``, downloaded once."""
    if base not in OFFICIAL_WHEELS:
        known = ", ".join(sorted(OFFICIAL_WHEELS))
        raise WheelError(f"no official wheel is known for vLLM {base} (known: {known})")
    filename, expected = OFFICIAL_WHEELS[base]
    try:
        return sources.cached_release_file(filename, expected, "wheel")
    except sources.SourceError as e:
        raise WheelError(str(e)) from None


# --------------------------------------------------------------------------
# Reading and verifying wheels


@dataclass
class WheelInfo:
    path: Path
    name: str
    version: Version
    dist_info: str
    metadata_version: str


def _dist_info_dir(zf: zipfile.ZipFile) -> str:
    tops = {n.split("/", 1)[0] for n in zf.namelist() if "/" in n}
    dist_infos = sorted(t for t in tops if t.endswith(".dist-info"))
    if len(dist_infos) != 1:
        raise WheelError(f"{zf.filename}: expected one .dist-info folder, found {dist_infos}")
    return dist_infos[0]


def read_info(whl: Path) -> WheelInfo:
    """Name and version of a wheel, from its file name and its METADATA."""
    try:
        name, version, _, _ = parse_wheel_filename(whl.name)
    except (InvalidWheelFilename, InvalidVersion) as e:
        raise WheelError(f"{whl.name} is not a wheel file name: {e}") from None
    try:
        with zipfile.ZipFile(whl) as zf:
            dist_info = _dist_info_dir(zf)
            metadata = zf.read(f"{dist_info}/METADATA").decode("utf-8", "replace")
    except (zipfile.BadZipFile, KeyError, OSError) as e:
        raise WheelError(f"{whl}: not a readable wheel: {e}") from None
    m = re.search(r"^Version: *(\S+) *$", metadata, re.MULTILINE)
    if not m:
        raise WheelError(f"{whl.name}: {dist_info}/METADATA has no Version")
    try:
        metadata_version = Version(m.group(1))
    except InvalidVersion:
        raise WheelError(f"{whl.name}: METADATA version {m.group(1)!r} is invalid") from None
    if metadata_version != version:
        raise WheelError(f"{whl.name}: file name says {version}, METADATA says {metadata_version}")
    return WheelInfo(whl, str(name), version, dist_info, m.group(1))


def _record_hash(data_iter: io.BufferedIOBase) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    for chunk in iter(lambda: data_iter.read(1 << 20), b""):
        digest.update(chunk)
        size += len(chunk)
    b64 = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    return f"sha256={b64}", size


def verify_record(whl: Path) -> list[str]:
    """Problems with a wheel's RECORD (empty: every file is listed once with
    its right sha256 and size, nothing listed is missing)."""
    problems: list[str] = []
    if not zipfile.is_zipfile(whl):
        return [f"{whl} is not a zip archive"]
    with zipfile.ZipFile(whl) as zf:
        dist_info = _dist_info_dir(zf)
        record_name = f"{dist_info}/RECORD"
        if record_name not in zf.namelist():
            return [f"{record_name} is missing"]
        text = zf.read(record_name).decode("utf-8")
        listed: dict[str, tuple[str, str]] = {}
        for row in csv.reader(io.StringIO(text, newline="")):
            if not row:
                continue
            if len(row) != 3:
                problems.append(f"RECORD row {row!r} does not have 3 fields")
                continue
            path, hash_, size = row
            if path in listed:
                problems.append(f"RECORD lists {path} twice")
            listed[path] = (hash_, size)
        names = [n for n in zf.namelist() if not n.endswith("/")]
        for name in names:
            if name == record_name:
                if listed.get(name, ("?", "?")) != ("", ""):
                    problems.append("RECORD must list itself with no hash and no size")
                continue
            if name.startswith(f"{dist_info}/RECORD."):  # signatures (.jws, .p7s)
                continue
            if name not in listed:
                problems.append(f"{name} is not listed in RECORD")
                continue
            want_hash, want_size = listed[name]
            if not want_hash.startswith("sha256="):
                problems.append(f"{name}: RECORD hash {want_hash!r} is not sha256")
                continue
            with zf.open(name) as f:
                got_hash, got_size = _record_hash(f)  # type: ignore[arg-type]
            if got_hash != want_hash:
                problems.append(f"{name}: sha256 differs from RECORD")
            if want_size != str(got_size):
                problems.append(f"{name}: size {got_size} differs from RECORD ({want_size})")
        for path in sorted(set(listed) - set(names)):
            problems.append(f"RECORD lists {path}, which the wheel does not have")
    return problems


# --------------------------------------------------------------------------
# Applying the vllm/ part of the series to an unpacked wheel


def _in_wheel(rel: str) -> bool:
    return rel.startswith("vllm/")


def _git_apply(root: Path, patch: series_mod.Patch, reverse: bool) -> str | None:
    cmd = ["git", "apply", "--whitespace=nowarn", "--include=vllm/*"]
    if reverse:
        cmd.append("--reverse")
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(root.parent))
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    res = subprocess.run(
        [*cmd, str(patch.path)], cwd=root, check=False, capture_output=True, text=True, env=env
    )
    return None if res.returncode == 0 else (res.stderr or res.stdout)


def _scratch_run(
    root: Path, series: series_mod.Series, reverse: bool
) -> tuple[dict[str, bytes | None], str | None]:
    """Apply (or reverse) the vllm/ parts of the series to copies of the
    wheel's files. Returns the new contents, or the first complaint."""
    paths = [f for f in series.touched_files if _in_wheel(f)]
    with tempfile.TemporaryDirectory(prefix="dsv4-wheel-scratch-") as tmp:
        scratch = Path(tmp) / "tree"
        scratch.mkdir()
        for rel in paths:
            if (root / rel).is_file():
                (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(root / rel, scratch / rel)
        order = list(reversed(series.patches)) if reverse else series.patches
        for patch in order:
            if not any(_in_wheel(f) for f in patch.files):
                continue
            complaint = _git_apply(scratch, patch, reverse)
            if complaint is not None:
                return {}, _explain(patch, complaint, reverse)
        out: dict[str, bytes | None] = {}
        for rel in paths:
            f = scratch / rel
            out[rel] = f.read_bytes() if f.is_file() else None
    return out, None


def _carries_series(root: Path, series: series_mod.Series) -> bool:
    overlay = [rel for rel in series.overlay_files if _in_wheel(rel)]
    for rel in overlay:
        f = root / rel
        if not f.is_file() or f.read_bytes() != series.overlay_bytes(rel):
            return False
    if not any(_in_wheel(f) for p in series.patches for f in p.files):
        return bool(overlay)
    return _scratch_run(root, series, reverse=True)[1] is None


# --------------------------------------------------------------------------
# Install requirements

# setup.py's install requirements of a CUDA build: requirements/cuda.txt, which
# includes common.txt.
REQUIREMENT_FILES = ("requirements/common.txt", "requirements/cuda.txt")
_REQUIRES = "Requires-Dist:"


def _requirements(lines: list[str]) -> list[Requirement]:
    """The requirements among requirement-file lines, read as setuptools reads
    setup.py's list: no blank, comment, ``-r`` or ``--`` option lines, an
    inline `` #`` comment dropped."""
    out = []
    for line in lines:
        text = line.strip()
        if not text or text.startswith(("#", "-")):
            continue
        out.append(Requirement(text.split(" #", 1)[0].strip()))
    return out


def _same(a: Requirement, b: Requirement) -> bool:
    return (
        canonicalize_name(a.name) == canonicalize_name(b.name)
        and a.extras == b.extras
        and a.specifier == b.specifier
        and a.url == b.url
        and str(a.marker or "") == str(b.marker or "")
    )


def _requires_dist(metadata: str) -> list[str]:
    head = metadata.split("\n\n", 1)[0]
    return [ln[len(_REQUIRES) :].strip() for ln in head.splitlines() if ln.startswith(_REQUIRES)]


def requirement_changes(
    metadata: str, series: series_mod.Series, label: str
) -> tuple[str, list[str]]:
    """``metadata`` (a METADATA file's text) with each patch's requirement
    changes, in series order, made to its ``Requires-Dist`` lines: a changed
    requirement keeps its line's place, a new one goes after the last. Also
    one line per change, for the summary. Raises WheelError when a
    requirement a patch changes is not what the wheel declares."""
    head, sep, body = metadata.partition("\n\n")
    # header lines, each Requires-Dist one with its requirement; None: removed
    lines: list[tuple[str, Requirement | None] | None] = []
    for ln in head.split("\n"):
        text = ln[len(_REQUIRES) :].strip() if ln.startswith(_REQUIRES) else None
        try:
            lines.append((ln, Requirement(text) if text is not None else None))
        except InvalidRequirement as e:
            raise WheelError(f"refusing {label}: its METADATA has {ln!r}: {e}") from None
    notes: list[str] = []
    for patch in series.patches:
        for rel in REQUIREMENT_FILES:
            if rel not in patch.files:
                continue
            try:
                removed, added = map(_requirements, patch.changed_lines(rel))
            except InvalidRequirement as e:
                raise WheelError(f"{patch.name}: {rel}: {e}") from None
            declared = [(i, entry[1]) for i, entry in enumerate(lines) if entry and entry[1]]
            place: dict[str, int] = {}
            for req in removed:
                at = next((i for i, have in declared if _same(have, req)), None)
                if at is None:
                    name = canonicalize_name(req.name)
                    same_name = [str(h) for _, h in declared if canonicalize_name(h.name) == name]
                    raise WheelError(
                        f"refusing {label}: {patch.name} changes {req} in {rel}, but the "
                        "wheel does not require it (its METADATA requires "
                        f"{', '.join(same_name) or f'nothing of {req.name}'}); "
                        "build from the official wheel of the release"
                    )
                place[canonicalize_name(req.name)] = at
                lines[at] = None
            new = []
            for req in added:  # changed ones in their places first: inserting shifts them
                at = place.pop(canonicalize_name(req.name), None)
                if at is None:
                    new.append(req)
                else:
                    lines[at] = (f"{_REQUIRES} {req}", req)
            for req in new:
                last = max((i for i, e in enumerate(lines) if e and e[1]), default=len(lines) - 1)
                lines.insert(last + 1, (f"{_REQUIRES} {req}", req))
            was = {canonicalize_name(r.name): str(r) for r in removed}
            for req in added:
                old = was.pop(canonicalize_name(req.name), "(new)")
                notes.append(f"{old} -> {req}  ({rel}, {patch.name})")
            notes += [f"{old} -> (removed)  ({rel}, {patch.name})" for old in was.values()]
    text = "\n".join(entry[0] for entry in lines if entry is not None)
    return text + sep + body, notes


@dataclass
class Plan:
    contents: dict[str, bytes | None]
    patched: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # not part of a wheel
    warnings: list[str] = field(default_factory=list)
    metadata: str | None = None  # METADATA with the series' requirements
    requirements: list[str] = field(default_factory=list)  # one line per change


def plan(root: Path, series: series_mod.Series, label: str) -> Plan:
    """What the series writes into the unpacked wheel at ``root``; raises
    WheelError naming the patch and file when it does not go in."""
    contents, complaint = _scratch_run(root, series, reverse=False)
    if complaint is not None:
        if _carries_series(root, series):
            raise WheelError(
                f"refusing {label}: it already carries the v{series.base} series "
                "(the patches apply in reverse); build from an official wheel"
            )
        raise WheelError(f"refusing {label}: {complaint}")
    result = Plan(contents, patched=sorted(contents))
    for rel in series.overlay_files:
        if not _in_wheel(rel):
            result.left_out.append(rel)
            continue
        data = series.overlay_bytes(rel)
        f = root / rel
        if f.exists():
            if f.is_file() and f.read_bytes() == data and _carries_series(root, series):
                raise WheelError(
                    f"refusing {label}: it already carries the v{series.base} series "
                    f"({rel} is there); build from an official wheel"
                )
            raise WheelError(f"refusing {label}: overlay file {rel} already exists in it")
        result.contents[rel] = data
        result.added.append(rel)
    if any(rel in series.touched_files for rel in REQUIREMENT_FILES):
        metadata = (_dist_info(root) / "METADATA").read_text()
        result.metadata, result.requirements = requirement_changes(metadata, series, label)
    result.left_out += sorted(
        {f for f in series.touched_files if not _in_wheel(f) and f not in REQUIREMENT_FILES}
    )
    result.warnings = _drift(root, series)
    return result


def _dist_info(root: Path) -> Path:
    """The ``.dist-info`` folder of the wheel unpacked at ``root``."""
    (dist_info,) = [d for d in root.iterdir() if d.name.endswith(".dist-info")]
    return dist_info


def _drift(root: Path, series: series_mod.Series) -> list[str]:
    """Files the series edits that differ from the release's sdist (a wheel
    built from a modified checkout): patched all the same, with a warning."""
    if not FINGERPRINTS.is_file():
        return []
    known = load_fingerprints().get(series.base, {})
    out = []
    for rel in series.touched_files:
        f = root / rel
        if not (_in_wheel(rel) and rel in known and f.is_file()):
            continue
        if hashlib.sha256(f.read_bytes()).hexdigest() != known[rel]:
            out.append(
                f"{rel} differs from pristine vLLM {series.base}; the series still applies cleanly"
            )
    return out


# --------------------------------------------------------------------------
# Building


def local_label(base: str) -> str:
    s = series_mod.load(base)
    return f"{LOCAL_PREFIX}.{len(s.patches)}.g{trees.series_digest(base)[:8]}"


def _check_input(info: WheelInfo, base: str | None) -> str:
    if info.name != "vllm":
        raise WheelError(f"{info.path.name} is a wheel of {info.name!r}, not of vllm")
    local = info.version.local or ""
    if LOCAL_PREFIX in local.split("."):
        raise WheelError(
            f"refusing {info.path.name}: version {info.version} is already patched "
            f"(local label +{local}); build from an official vLLM wheel"
        )
    public = info.version.public
    bases = series_mod.available_bases()
    if public not in bases:
        have = ", ".join(bases) or "none"
        raise WheelError(
            f"refusing {info.path.name}: vLLM {public} is not supported by this patch set "
            f"(supported bases: {have})"
        )
    if base is not None and base.removeprefix("v") != public:
        raise WheelError(
            f"refusing {info.path.name}: it is vLLM {public}, but --base {base} was asked for"
        )
    return public


def _wheel_cli(*args: str) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "wheel", *args], check=False, capture_output=True, text=True
    )
    if res.returncode != 0:
        raise WheelError(f"wheel {args[0]} failed: {(res.stderr or res.stdout).strip()}")


def _keep_filename_tags(root: Path, filename: str) -> None:
    """``wheel pack`` names the output after the WHEEL file's Tag lines. vLLM's
    official wheels say ``linux_x86_64`` there but are published as
    ``manylinux_2_28_x86_64``: make WHEEL say what the file name says, so the
    patched wheel keeps the official platform tag."""
    tags = sorted(str(t) for t in parse_wheel_filename(filename)[3])
    wheel_file = _dist_info(root) / "WHEEL"
    lines = wheel_file.read_text().splitlines()
    have = sorted(line.split(":", 1)[1].strip() for line in lines if line.startswith("Tag:"))
    if have == tags:
        return
    kept = [line for line in lines if not line.startswith("Tag:")]
    while kept and not kept[-1].strip():
        kept.pop()
    wheel_file.write_text("\n".join(kept + [f"Tag: {t}" for t in tags]) + "\n\n")


@dataclass
class Built:
    path: Path
    base: str
    version: str
    plan: Plan


def build(wheel: Path | None = None, base: str | None = None, dest: Path = DIST) -> Built:
    """The patched wheel of ``wheel`` (default: the official wheel of ``base``)
    in ``dest``; raises WheelError on any refusal, writing nothing."""
    if wheel is None:
        base = (base or sources.DEFAULT_BASE).removeprefix("v")
        if base not in series_mod.available_bases():
            have = ", ".join(series_mod.available_bases()) or "none"
            raise WheelError(
                f"vLLM {base} is not supported by this patch set (supported bases: {have})"
            )
        wheel = official_wheel(base)
    wheel = Path(wheel).resolve()
    if not wheel.is_file():
        raise WheelError(f"{wheel} does not exist")
    info = read_info(wheel)
    base = _check_input(info, base)
    series = series_mod.load(base)
    ours = local_label(base)
    label = f"{info.version.local}.{ours}" if info.version.local else ours

    BUILD.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dsv4-wheel-", dir=BUILD) as tmp:
        work = Path(tmp)
        _wheel_cli("unpack", "-d", str(work / "unpacked"), str(wheel))
        (root,) = list((work / "unpacked").iterdir())
        if not (root / "vllm").is_dir():
            raise WheelError(f"{wheel.name} has no vllm/ package folder")
        result = plan(root, series, wheel.name)
        _write(root, result.contents)
        if result.metadata is not None:
            (_dist_info(root) / "METADATA").write_text(result.metadata)
        _keep_filename_tags(root, wheel.name)
        (work / "out").mkdir()
        _wheel_cli("pack", "--local-version", label, "-d", str(work / "out"), str(root))
        (out,) = list((work / "out").iterdir())
        problems = verify_record(out)
        if problems:
            raise WheelError(f"{out.name}: RECORD does not verify: " + "; ".join(problems[:5]))
        got = read_info(out)
        if got.version.local != label or got.version.public != base:
            raise WheelError(f"{out.name}: packed as {got.version}, expected {base}+{label}")
        _check_contents(out, result)
        dest.mkdir(parents=True, exist_ok=True)
        final = dest / out.name
        shutil.move(str(out), str(final))
    return Built(final, base, f"{base}+{label}", result)


def _check_contents(whl: Path, result: Plan) -> None:
    with zipfile.ZipFile(whl) as zf:
        names = set(zf.namelist())
        for rel, data in result.contents.items():
            if data is None:
                if rel in names:
                    raise WheelError(f"{whl.name}: {rel} should have been removed")
            elif rel not in names or zf.read(rel) != data:
                raise WheelError(f"{whl.name}: {rel} is not the patched file")
        stray = sorted(n for n in names if n.startswith("tests/"))
        if stray:
            raise WheelError(f"{whl.name}: carries test files {stray[:3]}")
        if result.metadata is not None:
            packed = zf.read(f"{_dist_info_dir(zf)}/METADATA").decode()
            if _requires_dist(packed) != _requires_dist(result.metadata):
                raise WheelError(f"{whl.name}: METADATA lost the series' requirements")


def summary(built: Built) -> str:
    p = built.plan
    lines = [f"warning: {w}" for w in p.warnings] + [
        f"wrote {built.path}",
        f"  vLLM {built.version}: {len(p.patched)} files patched, {len(p.added)} overlay files added",
    ]
    lines += [f"  patched  {rel}" for rel in p.patched]
    lines += [f"  added    {rel}" for rel in p.added]
    lines += [f"  requires {change}" for change in p.requirements]
    if p.left_out:
        lines.append("  not part of a wheel (left out): " + ", ".join(p.left_out))
    lines.append(
        f"  install: pip install {built.path}  "
        "(add --no-deps where vLLM's dependencies are already installed)"
    )
    return "\n".join(lines)
