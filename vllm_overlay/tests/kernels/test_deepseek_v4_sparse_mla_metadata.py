# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""DeepSeek V4 sparse-MLA metadata kernels: the C128A top-k metadata kernel
(`build_c128a_topk_metadata`) and `combine_topk_swa_indices`.

  A) C128A metadata matches a torch reference; garbage request ids, block
     numbers and positions give slot -1 instead of an illegal address.
  B) After the compile-only startup warmup, launches over the shapes serving
     produces (decode-token counts, prefill chunk slices, M/N) compile nothing.
"""

import pytest
import torch

from vllm.models.deepseek_v4.common.ops.cache_utils import (
    combine_topk_swa_indices,
    combine_topk_swa_indices_warmup_launches,
)
from vllm.models.deepseek_v4.sparse_mla import (
    _block_table_width,
    build_c128a_topk_metadata,
    build_c128a_topk_metadata_warmup_launches,
    c128a_max_compressed_tokens,
)
from vllm.platforms import current_platform
from vllm.v1.attention.backends.mla.sparse_swa import compute_prefill_chunk_plan

pytestmark = pytest.mark.skipif(
    not current_platform.is_cuda(), reason="DeepSeek V4 sparse MLA needs CUDA"
)

RATIO = 128
KV_BLOCK = 256
BLOCK = KV_BLOCK // RATIO
WINDOW = 128
NUM_KV_BLOCKS = 4000


def _c128a_reference(positions, num_decode_tokens, req_ids, table, slots, width):
    n = torch.div(positions + 1, RATIO, rounding_mode="trunc").clamp(max=width)
    j = torch.arange(width, device=positions.device)
    d = num_decode_tokens
    rows, table_width = table.shape
    req = req_ids[:d].long()
    ok = (slots[:d] >= 0) & (req >= 0) & (req < rows)
    col = j // BLOCK
    valid = (j[None] < n[:d, None]) & ok[:, None] & (col < table_width)[None]
    safe_rows = req.clamp(0, max(rows - 1, 0))
    blocks = table[safe_rows][:, col.clamp(max=table_width - 1)].long()
    valid &= (blocks >= 0) & (blocks < NUM_KV_BLOCKS)
    decode = torch.where(valid, blocks * BLOCK + (j % BLOCK)[None], -1).int()
    prefill = torch.where(j[None] < n[d:, None], j[None], -1).int()
    return decode, valid.sum(1).int(), prefill


def _c128a_inputs(max_model_len, num_decodes, num_prefill_tokens, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    seq = torch.randint(
        2, max_model_len + 1, (num_decodes,), device="cuda", generator=gen
    )
    positions = torch.cat(
        [
            torch.stack([seq - 2, seq - 1], 1).reshape(-1),
            torch.randint(0, max_model_len, (num_prefill_tokens,), device="cuda"),
        ]
    )
    req_ids = torch.arange(num_decodes, device="cuda").repeat_interleave(2)
    req_ids = torch.cat(
        [req_ids, torch.full((num_prefill_tokens,), num_decodes, device="cuda")]
    )
    table = torch.randint(
        0,
        NUM_KV_BLOCKS,
        (num_decodes + 1, -(-max_model_len // KV_BLOCK)),
        device="cuda",
        generator=gen,
    )
    slots = torch.ones(positions.shape[0], dtype=torch.int64, device="cuda")
    return positions.long(), req_ids.int(), table.int(), slots


def _run_c128a(positions, num_decode_tokens, req_ids, table, slots, width):
    rows = positions.shape[0] + 4
    buffers = (
        torch.full((rows, width), -1, dtype=torch.int32, device="cuda"),
        torch.zeros(rows, dtype=torch.int32, device="cuda"),
        torch.full((rows, width), -1, dtype=torch.int32, device="cuda"),
    )
    return build_c128a_topk_metadata(
        positions,
        RATIO,
        num_decode_tokens,
        req_ids,
        table,
        BLOCK,
        slots,
        *buffers,
        max_compressed_tokens=width,
        num_kv_blocks=NUM_KV_BLOCKS,
    )


@pytest.mark.parametrize("max_model_len", [4096, 65536, 1048576])
@pytest.mark.parametrize("garbage", [False, True])
@torch.inference_mode()
def test_build_c128a_topk_metadata(max_model_len, garbage):
    num_decodes, num_prefill_tokens = 24, 40
    d = 2 * num_decodes
    positions, req_ids, table, slots = _c128a_inputs(
        max_model_len, num_decodes, num_prefill_tokens
    )
    slots[d - 2 : d] = -1  # CUDA-graph padding
    if garbage:
        req_ids[0], req_ids[3], req_ids[5] = -1, num_decodes, 1 << 24
        table[1, 0], table[2, 0], table[4, 0] = -1, NUM_KV_BLOCKS, 2**31 - 1
        positions[8], positions[d + 1] = 2**40, -(2**40)
    table = table[:num_decodes]
    width = c128a_max_compressed_tokens(max_model_len)
    out = _run_c128a(positions, d, req_ids, table, slots, width)
    ref = _c128a_reference(positions, d, req_ids, table, slots, width)
    torch.accelerator.synchronize()
    for got, expected in zip(out, ref):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    if garbage:
        assert bool((out[0][[0, 3, 5]] == -1).all())
        assert bool((out[1][[0, 3, 5]] == 0).all())


class _CompileCounter:
    def __init__(self):
        from triton.runtime.jit import JITFunction

        self._jit = JITFunction
        self.names: list[str] = []

    def __enter__(self):
        original = self._original = self._jit._do_compile
        names = self.names

        def counting(fn, *args, **kwargs):
            names.append(fn.fn.__name__)
            return original(fn, *args, **kwargs)

        self._jit._do_compile = counting
        return self

    def __exit__(self, *exc):
        self._jit._do_compile = self._original


def _compile(launches):
    for launch in launches:
        launch.kernel.warmup(*launch.args, grid=(1,), **launch.kwargs)


def _builder_with_kv_caches(caches, num_gpu_blocks):
    """A metadata builder with only what its block-id bound reads: its layer
    names and the KV caches bound to those layers."""
    from types import SimpleNamespace

    from vllm.models.deepseek_v4.sparse_mla import DeepseekV4FlashMLAMetadataBuilder

    builder = object.__new__(DeepseekV4FlashMLAMetadataBuilder)
    builder.layer_names = list(caches)
    builder.vllm_config = SimpleNamespace(
        cache_config=SimpleNamespace(num_gpu_blocks=num_gpu_blocks),
        compilation_config=SimpleNamespace(
            static_forward_context={
                name: SimpleNamespace(kv_cache=cache) for name, cache in caches.items()
            }
        ),
    )
    return builder


def test_c128a_block_id_bound_counts_kernel_blocks_of_the_bound_kv_cache():
    # 1000 allocation blocks of two kernel blocks each: block-table ids go up
    # to 1999, so num_gpu_blocks (1000) would drop valid ids.
    kv_cache = torch.empty(2000, BLOCK, 584, dtype=torch.uint8)
    builder = _builder_with_kv_caches({"a": kv_cache}, num_gpu_blocks=1000)
    assert builder._num_kernel_blocks() == 2000
    smaller = torch.empty(1500, BLOCK, 584, dtype=torch.uint8)
    builder = _builder_with_kv_caches({"a": kv_cache, "b": smaller}, 1000)
    assert builder._num_kernel_blocks() == 1500
    # Before bind_kv_cache: empty tensors, every block id is out of range.
    builder = _builder_with_kv_caches({"a": torch.tensor([])}, 1000)
    assert builder._num_kernel_blocks() == 0


@pytest.mark.parametrize(
    "max_model_len, kv_block_size, width",
    [(127, 256, 1), (127, 2048, 8), (4096, 2048, 16), (4097, 2048, 24)],
)
def test_warmup_block_table_width_counts_kernel_blocks(
    max_model_len, kv_block_size, width
):
    """The worker's block table splits each KV-manager block (--block-size)
    into kernel blocks of the builders' block size: its row length is
    ceil(max_model_len / kv_block_size) * (kv_block_size / kernel block)."""
    assert _block_table_width(max_model_len, KV_BLOCK, 1, kv_block_size) == width


@pytest.mark.parametrize("max_model_len", [4096, 65536])
@torch.inference_mode()
def test_warmup_covers_serving_launches(max_model_len):
    """Compile-only warmup first; then the launches serving makes compile
    nothing: every C128A decode-token class and every prefill chunk of a
    batch split over the workspace, for each layer type."""
    mnbt, max_num_seqs, index_topk = 8192, 256, 512
    _compile(
        build_c128a_topk_metadata_warmup_launches(
            max_num_batched_tokens=mnbt,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            block_size=KV_BLOCK,
            num_speculative_tokens=1,
        )
    )
    _compile(
        combine_topk_swa_indices_warmup_launches(
            max_num_batched_tokens=mnbt,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            compress_ratios=(1, 4, 128),
            index_topk=index_topk,
            window_size=WINDOW,
            num_speculative_tokens=1,
        )
    )
    width = c128a_max_compressed_tokens(max_model_len)
    with _CompileCounter() as compiled:
        # C128A: no decodes, one, a multiple of 16, anything else.
        for num_decodes, num_prefill_tokens in ((0, 8), (1, 0), (8, 5), (9, 3)):
            positions, req_ids, table, slots = _c128a_inputs(
                max_model_len, num_decodes, num_prefill_tokens
            )
            d = 2 * num_decodes
            if num_decodes == 1:  # one decode token (fresh, aligned tensors)
                positions, req_ids, slots = (
                    t[1:].clone() for t in (positions, req_ids, slots)
                )
                d = 1
            _run_c128a(positions, d, req_ids, table[:num_decodes], slots, width)
        # combine: many short prompts beside long ones, after 0-3 decodes.
        for ratio in (1, 4, 128):
            top_k = 0 if ratio == 1 else (index_topk if ratio == 4 else width)
            topk_width = index_topk if ratio <= 4 else width
            for num_decodes in range(4):
                prefills = [(3, max_model_len)] + [(3, 3)] * 5 + [(17, 17), (16, 143)]
                prefills += [(200, max_model_len), (40, 2000)] + [(3, 7)] * 60
                _run_combine_chunks(
                    num_decodes, prefills, ratio, top_k, topk_width, max_model_len, mnbt
                )
        torch.accelerator.synchronize()
    assert compiled.names == []


def _run_combine_chunks(
    num_decodes,
    prefills,
    ratio,
    top_k,
    topk_width,
    max_model_len,
    max_num_batched_tokens,
):
    """``DeepseekV4FlashMLAAttention._forward_prefill``'s per-chunk launch."""
    qlens = [1] * num_decodes + [q for q, _ in prefills]
    qsl = torch.tensor(
        [0] + torch.tensor(qlens).cumsum(0).tolist(), device="cuda"
    ).int()
    seq_lens = torch.tensor(
        [9] * num_decodes + [s for _, s in prefills], device="cuda"
    ).int()
    gather = [q + min(s - q, WINDOW - 1) for q, s in prefills]
    gather_lens = torch.tensor(gather, device="cuda").int()
    num_tokens = sum(q for q, _ in prefills)
    topk = torch.full((num_tokens, topk_width), -1, dtype=torch.int32, device="cuda")
    plan = compute_prefill_chunk_plan(
        [s for _, s in prefills],
        [q for q, _ in prefills],
        compress_ratio=ratio,
        prefill_chunk_size=4,
        window_size=WINDOW,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    d, base = num_decodes, int(qsl[num_decodes])
    for start, end, n, m in plan:
        qs, qe = int(qsl[d + start]) - base, int(qsl[d + end]) - base
        combine_topk_swa_indices(
            topk[qs:qe],
            qsl[d + start : d + end + 1],
            seq_lens[d:][start:end],
            gather_lens[start:end],
            WINDOW,
            ratio,
            top_k,
            m,
            n,
        )
