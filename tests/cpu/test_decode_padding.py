"""Which CUDA graph a uniform decode batch replays in (its metadata padded to
that graph's request count) is vLLM's dispatch, not the smallest capture size:
FULL decode graphs stop at ``max_num_seqs * (1 + k)`` tokens. The sparse-MLA
runtime drivers pad by ``serving.full_decode_graph_size``; this checks it
against each base's own dispatchers (V1 and V2 runners), run in the tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dsv4warmup import trees

PROBE = Path(__file__).resolve().parents[1] / "decode_padding_probe.py"
# (capture sizes, max_num_seqs, 1 + k): defaults, odd explicit lists, sizes
# past max_num_seqs * (1 + k) (the audit's boundary: one request, size 2)
CASES = [
    [[2], 1, 1],
    [[2, 324, 392], 1, 1],
    [[1, 2, 4, 8], 4, 1],
    [[2, 4, 8], 3, 2],
    [[1, 3, 7], 7, 1],
    [[4, 8, 16], 5, 4],
    [[2, 6, 12], 2, 2],
    [[1, 2, 4, 8, 16, 24, 32], 16, 1],
    [[2, 4, 8, 16, 24, 32, 40, 48], 20, 2],
]


@pytest.mark.parametrize("base", ["0.33.0", "0.26.0", "0.25.1"])
def test_padding_matches_vllm_dispatch(base: str) -> None:
    res = trees.json_from_tree(trees.pristine_tree(base), str(PROBE), json.dumps(CASES))
    assert res["runners"] == ["v1", "v2"], res["runners"]
    assert res["mismatches"] == [], res["mismatches"][:5]
    assert res["compared"] == 2 * sum(seqs for _, seqs, _ in CASES)
    # the cases reach the cap: batches a capture size holds that vLLM still
    # runs without FULL graph padding (the smallest-capture-size rule pads them)
    assert res["capped"] > 0
