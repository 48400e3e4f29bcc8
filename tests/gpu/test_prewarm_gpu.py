"""The offline pre-warm entry point on a GPU: ``python -m
vllm.model_executor.warmup.deepseek_v4_warmup`` in one process fills the
Triton and TileLang disk caches; a second process replaying a serving trace
through the real call sites (``scripts/bench/bench_first_request.py``'s replay,
same flags) then builds nothing: a warm-cache start."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.forked]

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "bench_first_request.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_first_request", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_prewarm_then_serve_compiles_nothing(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    bench = _bench()
    tree = os.environ.get("DSV4_VLLM_TREE")
    tree_path = Path(tree) if tree else None
    prewarm = bench._run(tree_path, tmp_path, "prewarm", 2048)
    assert prewarm["exit"] == 0
    # Positive control: the probe sees the pre-warm build Triton and TileLang kernels.
    built = prewarm["built"]
    assert built.get("_build_c128a_topk_metadata_kernel", 0) > 0, built
    assert any(name.endswith("_tilelang") for name in built), built
    serve = bench._run(tree_path, tmp_path, "replay", 2048)
    assert serve["built"] == {}, f"compiled during the replay: {serve['built']}"
    # The kernels did run: each was loaded once per process, from the disk cache.
    assert sum(serve["jit"].values()) > 0
    for kernel in (
        "_build_c128a_topk_metadata_kernel",
        "_combine_topk_swa_indices_kernel",
        "eagle_prepare_next_token_padded_kernel",
        "_mtp_shared_head_rmsnorm_kernel",
        bench.MHC,
    ):
        assert serve["calls"].get(kernel), kernel
