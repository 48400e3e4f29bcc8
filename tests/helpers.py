"""Small helpers shared by the CPU tests."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any


def base_params(bases: list[str] | tuple[str, ...]) -> list[Any]:
    """``bases`` for ``parametrize``, the frozen ones marked ``frozen`` (not in
    CI: ``make test-frozen``)."""
    import pytest
    from dsv4warmup.sources import FROZEN_BASES

    return [pytest.param(b, marks=pytest.mark.frozen) if b in FROZEN_BASES else b for b in bases]


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` with a fixed test identity; return stdout."""
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
    )
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


def run_interpreted(
    test_file: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Re-run ``test_file`` in a fresh pytest process with ``TRITON_INTERPRET=1``
    (Triton reads it at import) and ``env`` added, asserting that it passes."""
    full_env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file],
        cwd=Path(__file__).resolve().parents[1],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-4000:]
    return proc


def v033_python_path(tree: Path, *first: Path) -> str:
    """``PYTHONPATH`` for code that imports 0.33.0 tree ``tree``: ``first``,
    0.33.0's Triton toolchain, the tree, then this repo's ``scripts/``."""
    from dsv4warmup import toolchains
    from dsv4warmup.paths import REPO

    extra = [*first, *toolchains.extra_python_path("0.33.0")]
    return os.pathsep.join([*(str(p) for p in extra), str(tree.resolve()), str(REPO / "scripts")])


def v033_interpreted_env(tree: Path) -> dict[str, str]:
    """What :func:`run_interpreted` adds for a module that re-runs itself
    against 0.33.0 tree ``tree`` (the module checks ``DSV4_V033_INTERPRET``)."""
    return {
        "DSV4_V033_INTERPRET": "1",
        "DSV4_VLLM_TREE": str(tree),
        "PYTHONPATH": v033_python_path(tree),
    }


def tree_digest(root: Path) -> str:
    """Hash of every path, mode and byte under root: 'byte-identical'."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root)).encode()
        st = p.lstat()
        h.update(rel + b"\0" + oct(st.st_mode).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def fresh(base: str, tmp_path: Path, name: str = "vllm") -> Path:
    """A copy of the generated pristine tree of ``base`` at ``tmp_path/name``."""
    from dsv4warmup import trees

    dest = tmp_path / name
    shutil.copytree(trees.pristine_tree(base), dest, symlinks=True)
    return dest


def pytest_outcomes(junit_xml: Path) -> dict[str, str]:
    """``{classname::name: passed | failed | error | skipped}`` of a pytest
    run's ``--junitxml`` report."""
    from dsv4warmup.junit import outcomes

    return outcomes(junit_xml)


def v033_tree_pytest(
    source_tree: Path,
    *test_files: Path,
    env: dict[str, str] | None = None,
    python_path: tuple[Path, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """A 0.33.0 tree's own tests on CPU against ``source_tree``'s sources, the
    platform answering as a CUDA GPU (``dsv4warmup.registry.mhc_pytest_plugin``);
    ``python_path`` goes first on ``PYTHONPATH`` (e.g. a TileLang site)."""
    full_env = dict(
        os.environ, **(env or {}), PYTHONPATH=v033_python_path(source_tree, *python_path)
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rf",
            "--noconftest",
            "-p",
            "no:cacheprovider",
            "-p",
            "dsv4warmup.registry.mhc_pytest_plugin",
            *(str(f.resolve()) for f in test_files),
        ],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=test_files[0].resolve().parent,
    )
