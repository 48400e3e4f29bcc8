"""The tests vLLM 0.34.0's series adds to the tree that run on a CPU, each shown
failing against the pristine tree's code and passing against the patched
tree's (the tree's tests/AGENTS.md: show the failure before the fix).

The series' version of each test file runs from a scratch folder with the
tree on ``PYTHONPATH``: the pristine run is the new test on the base commit.
The mHC test needs a CUDA platform: ``dsv4warmup.registry.mhc_pytest_plugin``
makes this CPU answer as an H200 (SM90) or a B200 (SM100, where the fused
post + pre path changes its split below eight tokens). The CUDA platform's
test imports ``vllm.platforms.cuda`` through the platform stand-in's stubs
(``dsv4warmup.registry.triton_cpu_pytest_plugin``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dsv4warmup import toolchains, trees
from dsv4warmup.paths import PATCHES, REPO

BASE = "0.34.0"

# (test file, -k expression, pytest options, GPU the platform answers as,
#  patched outcome, pristine outcome)
CASES = [
    (
        "tests/kernels/mhc/test_mhc_jit_warmup.py",
        "warmup_keys_are_the_runtime_keys",
        ["--noconftest", "-p", "dsv4warmup.registry.mhc_pytest_plugin"],
        "h200",
        {"passed": 36},
        {"failed": 16, "passed": 20},
    ),
    (
        "tests/kernels/mhc/test_mhc_jit_warmup.py",
        "warmup_keys_are_the_runtime_keys",
        ["--noconftest", "-p", "dsv4warmup.registry.mhc_pytest_plugin"],
        "b200",
        {"passed": 36},
        {"failed": 20, "passed": 16},
    ),
    (
        "tests/jit_monitor/test_hooks.py",
        "count_jit_compiles",
        ["--confcutdir", "tests/jit_monitor"],
        "h200",
        {"passed": 1},
        {"failed": 1},
    ),
    (
        # 0016: PDL support from the (NVML-stubbed) device capability; on code
        # without it torch.cuda answers, which this CPU cannot: SM 9.0 and
        # 10.0 say False (SM 8.9 and no capability say False either way).
        "tests/cuda/test_cuda_context.py",
        "pdl_support",
        ["--noconftest", "-p", "dsv4warmup.registry.triton_cpu_pytest_plugin"],
        "h100",
        {"passed": 4},
        {"failed": 2, "passed": 2},
    ),
]

pytestmark = pytest.mark.skipif(
    not (PATCHES / f"v{BASE}" / "series").exists(), reason="no 0.34.0 series"
)


def _run(
    test_file: str, expr: str, options: list[str], gpu: str, code: Path, scratch: Path
) -> dict[str, int]:
    """pytest on the patched tree's ``test_file`` (copied under ``scratch``,
    with the conftest of its folder) against the vLLM of tree ``code``: the
    counts of its summary line (passed, failed, errors)."""
    patched = trees.patched_tree(BASE)
    for rel in (test_file, str(Path(test_file).parent / "conftest.py")):
        if (patched / rel).is_file():
            (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(patched / rel, scratch / rel)
    python_path = [*toolchains.extra_python_path(BASE), code, REPO / "scripts"]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(str(p) for p in python_path),
        VLLM_CACHE_ROOT=str(scratch / ".vllm-cache"),
        DSV4_GPU=gpu,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", "."]
        + options
        + [test_file, "-k", expr],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = proc.stdout.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}
    return {k: v for k, v in counts.items() if k in ("passed", "failed", "error", "errors")}


@pytest.mark.parametrize(("test_file", "expr", "options", "gpu", "patched", "pristine"), CASES)
def test_tree_test_fails_before_and_passes_after(
    tmp_path: Path,
    test_file: str,
    expr: str,
    options: list[str],
    gpu: str,
    patched: dict[str, int],
    pristine: dict[str, int],
) -> None:
    after = _run(test_file, expr, options, gpu, trees.patched_tree(BASE), tmp_path / "after")
    before = _run(test_file, expr, options, gpu, trees.pristine_tree(BASE), tmp_path / "before")
    assert after == patched
    assert before == pristine
