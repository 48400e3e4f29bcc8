"""DeepSeek V4 sparse-MLA metadata kernels on a GPU.

* After the startup warmup (``deepseek_v4_sparse_mla_key_warmup``), the
  realistic sweep of ``dsv4warmup.legacy.sparse_mla`` -- real metadata
  builders and ``forward_mqa`` on CUDA tensors -- compiles neither kernel again,
  and the warmup compiled exactly as many binaries as the CPU key audit counts.
* The guarded C128A kernel and ``combine_topk_swa_indices`` match torch
  references, garbage ids included.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from compile_counters import triton_compiles
from dsv4warmup.legacy import sparse_mla as callsites
from dsv4warmup.serving import FLASH, PRO, SPARSE_MLA_BOUNDARIES

pytestmark = [pytest.mark.gpu, pytest.mark.forked]

C128A, COMBINE = callsites.C128A_KERNEL, callsites.COMBINE_KERNEL
CONFIGS = {
    "flash-4k": FLASH.replace(max_model_len=4096),
    "flash-64k": FLASH,
    "flash-1m": FLASH.replace(max_model_len=1048576),
    "pro-64k": PRO,
    **SPARSE_MLA_BOUNDARIES,
}


def forget_compiled() -> None:
    """Drop both kernels' in-memory binaries: their next launch compiles
    (or loads from the disk cache) through ``_do_compile`` again."""
    from vllm.models.deepseek_v4.common.ops.cache_utils import _combine_topk_swa_indices_kernel
    from vllm.models.deepseek_v4.sparse_mla import _build_c128a_topk_metadata_kernel

    for kernel in (_build_c128a_topk_metadata_kernel, _combine_topk_swa_indices_kernel):
        kernel.device_caches.clear()


def assert_counter_sees_compiles(
    runner: callsites.Runner, batches: list[callsites.Batch], late: Counter[str]
) -> None:
    """Positive control of a zero count, in the same counter: after
    :func:`forget_compiled`, the batches compile both kernels again."""
    before = Counter(late)
    forget_compiled()
    for batch in batches:
        runner.step(batch)
        if late[C128A] > before[C128A] and late[COMBINE] > before[COMBINE]:
            return
    raise AssertionError(f"the compile counter saw no compile: {dict(late)}")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_sweep_after_warmup_compiles_nothing(name: str) -> None:
    from vllm.model_executor.warmup.sparse_mla_triton_warmup import (
        deepseek_v4_sparse_mla_key_warmup,
    )

    cfg = CONFIGS[name]
    expected = callsites.warmup_keys(cfg)  # CPU binder, recorded only
    with triton_compiles() as warm:
        deepseek_v4_sparse_mla_key_warmup(*callsites.key_warmup_args(cfg))
    assert warm[C128A] == len(expected[C128A]) > 0
    assert warm[COMBINE] == len(expected[COMBINE]) > 0

    runner = callsites.Runner(cfg, device="cuda")
    batches = callsites.sweep(cfg)
    with callsites.no_attention_kernels("cuda"), triton_compiles() as late:
        for batch in batches:
            runner.step(batch)
        torch.cuda.synchronize()
        after_sweep = Counter(late)
        assert_counter_sees_compiles(runner, batches, late)
        torch.cuda.synchronize()
    assert after_sweep[C128A] == 0, f"{after_sweep[C128A]} C128A compiles after warmup"
    assert after_sweep[COMBINE] == 0, f"{after_sweep[COMBINE]} combine compiles after warmup"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_runtime_key_once_after_warmup(name: str) -> None:
    """Warmup, then one batch per runtime key (``key_witness_batches``), each
    synchronized: every binary the sweep uses runs at least once, few enough
    launches for compute-sanitizer (``gpu-run.sh sanitizer_sweep``), and an
    error is reported at the batch that caused it."""
    from vllm.model_executor.warmup.sparse_mla_triton_warmup import (
        deepseek_v4_sparse_mla_key_warmup,
    )

    cfg = CONFIGS[name]
    batches = callsites.key_witness_batches(cfg)  # recorded on the meta device
    with triton_compiles() as warm:
        deepseek_v4_sparse_mla_key_warmup(*callsites.key_warmup_args(cfg))
    assert warm[C128A] > 0 and warm[COMBINE] > 0

    runner = callsites.Runner(cfg, device="cuda")
    baseline = torch.cuda.memory_allocated()
    with callsites.no_attention_kernels("cuda"), triton_compiles() as late:
        for i, batch in enumerate(batches):
            runner.step(batch)
            torch.cuda.synchronize()
            grown = torch.cuda.memory_allocated() - baseline
            assert grown < 1 << 30, f"batch {i} of {len(batches)}: {grown >> 20} MiB still held"
        after_sweep = Counter(late)
        assert_counter_sees_compiles(runner, batches, late)
        torch.cuda.synchronize()
    assert after_sweep[C128A] == 0 and after_sweep[COMBINE] == 0, dict(after_sweep)


def test_startup_path_runs_every_sparse_mla_warmup() -> None:
    """``sparse_mla_triton_warmup_if_needed`` (called by ``kernel_warmup``)
    still runs upstream's SWA / prefill-chunk warmups, then the key warmup."""
    from types import SimpleNamespace

    from vllm.model_executor.warmup.sparse_mla_triton_warmup import (
        sparse_mla_triton_warmup_if_needed,
    )
    from vllm.models.deepseek_v4.sparse_mla import DeepseekV4FlashMLABackend

    cfg = CONFIGS["flash-4k"]
    vllm_config = callsites.warmup_vllm_config(cfg)
    runner = SimpleNamespace(
        is_pooling_model=False,
        device=torch.device("cuda"),
        vllm_config=vllm_config,
        attn_groups=[[SimpleNamespace(backend=DeepseekV4FlashMLABackend)]],
    )
    worker = SimpleNamespace(
        model_runner=runner,
        scheduler_config=vllm_config.scheduler_config,
        vllm_config=vllm_config,
    )
    with triton_compiles() as compiled:
        sparse_mla_triton_warmup_if_needed(worker)  # type: ignore[arg-type]
        torch.cuda.synchronize()
    expected = callsites.warmup_keys(cfg)
    assert compiled["_compute_prefill_metadata_kernel"] > 0  # upstream's
    assert compiled[C128A] == len(expected[C128A])
    assert compiled[COMBINE] == len(expected[COMBINE])


# --- outputs against torch ------------------------------------------------------

RATIO, BLOCK = 128, 2  # C128A; 256-token KV blocks hold 2 compressed tokens


def c128a_reference(
    positions: torch.Tensor,
    num_decode_tokens: int,
    req_ids: torch.Tensor,
    table: torch.Tensor,
    slot_mapping: torch.Tensor,
    width: int,
    num_kv_blocks: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = torch.div(positions + 1, RATIO, rounding_mode="trunc").clamp(max=width)
    j = torch.arange(width, device=positions.device)
    d = num_decode_tokens
    rows, table_width = table.shape
    req = req_ids[:d].long()
    ok = (slot_mapping[:d] >= 0) & (req >= 0) & (req < rows)
    col = j // BLOCK
    valid = (j[None] < n[:d, None]) & ok[:, None] & (col < table_width)[None]
    blocks = table[req.clamp(0, max(rows - 1, 0))][:, col.clamp(max=table_width - 1)].long()
    valid &= (blocks >= 0) & (blocks < num_kv_blocks)
    decode = torch.where(valid, blocks * BLOCK + (j % BLOCK)[None], -1).int()
    prefill = torch.where(j[None] < n[d:, None], j[None], -1).int()
    return decode, valid.sum(1).int(), prefill


@pytest.mark.parametrize("max_model_len", [4096, 65536, 1048576])
@pytest.mark.parametrize("garbage", [False, True])
def test_c128a_matches_reference(max_model_len: int, garbage: bool) -> None:
    from vllm.models.deepseek_v4.sparse_mla import (
        build_c128a_topk_metadata,
        c128a_max_compressed_tokens,
    )

    g = torch.Generator(device="cuda").manual_seed(max_model_len)
    width = c128a_max_compressed_tokens(max_model_len)
    num_decodes, d, p, num_kv_blocks = 40, 80, 50, 5000
    table = torch.randint(0, num_kv_blocks, (64, -(-max_model_len // 256)), device="cuda")
    table = table.int()
    seq = torch.randint(2, max_model_len + 1, (num_decodes,), device="cuda", generator=g)
    positions = torch.cat(
        [
            torch.stack([seq - 2, seq - 1], 1).reshape(-1),
            torch.randint(0, max_model_len, (p,), device="cuda", generator=g),
        ]
    )
    req_ids = torch.arange(num_decodes, device="cuda").repeat_interleave(2).int()
    req_ids = torch.cat([req_ids, torch.full((p,), num_decodes, device="cuda").int()])
    slot_mapping = torch.ones(d + p, dtype=torch.int64, device="cuda")
    slot_mapping[d - 3 : d] = -1  # CUDA-graph padding
    if garbage:
        req_ids[[0, 7, 11]] = torch.tensor([-1, num_decodes, 1 << 24], device="cuda").int()
        table[[1, 2], :3] = torch.tensor([-1, num_kv_blocks, 2**31 - 1], device="cuda").int()
        positions[[4, d + 1]] = torch.tensor([2**40, -(2**40)], device="cuda")
    out = [
        torch.full((d + p + 4, width), -1, dtype=torch.int32, device="cuda"),
        torch.zeros(d + p + 4, dtype=torch.int32, device="cuda"),
        torch.full((d + p + 4, width), -1, dtype=torch.int32, device="cuda"),
    ]
    decode, lens, prefill = build_c128a_topk_metadata(
        positions.long(),
        RATIO,
        d,
        req_ids,
        table[:num_decodes],
        BLOCK,
        slot_mapping,
        *out,
        max_compressed_tokens=width,
        num_kv_blocks=num_kv_blocks,
    )
    ref = c128a_reference(
        positions.long(), d, req_ids, table[:num_decodes], slot_mapping, width, num_kv_blocks
    )
    torch.cuda.synchronize()
    assert torch.equal(decode, ref[0])
    assert torch.equal(lens, ref[1])
    assert torch.equal(prefill, ref[2])
    assert bool((out[0][d:] == -1).all()) and bool((out[1][d:] == 0).all())


def combine_reference(
    topk: torch.Tensor,
    qsl: torch.Tensor,
    seq_lens: torch.Tensor,
    gather_lens: torch.Tensor,
    window: int,
    ratio: int,
    top_k: int,
    m: int,
    n: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    topk, qsl, seq_lens, gather_lens = (t.cpu() for t in (topk, qsl, seq_lens, gather_lens))
    width = (top_k + window + 127) // 128 * 128
    out = torch.full((topk.shape[0], width), -1, dtype=torch.int32)
    lens = torch.zeros(topk.shape[0], dtype=torch.int32)
    base = int(qsl[0])
    for b in range(seq_lens.shape[0]):
        start, end = int(qsl[b]) - base, int(qsl[b + 1]) - base
        seq, gather = int(seq_lens[b]), int(gather_lens[b])
        for t in range(start, end):
            pos = seq - (end - start) + (t - start)
            k, w = min((pos + 1) // ratio, top_k), min(pos + 1, window)
            out[t, :k] = topk[t, :k] + m * b
            out[t, k : k + w] = m * b + n + torch.arange(w) + pos - w + 1 - (seq - gather)
            lens[t] = k + w
    return out, lens


@pytest.mark.parametrize("ratio,top_k", [(1, 0), (4, 512), (128, 512), (128, 8192)])
def test_combine_matches_reference(ratio: int, top_k: int) -> None:
    from vllm.models.deepseek_v4.common.ops.cache_utils import combine_topk_swa_indices
    from vllm.v1.attention.backends.mla.sparse_swa import compute_prefill_chunk_plan

    window, width = 128, max(top_k, 512)
    torch.manual_seed(ratio)
    # 3 decodes, then prefills (56 tokens) that the workspace of a 64-token
    # batch splits into chunks.
    prefills = [(3, 65536), (3, 3), (3, 3), (3, 3), (3, 3), (16, 143), (5, 7), (20, 5000)]
    qlens = [1, 1, 1] + [q for q, _ in prefills]
    qsl = torch.tensor([0, *torch.tensor(qlens).cumsum(0).tolist()], device="cuda").int()
    seq_lens = torch.tensor([9, 9, 9] + [s for _, s in prefills], device="cuda").int()
    gather = torch.tensor([q + min(s - q, window - 1) for q, s in prefills], device="cuda")
    gather = gather.int()
    topk = torch.randint(-1, 4 * width, (sum(q for q, _ in prefills), width), device="cuda")
    topk = topk.int()
    plan = compute_prefill_chunk_plan(
        [s for _, s in prefills],
        [q for q, _ in prefills],
        compress_ratio=ratio,
        prefill_chunk_size=4,
        window_size=window,
        max_model_len=65536,
        max_num_batched_tokens=64,
    )
    assert len(plan) > 1
    d, base = 3, int(qsl[3])
    for start, end, n, m in plan:
        qs, qe = int(qsl[d + start]) - base, int(qsl[d + end]) - base
        args = (topk[qs:qe], qsl[d + start : d + end + 1], seq_lens[d:][start:end])
        args = (*args, gather[start:end])
        out, lens = combine_topk_swa_indices(*args, window, ratio, top_k, m, n)
        ref_out, ref_lens = combine_reference(*args, window, ratio, top_k, m, n)
        assert torch.equal(out.cpu(), ref_out)
        assert torch.equal(lens.cpu(), ref_lens)
