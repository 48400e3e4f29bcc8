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
