"""Caches baked on a CPU-only machine (``dsv4warmup.registry.cpu_bake``): the
patched 0.34.0 tree's real registry warmup compiles the report's deployment's
Triton keys for an sm_90 GPU with Triton's own compiler and ptxas (the pinned
Triton, 3.8.0), no GPU and no driver, into ``HOME``'s default Triton cache,
which the patched server reads with no cache variable set (patch 0013).

Positive control and reproducibility: the first bake builds every key; a second
bake on the same ``HOME`` builds none and reads each from the disk cache, so the
entries are complete and their keys are those the same registrations derive.
That a GPU server loads them is shown on the device (lab phase
``cpu_bake_serve``, docs/gpu-results.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_cpu_bake_builds_sm90_binaries_a_second_bake_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dsv4warmup import trees

    tree = trees.patched_tree("0.34.0")
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for name in ("TRITON_CACHE_DIR", "TRITON_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)

    first = trees.json_from_tree(tree, "-m", "dsv4warmup.registry.cpu_bake", "--no-tilelang")
    second = trees.json_from_tree(tree, "-m", "dsv4warmup.registry.cpu_bake", "--no-tilelang")

    assert first["triton_built"] >= 20 and first["triton_read"] == 0, first
    assert (second["triton_built"], second["triton_read"]) == (0, first["triton_built"]), second
    cache = home / ".triton" / "cache"
    cubins = list(cache.glob("*/*.cubin"))
    assert len(cubins) == first["triton_built"]
    for cubin in cubins:
        meta = json.loads(cubin.with_suffix(".json").read_text())
        assert meta["target"]["backend"] == "cuda" and meta["target"]["arch"] == 90, meta


GPU_KEY_LOG = (
    Path(__file__).resolve().parents[2]
    / "docs/gpu-data/2026-12-07-v034-cpu-bake-keys-tilelang-side-by-side/keys/serve-inductor.jsonl"
)


def test_cpu_bake_derives_the_tilelang_keys_the_h100_server_computed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every TileLang cache key a serving start on the H100 computed (its key
    log, 2026-12-07: TileLang 0.1.12, the patched tree) is one the CPU bake
    derives for the same deployment, part for part: the kernels elaborate to
    the same scripts (with PDL: patch 0016 reads it from the capability the
    platform stand-in reports, which says nothing else about PDL), for the
    same target, pass configs and version. Keys only: nothing is built, so
    no nvcc is needed. Without 0016 every key differs in its script."""
    from dsv4warmup import tilelang_site, trees
    from dsv4warmup.registry import cache_keys

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TILELANG_DEFAULT_TARGET", '{"kind": "cuda", "arch": "sm_90a"}')
    log = tmp_path / "keys" / "cpu.jsonl"
    trees.json_from_tree(
        trees.patched_tree("0.34.0"),
        "-m",
        "dsv4warmup.registry.cpu_bake",
        "--key-log",
        str(log),
        "--keys-only",
        toolchain=[tilelang_site.site_for_version("0.1.12")],
    )

    tilelang = cache_keys.compare(cache_keys.load(log), cache_keys.load(GPU_KEY_LOG))["tilelang"]
    assert (tilelang["keys_a"], tilelang["keys_b"]) == (24, 24), tilelang
    assert tilelang["b_not_in_a"] == 0, tilelang
