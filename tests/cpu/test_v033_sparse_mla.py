"""vLLM 0.33.0's sparse-MLA metadata kernels: the key audit, pristine and patched.

``dsv4warmup.registry.sparse_mla`` drives each tree's real call sites (layers,
KV cache planner, metadata builders, ``forward_mqa``) over the chunk-boundary
sweep of DeepSeek V4 Flash for every model runner of the tree, and the real
start-up lifecycle (``dsv4warmup.registry.lifecycle``) for what the tree warms.
Each tree runs in a fresh interpreter (``trees.json_from_tree``).

* pristine: ``CombineTopkSwaIndicesKernel`` misses the ten keys whose
  ``gather_lens`` slice is not 16-byte aligned (a prefill chunk starting at a
  request that is not a multiple of four) and warms five all-unaligned keys no
  call site launches; each witness batch launches its key again on its own.
* patched: every runtime key is warmed, nothing else is.
* the patches change no launch, except the C128A kernel's three new bounds,
  which are unspecialized.
* 0.34.0 (the same drivers; Model Runner V2 only, V1 is gone): pristine has
  the same gaps, its runtime and warmed keys are 0.33.0's V2 keys; its series
  closes them the same way.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path
from typing import Any

import pytest

C128A = "BuildC128ATopkMetadataKernel.kernel"
COMBINE = "CombineTopkSwaIndicesKernel.kernel"
RUNNERS = ("v2", "v1")
# (base, runner) audited: 0.34.0 has no V1 runner.
BASE_RUNNERS = [("0.33.0", "v2"), ("0.33.0", "v1"), ("0.34.0", "v2")]
# Specialization positions of the combine kernel's pointers.
COMBINE_PTRS = {"topk_indices": 3, "query_start_loc": 5, "seq_lens": 6, "gather_lens": 7}
# The patched C128A kernel's guard bounds: block_table_rows, readable_width,
# num_kv_blocks (after block_table_stride and block_size).
C128A_BOUNDS = (12, 13, 15)


def _patched_tree(base: str) -> Path:
    override = os.environ.get("DSV4_V033_PATCHED_TREE")
    if override and base == "0.33.0":
        return Path(override).resolve()
    from dsv4warmup import trees
    from dsv4warmup.paths import PATCHES

    if not (PATCHES / f"v{base}" / "series").exists():
        pytest.skip(f"patches/v{base} has no series yet")
    return trees.patched_tree(base)


@functools.cache
def _audit(which: str, base: str = "0.33.0") -> dict[str, Any]:
    """The ``--quick`` audit of every runner of the tree, as JSON by runner."""
    from dsv4warmup import trees

    tree = trees.pristine_tree(base) if which == "pristine" else _patched_tree(base)
    return trees.json_from_tree(tree, "-m", "dsv4warmup.registry.sparse_mla", "flash", "--quick")


def _spec(key: str) -> tuple[tuple[Any, ...], ...]:
    return ast.literal_eval(key)[0]


def _aligned(key: str, pointer: str) -> bool:
    return _spec(key)[COMBINE_PTRS[pointer]][1] == "D"


@pytest.mark.parametrize(("base", "runner"), BASE_RUNNERS)
def test_pristine_audit_reports_the_gaps(base: str, runner: str) -> None:
    rows = _audit("pristine", base)[runner]
    c128a, combine = rows[C128A], rows[COMBINE]
    assert (len(c128a["runtime"]), len(c128a["warmed"])) == (1, 1)
    assert set(c128a["runtime"]) == set(c128a["warmed"])

    runtime, warmed = set(combine["runtime"]), set(combine["warmed"])
    missing, wasted = runtime - warmed, warmed - runtime
    assert (len(runtime), len(warmed), len(missing), len(wasted)) == (20, 15, 10, 5)
    # The gap: gather_lens sliced at a chunk start that is not a multiple of 4.
    assert all(not _aligned(k, "gather_lens") for k in missing)
    assert all(_aligned(k, "topk_indices") for k in missing)
    # The waste: top-k rows are never unaligned.
    assert all(not _aligned(k, "topk_indices") for k in wasted)
    # Every witness launches its key again on its own.
    assert set(combine["replayed"]) == missing and all(combine["replayed"].values())
    # The SWA-only (MTP) layer's workspace chunk closes after the long prompt
    # and four short ones: the second chunk starts at request 5.
    swa_only = {
        k
        for k in missing
        if _spec(k)[-5:-3] == (("constexpr", 0), ("constexpr", 1))  # TOP_K, ratio
        and not _aligned(k, "query_start_loc")
    }
    assert {combine["runtime"][k] for k in swa_only} == {
        "prefill: 6 reqs; prefills (q, seq) [(5420, 65536), (3, 3) x5]"
    }


@pytest.mark.parametrize(("base", "runner"), BASE_RUNNERS)
def test_patched_runtime_keys_are_warmed(base: str, runner: str) -> None:
    rows = _audit("patched", base)[runner]
    for kernel in (C128A, COMBINE):
        runtime, warmed = set(rows[kernel]["runtime"]), set(rows[kernel]["warmed"])
        assert runtime <= warmed, f"{kernel}: {len(runtime - warmed)} keys not warmed"
        assert warmed <= runtime, f"{kernel}: {len(warmed - runtime)} keys never launched"


def _without_bounds(key: str) -> tuple[Any, ...]:
    spec, options = ast.literal_eval(key)
    bounds = [spec[i] for i in C128A_BOUNDS]
    assert bounds == [("i32", None)] * 3, f"guard bounds are specialized: {bounds}"
    kept = tuple(s for i, s in enumerate(spec) if i not in C128A_BOUNDS)
    return kept, options


@pytest.mark.parametrize(("base", "runner"), BASE_RUNNERS)
def test_patched_launches_equal_pristine(base: str, runner: str) -> None:
    pristine, patched = _audit("pristine", base)[runner], _audit("patched", base)[runner]
    assert set(patched[COMBINE]["runtime"]) == set(pristine[COMBINE]["runtime"])
    assert {_without_bounds(k) for k in patched[C128A]["runtime"]} == {
        ast.literal_eval(k) for k in pristine[C128A]["runtime"]
    }


def test_pristine_0_34_0_is_0_33_0_on_model_runner_v2() -> None:
    """vLLM 0.34.0 removed Model Runner V1; its V2 call sites launch, and its
    start-up warms, exactly 0.33.0's V2 keys (sparse_mla.py is byte-identical,
    the combine warmup's three alignments unchanged)."""
    new, old = _audit("pristine", "0.34.0"), _audit("pristine", "0.33.0")
    assert set(new) == {"v2"} and set(old) == set(RUNNERS)
    for kernel in (C128A, COMBINE):
        for side in ("runtime", "warmed"):
            assert set(new["v2"][kernel][side]) == set(old["v2"][kernel][side]), (kernel, side)
