"""The proposed 0.34.0 patch 0015 (``patches/proposed/v0.34.0/``, not in the
series) on this CPU-only machine: its vLLM-tree tests, ``test_jit_warmup.py``
and ``test_mhc_jit_warmup.py -k side_by_side``, fail on the series (with
0015's test files copied in) and pass on the series plus 0015: kernels that
wait for each other compile only side by side. The proposal must keep
applying onto the series.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from test_v034_startup_tree_tests import MHC_TEST, _pytest

pytestmark = pytest.mark.slow

JIT_TEST = "tests/model_executor/test_jit_warmup.py"


def _with_proposed_0015(tmp_path: Path) -> Path:
    """The patched tree plus the proposed patch 0015 (not in the series until
    its start-up gain is measured on a GPU host)."""
    from dsv4warmup import trees
    from dsv4warmup.paths import REPO

    tree = tmp_path / "with-0015"
    shutil.copytree(trees.patched_tree("0.34.0"), tree, symlinks=True)
    (patch,) = (REPO / "patches" / "proposed" / "v0.34.0").glob("0015-*.patch")
    subprocess.run(["patch", "-p1", "-s", "-d", str(tree), "-i", str(patch)], check=True)
    return tree


def test_proposed_0015_side_by_side_tests_fail_on_the_series_pass_with_it(
    tmp_path: Path,
) -> None:
    """The proposed 0015's tests, with its test files, on the series and on
    the series plus 0015: its kernels wait for each other, so compiling one
    after the other fails (the first waits in vain) and side by side passes.
    No compile runs (the batches are stubbed), so no nvcc is needed."""
    from dsv4warmup import tilelang_site, trees

    series = tmp_path / "series"
    shutil.copytree(trees.patched_tree("0.34.0"), series, symlinks=True)
    proposed = _with_proposed_0015(tmp_path)
    for test_file in (MHC_TEST, JIT_TEST):
        shutil.copy2(proposed / test_file, series / test_file)
    site = tilelang_site.tilelang_site(proposed)
    select = "side_by_side"
    out = {
        name: _pytest(
            tree,
            f"{MHC_TEST} {JIT_TEST}",
            select,
            "dsv4warmup.registry.mhc_pytest_plugin",
            site,
            DSV4_GPU="h100",
        )
        for name, tree in {"series": series, "proposed": proposed}.items()
    }
    assert "2 failed" in out["series"], out["series"][-3000:]
    assert "BrokenBarrierError" in out["series"], out["series"][-3000:]
    assert "2 passed" in out["proposed"], out["proposed"][-3000:]
    assert "failed" not in out["proposed"], out["proposed"][-3000:]
