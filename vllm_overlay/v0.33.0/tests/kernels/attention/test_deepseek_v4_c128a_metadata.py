# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""C128A top-k metadata: bounds guards and initialised buffers."""

from types import SimpleNamespace

import pytest
import torch

from vllm.models.deepseek_v4 import sparse_mla
from vllm.platforms import current_platform
from vllm.platforms.interface import DeviceCapability
from vllm.v1.kv_cache_interface import MLAAttentionSpec

COMPRESS_RATIO = 128
BLOCK_SIZE = 2  # compressed rows per 256-token kernel block
WIDTH = 256  # max_compressed_tokens


def _reference(positions, num_decode_tokens, req_ids, block_table, slot_mapping, width):
    """The kernel's contract for in-range ids (the unguarded computation)."""
    num_tokens = positions.shape[0]
    slots = torch.full((num_decode_tokens, width), -1, dtype=torch.int32)
    lens = torch.zeros(num_decode_tokens, dtype=torch.int32)
    local = torch.full((num_tokens - num_decode_tokens, width), -1, dtype=torch.int32)
    offsets = torch.arange(width)
    for t in range(num_tokens):
        n = min((int(positions[t]) + 1) // COMPRESS_RATIO, width)
        if t >= num_decode_tokens:
            local[t - num_decode_tokens, :n] = offsets[:n].to(torch.int32)
            continue
        blocks = block_table[int(req_ids[t]), offsets[:n] // BLOCK_SIZE]
        slots[t, :n] = (blocks * BLOCK_SIZE + offsets[:n] % BLOCK_SIZE).to(torch.int32)
        lens[t] = n if slot_mapping[t] >= 0 else 0
    return slots, lens, local


def _launch(
    positions, num_decode_tokens, req_ids, block_table, num_kv_blocks, slot_mapping
):
    device = positions.device
    num_tokens = positions.shape[0]
    capacity = 2 * WIDTH
    global_decode = torch.full(
        (num_tokens, capacity), -7, dtype=torch.int32, device=device
    )
    decode_lens = torch.full((num_tokens,), -7, dtype=torch.int32, device=device)
    prefill = torch.full_like(global_decode, -7)
    out = sparse_mla.build_c128a_topk_metadata(
        positions,
        COMPRESS_RATIO,
        num_decode_tokens,
        req_ids,
        block_table,
        BLOCK_SIZE,
        num_kv_blocks,
        slot_mapping,
        global_decode,
        decode_lens,
        prefill,
        max_compressed_tokens=WIDTH,
    )
    torch.accelerator.synchronize()
    return [t.cpu() for t in out]


@pytest.fixture
def not_sm120(monkeypatch: pytest.MonkeyPatch):
    # SM120 keeps the full-width decode view; compare the active width.
    monkeypatch.setattr(
        sparse_mla.current_platform,
        "get_device_capability",
        lambda: DeviceCapability(9, 0),
    )


def _valid_batch(seed: int, device: torch.device):
    gen = torch.Generator().manual_seed(seed)
    num_reqs, num_decode_tokens, num_prefill_tokens = 5, 12, 7
    num_kv_blocks = 64
    max_len = WIDTH * COMPRESS_RATIO
    width = max_len // (BLOCK_SIZE * COMPRESS_RATIO)
    block_table = torch.randint(0, num_kv_blocks, (num_reqs, width), generator=gen)
    req_ids = torch.randint(
        0, num_reqs, (num_decode_tokens + num_prefill_tokens,), generator=gen
    )
    positions = torch.randint(
        0, max_len + 3 * COMPRESS_RATIO, (req_ids.shape[0],), generator=gen
    )
    slot_mapping = torch.randint(-1, 1000, (req_ids.shape[0],), generator=gen)
    return (
        positions,
        num_decode_tokens,
        req_ids.to(torch.int32),
        block_table.to(torch.int32),
        num_kv_blocks,
        slot_mapping,
    )


@pytest.mark.skipif(not current_platform.is_cuda_alike(), reason="needs a GPU")
@pytest.mark.parametrize("seed", range(4))
def test_c128a_metadata_valid_input_matches_reference(seed: int, not_sm120):
    device = torch.device(current_platform.device_type)
    positions, nd, req_ids, table, num_kv_blocks, slots = _valid_batch(seed, device)
    global_decode, decode_lens, prefill = _launch(
        positions.to(device),
        nd,
        req_ids.to(device),
        table.to(device),
        num_kv_blocks,
        slots.to(device),
    )
    ref_slots, ref_lens, ref_local = _reference(
        positions, nd, req_ids, table, slots, WIDTH
    )
    torch.testing.assert_close(global_decode, ref_slots, rtol=0, atol=0)
    torch.testing.assert_close(decode_lens, ref_lens, rtol=0, atol=0)
    torch.testing.assert_close(prefill, ref_local, rtol=0, atol=0)


@pytest.mark.skipif(not current_platform.is_cuda_alike(), reason="needs a GPU")
def test_c128a_metadata_garbage_ids_give_no_slots(not_sm120):
    """Out-of-range request ids, block-table columns and block ids must not be
    dereferenced: their slots are -1. A request id out of range has length 0,
    columns past the table are not counted, and a block id out of range is a
    -1 slot inside the length."""
    device = torch.device(current_platform.device_type)
    num_kv_blocks = 8
    # Two rows of two columns: positions past 4 * 128 tokens read past a row.
    block_table = torch.tensor([[1, 2], [-5, 1 << 30]], dtype=torch.int32)
    req_ids = torch.tensor([0, 1, 2, -1, 1 << 30, -(1 << 31), 0, 0], dtype=torch.int32)
    positions = torch.tensor(
        [4 * 128 - 1, 4 * 128 - 1, 255, 255, 255, 255, 1 << 40, -5]
    )
    slot_mapping = torch.zeros(8, dtype=torch.int64)
    global_decode, decode_lens, _ = _launch(
        positions.to(device),
        8,
        req_ids.to(device),
        block_table.to(device),
        num_kv_blocks,
        slot_mapping.to(device),
    )
    # Row 0 is valid: blocks 1 and 2.
    assert global_decode[0, :5].tolist() == [2, 3, 4, 5, -1]
    assert decode_lens[0] == 4
    # Row 1 holds block ids outside [0, num_kv_blocks): its 4 readable
    # columns are -1 slots.
    assert torch.all(global_decode[1] == -1) and decode_lens[1] == 4
    # Request ids outside the table's rows.
    assert torch.all(global_decode[2:6] == -1)
    assert decode_lens[2:6].tolist() == [0, 0, 0, 0]
    # A huge position reads only the row's two columns; a negative one none.
    assert global_decode[6, :5].tolist() == [2, 3, 4, 5, -1]
    assert torch.all(global_decode[6, 4:] == -1) and decode_lens[6] == 4
    assert torch.all(global_decode[7] == -1) and decode_lens[7] == 0


def _builder(num_blocks_by_layer: dict[str, int], max_model_len: int = 65536):
    layers = {
        name: SimpleNamespace(kv_cache=torch.empty(n, BLOCK_SIZE, 584, device="meta"))
        for name, n in num_blocks_by_layer.items()
    }
    vllm_config = SimpleNamespace(
        model_config=SimpleNamespace(
            hf_config=SimpleNamespace(index_topk=512), max_model_len=max_model_len
        ),
        scheduler_config=SimpleNamespace(max_num_batched_tokens=16),
        speculative_config=None,
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
        compilation_config=SimpleNamespace(static_forward_context=layers),
    )
    spec = MLAAttentionSpec(
        block_size=256,
        num_kv_heads=1,
        head_size=512,
        dtype=torch.uint8,
        tokens_per_state=COMPRESS_RATIO,
    )
    return sparse_mla.DeepseekV4SparseMLAMetadataBuilder(
        spec, list(layers), vllm_config, torch.device("cpu")
    )


def test_c128a_buffers_are_initialised():
    builder = _builder({"model.layers.0.attn": 4})
    assert torch.all(builder.c128a_global_decode_buffer == -1)
    assert torch.all(builder.c128a_prefill_buffer == -1)
    assert torch.all(builder.c128a_decode_lens_buffer == 0)


def test_c128a_block_bound_comes_from_bound_kv_cache():
    # A packed KV cache split into kernel blocks has more kernel blocks than
    # the allocator has blocks: the bound is the bound views' block count.
    builder = _builder(
        {"model.layers.0.attn": 20967938, "model.layers.2.attn": 20967938}
    )
    assert builder._num_kv_cache_blocks() == 20967938
    # Before the KV cache is bound, no block id is valid.
    assert _builder({"model.layers.0.attn": 0})._num_kv_cache_blocks() == 0
