"""``vllm warmup-kernels`` (0.33.0 series) on a GPU: one process pre-warms the
report's deployment (``FLASH``) into fresh Triton and TileLang disk caches; a
second process with the same flags then finds every key of its registry
warmup there: nothing compiles.

Compiles are counted twice, independently: by the command's own summary
(Triton's ``knobs.compilation.listener`` ``cache_hit``, TileLang's
``JITKernel(from_database=...)``) and by the entries the caches gain on disk
(a disk-cache hit adds none). Positive control: a third process with a
shorter ``--max-model-len`` has compile keys the caches lack, and both counts
see them compile: Triton only, at most one binary per fresh key.

The tree is ``DSV4_V033_PATCHED_TREE`` or ``DSV4_VLLM_TREE`` (it must have
``vllm warmup-kernels``); run with ``pytest -m gpu``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import prewarm_process
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.forked]


def _flags(tmp_path: Path, **changes: Any) -> list[str]:
    from dsv4warmup.serving import FLASH

    return prewarm_process.serve_flags(tmp_path / "model", FLASH.replace(**changes))


def test_second_process_finds_every_key_in_the_disk_caches(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    tree = prewarm_process.tree()
    if tree is None:
        pytest.skip("needs a vLLM tree with `vllm warmup-kernels` (DSV4_V033_PATCHED_TREE)")
    caches = {"triton": tmp_path / "triton", "tilelang": tmp_path / "tilelang"}
    flags = _flags(tmp_path)

    first = prewarm_process.run(tree, caches, flags)
    prewarm_process.record("flash-cold", first)
    assert first["dry_run"] is False and first["num_keys"] > 0
    assert first["cache_dirs"] == {name: str(path) for name, path in caches.items()}
    names = {k["name"] for k in first["kernels"]}
    for kernel in (
        "BuildC128ATopkMetadataKernel",
        "CombineTopkSwaIndicesKernel",
        "MTPSharedHeadRMSNormKernel",
        "MhcPreBigFuseTileLangKernel",
    ):
        assert kernel in names, kernel
    assert first["compiled"].get("triton", 0) > 0, first
    assert first["compiled"].get("tilelang", 0) > 0, first
    assert first["new_entries"]["triton"] > 0 and first["new_entries"]["tilelang"] > 0

    second = prewarm_process.run(tree, caches, flags)
    prewarm_process.record("flash-warm", second)
    assert second["num_keys"] == first["num_keys"]
    assert second["compiled"] == {}, f"compiled again: {second['compiled']}"
    # The registry's own closing line (patch 0006) says the same.
    assert "; compiled: 0; loaded from the disk caches: " in second["warmup_line"]
    assert second["new_entries"] == {"triton": 0, "tilelang": 0}
    for backend in ("triton", "tilelang"):
        # Every binary the first process built, the second read from disk.
        built = first["compiled"].get(backend, 0) + first["loaded_from_cache"].get(backend, 0)
        assert second["loaded_from_cache"].get(backend, 0) == built, backend

    # Positive control: a shorter max_model_len has compile keys the caches
    # lack (C128A's and the global top-k kernel's); those compile, and nothing
    # else (two compile keys may share one binary: at most one per key).
    control = prewarm_process.run(tree, caches, _flags(tmp_path, max_model_len=4096))
    prewarm_process.record("flash-len4096-after-65536", control)
    fresh = _triton_keys(control) - _triton_keys(first)
    assert fresh, "the control configuration has no new Triton compile key"
    assert set(control["compiled"]) == {"triton"}, control["compiled"]
    assert 0 < control["compiled"]["triton"] <= len(fresh), (control["compiled"], fresh)
    assert control["new_entries"] == {"triton": control["new_entries"]["triton"], "tilelang": 0}
    assert control["new_entries"]["triton"] > 0, control


def _triton_keys(summary: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (kernel["name"], key)
        for kernel in summary["kernels"]
        if kernel["backend"] == "triton"
        for key in kernel["keys"]
    }
