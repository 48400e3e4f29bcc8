"""Exact Triton keys of the DeepSeek V4 sparse-MLA metadata kernels.

Runtime side: the real metadata builders and ``forward_mqa`` over a sweep of
batches (``dsv4warmup.legacy.sparse_mla.runtime_keys``). Warmup side: the
startup warmup on the same configuration (``warmup_keys``). Every runtime key
must be warmed, and every warmed key must be one the real call sites launch
for some feasible batch (no compile is wasted).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from dsv4warmup.legacy import sparse_mla as callsites
from dsv4warmup.serving import FLASH, PRO, SPARSE_MLA_BOUNDARIES, ServingConfig
from hypothesis import given, settings
from hypothesis import strategies as st

C128A, COMBINE = callsites.C128A_KERNEL, callsites.COMBINE_KERNEL

# The realistic sweeps (seconds each); the report's deployment at three
# context lengths, and Pro.
SWEEP_CONFIGS = {
    "flash-4k": FLASH.replace(max_model_len=4096),
    "flash-64k": FLASH,
    "flash-1m": FLASH.replace(max_model_len=1048576),
    "pro-64k": PRO,
}
# Cheaper checks also run on unusual shapes.
EDGE_CONFIGS = {
    **SWEEP_CONFIGS,
    "no-mtp": FLASH.replace(num_speculative_tokens=0, speculative_method=None),
    "mtp-3": PRO.replace(num_speculative_tokens=3),
    "one-seq": FLASH.replace(max_num_seqs=1),
    "tiny-context": FLASH.replace(max_num_seqs=2, max_model_len=256),
    "small-batch": FLASH.replace(max_num_seqs=8, max_num_batched_tokens=2048),
    "big-batch": FLASH.replace(max_num_seqs=1024, max_num_batched_tokens=65536, max_model_len=1024),
}


@functools.cache
def runtime(cfg: ServingConfig) -> dict[str, set[Any]]:
    return callsites.runtime_keys(cfg)


@functools.cache
def warmup(cfg: ServingConfig) -> dict[str, set[Any]]:
    return callsites.warmup_keys(cfg)


def missing(cfg: ServingConfig, warmed: dict[str, set[Any]]) -> dict[str, int]:
    got = runtime(cfg)
    return {k: len(got[k] - warmed[k]) for k in callsites.KERNELS}


@pytest.mark.parametrize("name", sorted(SWEEP_CONFIGS))
def test_every_runtime_key_is_warmed(name: str) -> None:
    cfg = SWEEP_CONFIGS[name]
    got, warmed = runtime(cfg), warmup(cfg)
    for kernel in callsites.KERNELS:
        assert got[kernel], f"the sweep never launched {kernel}"
        assert got[kernel] <= warmed[kernel], sorted(got[kernel] - warmed[kernel])[:3]
    # The decode-token classes 0 / 1 / %16 / other are all seen and warmed.
    assert len(got[C128A]) == len(warmed[C128A]) == 3


@pytest.mark.parametrize("name", sorted(SPARSE_MLA_BOUNDARIES))
def test_boundary_runtime_keys_are_warmed(name: str) -> None:
    """The GPU tests' boundary configurations: the warmup the series runs in
    the server (``key_warmup_args``) covers the sweep; the one-request
    configuration never pads a decode past one request, so it launches no
    C128A key whose decode-token count is neither 0, 1 nor a multiple of 16."""
    cfg = SPARSE_MLA_BOUNDARIES[name]
    got, warmed = runtime(cfg), warmup(cfg)
    for kernel in callsites.KERNELS:
        assert got[kernel], f"the sweep never launched {kernel}"
        assert got[kernel] <= warmed[kernel], sorted(got[kernel] - warmed[kernel])[:3]
    if cfg.max_num_seqs == 1:
        assert len(got[C128A]) == len(warmed[C128A]) == 2


@pytest.mark.parametrize("name", ["flash-4k", "pro-64k"])
def test_key_witness_batches_launch_every_runtime_key(name: str) -> None:
    """The short sweep the memcheck run uses: its batches alone, in a fresh
    runner, launch exactly the full sweep's keys."""
    cfg = SWEEP_CONFIGS[name]
    witnesses = callsites.key_witness_batches(cfg)
    assert len(witnesses) < len(callsites.sweep(cfg)) // 4
    assert callsites.launched_keys(cfg, witnesses) == runtime(cfg)


@pytest.mark.parametrize("name", sorted(EDGE_CONFIGS))
def test_every_warmup_key_is_reachable(name: str) -> None:
    """The batches the combine warmup derives its keys from, run through the
    real call sites, launch exactly the warmed keys."""
    cfg = EDGE_CONFIGS[name]
    warmed = warmup(cfg)
    reached = callsites.witness_keys(cfg)
    assert reached[COMBINE] == warmed[COMBINE]
    assert reached[C128A] <= warmed[C128A]


def test_dropping_any_reached_launch_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: without one warmup launch, the comparison fails."""
    from dsv4warmup.triton_keys import exact_key
    from vllm.model_executor.warmup import sparse_mla_triton_warmup as module

    cfg = SWEEP_CONFIGS["flash-4k"]
    full = warmup(cfg)
    assert missing(cfg, full) == {k: 0 for k in callsites.KERNELS}
    original = module.deepseek_v4_sparse_mla_warmup_launches
    launches = original(callsites.warmup_vllm_config(cfg))
    for kernel in callsites.KERNELS:
        index = next(
            i
            for i, launch in enumerate(launches)
            if launch.kernel_name == kernel
            and exact_key(launch.kernel, launch.args, launch.kwargs) in runtime(cfg)[kernel]
        )

        def without_one(
            vllm_config: Any, kv_block_size: int | None = None, *, index: int = index
        ) -> list[Any]:
            out = original(vllm_config, kv_block_size)
            del out[index]
            return out

        monkeypatch.setattr(module, "deepseek_v4_sparse_mla_warmup_launches", without_one)
        mutated = callsites.warmup_keys(cfg)
        assert len(mutated[kernel]) == len(full[kernel]) - 1
        assert missing(cfg, mutated)[kernel] == 1
    monkeypatch.undo()


def test_context_of_one_block_specializes_the_block_table_stride() -> None:
    # max_model_len 256: one block per request, block_table.stride(0) == 1.
    cfg = EDGE_CONFIGS["tiny-context"]
    keys = warmup(cfg)[C128A]
    assert all(key[0][11] == ("constexpr", 1) for key in keys), keys


def test_warmup_ignores_a_lowered_cache_block_size() -> None:
    """After KV-cache setup the engine may lower cache_config.block_size to
    the smallest group's (SWA: 64); in-process workers share that config."""
    from dsv4warmup.triton_keys import keys_by_kernel, record_launches
    from vllm.model_executor.warmup.sparse_mla_triton_warmup import (
        deepseek_v4_sparse_mla_key_warmup,
    )

    vllm_config = callsites.warmup_vllm_config(FLASH)
    vllm_config.cache_config.block_size = 64
    with record_launches() as recorded:
        deepseek_v4_sparse_mla_key_warmup(vllm_config)
    keys = keys_by_kernel(recorded)
    assert {k: keys[k] for k in callsites.KERNELS} == warmup(FLASH)


def test_warmup_is_one_compile_call_with_one_log_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.model_executor.warmup import sparse_mla_triton_warmup as module

    calls = []
    monkeypatch.setattr(
        module, "compile_triton_warmup", lambda what, launches: calls.append(list(launches))
    )
    module.deepseek_v4_sparse_mla_key_warmup(callsites.warmup_vllm_config(FLASH))
    assert len(calls) == 1
    names = {launch.kernel_name for launch in calls[0]}
    assert names == {C128A, COMBINE}


def test_other_models_warm_nothing() -> None:
    from vllm.model_executor.warmup.sparse_mla_triton_warmup import (
        deepseek_v4_sparse_mla_warmup_launches,
    )

    vllm_config = callsites.warmup_vllm_config(FLASH)
    vllm_config.model_config.hf_config = SimpleNamespace(model_type="llama")
    assert deepseek_v4_sparse_mla_warmup_launches(vllm_config) == []
    # DeepSeek V4 without attention layers loaded (e.g. pipeline stage).
    empty = callsites.make_vllm_config(FLASH)
    assert deepseek_v4_sparse_mla_warmup_launches(empty) == []


def test_other_attention_backends_skip_the_combine_kernel() -> None:
    """FlashInfer / ROCm DeepSeek V4 attention still builds C128A metadata
    but never calls the Triton combine kernel."""
    from vllm.model_executor.warmup.sparse_mla_triton_warmup import (
        deepseek_v4_sparse_mla_warmup_launches,
    )
    from vllm.models.deepseek_v4.nvidia.flashinfer_sparse import (
        DeepseekV4FlashInferMLAAttention as Attention,
    )

    vllm_config = callsites.make_vllm_config(FLASH)
    for ratio in (1, 4, 128):
        layer = Attention.__new__(Attention)
        torch.nn.Module.__init__(layer)
        layer.compress_ratio = ratio
        vllm_config.compilation_config.static_forward_context[f"l{ratio}"] = layer
    names = {launch.kernel_name for launch in deepseek_v4_sparse_mla_warmup_launches(vllm_config)}
    assert names == {C128A}


def test_warmup_errors_are_logged_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.model_executor.warmup import sparse_mla_triton_warmup as module

    def broken(vllm_config: Any) -> list[Any]:
        raise RuntimeError("boom")

    monkeypatch.setattr(module, "deepseek_v4_sparse_mla_warmup_launches", broken)
    warned = []
    monkeypatch.setattr(module.logger, "warning", lambda msg, *a, **k: warned.append(msg % a))
    module.deepseek_v4_sparse_mla_key_warmup(callsites.warmup_vllm_config(FLASH))
    assert warned and "Skipping DeepSeek V4 sparse MLA" in warned[0]


def _torch_chunk_plan(
    seq_lens: list[int],
    query_lens: list[int],
    ratio: int,
    chunk: int,
    window: int,
    max_model_len: int,
    mnbt: int,
) -> list[tuple[int, int, int, int]]:
    """``DeepseekSparseSWAMetadata.get_prefill_chunk_plan`` of vLLM 0.26.0."""
    seq = torch.tensor(seq_lens, dtype=torch.int32)
    query = torch.tensor(query_lens, dtype=torch.int32)
    area = chunk * ((0 if ratio <= 1 else -(-max_model_len // ratio)) + window + mnbt)
    gather = query + torch.clamp(seq - query, min=0, max=window - 1)
    compressed = (
        torch.zeros_like(seq) if ratio <= 1 else torch.div(seq, ratio, rounding_mode="floor")
    )
    plan, start = [], 0
    while start < len(seq_lens):
        c_max, g_max, end = int(compressed[start]), int(gather[start]), start + 1
        while end < len(seq_lens):
            c2 = max(c_max, int(compressed[end]))
            g2 = max(g_max, int(gather[end]))
            if (end - start + 1) * (c2 + g2) > area:
                break
            c_max, g_max, end = c2, g2, end + 1
        plan.append((start, end, c_max, c_max + g_max))
        start = end
    return plan


@settings(max_examples=300, deadline=None)
@given(
    requests=st.lists(
        st.tuples(st.integers(1, 5000), st.integers(0, 70000)), min_size=1, max_size=40
    ),
    ratio=st.sampled_from([1, 4, 128]),
    mnbt=st.sampled_from([64, 2048, 8192]),
    max_model_len=st.sampled_from([4096, 65536]),
)
def test_chunk_plan_is_unchanged(
    requests: list[tuple[int, int]], ratio: int, mnbt: int, max_model_len: int
) -> None:
    """The chunk planner factored out of ``get_prefill_chunk_plan`` (so the
    warmup can run it) plans exactly as before."""
    from vllm.v1.attention.backends.mla.sparse_swa import compute_prefill_chunk_plan

    query_lens = [q for q, _ in requests]
    seq_lens = [q + prefix for q, prefix in requests]
    args = (ratio, 4, 128, max_model_len, mnbt)
    assert compute_prefill_chunk_plan(
        seq_lens,
        query_lens,
        compress_ratio=ratio,
        prefill_chunk_size=4,
        window_size=128,
        max_model_len=max_model_len,
        max_num_batched_tokens=mnbt,
    ) == _torch_chunk_plan(seq_lens, query_lens, *args)
