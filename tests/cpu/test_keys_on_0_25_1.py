"""The exact-key coverage tests again, against the patched 0.25.1 tree.

The 0.25.1 series is a port (no broadcast first-layer path, no
``Worker.get_draft_model``); this proves its warmups still cover every key its
own call sites produce. Runs in a subprocess: a process imports one vLLM tree.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from dsv4warmup import trees

KEY_TESTS = (
    "tests/cpu/test_spec_decode_keys.py",
    "tests/cpu/test_sparse_mla_keys.py",
    "tests/cpu/test_mhc_keys.py",
    "tests/cpu/test_prewarm_cli.py",
)


@pytest.mark.slow
def test_key_coverage_on_patched_0_25_1() -> None:
    tree = trees.patched_tree("0.25.1")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *KEY_TESTS],
        cwd=repo,
        env=dict(os.environ, DSV4_VLLM_TREE=str(tree)),
        capture_output=True,
        text=True,
    )
    tail = (res.stdout + res.stderr)[-3000:]
    assert res.returncode == 0, tail
    assert " passed" in tail and " failed" not in tail
