"""The vLLM-tree tests of 0.34.0 patches 0013, 0014 and 0015 on this CPU-only
machine: on code without the patch (with the series' test file copied in) each
fails, on the patched tree it passes.

- 0013, ``test_jit_warmup_triton_launcher.py -k triton_cache_the_registry_started_with``,
  through ``dsv4warmup.registry.triton_cpu_pytest_plugin``: the platform answers
  as an H100 and Triton (the pinned 3.8.0) compiles for sm_90 with its own
  ptxas, so the warmed kernel's cache folder is real.
- 0014, ``test_mhc_jit_warmup.py -k builds_a_key_once_per_cache_folder``, through
  ``dsv4warmup.registry.mhc_pytest_plugin`` (which also sets up the two warmer
  processes the test starts) with the TileLang the tree pins, compiling for
  sm_90a with nvcc: two processes warming one key into one folder build it once.
- 0015, ``test_jit_warmup.py`` and ``test_mhc_jit_warmup.py -k "side_by_side or
  threads_can_parse_python"``: kernels that wait for each other compile only
  side by side; with the Python-version gate closed, one after another on the
  registry's thread; every mHC TileLang owner declares it; overlapping compiles
  restore the TileLang loggers' levels. No compile runs, so no nvcc is needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TRITON_TEST = "tests/model_executor/test_jit_warmup_triton_launcher.py"
MHC_TEST = "tests/kernels/mhc/test_mhc_jit_warmup.py"
JIT_TEST = "tests/model_executor/test_jit_warmup.py"


def _trees(tmp_path: Path, test_file: str) -> dict[str, Path]:
    """The patched tree, and a pristine copy holding the patched test file."""
    from dsv4warmup import trees

    patched = trees.patched_tree("0.34.0")
    pristine = tmp_path / "pristine"
    shutil.copytree(trees.pristine_tree("0.34.0"), pristine, symlinks=True)
    shutil.copy2(patched / test_file, pristine / test_file)
    return {"pristine": pristine, "patched": patched}


def _pytest(tree: Path, test_file: str, select: str, plugin: str, *first: Path, **env: str) -> str:
    """pytest on ``tree``: ``test_file`` (several, space-separated), ``-k select``."""
    from dsv4warmup import toolchains
    from dsv4warmup.paths import REPO

    path = [*first, *toolchains.extra_python_path("0.34.0"), tree, REPO / "scripts"]
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest"]
        + ["-p", plugin, *test_file.split(), "-k", select],
        capture_output=True,
        text=True,
        cwd=tree,
        env=dict(os.environ, **env, PYTHONPATH=os.pathsep.join(str(p) for p in path)),
        timeout=900,
    )
    return res.stdout + res.stderr


def test_0013_triton_cache_test_fails_on_pristine_passes_patched(tmp_path: Path) -> None:
    out = {
        name: _pytest(
            tree,
            TRITON_TEST,
            "triton_cache_the_registry_started_with",
            "dsv4warmup.registry.triton_cpu_pytest_plugin",
            DSV4_GPU="h100",
        )
        for name, tree in _trees(tmp_path, TRITON_TEST).items()
    }
    assert "1 failed" in out["pristine"], out["pristine"][-3000:]
    assert "_warmup_cache_kernel.json" in out["pristine"], out["pristine"][-3000:]
    assert "1 passed" in out["patched"] and "failed" not in out["patched"], out["patched"][-3000:]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="TileLang compiles need nvcc")
def test_0014_one_build_per_folder_fails_on_pristine_passes_patched(tmp_path: Path) -> None:
    from dsv4warmup import tilelang_site, trees

    site = tilelang_site.tilelang_site(trees.patched_tree("0.34.0"))
    out = {
        name: _pytest(
            tree,
            MHC_TEST,
            "builds_a_key_once_per_cache_folder",
            "dsv4warmup.registry.mhc_pytest_plugin",
            site,
            DSV4_GPU="h100",
            TILELANG_DEFAULT_TARGET='{"kind": "cuda", "arch": "sm_90a"}',
        )
        for name, tree in _trees(tmp_path, MHC_TEST).items()
    }
    # Before: both warmers build the key.
    assert "[(1, 0), (1, 0)] == [(0, 1), (1, 0)]" in out["pristine"], out["pristine"][-3000:]
    assert "1 passed" in out["patched"] and "failed" not in out["patched"], out["patched"][-3000:]


def test_0015_side_by_side_tests_fail_without_it_pass_patched(tmp_path: Path) -> None:
    """0015's tests on the series less 0015 (its test files copied in) and on
    the series. Without 0015 the 10 registry tests fail (no version gate to
    set), the 6 owner declarations fail, and overlapping compiles leave the
    TileLang loggers quieted; with it all 17 pass, the side-by-side test with
    the gate forced open even on CI's Python 3.11.7."""
    from dsv4warmup import tilelang_site, trees
    from dsv4warmup.paths import REPO

    patched = trees.patched_tree("0.34.0")
    before = tmp_path / "without-0015"
    shutil.copytree(patched, before, symlinks=True)
    (patch,) = (REPO / "patches" / "v0.34.0").glob("0015-*.patch")
    subprocess.run(["patch", "-R", "-p1", "-s", "-d", str(before), "-i", str(patch)], check=True)
    for test_file in (MHC_TEST, JIT_TEST):
        shutil.copy2(patched / test_file, before / test_file)
    site = tilelang_site.tilelang_site(patched)
    out = {
        name: _pytest(
            tree,
            f"{MHC_TEST} {JIT_TEST}",
            "side_by_side or threads_can_parse_python",
            "dsv4warmup.registry.mhc_pytest_plugin",
            site,
            DSV4_GPU="h100",
        )
        for name, tree in {"before": before, "patched": patched}.items()
    }
    assert "17 failed" in out["before"], out["before"][-3000:]
    assert "has no attribute 'threads_can_parse_python'" in out["before"], out["before"][-3000:]
    assert "has no attribute 'supports_concurrent_warmup'" in out["before"], out["before"][-3000:]
    assert "assert [40, 40] == [20, 20]" in out["before"], out["before"][-3000:]
    assert "17 passed" in out["patched"], out["patched"][-3000:]
    assert "failed" not in out["patched"], out["patched"][-3000:]
