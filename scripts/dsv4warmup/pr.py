"""Upstream PRs: branches and PR bodies that vLLM's review would accept.

``<out>/v<base>/vllm`` is a git copy of the pristine sdist (tag ``v<base>``)
holding the branch ``dsv4-warmup/v<base>`` (the whole series, one commit per
patch) and, per PR, ``dsv4-warmup/<slug>``: the PR's patches on top of the
earlier PRs it needs, made with ``git am``. ``<out>/v<base>/<NNNN>-<slug>.md``
is the PR body in the tree's ``.github/PULL_REQUEST_TEMPLATE.md``
(``pr_body.py``): what and why from the commit message, the test's output on
the base commit and with the change and the change's own measurements from
its evidence file, the checks run here, the AI-assistance statement and the
submitter's checklist.

Evidence files
--------------
``docs/pr-evidence/v<base>/<NNNN>.md`` (``DSV4_EVIDENCE_DIR`` replaces
``docs/pr-evidence``), one per patch, written by hand from real runs; ``make
pr`` quotes it verbatim and refuses a patch without one, naming the file
(``make pr DRY_RUN=1`` proceeds without it, marking each body that lacks it).
It lives outside ``patches/`` because ``make regen`` rewrites that folder::

    # 0006 evidence

    Patch: <the patch's subject, exactly; a renumbered patch is caught>
    Claim: <optional, repeatable: a Claims bullet, e.g. "decode 16.8 -> 14.1 us">

    ## Before

    - Command: `<the exact command>`
    - Tree: pristine <what: e.g. "vLLM 0.34.0 sdist + this change's test file">
    - Host: <CPU / GPU model, OS>
    - Versions: <python, torch, triton, ... as run>
    - Date: YYYY-MM-DD

    ```text
    <output excerpt, at most 30 lines: the failure and the summary line>
    ```

    ## After

    (the same fields; `Tree: patched ...`)

    ## Measurement: <what it shows, e.g. "C128A metadata build: 5.2 -> 4.8 us">

    (optional, repeatable: the same fields, the output; words outside the
    fields and the fence are quoted as its note)

    ## Related

    (optional, hand-written: related upstream work and how this differs)

``Before`` runs on the pristine tree, ``After`` on the patched one; each
section has every field and exactly one fenced excerpt. A patch that touches
no ``tests/`` file (a dependency pin) may leave both out and show its effect
by measurements alone. The body's Claims
are the ``Claim:`` lines (else, where both excerpts end in pytest's summary
line, those two lines) and the measurements' titles; Validation quotes the
commands and the excerpts, each with its tree, host, versions and date.
Nothing else is quoted: no other patch's or base's figures, no
``docs/gpu-results.md``.

PRs: each patch is its own PR unless its commit message carries a trailer
``PR: <slug>``; patches with the same slug form one PR (branch
``dsv4-warmup/<slug>``, numbered and titled by its first patch).

Sign-off: commits are authored and signed off by a person, ``SIGNOFF="Name
<email>"`` or the invoking user's git identity (``git config user.name`` /
``user.email``); the project pseudonym ``dsv4-warmup`` is no person, so
without either ``make pr`` refuses. The patches' own ``Signed-off-by`` /
``From:`` lines are replaced, and an AI ``Co-authored-by:`` trailer is added
(vLLM's AGENTS.md).

Dependencies (``pr_code.py``): by AST, a patch needs an earlier one when its
added or changed code imports a module that one adds, loads a module-level
name that one defines (or whose signature it changes) or calls a method it
adds; and, only when its hunks do not apply without them, the earlier PRs
that edit the same files. A PR must not carry a new name or module that only
a later PR uses ("dead until").

Checks, per PR branch, in the git copy (``pr_hooks.py``): every hook of the
tree's ``.pre-commit-config.yaml`` that applies to the PR's files (vLLM's
``tools/pre_commit/*.py`` checks, mypy through ``tools/pre_commit/mypy.py``,
typos), and ``ruff check`` / ``ruff format --check`` with the ruff version the
tree pins. A failure the pristine tag has too is not blamed on the PR.
Nothing is written unless every check passes; otherwise exit 1 with one line
per failure: patch, file, hook, and the tool's message (with its line). A dry
run (``DRY_RUN=1``) writes the branches and bodies anyway, for inspection, and
still exits 1 with the same lines.
"""

from __future__ import annotations

import ast
import difflib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from email.header import Header
from pathlib import Path

from . import devtree, pr_body, pr_code, pr_hooks, sources
from . import series as series_mod
from .paths import BUILD, CACHE, REPO
from .series import Patch
from .tree import TreeError, _write

EVIDENCE = Path(os.environ.get("DSV4_EVIDENCE_DIR", REPO / "docs" / "pr-evidence"))
PSEUDONYM = "dsv4-warmup"
COAUTHOR = "Claude <noreply@anthropic.com>"
_IDENT = re.compile(r"^\s*([^<>]*[^<>\s])\s*<([^<>@\s]+@[^<>\s]+)>\s*$")


class PrError(RuntimeError):
    """A failed check: the message names the patch, the file and the hook."""


class DryRunFailures(PrError):
    """A dry run wrote its branches and bodies, but checks failed."""

    def __init__(self, message: str, prs: list[PullRequest]) -> None:
        super().__init__(message)
        self.prs = prs


# --------------------------------------------------------------------------
# Patches: numbers, slugs, commit messages


def number_and_slug(patch: Patch) -> tuple[str, str]:
    m = re.match(r"(\d{4})-(.+)\.patch$", patch.name)
    if not m:
        raise PrError(f"{patch.name}: patch names must be NNNN-<slug>.patch")
    return m.group(1), m.group(2)


def _message_lines(patch: Patch) -> list[str]:
    rest = patch.text.partition("\n\n")[2]
    return rest.split("\n---\n", 1)[0].rstrip("\n").splitlines()


def message(patch: Patch) -> tuple[str, str, list[str]]:
    """Subject, body (no trailers) and trailer lines of a patch mail."""
    lines = _message_lines(patch)
    trailers: list[str] = []
    while lines and (re.match(r"^[A-Z][\w-]*(-by)?: ", lines[-1]) or not lines[-1].strip()):
        if lines[-1].strip():
            trailers.insert(0, lines[-1])
        lines.pop()
    # A trailer block is the last paragraph; a one-line body "Foo: bar" is prose.
    return patch.subject, "\n".join(lines).strip(), trailers


def pr_slug(patch: Patch) -> tuple[str, str | None]:
    """The PR a patch belongs to: ``PR: <slug> [title]`` trailer, else its own."""
    for line in message(patch)[2]:
        m = re.match(r"^PR:\s*([a-z0-9][a-z0-9._-]*)(?:\s+(\S.*?))?\s*$", line)
        if m:
            return m.group(1), m.group(2)
    return number_and_slug(patch)[1], None


# --------------------------------------------------------------------------
# Who signs off


def _git_config(key: str) -> str:
    res = subprocess.run(
        ["git", "config", key], cwd=REPO, check=False, capture_output=True, text=True
    )
    return res.stdout.strip()


def _is_pseudonym(name: str, email: str) -> bool:
    return name.strip().lower() == PSEUDONYM or email.lower().startswith(PSEUDONYM + "@")


def identity(signoff: str | None) -> tuple[str, str]:
    """The person who signs the commits off: ``signoff`` ("Name <email>") or
    the user's git identity; PrError (one line, why) when there is none."""
    if signoff:
        m = _IDENT.match(signoff)
        if not m:
            raise PrError(f'SIGNOFF must read "Name <email>", not {signoff!r}')
        if _is_pseudonym(m.group(1), m.group(2)):
            raise PrError(
                f"SIGNOFF {signoff!r} is the project pseudonym, not a person: "
                'give yours, SIGNOFF="Name <email>"'
            )
        return m.group(1), m.group(2)
    name, email = _git_config("user.name"), _git_config("user.email")
    if not name or not email:
        raise PrError(
            "no one to sign the commits off (DCO): no git user.name / user.email; "
            'run `make pr SIGNOFF="Your Name <you@example.com>"`'
        )
    if _is_pseudonym(name, email):
        raise PrError(
            f"your git identity is the project pseudonym {name} <{email}>, which cannot give a "
            'DCO sign-off; run `make pr SIGNOFF="Your Name <you@example.com>"`'
        )
    return name, email


def _header_name(name: str) -> str:
    return name if name.isascii() else Header(name, "utf-8").encode()


def signed_mail(patch: Patch, who: tuple[str, str], coauthor: str) -> str:
    """The patch mail as the person sends it: ``From:`` is them, the project's
    ``Signed-off-by`` / ``PR:`` trailers are dropped, ``Co-authored-by:`` (the
    AI) and their ``Signed-off-by:`` close the message."""
    text = patch.text
    head, sep, rest = text.partition("\n\n")
    head = re.sub(
        r"^From: .*(?:\n[ \t].*)*$",
        lambda _: f"From: {_header_name(who[0])} <{who[1]}>",
        head,
        count=1,
        flags=re.M,
    )
    msg, dashes, tail = rest.partition("\n---\n")
    lines = msg.rstrip("\n").splitlines()
    kept: list[str] = []
    trailer_start = len(lines)
    while trailer_start > 0 and (
        re.match(r"^[A-Z][\w-]*: ", lines[trailer_start - 1])
        or not lines[trailer_start - 1].strip()
    ):
        trailer_start -= 1
    kept = lines[:trailer_start]
    trailers = [
        ln
        for ln in lines[trailer_start:]
        if ln.strip() and not re.match(r"^(Signed-off-by|PR|Co-authored-by): ", ln)
    ]
    trailers += [f"Co-authored-by: {coauthor}", f"Signed-off-by: {who[0]} <{who[1]}>"]
    body = "\n".join([*kept, "", *trailers]) + "\n"
    return head + sep + body + (dashes + tail if dashes else "")


def _git(repo: Path, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
    res = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    if check and res.returncode != 0:
        raise TreeError(f"git {' '.join(args)} failed in {repo}: {res.stderr.strip()}")
    return res.stdout


def _who_env(who: tuple[str, str]) -> dict[str, str]:
    return {
        "GIT_COMMITTER_NAME": who[0],
        "GIT_COMMITTER_EMAIL": who[1],
        "GIT_AUTHOR_NAME": who[0],
        "GIT_AUTHOR_EMAIL": who[1],
    }


def am(repo: Path, patches: list[Patch], who: tuple[str, str], coauthor: str) -> None:
    """``git am`` each patch (as the person sends it), its overlay files in the
    same commit."""
    env = _who_env(who)
    with tempfile.TemporaryDirectory() as tmp:
        for patch in patches:
            mail = Path(tmp) / patch.name
            mail.write_text(signed_mail(patch, who, coauthor))
            res = subprocess.run(
                [
                    "git",
                    "-C",
                    str(repo),
                    "am",
                    "--quiet",
                    "--keep-cr",
                    "--keep-non-patch",
                    str(mail),
                ],
                capture_output=True,
                text=True,
                env={**os.environ, "GIT_COMMITTER_NAME": who[0], "GIT_COMMITTER_EMAIL": who[1]},
            )
            if res.returncode != 0:
                _git(repo, "am", "--abort", check=False)
                raise TreeError(f"git am of {patch.name} failed: {res.stderr.strip()}")
            if patch.overlay:
                _write(repo, {rel: patch.overlay_bytes(rel) for rel in patch.overlay})
                _git(repo, "add", "-f", "--", *patch.overlay)
                _git(repo, "commit", "-q", "--amend", "--no-edit", "--no-verify", env=env)


# --------------------------------------------------------------------------
# ruff, at the version the tree pins


def pinned_ruff_version(tree: Path) -> str | None:
    """The ruff release the tree's pre-commit config pins (a rev frozen to a
    commit names it in a comment); PrError when it pins a commit without one."""
    if not (tree / ".pre-commit-config.yaml").is_file():
        return None
    rev = pr_hooks.pinned_rev(tree, pr_hooks.RUFF_REPO)
    if rev is not None and not re.match(r"^\d+(\.\d+)*$", rev):
        raise PrError(f"the tree pins ruff at {rev}, with no release named beside it")
    return rev


def _ruff_version(exe: str) -> str | None:
    try:
        res = subprocess.run([exe, "--version"], check=False, capture_output=True, text=True)
    except OSError:
        return None
    return res.stdout.split()[-1] if res.returncode == 0 and res.stdout.strip() else None


def ruff_for(tree: Path) -> tuple[str, str]:
    """(ruff executable, note). DSV4_RUFF overrides; otherwise the version the
    tree's pre-commit config pins, installed once under the cache with pip."""
    if os.environ.get("DSV4_RUFF"):
        exe = os.environ["DSV4_RUFF"]
        return exe, f"ruff {_ruff_version(exe)} (DSV4_RUFF)"
    local = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    pin = pinned_ruff_version(tree)
    if pin is None:
        if local is None:
            raise PrError("no ruff found (the tree pins none either)")
        return local, f"ruff {_ruff_version(local)} (the tree pins no version)"
    if local and _ruff_version(local) == pin:
        return local, f"ruff {pin} (pinned by the tree's .pre-commit-config.yaml)"
    target = CACHE / "tools" / f"ruff-{pin}"
    exe = target / "bin" / "ruff"
    if _ruff_version(str(exe)) != pin:
        shutil.rmtree(target, ignore_errors=True)
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--target",
                str(target),
                f"ruff=={pin}",
            ],
            check=False,
            capture_output=True,
            text=True,
        )
        if res.returncode != 0 or _ruff_version(str(exe)) != pin:
            if local is None:
                raise PrError(f"cannot install ruff {pin}: {res.stderr.strip()[-500:]}")
            note = f"ruff {_ruff_version(local)} (could not install the pinned {pin})"
            print(f"warning: {note}", file=sys.stderr)
            return local, note
    return str(exe), f"ruff {pin} (pinned by the tree's .pre-commit-config.yaml)"


def _run(cmd: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, input=stdin, check=False, capture_output=True, text=True)


def _lint(ruff: str, repo: Path, rel: str, content: str) -> list[dict[str, object]]:
    res = _run(
        [
            ruff,
            "check",
            "--no-cache",
            "--force-exclude",
            "--output-format",
            "json",
            "--stdin-filename",
            rel,
            "-",
        ],
        repo,
        content,
    )
    if res.returncode not in (0, 1):
        raise PrError(f"ruff check failed on {rel}: {res.stderr.strip()}")
    return json.loads(res.stdout or "[]")


def _formatted(ruff: str, repo: Path, rel: str, content: str) -> str:
    res = _run(
        [ruff, "format", "--no-cache", "--force-exclude", "--stdin-filename", rel, "-"],
        repo,
        content,
    )
    if res.returncode != 0:
        raise PrError(f"ruff format cannot parse {rel}: {res.stderr.strip()}")
    return res.stdout if res.stdout or not content else content


def _added_lines(repo: Path, old: str, new: str, rel: str) -> set[int]:
    diff = _git(repo, "diff", "-U0", old, new, "--", rel)
    out: set[int] = set()
    for m in re.finditer(r"^@@ -\S+ \+(\d+)(?:,(\d+))? @@", diff, re.MULTILINE):
        start, count = int(m.group(1)), int(m.group(2) or 1)
        out.update(range(start, start + count))
    return out


def ruff_problems(
    ruff: str, repo: Path, files: list[str], old: str, new: str = "HEAD"
) -> tuple[list[tuple[str, str, str]], bool, bool]:
    """ruff complaints that ``old..new`` brings into ``files``:
    ([(file, check, message)], check ran clean, format ran clean). A code the
    ``old`` file already had as often, or a format difference outside the
    changed lines of a file that was unformatted already, is not counted."""
    files = [f for f in files if f.endswith((".py", ".pyi")) and (repo / f).is_file()]
    if not files:
        return [], True, True
    problems: list[tuple[str, str, str]] = []
    check = _run([ruff, "check", "--no-cache", "--force-exclude", "--", *files], repo)
    fmt = _run([ruff, "format", "--check", "--no-cache", "--force-exclude", "--", *files], repo)
    if check.returncode == 0 and fmt.returncode == 0:
        return [], True, True
    for rel in files:
        now = (repo / rel).read_text()
        prev = _run(["git", "show", f"{old}:{rel}"], repo)
        before = prev.stdout if prev.returncode == 0 else None

        found = _lint(ruff, repo, rel, now) if check.returncode != 0 else []
        if found:
            base = (
                Counter(str(v["code"]) for v in _lint(ruff, repo, rel, before))
                if before
                else Counter()
            )
            new_codes = Counter(str(v["code"]) for v in found) - base
            for v in found:
                if new_codes[str(v["code"])] > 0:
                    row = v["location"]["row"]  # type: ignore[index]
                    problems.append((rel, "ruff check", f"{rel}:{row}: {v['code']} {v['message']}"))

        if fmt.returncode == 0:
            continue
        formatted = _formatted(ruff, repo, rel, now)
        if formatted != now:
            if before is None or _formatted(ruff, repo, rel, before) == before:
                ours = True
            else:  # the old file is not formatted either: blame lines
                added = _added_lines(repo, old, new, rel)
                sm = difflib.SequenceMatcher(
                    None, now.splitlines(), formatted.splitlines(), autojunk=False
                )
                touched = {
                    i + 1
                    for tag, i1, i2, _, _ in sm.get_opcodes()
                    if tag != "equal"
                    for i in range(i1, max(i2, i1 + 1))
                }
                ours = bool(touched & added)
            if ours:
                problems.append((rel, "ruff format", f"{rel}: ruff format would reformat it"))
    return problems, check.returncode == 0, fmt.returncode == 0


def style_problems(ruff: str, repo: Path, patch: Patch, rev: str = "HEAD") -> list[str]:
    """ruff complaints the commit ``rev`` (``patch``) brings into its files."""
    problems, _, _ = ruff_problems(ruff, repo, [*patch.files, *patch.overlay], f"{rev}~1", rev)
    return [f"{patch.name}: {msg}" for _, _, msg in problems]


# --------------------------------------------------------------------------
# What each patch's code defines and uses


def _show(repo: Path, rev: str, rel: str) -> str | None:
    res = _run(["git", "show", f"{rev}:{rel}"], repo)
    return res.stdout if res.returncode == 0 else None


def patch_facts(repo: Path, commit: str, patch: Patch) -> pr_code.Facts:
    changes: list[pr_code.FileChange] = []
    for rel in dict.fromkeys([*patch.files, *patch.overlay]):
        if not rel.endswith((".py", ".pyi")):
            continue
        after = _show(repo, commit, rel)
        if after is None:
            continue
        before = _show(repo, f"{commit}~1", rel)
        added = _added_lines(repo, f"{commit}~1", commit, rel) if before is not None else set()
        changes.append(pr_code.FileChange(rel, before, after, added))
    return pr_code.facts(changes)


def touched_launch_code(repo: Path, commit: str, patch: Patch) -> list[str]:
    """Kernels (``@triton.jit`` / TileLang functions) whose code the patch
    changes: where outputs could change."""
    hits: list[str] = []
    for rel in patch.files:
        if not rel.endswith(".py"):
            continue
        after = _show(repo, commit, rel)
        if after is None:
            continue
        added = _added_lines(repo, f"{commit}~1", commit, rel)
        removed_at = _removed_anchor_lines(repo, f"{commit}~1", commit, rel)
        try:
            tree = ast.parse(after)
        except SyntaxError:
            continue
        owner = {
            child: node
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            for child in node.body
        }
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            span = set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
            if not span & (added | removed_at):
                continue
            decos = " ".join(ast.unparse(d) for d in node.decorator_list)
            cls = owner.get(node)
            name = f"{cls.name}.{node.name}" if cls else node.name  # a registry kernel's `kernel`
            if re.search(r"\bjit\b|prim_func|tilelang", decos) and name not in hits:
                hits.append(name)
    return hits


def _removed_anchor_lines(repo: Path, old: str, new: str, rel: str) -> set[int]:
    """Lines of ``new`` where a pure deletion happened."""
    diff = _git(repo, "diff", "-U0", old, new, "--", rel)
    return {int(m.group(1)) or 1 for m in re.finditer(r"^@@ -\S+ \+(\d+),0 @@", diff, re.MULTILINE)}


# --------------------------------------------------------------------------
# PRs


@dataclass
class PullRequest:
    slug: str
    number: str
    patches: list[Patch]
    branch: str
    deps: list[PullRequest] = field(default_factory=list)
    reasons: dict[str, list[str]] = field(default_factory=dict)  # dep slug -> why
    checks: list[pr_body.CheckLine] = field(default_factory=list)
    not_applicable: list[str] = field(default_factory=list)
    touches_outputs: list[str] = field(default_factory=list)
    body: str = ""
    given_title: str | None = None

    @property
    def patch(self) -> Patch:
        return self.patches[0]

    @property
    def title(self) -> str:
        """The trailer's title, else the subject of its last patch (in a group
        of patches, the one that completes the change)."""
        return self.given_title or self.patches[-1].subject

    @property
    def files(self) -> list[str]:
        return sorted({f for p in self.patches for f in [*p.files, *p.overlay]})


def group(patches: list[Patch]) -> list[PullRequest]:
    """PRs in series order (by first patch); ``PR: <slug>`` trailers group."""
    prs: dict[str, PullRequest] = {}
    for patch in patches:
        number, _ = number_and_slug(patch)
        slug, title = pr_slug(patch)
        if slug not in prs:
            prs[slug] = PullRequest(slug, number, [], f"dsv4-warmup/{slug}")
        prs[slug].patches.append(patch)
        prs[slug].given_title = prs[slug].given_title or title
    return list(prs.values())


def pristine_clone(base: str, dest: Path) -> Path:
    """A git copy of the pristine sdist (tag ``v<base>``) at ``dest``: a local
    clone of one made once by ``devtree.init_pristine_repo`` and kept in
    ``build/git/`` (extracting and committing the sdist takes a while)."""
    root = BUILD / "git"
    root.mkdir(parents=True, exist_ok=True)
    cached = root / f"vllm-{base}"
    stamp = root / f"vllm-{base}.stamp"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        want = sources.SDIST_SHA256[base]
        if not (stamp.exists() and stamp.read_text() == want and (cached / ".git").is_dir()):
            shutil.rmtree(cached, ignore_errors=True)
            devtree.init_pristine_repo(base, cached)
            stamp.write_text(want)
        res = _run(["git", "clone", "-q", "--local", str(cached), str(dest)], root)
    if res.returncode != 0:
        raise PrError(f"cannot clone {cached}: {res.stderr.strip()}")
    _git(dest, "remote", "remove", "origin")
    return dest


def _closure(prs: list[PullRequest], direct: set[str], known: dict[str, set[str]]) -> set[str]:
    out = set(direct)
    for slug in direct:
        out |= known.get(slug, set())
    return out


def _file_of(line: str, files: list[str]) -> str | None:
    return next((f for f in sorted(files, key=len, reverse=True) if f in line), None)


def _owner(pr: PullRequest, rel: str | None) -> Patch:
    owners = [p for p in pr.patches if rel in [*p.files, *p.overlay]]
    return owners[-1] if owners else pr.patches[-1]


def _dry_run_env() -> bool:
    return os.environ.get("DRY_RUN", "").strip().lower() not in ("", "0", "no", "false")


@dataclass
class Options:
    signoff: str | None = None
    coauthor: str = COAUTHOR
    skip: set[str] = field(default_factory=set)
    stage: str = pr_hooks.STAGE
    # Proceed when a patch has no evidence file (``make pr DRY_RUN=1``): its
    # body says so where the outputs would be. Never for bodies to open.
    dry_run: bool = field(default_factory=_dry_run_env)
    evidence: Path = field(default_factory=lambda: EVIDENCE)


def evidence_path(root: Path, base: str, patch: Patch) -> Path:
    return root / f"v{base}" / f"{number_and_slug(patch)[0]}.md"


def has_test(patch: Patch) -> bool:
    """Whether ``patch`` adds or changes a test (then its evidence shows it
    failing before and passing after)."""
    return any(f.startswith("tests/") for f in [*patch.files, *patch.overlay])


def load_evidence(
    base: str, patches: list[Patch], opts: Options
) -> tuple[dict[str, pr_body.Evidence | None], list[str]]:
    """Each patch's evidence (None where missing in a dry run) and the
    problems: a missing file (unless a dry run) or one that cannot be quoted."""
    found: dict[str, pr_body.Evidence | None] = {}
    problems: list[str] = []
    for patch in patches:
        path = evidence_path(opts.evidence, base, patch)
        if not path.is_file():
            found[patch.name] = None
            if not opts.dry_run:
                problems.append(
                    f"{patch.name}: no evidence file {_shown(path)}: record the test's output on "
                    "the pristine and the patched tree there (format: pr.py's docstring)"
                )
            continue
        try:
            found[patch.name] = pr_body.read_evidence(path, patch.subject, has_test(patch))
        except pr_body.EvidenceError as e:
            found[patch.name] = None
            problems.append(f"{patch.name}: {str(e).replace(str(path), _shown(path))}")
    return found, problems


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def export(base: str, out: Path, options: Options | None = None) -> list[PullRequest]:
    """Check everything, then write ``out/v<base>/``; raises PrError."""
    opts = options or Options()
    who = identity(opts.signoff)
    series = series_mod.load(base)
    base = series.base
    dest = out / f"v{base}"
    errors: list[str] = []
    warnings: list[str] = []
    evidence, missing = load_evidence(base, series.patches, opts)
    if missing:
        hint = "" if opts.dry_run else " (DRY_RUN=1 checks everything else without them)"
        raise PrError(
            f"the v{base} series' evidence is incomplete, nothing written{hint}:\n  "
            + "\n  ".join(missing)
        )
    prs = group(series.patches)
    index = {p.name: i for i, p in enumerate(series.patches)}
    pr_of = {p.name: pr for pr in prs for p in pr.patches}

    def fail() -> PrError:
        return PrError(
            f"checks failed for the v{base} series, nothing written:\n  " + "\n  ".join(errors)
        )

    work = out / f".v{base}.tmp"
    shutil.rmtree(work, ignore_errors=True)
    try:
        repo = pristine_clone(base, work / "vllm")
        _git(repo, "config", "user.name", who[0])
        _git(repo, "config", "user.email", who[1])
        template_file = repo / ".github" / "PULL_REQUEST_TEMPLATE.md"
        template = (
            template_file.read_text() if template_file.is_file() else pr_body.FALLBACK_TEMPLATE
        )
        try:
            config = pr_hooks.load_config(repo)
        except pr_hooks.HookError as e:
            raise PrError(f"cannot read the tree's pre-commit configuration: {e}") from None

        series_branch = f"dsv4-warmup/v{base}"
        _git(repo, "checkout", "-q", "-b", series_branch, f"v{base}")
        try:  # the whole series, one patch at a time, in order
            am(repo, series.patches, who, opts.coauthor)
        except TreeError as e:
            errors.append(f"the series does not apply in order: {e}")
            raise fail() from None
        commits = _git(repo, "rev-list", "--reverse", f"v{base}..{series_branch}").split()
        commit_of = {p.name: c for p, c in zip(series.patches, commits, strict=True)}

        # Code facts, dependencies, dead code.
        facts = [patch_facts(repo, commit_of[p.name], p) for p in series.patches]
        fresh: set[str] = set()
        for f in facts:
            for name in f.methods:
                found = _run(
                    ["git", "grep", "-q", "-w", "-e", name, f"v{base}", "--", "*.py"], repo
                )
                if found.returncode != 0:
                    fresh.add(name)
        tooling = {d.name for d in (REPO / "scripts").iterdir() if (d / "__init__.py").is_file()}
        for patch, f in zip(series.patches, facts, strict=True):
            shortest: dict[tuple[str, int], str] = {}
            for mod, sites in f.uses.imports.items():
                if mod.split(".")[0] in tooling:
                    for site in sites:
                        if site not in shortest or len(mod) < len(shortest[site]):
                            shortest[site] = mod
            for (path, line), mod in sorted(shortest.items()):
                errors.append(
                    f"{patch.name}: {path}:{line}: imports {mod}, this repository's "
                    "tooling, which is not part of vLLM"
                )
        hard: dict[str, dict[str, list[str]]] = {}
        for i, patch in enumerate(series.patches):
            hard[patch.name] = {}
            for earlier, ef in zip(series.patches[:i], facts[:i], strict=True):
                why = pr_code.needs(facts[i], ef, fresh)
                if why:
                    hard[patch.name][earlier.name] = why
        order = {pr.slug: k for k, pr in enumerate(prs)}
        pr_deps: dict[str, set[str]] = {}
        for pr in prs:
            direct: set[str] = set()
            for patch in pr.patches:
                for dep, why in hard[patch.name].items():
                    other = pr_of[dep]
                    if other is pr:
                        continue
                    if order[other.slug] > order[pr.slug]:
                        errors.append(
                            f"{patch.name} (PR {pr.slug}) needs {dep} ({'; '.join(why[:2])}), "
                            f"which is in the later PR {other.slug}: group them or reorder"
                        )
                        continue
                    direct.add(other.slug)
                    pr.reasons.setdefault(other.slug, []).extend(
                        r for r in why if r not in pr.reasons.get(other.slug, [])
                    )
            pr_deps[pr.slug] = _closure(prs, direct, pr_deps)
        for pr in prs:
            k = order[pr.slug]
            for patch in pr.patches:
                f = facts[index[patch.name]]
                for ref, (path, d) in sorted(f.defines.items()):
                    if ref in f.exempt:
                        continue
                    users = pr_code.users_of(ref, d, path, facts)
                    if any(order[pr_of[series.patches[u].name].slug] <= k for u in users):
                        continue
                    what = f"`{ref[1]}` ({d.kind} in {path})"
                    if users:
                        first = series.patches[min(users)].name
                        errors.append(
                            f"{patch.name}: {path}: {what} is dead until {first} "
                            f"(PR {pr_of[first].slug}): move it there or group the PRs"
                        )
                    else:
                        warnings.append(f"{patch.name}: {path}: {what} is used by no patch")
                for mod in sorted(f.modules - f.entry_modules):
                    users = pr_code.importers_of(mod, facts)
                    if any(order[pr_of[series.patches[u].name].slug] <= k for u in users):
                        continue
                    if users:
                        first = series.patches[min(users)].name
                        errors.append(
                            f"{patch.name}: module {mod} is dead until {first} "
                            f"(PR {pr_of[first].slug}): move it there or group the PRs"
                        )
                    else:
                        warnings.append(f"{patch.name}: module {mod} is imported by no patch")

        # Branches: the PR on the PRs it needs; with the ones it shares files
        # with only when its hunks do not apply without them.
        for pr in prs:
            k = order[pr.slug]
            textual = {
                other.slug
                for other in prs[:k]
                for p in other.patches
                if set(p.files) & {f for q in pr.patches for f in q.files}
            }
            choices = [pr_deps[pr.slug], _closure(prs, pr_deps[pr.slug] | textual, pr_deps)]
            built = False
            for n, chosen in enumerate(dict.fromkeys(map(frozenset, choices))):
                patches = [
                    p for p in series.patches if pr_of[p.name].slug in chosen or pr_of[p.name] is pr
                ]
                _git(repo, "checkout", "-q", "--detach", f"v{base}")
                _git(repo, "branch", "-D", pr.branch, check=False)
                _git(repo, "checkout", "-q", "-b", pr.branch, f"v{base}")
                try:
                    am(repo, patches, who, opts.coauthor)
                except TreeError as e:
                    if n == len(set(map(frozenset, choices))) - 1:
                        errors.append(f"{pr.patches[0].name}: its PR branch does not build: {e}")
                    continue
                for slug in set(chosen) - set(choices[0]):
                    shared = sorted(
                        {f for p in prs[order[slug]].patches for f in p.files}
                        & {f for q in pr.patches for f in q.files}
                    )
                    if shared:
                        pr.reasons.setdefault(slug, []).append(
                            f"its hunks in {', '.join(shared)} do not apply without it"
                        )
                pr_deps[pr.slug] = set(chosen)
                built = True
                break
            pr.deps = [p for p in prs if p.slug in pr_deps[pr.slug]]
            for dep in pr.deps:  # the ones it needs only through another
                if not pr.reasons.get(dep.slug):
                    via = [d.number for d in pr.deps if dep.slug in pr_deps.get(d.slug, set())]
                    if via:
                        pr.reasons[dep.slug] = [f"needed by {', '.join(via)}"]
            if not built:
                continue
            run_checks(repo, base, pr, config, opts, errors)
            pr.touches_outputs = [
                k for p in pr.patches for k in touched_launch_code(repo, commit_of[p.name], p)
            ]
        _git(repo, "checkout", "-q", series_branch)
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        if errors and not opts.dry_run:
            raise fail()

        numbers = {pr.slug: pr.number for pr in prs}
        for pr in prs:
            pr.body = pr_body.render(
                pr_body.BodyInput(
                    base=base,
                    title=pr.title,
                    branch=pr.branch,
                    parts=[
                        pr_body.Part(
                            number_and_slug(p)[0],
                            p.subject,
                            message(p)[1],
                            evidence[p.name],
                            Path(_shown(evidence_path(opts.evidence, base, p))),
                        )
                        for p in pr.patches
                    ],
                    depends=[
                        (numbers[d.slug], d.title, d.branch, pr.reasons.get(d.slug, []))
                        for d in pr.deps
                    ],
                    checks=pr.checks,
                    submitter=f"{who[0]} <{who[1]}>",
                    coauthor=opts.coauthor,
                    touches_outputs=pr.touches_outputs,
                ),
                template,
            )
            errors += [f"{pr.number}-{pr.slug}.md: {p}" for p in pr_body.lint(pr.body)]
            words = pr_body.word_count(pr.body)
            if words > pr_body.WORD_BUDGET:
                longest = max(pr.patches, key=lambda p: len(message(p)[1].split()))
                print(
                    f"warning: {pr.number}-{pr.slug}.md: {words} words of prose (aim: under "
                    f"{pr_body.WORD_BUDGET}); its longest commit message, {longest.name}, has "
                    f"{len(message(longest)[1].split())}",
                    file=sys.stderr,
                )
        if errors and not opts.dry_run:
            raise fail()
        if dest.exists():
            shutil.rmtree(dest)
        work.rename(dest)
        for pr in prs:
            (dest / f"{pr.number}-{pr.slug}.md").write_text(pr.body)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if errors:  # a dry run: written for inspection, with what blocks opening them
        raise DryRunFailures(
            "dry run: written, but checks failed (fix them before opening any of these "
            "PRs):\n  " + "\n  ".join(errors) + "\n" + summary(base, out, prs),
            prs,
        )
    return prs


def run_checks(
    repo: Path,
    base: str,
    pr: PullRequest,
    config: pr_hooks.Config,
    opts: Options,
    errors: list[str],
) -> None:
    """The tree's hooks and the pinned ruff on the PR's files, on its branch
    (checked out in ``repo``); new failures go to ``errors``."""
    files = [f for f in pr.files if (repo / f).is_file()]

    def on_pristine(fs: list[str], run):  # type: ignore[no-untyped-def]
        present = [
            f for f in fs if _run(["git", "cat-file", "-e", f"v{base}:{f}"], repo).returncode == 0
        ]
        if fs and not present:
            return None
        _git(repo, "checkout", "-q", "--detach", f"v{base}")
        try:
            return run(present)
        finally:
            pr_hooks.restore(repo)
            _git(repo, "checkout", "-q", pr.branch)

    try:
        results = pr_hooks.check(
            repo,
            config,
            files,
            on_pristine,
            opts.skip,
            opts.stage,
            {"MYPY_CACHE_DIR": str(CACHE / "tools" / f"mypy-cache-v{base}")},
        )
    except pr_hooks.HookError as e:
        errors.append(f"{pr.patches[0].name}: cannot run the tree's hooks: {e}")
        return
    for r in results:
        if r.status == "no files":
            if r.hook.id not in pr.not_applicable:
                pr.not_applicable.append(r.hook.id)
            continue
        detail = r.detail
        pr.checks.append(pr_body.CheckLine(r.hook.id, r.command, r.status, detail))
        if r.status == "failed":
            for line in r.new_lines:
                rel = _file_of(line, r.files)
                patch = _owner(pr, rel)
                text = pr_hooks.plain(line).strip()[:300]
                errors.append(f"{patch.name}: {rel or '(all files)'}: {r.hook.id}: {text}")
        elif r.status == "pre-existing":
            for line in r.new_lines[:5]:
                print(
                    f"note: {pr.number}: {r.hook.id} on v{base} too: {line[:300]}", file=sys.stderr
                )
        elif r.status == "not run" and r.detail not in ("skipped (SKIP)", pr_hooks.PRINTS_ONLY):
            print(f"warning: {pr.slug}: hook {r.hook.id} not run: {r.detail}", file=sys.stderr)

    py = [f for f in files if f.endswith((".py", ".pyi"))]
    if "ruff-check" in opts.skip and "ruff-format" in opts.skip:
        return
    try:
        ruff, note = ruff_for(repo)
    except PrError as e:
        pr.checks.append(pr_body.CheckLine("ruff", "ruff", "not run", str(e)))
        print(f"warning: {pr.slug}: ruff not run: {e}", file=sys.stderr)
        return
    problems, check_ok, fmt_ok = ruff_problems(ruff, repo, py, f"v{base}")
    for hook_id, tool, args, clean in (
        ("ruff-check", "ruff check", ["check", "--no-cache", "--force-exclude"], check_ok),
        (
            "ruff-format",
            "ruff format",
            ["format", "--check", "--no-cache", "--force-exclude"],
            fmt_ok,
        ),
    ):
        if not py:
            pr.not_applicable.append(hook_id)
            continue
        command = " ".join(["ruff", *args, "--", *py])
        if hook_id in opts.skip:
            pr.checks.append(pr_body.CheckLine(hook_id, command, "not run", "skipped (SKIP)"))
            continue
        mine = [p for p in problems if p[1] == tool]
        status = "passed" if clean else ("failed" if mine else "pre-existing")
        detail = (
            note
            if status == "passed"
            else (
                "" if mine else "findings the pristine files already have; nothing new from this PR"
            )
        )
        pr.checks.append(pr_body.CheckLine(hook_id, command, status, detail))
        for rel, _, msg in mine:
            errors.append(f"{_owner(pr, rel).name}: {rel}: {hook_id}: {msg}")


def summary(base: str, out: Path, prs: list[PullRequest]) -> str:
    dest = out / f"v{base}"
    lines = [f"vLLM {base}: {len(prs)} PRs; branches in {dest / 'vllm'} (on tag v{base})"]
    for pr in prs:
        deps = ", ".join(d.number for d in pr.deps) or "none"
        own = " + ".join(number_and_slug(p)[0] for p in pr.patches)
        lines.append(f"  {pr.number} {pr.branch}  depends on: {deps}")
        if len(pr.patches) > 1:
            lines.append(f"       patches: {own}")
        words = pr_body.word_count(pr.body)
        lines.append(f"       body: {dest / f'{pr.number}-{pr.slug}.md'} ({words} words of prose)")
        if "**Dry run: no evidence file**" in pr.body:
            lines.append("       DRY RUN: no evidence file; do not open this PR from it")
    return "\n".join(lines)


def newest_bases() -> list[str]:
    """Upstream PRs are made from the newest base with a series; the older
    series stay for operators (``BASE=...`` exports one of them)."""
    return series_mod.available_bases()[-1:]  # oldest first
