"""The patched tree launches what the pristine tree launches, kernel by kernel.

The warmup-vs-runtime tests take both sides from the patched tree, so a wrong
launch helper shared by a launch and its warmup (a doubled
``BLOCK_SIZE_TOKENS``, a doubled ``PADDED_TOP_K``, another mHC ``tile_n``
threshold) passes them. Here the reference is each base's own pristine tree:
the same call-site drivers run in both trees (``dsv4warmup.keysets``) and
every kernel's key set must be equal, but for the parameters a patch adds on
purpose (``keysets.intended``). One pristine and one patched interpreter per
base, side by side.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from dsv4warmup import keysets, series, trees

# Every kernel the sweeps must reach, so an empty comparison cannot pass.
REACHED = {
    "spec_decode": {
        "eagle_prepare_next_token_padded_kernel",
        "eagle_prepare_inputs_padded_kernel",
        "eagle_step_slot_mapping_metadata_kernel",
        "_mtp_shared_head_rmsnorm_kernel",
    },
    "sparse_mla": {"_build_c128a_topk_metadata_kernel", "_combine_topk_swa_indices_kernel"},
    "mhc": {
        "mhc_pre_big_fuse_with_norm_tilelang",
        "mhc_fused_tilelang",
        "mhc_post_tilelang",
        "hc_head_fuse_tilelang",
        "hc_prenorm_gemm_tilelang",
        "hc_prenorm_gemm_block_m_tilelang",
    },
}


def _both_trees(base: str) -> tuple[keysets.KeySets, keysets.KeySets]:
    sweep_list = keysets.sweeps(base)
    tree_list = [trees.pristine_tree(base), trees.patched_tree(base)]
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        pristine, patched = pool.map(lambda t: keysets.key_sets_of_tree(t, sweep_list), tree_list)
    return pristine, patched


@pytest.mark.parametrize("base", series.available_bases())
def test_patched_launches_what_pristine_launches(base: str) -> None:
    pristine, patched = _both_trees(base)
    for group, kernels in REACHED.items():
        seen = {k for sid, by in pristine.items() if sid.startswith(f"{group}/") for k in by}
        assert kernels <= seen, f"{base}: the {group} sweeps never reach {kernels - seen}"
    problems = keysets.compare(pristine, patched, keysets.intended(base))
    assert not problems, f"vLLM {base}, patched vs pristine:\n" + "\n".join(problems)


# --- the comparison itself can fail ----------------------------------------------

_C128A = "_build_c128a_topk_metadata_kernel"
_ADDED = keysets.Intended(_C128A, frozenset({"rows"}), "test")


def _key(**pairs: str) -> keysets.NamedKey:
    return tuple(sorted(pairs.items()))


def test_compare_reports_each_kind_of_difference() -> None:
    pristine = {"s": {_C128A: {_key(a="1")}, "k": {_key(a="1"), _key(a="2")}}}
    same = {"s": {_C128A: {_key(a="1", rows="i32")}, "k": {_key(a="1"), _key(a="2")}}}
    assert keysets.compare(pristine, same, [_ADDED]) == []
    # A key only one tree launches.
    moved = {"s": {**same["s"], "k": {_key(a="1"), _key(a="3")}}}
    (problem,) = keysets.compare(pristine, moved, [_ADDED])
    assert "s k: 1 key(s) only pristine" in problem and "'a': '3'" in problem
    # The added parameter splits keys: more binaries than upstream.
    split = {"s": {**same["s"], _C128A: {_key(a="1", rows="i32"), _key(a="1", rows="const")}}}
    assert any("split keys" in p for p in keysets.compare(pristine, split, [_ADDED]))
    # Without the allow-list the added parameter is a difference; an
    # allow-list entry whose parameter is gone is stale.
    assert keysets.compare(pristine, same, [])
    stale = {"s": {**same["s"], _C128A: {_key(a="1")}}}
    assert any("stale" in p for p in keysets.compare(pristine, stale, [_ADDED]))
    # A sweep one side lacks.
    assert keysets.compare(pristine, {}, [_ADDED])


def test_every_base_with_a_series_has_sweeps() -> None:
    for base in series.available_bases():
        assert keysets.sweeps(base), base
    with pytest.raises(keysets.UnregisteredBase, match="register its drivers"):
        keysets.sweeps("0.0.1")
