"""Per-base Python toolchain extras: the Triton release each base's torch pin brings.

Exact Triton specialization keys depend on the Triton version. 0.25.1 and
0.26.0 pin torch 2.11.0 (triton 3.6.0, the dev venv's own); 0.33.0 pins torch
2.14.0, which requires ``triton~=3.8.0``. That Triton is installed once with
pip into ``.cache/py-triton-<version>`` and put first on ``PYTHONPATH`` of the
interpreters that import a 0.33.0 tree; the torch CPU build stays the venv's
(the key binder and the interpreter do not depend on torch's CUDA build).
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .paths import CACHE

# Triton release each base's pinned torch requires (torch METADATA Requires-Dist).
TRITON_FOR_BASE: dict[str, str] = {
    "0.25.1": "3.6.0",
    "0.26.0": "3.6.0",
    "0.33.0": "3.8.0",
    "0.34.0": "3.8.0",
}
VENV_TRITON = "3.6.0"


def triton_version(base: str) -> str:
    return TRITON_FOR_BASE.get(base, VENV_TRITON)


def extra_python_path(base: str) -> list[Path]:
    """Folders to put before the venv's site-packages for ``base``."""
    version = triton_version(base)
    if version == VENV_TRITON:
        return []
    target = CACHE / f"py-triton-{version}"
    if not (target / "triton" / "__init__.py").is_file():
        _install(version, target)
    return [target]


def _install(version: str, target: Path) -> None:
    """pip-install ``triton==version`` into ``target``, once across processes.

    The audit starts its pristine and patched interpreters at the same time:
    an exclusive lock makes the second wait for the first, and the install goes
    to a scratch folder renamed into place, so no process ever imports a
    half-written Triton (or finds one left by a killed install).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "triton" / "__init__.py").is_file():
            return
        print(f"installing triton {version} into {target}", file=sys.stderr)
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--no-deps",
                    "--target",
                    str(scratch),
                    f"triton=={version}",
                ],
                check=True,
            )
            shutil.rmtree(target, ignore_errors=True)
            scratch.rename(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
