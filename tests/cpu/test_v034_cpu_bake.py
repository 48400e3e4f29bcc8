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
