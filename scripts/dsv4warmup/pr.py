"""Upstream PRs: for every patch of a base, a branch and a PR body.

``<out>/v<base>/vllm`` is a git copy of the pristine sdist (tag ``v<base>``)
holding the branch ``dsv4-warmup/v<base>`` (the whole series, one commit per
patch) and, per patch, ``dsv4-warmup/<slug>``: the patch on top of the earlier
patches it depends on, made with ``git am``. ``<out>/v<base>/<NNNN>-<slug>.md``
is the PR body in the tree's ``.github/PULL_REQUEST_TEMPLATE.md``.

A patch depends on an earlier one when it imports a module the earlier one
adds or uses a name the earlier one defines, and, only when its hunks do not
apply without them, on the earlier ones that edit the same files. The set is
closed transitively and stated in the PR body.

Nothing is written unless every check passes: each patch has a DCO
sign-off, the series goes in with ``git am`` one patch at a time in series
order, every PR branch builds, and the Python files each patch touches pass
``ruff check`` and ``ruff format --check`` inside the git copy (so the tree's
own ``pyproject.toml`` configuration applies) with the ruff version the
tree's ``.pre-commit-config.yaml`` pins. A violation the pristine file already
had is not blamed on the patch.
"""

from __future__ import annotations

import difflib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import devtree, sources
from . import series as series_mod
from .paths import BUILD, CACHE, REPO
from .series import Patch, Series
from .tree import TreeError

ISSUE = "vllm-project/vllm#48809"
GPU_RESULTS = REPO / "docs" / "gpu-results.md"

# The model-specific JIT kernels of the upstream issue: a heading of
# docs/gpu-results.md naming one of them belongs to the patches whose diff does.
KERNELS = (
    "eagle_prepare_next_token_padded_kernel",
    "eagle_prepare_inputs_padded_kernel",
    "eagle_step_slot_mapping_metadata_kernel",
    "_mtp_shared_head_rmsnorm_kernel",
    "_build_c128a_topk_metadata_kernel",
    "_combine_topk_swa_indices_kernel",
    "mhc_pre_big_fuse_with_norm_tilelang",
    "mhc_pre_tilelang",
    "mhc_pre_broadcast_tilelang",
    "mhc_fused_post_pre_tilelang",
    "mhc_post_tilelang",
    "hc_head_fuse_tilelang",
    "hc_head_fused_kernel_tilelang",
)

FALLBACK_TEMPLATE = """\
## Purpose

## Test Plan

## Test Result
"""
SECTIONS = ("Purpose", "Test Plan", "Test Result")
E2E_PLAN = (
    "End to end, on the issue's DeepSeek-V4-Flash deployment (TP 4, `--kv-cache-dtype fp8`, "
    "`--block-size 256`, MTP `num_speculative_tokens=1`): after start-up, a sweep of requests "
    "must log no `TileLang begins to compile kernel`, no Triton first compile and no "
    "`No available shared memory broadcast block found in 60 seconds`."
)


class PrError(RuntimeError):
    """A failed check: the message names the patch and the file."""


# --------------------------------------------------------------------------
# Patches: numbers, slugs, commit messages, dependencies


def number_and_slug(patch: Patch) -> tuple[str, str]:
    m = re.match(r"(\d{4})-(.+)\.patch$", patch.name)
    if not m:
        raise PrError(f"{patch.name}: patch names must be NNNN-<slug>.patch")
    return m.group(1), m.group(2)


def message(patch: Patch) -> tuple[str, str, list[str]]:
    """Subject, body (no trailers) and Signed-off-by lines of a patch mail."""
    rest = patch.text.partition("\n\n")[2]
    msg = rest.split("\n---\n", 1)[0]
    lines = msg.rstrip("\n").splitlines()
    signoffs = [ln for ln in lines if re.match(r"^Signed-off-by: .+ <[^<>@\s]+@[^<>\s]+>$", ln)]
    while lines and (re.match(r"^[A-Z][\w-]*-by: ", lines[-1]) or not lines[-1].strip()):
        lines.pop()
    return patch.subject, "\n".join(lines).strip(), signoffs


def _added_text(patch: Patch) -> str:
    """Lines a patch adds, and its overlay files: where its imports are."""
    added = [
        ln[1:] for ln in patch.text.splitlines() if ln.startswith("+") and not ln.startswith("+++")
    ]
    overlay = [patch.overlay_bytes(rel).decode(errors="replace") for rel in patch.overlay]
    return "\n".join(added + overlay)


def _diff_text(patch: Patch) -> str:
    changed = [
        ln[1:]
        for ln in patch.text.splitlines()
        if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
    ]
    return "\n".join(
        changed + [patch.overlay_bytes(rel).decode(errors="replace") for rel in patch.overlay]
    )


def _module(rel: str) -> str | None:
    if not rel.endswith(".py"):
        return None
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(text: str, module: str) -> bool:
    if re.search(rf"(?<![\w.]){re.escape(module)}(?![\w])", text):
        return True
    parent, _, leaf = module.rpartition(".")
    if not parent:
        return False
    pattern = rf"from\s+{re.escape(parent)}\s+import\s+(\([^)]*\)|[^\n]*)"
    return any(re.search(rf"\b{re.escape(leaf)}\b", m.group(1)) for m in re.finditer(pattern, text))


def _defined_names(patch: Patch) -> set[str]:
    """Functions, classes and module-level names the patch's added lines define
    (its overlay modules are matched by import instead)."""
    names: set[str] = set()
    added = [
        ln[1:] for ln in patch.text.splitlines() if ln.startswith("+") and not ln.startswith("+++")
    ]
    for line in added:
        m = re.match(
            r"\s*(?:async\s+)?(?:def|class)\s+(\w+)|([A-Za-z_]\w*)\s*(?::[^=]+)?=(?!=)", line
        )
        name = m and (m.group(1) or m.group(2))
        if name and len(name) > 2 and not name.startswith("__"):
            names.add(name)
    return names


def direct_dependencies(series: Series) -> dict[str, tuple[set[str], set[str]]]:
    """Per patch: (hard, textual) earlier patches. Hard: it imports a module
    one adds, or uses a name one defines. Textual: it edits a file one edits
    (needed only when its hunks do not apply without them)."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    for i, patch in enumerate(series.patches):
        text = _added_text(patch)
        words = set(re.findall(r"\w+", text))
        hard: set[str] = set()
        textual: set[str] = set()
        for earlier in series.patches[:i]:
            modules = [m for m in map(_module, earlier.overlay) if m]
            if any(_imports(text, m) for m in modules) or _defined_names(earlier) & words:
                hard.add(earlier.name)
            elif set(patch.files) & set(earlier.files):
                textual.add(earlier.name)
        out[patch.name] = (hard, textual)
    return out


def closure(series: Series, direct: set[str], known: dict[str, list[Patch]]) -> list[Patch]:
    """``direct`` and everything those need (``known``), in series order."""
    names = set(direct)
    for name in direct:
        names.update(p.name for p in known[name])
    return [p for p in series.patches if p.name in names]


# --------------------------------------------------------------------------
# ruff, at the version the tree pins


def pinned_ruff_version(tree: Path) -> str | None:
    cfg = tree / ".pre-commit-config.yaml"
    if not cfg.is_file():
        return None
    m = re.search(r"astral-sh/ruff-pre-commit\s*\n\s*rev:\s*v?([\w.]+)", cfg.read_text())
    return m.group(1) if m else None


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


def _added_lines(repo: Path, rev: str, rel: str) -> set[int]:
    diff = devtree._git(repo, "diff", "-U0", f"{rev}~1", rev, "--", rel)
    out: set[int] = set()
    for m in re.finditer(r"^@@ -\S+ \+(\d+)(?:,(\d+))? @@", diff, re.MULTILINE):
        start, count = int(m.group(1)), int(m.group(2) or 1)
        out.update(range(start, start + count))
    return out


def style_problems(ruff: str, repo: Path, patch: Patch, rev: str = "HEAD") -> list[str]:
    """ruff complaints that the patch (the commit ``rev`` of ``repo``) brings
    into the Python files it touches."""
    files = [f for f in [*patch.files, *patch.overlay] if f.endswith(".py")]
    files = [f for f in files if (repo / f).is_file()]
    if not files:
        return []
    problems: list[str] = []
    check = _run([ruff, "check", "--no-cache", "--force-exclude", "--", *files], repo)
    fmt = _run([ruff, "format", "--check", "--no-cache", "--force-exclude", "--", *files], repo)
    if check.returncode == 0 and fmt.returncode == 0:
        return []
    for rel in files:
        now = (repo / rel).read_text()
        prev = _run(["git", "show", f"{rev}~1:{rel}"], repo)
        before = prev.stdout if prev.returncode == 0 else None

        found = _lint(ruff, repo, rel, now)
        if found:
            base = (
                Counter(str(v["code"]) for v in _lint(ruff, repo, rel, before))
                if before
                else Counter()
            )
            new = Counter(str(v["code"]) for v in found) - base
            for v in found:
                if new[str(v["code"])] > 0:
                    row = v["location"]["row"]  # type: ignore[index]
                    problems.append(
                        f"{patch.name}: {rel}:{row}: ruff check {v['code']} {v['message']}"
                    )

        formatted = _formatted(ruff, repo, rel, now)
        if formatted != now:
            if before is None or _formatted(ruff, repo, rel, before) == before:
                ours = True
            else:  # the pristine file is not formatted either: blame lines
                added = _added_lines(repo, rev, rel)
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
                problems.append(f"{patch.name}: {rel}: ruff format would reformat it")
    return problems


# --------------------------------------------------------------------------
# The PR body


@dataclass
class PullRequest:
    patch: Patch
    number: str
    slug: str
    branch: str
    deps: list[Patch]
    body: str = ""
    tests: list[str] = field(default_factory=list)


def _sections(markdown: str) -> list[tuple[int, str, str]]:
    """(level, heading, text incl. heading) of every section."""
    lines = markdown.splitlines()
    heads = [
        (i, len(m.group(1)), m.group(2).strip())
        for i, line in enumerate(lines)
        if (m := re.match(r"^(#{1,6})\s+(.*)$", line))
    ]
    out = []
    for k, (i, level, title) in enumerate(heads):
        end = next((j for j, lv, _ in heads[k + 1 :] if lv <= level), len(lines))
        out.append((i, level, title, "\n".join(lines[i:end]).strip()))
    return [(lv, t, s) for _, lv, t, s in out]


def _norm(text: str) -> str:
    text = re.sub(r"^\s*(\[[^\]]*\]\s*)+", "", text)
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def measured(pr: PullRequest, results: Path) -> str | None:
    """The sections of docs/gpu-results.md about this patch: headed by its
    subject, its number/file name/slug, or a kernel its diff changes."""
    if not results.is_file():
        return None
    diff = _diff_text(pr.patch)
    subject = _norm(pr.patch.subject)
    picked: list[tuple[int, str]] = []
    for level, title, text in _sections(results.read_text()):
        words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", title))
        kernels = [k for k in KERNELS if k in words and re.search(rf"\b{k}\b", diff)]
        hit = (
            (subject and subject in _norm(title))
            or re.search(rf"\b{pr.number}\b", title)
            or pr.slug in title
            or pr.patch.name in title
            or kernels
        )
        if hit and not any(text in t for _, t in picked):
            picked.append((level, text))
    if not picked:
        return None
    return "\n\n".join(_demote(text, 4 - level) for level, text in picked)


def _demote(text: str, by: int) -> str:
    """Headings nest under the body's ``## Test Result``."""

    def repl(m: re.Match[str]) -> str:
        return "#" * min(6, max(3, len(m.group(1)) + by)) + " "

    return re.sub(r"^(#{1,6})\s+", repl, text, flags=re.MULTILINE)


def upstream_tests(tree: Path, patch: Patch, limit: int = 6) -> list[str]:
    """vLLM's own tests that import a module the patch changes (or the
    patch's own vLLM-tree tests)."""
    own = sorted(
        f for f in [*patch.files, *patch.overlay] if f.startswith("tests/") and f.endswith(".py")
    )
    modules = [m for f in patch.files if f.startswith("vllm/") and (m := _module(f))]
    hits: list[str] = []
    if modules:
        res = _run(
            [
                "git",
                "grep",
                "-l",
                "-E",
                "|".join(re.escape(m) + r"\b" for m in modules),
                "--",
                "tests/*.py",
            ],
            tree,
        )
        hits = sorted(
            f for f in res.stdout.split() if Path(f).name.startswith("test_") and f not in own
        )
    return own + hits[:limit]


def fill_template(template: str, sections: dict[str, str]) -> str:
    lines = template.splitlines()
    lines = [ln for ln in lines if not ln.startswith("PLEASE FILL IN THE PR DESCRIPTION")]
    out: list[str] = []
    done: set[str] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^##\s+(.*?)\s*$", line)
        if m and m.group(1) in sections:
            out += [line, "", sections[m.group(1)].rstrip(), ""]
            done.add(m.group(1))
            i += 1
            while i < len(lines) and not re.match(r"^(#{1,6}\s|---\s*$|<details>)", lines[i]):
                i += 1
            continue
        out.append(line)
        i += 1
    missing = [s for s in SECTIONS if s not in done]
    tail = [ln for s in missing for ln in (f"## {s}", "", sections[s].rstrip(), "")]
    if missing:
        cut = next((k for k, ln in enumerate(out) if re.match(r"^---\s*$", ln)), len(out))
        out = out[:cut] + tail + out[cut:]
    return "\n".join(out).rstrip() + "\n"


def render(
    pr: PullRequest,
    base: str,
    template: str,
    results: Path,
    ruff_note: str,
    numbers: dict[str, str],
) -> str:
    subject, body, _ = message(pr.patch)
    files = sorted({*pr.patch.files, *pr.patch.overlay})
    purpose = [body or subject, ""]
    if "48809" not in body:
        purpose += [
            f"Part of the fix for {ISSUE} (DeepSeek V4 JIT kernels compiled during inference).",
            "",
        ]
    if pr.deps:
        purpose.append(
            f"**Depends on** {len(pr.deps)} earlier patch(es) of this series; their commits are the "
            "first commits of this branch, so merge (or review) those PRs first:"
        )
        purpose += [
            f"- {numbers[d.name]} {message(d)[0]} (branch `dsv4-warmup/{number_and_slug(d)[1]}`)"
            for d in pr.deps
        ]
    else:
        purpose.append(f"**Depends on** nothing: applies on its own to vLLM v{base}.")
    purpose += ["", "Files:", *[f"- `{f}`" for f in files]]

    lint_files = " ".join(f for f in files if f.endswith(".py"))
    plan = ["```bash", f"pre-commit run --files {lint_files}" if lint_files else "pre-commit run"]
    if pr.tests:
        plan.append(f"pytest -v {' '.join(pr.tests)}  # on a GPU")
    plan += ["```", "", E2E_PLAN]

    found = measured(pr, results)
    result = [
        f"- `git am` onto v{base}"
        + (f" after {', '.join(numbers[d.name] for d in pr.deps)}" if pr.deps else "")
        + ": clean.",
        f"- `ruff check` / `ruff format --check` with the tree's configuration, {ruff_note}: clean.",
        "",
    ]
    if found:
        result += ["Measured (from dsv4-warmup `docs/gpu-results.md`):", "", found]
    elif results.is_file():
        result.append(
            "GPU figures: not yet measured (no section of the results names this patch or its kernels)."
        )
    else:
        result.append("GPU figures: not yet measured.")

    filled = fill_template(
        template,
        {
            "Purpose": "\n".join(purpose),
            "Test Plan": "\n".join(plan),
            "Test Result": "\n".join(result),
        },
    )
    head = f"<!-- title: {subject} | branch: {pr.branch} | base: v{base} -->\n"
    if filled.startswith("<!-- markdownlint-disable -->\n"):
        return filled.replace(
            "<!-- markdownlint-disable -->\n", "<!-- markdownlint-disable -->\n" + head, 1
        )
    return head + filled


# --------------------------------------------------------------------------
# The command


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
    devtree._git(dest, "remote", "remove", "origin")
    if not devtree._git(dest, "config", "user.email", check=False).strip():
        devtree._git(dest, "config", "user.name", devtree.IDENTITY[0])
        devtree._git(dest, "config", "user.email", devtree.IDENTITY[1])
    return dest


def _am(repo: Path, branch: str, base: str, patches: list[Patch]) -> None:
    devtree._git(repo, "checkout", "-q", "-b", branch, f"v{base}")
    devtree.am_series(repo, Series(base, patches))


def _branch(
    repo: Path, branch: str, base: str, patch: Patch, choices: list[list[Patch]]
) -> list[Patch]:
    """Make ``branch``: ``patch`` on the first dependency set it applies on
    (the hard dependencies alone, else with the ones it shares files with)."""
    choices = [c for k, c in enumerate(choices) if c not in choices[:k]]
    for k, deps in enumerate(choices):
        try:
            _am(repo, branch, base, [*deps, patch])
            return deps
        except TreeError:
            devtree._git(repo, "checkout", "-q", "--detach", f"v{base}")
            devtree._git(repo, "branch", "-D", branch)
            if k == len(choices) - 1:
                raise
    raise AssertionError("no dependency set given")


def export(base: str, out: Path, results: Path = GPU_RESULTS) -> list[PullRequest]:
    """Check everything, then write ``out/v<base>/``; raises PrError."""
    series = series_mod.load(base)
    base = series.base
    dest = out / f"v{base}"
    errors: list[str] = []
    for patch in series.patches:
        number_and_slug(patch)
        if not message(patch)[2]:
            errors.append(f"{patch.name}: no Signed-off-by line (DCO); commit with `git commit -s`")

    work = out / f".v{base}.tmp"
    shutil.rmtree(work, ignore_errors=True)
    try:
        repo = pristine_clone(base, work / "vllm")
        template_file = repo / ".github" / "PULL_REQUEST_TEMPLATE.md"
        template = template_file.read_text() if template_file.is_file() else FALLBACK_TEMPLATE

        try:  # the whole series, one patch at a time, in order
            _am(repo, f"dsv4-warmup/v{base}", base, series.patches)
        except TreeError as e:
            errors.append(f"the series does not apply in order: {e}")
            raise PrError(
                f"checks failed for the v{base} series, nothing written:\n  " + "\n  ".join(errors)
            ) from None

        ruff, ruff_note = ruff_for(repo)
        direct = direct_dependencies(series)
        deps: dict[str, list[Patch]] = {}
        numbers = {p.name: number_and_slug(p)[0] for p in series.patches}
        prs: list[PullRequest] = []
        for patch in series.patches:
            number, slug = number_and_slug(patch)
            hard, textual = direct[patch.name]
            branch = f"dsv4-warmup/{slug}"
            try:
                deps[patch.name] = _branch(
                    repo,
                    branch,
                    base,
                    patch,
                    [closure(series, hard, deps), closure(series, hard | textual, deps)],
                )
            except TreeError as e:
                errors.append(f"{patch.name}: its PR branch does not build: {e}")
                deps[patch.name] = closure(series, hard | textual, deps)
                continue
            pr = PullRequest(patch, number, slug, branch, deps[patch.name])
            errors += style_problems(ruff, repo, patch)
            pr.tests = upstream_tests(repo, patch)
            prs.append(pr)
        devtree._git(repo, "checkout", "-q", f"dsv4-warmup/v{base}")
        if errors:
            raise PrError(
                f"checks failed for the v{base} series, nothing written:\n  " + "\n  ".join(errors)
            )
        for pr in prs:
            pr.body = render(pr, base, template, results, ruff_note, numbers)

        if dest.exists():
            shutil.rmtree(dest)
        work.rename(dest)
        for pr in prs:
            (dest / f"{pr.number}-{pr.slug}.md").write_text(pr.body)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return prs


def summary(base: str, out: Path, prs: list[PullRequest]) -> str:
    dest = out / f"v{base}"
    lines = [f"vLLM {base}: {len(prs)} PRs; branches in {dest / 'vllm'} (on tag v{base})"]
    for pr in prs:
        deps = ", ".join(number_and_slug(d)[0] for d in pr.deps) or "none"
        lines.append(f"  {pr.number} {pr.branch}  depends on: {deps}")
        lines.append(f"       body: {dest / f'{pr.number}-{pr.slug}.md'}")
    return "\n".join(lines)
