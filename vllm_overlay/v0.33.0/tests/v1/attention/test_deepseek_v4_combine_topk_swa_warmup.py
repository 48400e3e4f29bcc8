# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Warmup keys of DeepSeek V4's combine_topk_swa_indices kernel."""

from collections import Counter
from types import SimpleNamespace

import pytest

from vllm.models.deepseek_v4.common.ops.cache_utils import (
    CombineTopkSwaIndicesKernel,
)

POINTERS = ("topk_indices", "query_start_loc", "seq_lens", "gather_lens")


def _config(index_topk: int = 512, max_model_len: int = 65536) -> SimpleNamespace:
    return SimpleNamespace(
        scheduler_config=SimpleNamespace(max_num_batched_tokens=8192),
        model_config=SimpleNamespace(
            max_model_len=max_model_len,
            hf_config=SimpleNamespace(
                sliding_window=128,
                index_topk=index_topk,
                # C128A, C4A, and the SWA-only MTP layer.
                compress_ratios=[128, 4, 0],
            ),
        ),
    )


def _alignments(key) -> tuple[bool, ...]:
    return tuple(key.input_variant.is_aligned(name) for name in POINTERS)


def test_combine_warmup_covers_every_prefill_chunk_alignment():
    """A prefill chunk starting at request ``c`` (after ``d`` decodes) slices
    query_start_loc and seq_lens at ``d + c`` and gather_lens at ``c``: both
    offsets can be a multiple of four int32s or not, independently. The
    top-k rows are always 16-byte aligned."""
    keys = CombineTopkSwaIndicesKernel().get_warmup_keys(_config())

    per_shape = Counter((key.COMPRESS_RATIO, key.TOP_K) for key in keys)
    # C128A widths 128, 256 and 512 (65536 / 128), C4A's index_topk, SWA-only.
    assert set(per_shape) == {(128, 128), (128, 256), (128, 512), (4, 512), (1, 0)}
    assert set(per_shape.values()) == {4}
    assert {_alignments(key) for key in keys} == {
        (True, request_aligned, request_aligned, chunk_aligned)
        for request_aligned in (True, False)
        for chunk_aligned in (True, False)
    }


@pytest.mark.parametrize("index_topk,unaligned_topk", [(512, False), (510, True)])
def test_combine_warmup_topk_alignment_follows_index_topk(
    index_topk: int, unaligned_topk: bool
):
    keys = CombineTopkSwaIndicesKernel().get_warmup_keys(_config(index_topk))
    assert any(not _alignments(key)[0] for key in keys) == unaligned_topk
