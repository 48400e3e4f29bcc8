"""The tilelang package a base pins, for CPU tests only.

TileLang's compile key (``JITFunc._parse_phase1_key``) and kernel elaboration
(``get_tir``) run without a GPU, so the tests that compare the recorded mHC
keys with TileLang's own can run in CI. The package is not one of this repo's
requirements (it is vLLM's CUDA dependency, ~200 MB unpacked): it is installed
once, without dependencies, under ``.cache/tools/`` at the version the tree's
``requirements/cuda.txt`` pins, with the import dependencies the venv lacks
(``ml-dtypes``; for 0.1.12 and 0.1.15 also ``z3-solver``, ``cloudpickle``,
``torch-c-dlpack-ext`` and the ``apache-tvm-ffi`` it needs, newer than the
venv's), and put first on ``PYTHONPATH`` of a subprocess.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .paths import CACHE

# tilelang's own import-time dependencies that requirements-dev.txt lacks.
_EXTRA = ("ml-dtypes>=0.5.1",)
# ... and those of later versions (their METADATA's Requires-Dist).
_EXTRA_BY_VERSION = {
    "0.1.12": (
        "apache-tvm-ffi==0.1.11",
        "z3-solver>=4.13.0,<4.15.5",
        "cloudpickle",
        "torch-c-dlpack-ext",
    ),
    "0.1.15": (
        "apache-tvm-ffi==0.1.11",
        "z3-solver>=4.13.0,<4.15.5",
        "cloudpickle",
        "torch-c-dlpack-ext",
    ),
}


def pinned_version(tree: Path) -> str:
    """``tilelang==X`` of the tree's CUDA requirements."""
    text = (tree / "requirements" / "cuda.txt").read_text()
    m = re.search(r"^tilelang==([\w.]+)", text, re.M)
    if m is None:
        raise RuntimeError(f"{tree}: requirements/cuda.txt pins no tilelang")
    return m.group(1)


def tilelang_site(tree: Path) -> Path:
    """A folder to put on ``PYTHONPATH`` that holds the tilelang ``tree`` pins
    (installed on first use)."""
    return site_for_version(pinned_version(tree))


def site_for_version(version: str) -> Path:
    """A folder to put on ``PYTHONPATH`` that holds tilelang ``version``
    (installed on first use)."""
    root = CACHE / "tools"
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"tilelang-{version}"
    requirements = [f"tilelang=={version}", *_EXTRA, *_EXTRA_BY_VERSION.get(version, ())]
    # What the folder was installed with: a folder from an older list (fewer
    # dependencies) is installed again.
    installed = target / ".requirements"
    with open(root / ".tilelang.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed.is_file() and installed.read_text().split("\n") == requirements:
            return target
        scratch = root / f".tilelang-{version}.partial"
        shutil.rmtree(scratch, ignore_errors=True)
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        cmd += ["--no-deps", "--target", str(scratch), *requirements]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"cannot install tilelang {version}: {res.stderr[-2000:]}")
        (scratch / ".requirements").write_text("\n".join(requirements))
        shutil.rmtree(target, ignore_errors=True)
        scratch.rename(target)
    return target


def patched_site(version: str, patch: Path) -> Path:
    """:func:`site_for_version` with ``patch`` (a TileLang change, a ``git
    format-patch`` mail against that version) applied to its ``tilelang/``
    files; the rest of the mail (TileLang's tests) is not part of a site.

    The copy hard-links every file but those the patch edits, so it costs
    no second 200 MB; it is made once per patch content."""
    import hashlib

    base = site_for_version(version)
    digest = hashlib.sha256(patch.read_bytes()).hexdigest()[:12]
    target = base.parent / f"tilelang-{version}+{patch.stem[:40]}-{digest}"
    with open(base.parent / ".tilelang.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".patched").is_file():
            return target
        scratch = base.parent / f".{target.name}.partial"
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.copytree(base, scratch, copy_function=_link_or_copy)
        edited = re.findall(r"^\+\+\+ b/(tilelang/\S+)$", patch.read_text(), re.M)
        for rel in edited:
            # Break the hard link: the patch must not edit the shared original.
            path = scratch / rel
            if path.is_file():
                data = path.read_bytes()
                path.unlink()
                path.write_bytes(data)
        # Outside any repository: inside one, git apply would take the paths
        # as relative to that repository's top.
        env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(scratch.parent)}
        res = subprocess.run(
            ["git", "apply", "--include=tilelang/*", str(patch.resolve())],
            cwd=scratch,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode != 0 or not edited:
            shutil.rmtree(scratch, ignore_errors=True)
            raise RuntimeError(f"{patch.name} does not apply to tilelang {version}: {res.stderr}")
        (scratch / ".patched").write_text(patch.name)
        shutil.rmtree(target, ignore_errors=True)
        scratch.rename(target)
    return target


def _link_or_copy(src: str, dst: str) -> None:
    try:
        Path(dst).hardlink_to(src)
    except OSError:
        shutil.copy2(src, dst)
