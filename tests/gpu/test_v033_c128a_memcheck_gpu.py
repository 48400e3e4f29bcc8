"""compute-sanitizer memcheck over a garbage batch through vLLM 0.33.0's C128A
top-k metadata kernel (scripts/dsv4warmup/gpu/v033_c128a_garbage.py).

* patched (the imported tree): no memcheck error, garbage ids slot -1,
  garbage rows length 0;
* positive controls: a kernel reading past its tensor, and, when
  ``DSV4_V033_PRISTINE_TREE`` names the unpatched tree, the unpatched kernel
  on the same batch, both reported.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "dsv4warmup" / "gpu" / "v033_c128a_garbage.py"


def _memcheck(*args: str) -> subprocess.CompletedProcess[str]:
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not on PATH")
    # Every tensor its own allocation: a read past one is an invalid address.
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    cmd = [
        sanitizer,
        "--tool",
        "memcheck",
        "--show-backtrace",
        "device",
        "--print-limit",
        "20",
        "--error-exitcode",
        "3",
        sys.executable,
        str(SCRIPT),
        *args,
    ]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


def test_patched_garbage_batch_is_clean() -> None:
    proc = _memcheck("patched")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "ERROR SUMMARY: 0 errors" in out, out[-6000:]
    assert "patched: garbage ids give slot -1, garbage rows length 0" in out


def test_sanitizer_reports_an_out_of_bounds_read() -> None:
    proc = _memcheck("out-of-bounds")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Invalid __global__ read" in out, out[-6000:]


def test_unpatched_kernel_reads_out_of_bounds() -> None:
    tree = os.environ.get("DSV4_V033_PRISTINE_TREE")
    if not tree:
        pytest.skip("DSV4_V033_PRISTINE_TREE is not set")
    proc = _memcheck("pristine", "--pristine-tree", tree)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Invalid __global__ read" in out, out[-6000:]
