"""The TileLang change ``patches/tilelang/v0.1.15/0001-*.patch`` (``T.reduce_*``
builds its ``@macro`` once at import instead of on every call): its own test
fails on TileLang 0.1.15 as released and passes patched, and the mHC kernels
vLLM 0.34.0 compiles for the report's deployment keep every TileLang cache key,
so caches built before the change stay valid.

What it saves at start-up is measured on the GPU (``docs/gpu-results.md``); the
CPU elaboration time is in the patch's commit message.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
(PATCH,) = (REPO / "patches" / "tilelang" / "v0.1.15").glob("0001-*.patch")
TEST_FILE = "testing/python/language/test_tilelang_language_reduce_macro.py"


@pytest.fixture(scope="module")
def tilelang_test(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test file the patch adds to TileLang, written out of the mail."""
    root = tmp_path_factory.mktemp("tilelang-tests")
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(root.parent)}
    subprocess.run(
        ["git", "apply", f"--include={TEST_FILE}", str(PATCH)],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
    )
    return root / TEST_FILE


def _pytest(site: Path, test: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", str(test)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=test.parent)


def test_tilelang_test_fails_before_the_change_and_passes_after(tilelang_test: Path) -> None:
    from dsv4warmup import tilelang_site

    before = _pytest(tilelang_site.site_for_version("0.1.15"), tilelang_test)
    after = _pytest(tilelang_site.patched_site("0.1.15", PATCH), tilelang_test)

    assert before.returncode == 1, before.stdout[-3000:] + before.stderr[-3000:]
    failed = [line for line in before.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == 1 and "test_reduce_macro_is_not_rebuilt_per_call" in failed[0], failed
    assert "1 failed, 2 passed" in before.stdout, before.stdout[-2000:]
    assert after.returncode == 0 and "3 passed" in after.stdout, after.stdout[-3000:]


def test_deployment_tilelang_keys_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every TileLang cache key of the report's deployment (24 mHC keys, the
    patched 0.34.0 tree, sm_90a) is the same with the change as without it,
    part for part: the elaborated kernels' scripts are identical."""
    from dsv4warmup import tilelang_site, trees
    from dsv4warmup.registry import cache_keys

    monkeypatch.setenv("TILELANG_DEFAULT_TARGET", '{"kind": "cuda", "arch": "sm_90a"}')
    logs = {}
    for name, site in (
        ("released", tilelang_site.site_for_version("0.1.15")),
        ("patched", tilelang_site.patched_site("0.1.15", PATCH)),
    ):
        monkeypatch.setenv("HOME", str(tmp_path / name))
        logs[name] = tmp_path / f"{name}.jsonl"
        trees.json_from_tree(
            trees.patched_tree("0.34.0"),
            "-m",
            "dsv4warmup.registry.cpu_bake",
            "--key-log",
            str(logs[name]),
            "--keys-only",
            toolchain=[site],
        )

    released, patched = (cache_keys.load(logs[name]) for name in ("released", "patched"))
    tilelang = cache_keys.compare(released, patched)["tilelang"]
    assert (tilelang["keys_a"], tilelang["keys_b"]) == (24, 24), tilelang
    assert tilelang["b_not_in_a"] == 0, tilelang
