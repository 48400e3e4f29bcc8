"""vLLM 0.33.0's sparse-MLA metadata kernels on a GPU (patched 0.33.0 tree).

* After the real ``JitWarmupRegistry`` warmup of ``BuildC128ATopkMetadataKernel``
  and ``CombineTopkSwaIndicesKernel`` -- registered by the real DeepSeek V4
  attention layers, in the set-up steps the runner activates -- the sweep of
  ``dsv4warmup.registry.sparse_mla`` (real KV cache, metadata builders and
  ``forward_mqa`` on CUDA, FlashMLA stubbed) compiles neither kernel again;
  a launch with a fresh key does compile (the counter works).
* The guarded C128A kernel and ``combine_topk_swa_indices`` on an unaligned
  chunk match torch references.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from c128a_reference import c128a_reference
from compile_counters import triton_compiles
from dsv4warmup.registry.lifecycle import available_runners
from dsv4warmup.serving import FLASH, PRO

pytestmark = [pytest.mark.gpu, pytest.mark.forked]

C128A = "BuildC128ATopkMetadataKernel.kernel"
COMBINE = "CombineTopkSwaIndicesKernel.kernel"
CONFIGS = {
    "flash-64k-k1": FLASH,
    "flash-4k-k3": FLASH.replace(
        max_model_len=4096, num_speculative_tokens=3, max_num_batched_tokens=4096
    ),
    "pro-100k-k2": PRO.replace(
        max_model_len=100000, num_speculative_tokens=2, max_num_batched_tokens=2048
    ),
}


@pytest.mark.parametrize("runner", available_runners())
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_sweep_after_warmup_compiles_nothing(name: str, runner: str) -> None:
    from dsv4warmup.registry import sparse_mla as driver

    model = driver.build_model(CONFIGS[name], runner, device="cuda", kv_cache_bytes=32 << 30)
    with triton_compiles() as warm:
        driver.warm_registry(model.vllm_config, runner).warmup()
        torch.cuda.synchronize()
    assert warm[C128A] >= 1 and warm[COMBINE] >= 1, dict(warm)

    # No JIT monitor here: it cannot be scoped to these two kernels, and the
    # sweep is the first launch of other metadata kernels (e.g.
    # _token_request_mapping_kernel) that a server's dummy runs compile first.
    with triton_compiles() as late:
        driver.run_batches(model, driver.sweep(model))
        torch.cuda.synchronize()
    assert late[C128A] == 0, f"{late[C128A]} C128A compiles after warmup"
    assert late[COMBINE] == 0, f"{late[COMBINE]} combine compiles after warmup"

    # Positive control: keys nothing warms (a block size of 1, an unaligned
    # top-k row) compile.
    with triton_compiles() as fresh:
        _c128a(*_c128a_batch(block_size=1))
        _combine_unaligned_topk()
        torch.cuda.synchronize()
    assert fresh[C128A] == 1 and fresh[COMBINE] == 1, dict(fresh)


# --- outputs against torch ------------------------------------------------------

RATIO = 128


def _c128a_batch(block_size: int = 2, garbage: bool = False) -> tuple[Any, ...]:
    g = torch.Generator(device="cuda").manual_seed(block_size + garbage)
    max_model_len, num_kv_blocks = 65536, 5000
    width = 512
    num_decodes, d, p = 40, 80, 50
    table_width = -(-max_model_len // (block_size * RATIO))
    table = torch.randint(
        0, num_kv_blocks, (num_decodes, table_width), device="cuda", generator=g
    ).int()
    seq = torch.randint(2, max_model_len + 1, (num_decodes,), device="cuda", generator=g)
    positions = torch.cat(
        [
            torch.stack([seq - 2, seq - 1], 1).reshape(-1),
            torch.randint(0, max_model_len, (p,), device="cuda", generator=g),
        ]
    )
    req_ids = torch.arange(num_decodes, device="cuda").repeat_interleave(2).int()
    req_ids = torch.cat([req_ids, torch.zeros(p, dtype=torch.int32, device="cuda")])
    slot_mapping = torch.ones(d + p, dtype=torch.int64, device="cuda")
    slot_mapping[d - 3 : d] = -1  # CUDA-graph padding
    if garbage:
        req_ids[[0, 7, 11]] = torch.tensor([-1, num_decodes, 1 << 24], device="cuda").int()
        table[[1, 2], :3] = torch.tensor([-1, num_kv_blocks, 2**31 - 1], device="cuda").int()
        positions[[4, d + 1]] = torch.tensor([2**40, -(2**40)], device="cuda")
    return positions, d, req_ids, table, block_size, num_kv_blocks, slot_mapping, width


def _c128a(positions, d, req_ids, table, block_size, num_kv_blocks, slot_mapping, width):  # type: ignore[no-untyped-def]
    from vllm.models.deepseek_v4.sparse_mla import build_c128a_topk_metadata

    n = positions.shape[0]
    out = [
        torch.full((n + 4, width), -1, dtype=torch.int32, device="cuda"),
        torch.zeros(n + 4, dtype=torch.int32, device="cuda"),
        torch.full((n + 4, width), -1, dtype=torch.int32, device="cuda"),
    ]
    return build_c128a_topk_metadata(
        positions,
        RATIO,
        d,
        req_ids,
        table,
        block_size,
        num_kv_blocks,
        slot_mapping,
        *out,
        max_compressed_tokens=width,
    )


@pytest.mark.parametrize("garbage", [False, True])
def test_c128a_matches_reference(garbage: bool) -> None:
    batch = _c128a_batch(garbage=garbage)
    decode, lens, prefill = _c128a(*batch)
    ref = c128a_reference(*batch)
    torch.cuda.synchronize()
    assert torch.equal(decode, ref[0])
    assert torch.equal(lens, ref[1])
    assert torch.equal(prefill, ref[2])


def combine_reference(topk, qsl, seq_lens, gather_lens, window, ratio, top_k, m, n):  # type: ignore[no-untyped-def]
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


@pytest.mark.parametrize("ratio,top_k", [(1, 0), (4, 512), (128, 256)])
@pytest.mark.parametrize("decodes", [0, 3])
def test_combine_on_an_unaligned_chunk_matches_reference(
    ratio: int, top_k: int, decodes: int
) -> None:
    """A chunk starting at request 5 (after ``decodes`` decode requests):
    gather_lens unaligned, query_start_loc / seq_lens aligned or not."""
    from vllm.models.deepseek_v4.common.ops.cache_utils import combine_topk_swa_indices

    window, width = 128, max(top_k, 512)
    torch.manual_seed(ratio + decodes)
    prefills = [(3, 65536), (3, 3), (3, 3), (3, 3), (3, 3), (16, 143), (5, 7), (20, 5000)]
    qlens = [1] * decodes + [q for q, _ in prefills]
    qsl = torch.tensor([0, *torch.tensor(qlens).cumsum(0).tolist()], device="cuda").int()
    seq_lens = torch.tensor([9] * decodes + [s for _, s in prefills], device="cuda").int()
    gather = torch.tensor([q + min(s - q, window - 1) for q, s in prefills], device="cuda")
    gather = gather.int()
    tokens = sum(q for q, _ in prefills)
    topk = torch.randint(-1, 4 * width, (tokens, width), device="cuda").int()
    start, end, d = 5, len(prefills), decodes
    base = int(qsl[d])
    qs, qe = int(qsl[d + start]) - base, int(qsl[d + end]) - base
    args = (topk[qs:qe], qsl[d + start : d + end + 1], seq_lens[d:][start:end], gather[start:end])
    n = max(s // ratio for _, s in prefills[start:]) if ratio > 1 else 0
    m = n + max(int(g) for g in gather[start:end])
    out, lens = combine_topk_swa_indices(*args, window, ratio, top_k, m, n)
    ref_out, ref_lens = combine_reference(*args, window, ratio, top_k, m, n)
    assert torch.equal(out.cpu(), ref_out)
    assert torch.equal(lens.cpu(), ref_lens)


def _combine_unaligned_topk() -> None:
    """A top-k view one int32 into its buffer: a key no call site makes."""
    from vllm.models.deepseek_v4.common.ops.cache_utils import combine_topk_swa_indices

    topk = torch.zeros(17 * 512 + 1, dtype=torch.int32, device="cuda")[1:].view(17, 512)
    qsl = torch.tensor([0, 17], dtype=torch.int32, device="cuda")
    seq_lens = torch.tensor([17], dtype=torch.int32, device="cuda")
    combine_topk_swa_indices(topk, qsl, seq_lens, seq_lens, 128, 4, 512, 17 + 128, 4)
