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

import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from dsv4warmup import keysets, series, trees
from dsv4warmup.generation import is_registry_era
from dsv4warmup.registry.lifecycle import runners_in_tree
from helpers import base_params

# Every kernel the sweeps must reach, so an empty comparison cannot pass.
REACHED_SEED_LAYOUT = {
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


# 0.33.0 renamed the owners: Triton rows by qualified name, mHC by factory.
# The EAGLE helpers are launched by Model Runner V1 only (gone in 0.34.0).
EAGLE_HELPERS = {
    "eagle_prepare_next_token_padded_kernel",
    "eagle_prepare_inputs_padded_kernel",
    "eagle_step_slot_mapping_metadata_kernel",
}
REACHED_V033 = {
    "spec_decode": {
        "eagle_prepare_next_token_padded_kernel",
        "eagle_prepare_inputs_padded_kernel",
        "eagle_step_slot_mapping_metadata_kernel",
        "MTPSharedHeadRMSNormKernel.kernel",
    },
    "sparse_mla": {"BuildC128ATopkMetadataKernel.kernel", "CombineTopkSwaIndicesKernel.kernel"},
    "mhc": {
        "mhc_pre_big_fuse_with_norm_tilelang",
        "mhc_pre_big_fuse_broadcast_with_norm_tilelang",
        "mhc_fused_tilelang",
        "mhc_post_tilelang",
        "hc_head_fuse_tilelang",
    },
}


def reached(base: str) -> dict[str, set[str]]:
    if not is_registry_era(base):
        return REACHED_SEED_LAYOUT
    if "v1" in runners_in_tree(trees.pristine_tree(base)):
        return REACHED_V033
    return {g: kernels - EAGLE_HELPERS for g, kernels in REACHED_V033.items()}


def _both_trees(base: str) -> tuple[keysets.KeySets, keysets.KeySets]:
    sweep_list = keysets.sweeps(base)
    tree_list = [trees.pristine_tree(base), trees.patched_tree(base)]
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        pristine, patched = pool.map(lambda t: keysets.key_sets_of_tree(t, sweep_list), tree_list)
    return pristine, patched


@pytest.mark.parametrize("base", base_params(series.available_bases()))
def test_patched_launches_what_pristine_launches(base: str) -> None:
    pristine, patched = _both_trees(base)
    for group, kernels in reached(base).items():
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


def test_registry_era_runners_come_from_the_tree() -> None:
    """The sweeps of a model runner a tree does not have are left out (0.34.0
    removed V1), read from the tree's files; an older tree keeps both."""
    assert runners_in_tree(trees.pristine_tree("0.33.0")) == ("v2", "v1")
    assert runners_in_tree(trees.pristine_tree("0.34.0")) == ("v2",)
    runners = {s.options["runner"] for s in keysets.sweeps("0.34.0")}
    assert runners == {"v2", "v1"}  # the same sweeps as 0.33.0; the tree decides
    assert reached("0.34.0")["spec_decode"] == {"MTPSharedHeadRMSNormKernel.kernel"}


@pytest.mark.parametrize(("base", "runners"), [("0.33.0", {"v2", "v1"}), ("0.34.0", {"v2"})])
def test_key_sets_of_tree_drive_the_tree_runners_only(
    base: str, runners: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    driven: list[dict[str, Any]] = []

    def record(tree: Any, *args: str) -> dict[str, Any]:
        driven.extend(json.loads(args[-1]))
        return {}

    monkeypatch.setattr(trees, "json_from_tree", record)
    keysets.key_sets_of_tree(trees.pristine_tree(base), keysets.sweeps("0.34.0"))
    assert {s["options"]["runner"] for s in driven} == runners


def test_every_base_with_a_series_has_sweeps() -> None:
    for base in series.available_bases():
        assert keysets.sweeps(base), base
    with pytest.raises(keysets.UnregisteredBase, match="register its drivers"):
        keysets.sweeps("0.0.1")
