"""The exact-key coverage tests again, against the patched 0.25.1 tree.

The 0.25.1 series is a port (no broadcast first-layer path, no
``Worker.get_draft_model``); this proves its warmups still cover every key its
own call sites produce. Runs in subprocesses (a process imports one vLLM tree),
one per test file, as many at once as there are CPUs. 0.25.1 is frozen: CI keeps
its apply/revert and its audit (``test_audit.py``); this runs with ``make
test-frozen``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from dsv4warmup import trees

KEY_TESTS = (
    "tests/cpu/test_spec_decode_keys.py",
    "tests/cpu/test_sparse_mla_keys.py",
    "tests/cpu/test_mhc_keys.py",
    "tests/cpu/test_prewarm_cli.py",
)


# The pre-warm command's refusal of bad flags (a subprocess each, the same code
# as 0.26.0's) is left to the 0.26.0 run.
DESELECT = "not bad_flags_exit_2"


def _run_on(tree: str, repo: str, test_file: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", DESELECT, test_file],
        cwd=repo,
        env=dict(os.environ, DSV4_VLLM_TREE=tree),
        capture_output=True,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.frozen
def test_key_coverage_on_patched_0_25_1() -> None:
    tree = str(trees.patched_tree("0.25.1"))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    workers = max(1, min(len(KEY_TESTS), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda f: _run_on(tree, repo, f), KEY_TESTS))
    failures = []
    for test_file, res in zip(KEY_TESTS, results, strict=True):
        tail = (res.stdout + res.stderr)[-3000:]
        if res.returncode != 0 or " passed" not in tail or " failed" in tail:
            failures.append(f"--- {test_file} (exit {res.returncode})\n{tail}")
    assert not failures, "\n".join(failures)
