"""Model Runner V2's sampling and verification kernels on vLLM 0.34.0, DeepSeek V4 + MTP.

:mod:`dsv4warmup.registry.sampling` drives the tree's real ``GPUModelRunner`` on the
meta device: serving steps through its own request bookkeeping, input
preparation and ``sample`` (``Sampler`` / ``RejectionSampler``) plus the MTP
drafter's ``sample_draft``, and start-up through the tree's own
``_dummy_sampler_run``, registry warmup, ``warmup_kernels`` and
``run_kv_cache_sizing_warmup``, recording every Triton key. One interpreter
per tree (``trees.json_from_tree``), the quick sweep (k=1; greedy, a plain
``temperature=0.7`` request and a filtered one, alone and mixed).

* Pristine 0.34.0 misses ``_gumbel_sample_kernel`` with FP32 logits (the first
  prefill-only step of a plain ``temperature=0.7`` request: processed logits,
  no top-k/top-p so no fused FlashInfer sampler) and ``_resample_kernel`` with
  FP32 logits and ``SKIP_MASKED_BLOCKS=False`` (that request's first
  verification step): the only non-greedy warm-up request,
  ``SamplingParams.for_sampler_warmup()``, enables every filter. It also
  misses the logprobs kernel for widths warmup never asks (0 and 15 logprobs)
  and, with ``--max-num-seqs 100``, the draft gather for a multiple of 16
  logits rows.
* Positive controls: keys start-up does compile are found on both sides -- the
  model-dtype Gumbel key (greedy steps), the ``(FP32, SKIP_MASKED_BLOCKS=True)``
  and ``(bf16, False)`` resample keys, the draft ``greedy_argmax``.
* Patched: the same kernels, no more keys or misses; once the series carries a
  sampling fix (it touches one of :data:`SAMPLING_FILES`, or
  ``DSV4_V034_PATCHED_TREE`` names a tree that does), nothing missing.
"""

from __future__ import annotations

import ast
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

GATHER = "_gather_draft_sampled_kernel"
GUMBEL = "_gumbel_sample_kernel"
RESAMPLE = "_resample_kernel"
LOGPROBS = "_topk_log_softmax_kernel"
ARGMAX = "_argmax_partial"

# Files a fix of these gaps would change (warmup, the samplers, their kernels).
SAMPLING_FILES = (
    "vllm/v1/worker/gpu/warmup.py",
    "vllm/v1/worker/gpu/sample/gumbel.py",
    "vllm/v1/worker/gpu/sample/logprob.py",
    "vllm/v1/worker/gpu/sample/sampler.py",
    "vllm/v1/worker/gpu/spec_decode/rejection_sampler.py",
    "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py",
)

# ``--max-num-seqs 100``: warmup's request counts (100, 2, 1) and its logits
# rows (200, 3, 2) are then no multiple of 16.
_ARGS = (
    "-m",
    "dsv4warmup.registry.sampling",
    "flash",
    "--k",
    "1",
    "--max-num-seqs",
    "100",
    "--quick",
    "--json",
)


# Another patched 0.34.0 tree to check instead of the series' (e.g. one with a
# sampling fix under review); it must then miss nothing.
_OVERRIDE = "DSV4_V034_PATCHED_TREE"


def _series_fixes_sampling() -> bool:
    from dsv4warmup import series
    from dsv4warmup.paths import PATCHES

    if os.environ.get(_OVERRIDE):
        return True
    if not (PATCHES / "v0.34.0" / "series").exists():
        return False
    touched = set(series.load("0.34.0").touched_files)
    return any(f in touched for f in SAMPLING_FILES)


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    from dsv4warmup import trees
    from dsv4warmup.paths import PATCHES

    jobs = {"pristine": trees.pristine_tree("0.34.0")}
    if os.environ.get(_OVERRIDE):
        jobs["patched"] = Path(os.environ[_OVERRIDE]).resolve()
    elif (PATCHES / "v0.34.0" / "series").exists():
        jobs["patched"] = trees.patched_tree("0.34.0")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            name: pool.submit(trees.json_from_tree, tree, *_ARGS) for name, tree in jobs.items()
        }
        return {name: f.result()[0] for name, f in futures.items()}


def _decoded(row: dict[str, Any], key: str) -> dict[str, Any]:
    """A key's specialization by parameter name (``(type, attribute)``, or
    ``("constexpr", value)``)."""
    spec, _options = ast.literal_eval(key)
    return dict(zip(row["params"], spec, strict=True))


def _runtime(result: dict[str, Any], kernel: str) -> list[dict[str, Any]]:
    row = result["kernels"][kernel]
    return [_decoded(row, k) for k in row["runtime"]]


def _startup(result: dict[str, Any], kernel: str) -> list[dict[str, Any]]:
    row = result["kernels"][kernel]
    return [_decoded(row, k) for k in row["startup"]]


def _missing(result: dict[str, Any]) -> dict[str, list[tuple[dict[str, Any], str]]]:
    out = {}
    for kernel, row in result["kernels"].items():
        if row["missing"]:
            out[kernel] = [(_decoded(row, k), m["witness"]) for k, m in row["missing"].items()]
    return out


def test_pristine_misses_fp32_gumbel_and_unmasked_fp32_resample(results: dict[str, Any]) -> None:
    missing = _missing(results["pristine"])
    assert sorted(missing) == [GATHER, GUMBEL, RESAMPLE, LOGPROBS]

    [(gumbel, witness)] = missing[GUMBEL]
    assert gumbel["logits_ptr"] == ("*fp32", "D")
    assert witness == "k=1: prefill-only step, 1 reqs [t0.7]"

    [(resample, witness)] = missing[RESAMPLE]
    assert resample["target_logits_ptr"] == ("*fp32", "D")
    assert resample["SKIP_MASKED_BLOCKS"] == ("constexpr", False)
    assert witness == "k=1: verify step, 1 reqs x 1 drafts [t0.7]"


def test_pristine_misses_verification_row_counts_of_16(results: dict[str, Any]) -> None:
    """``num_logits`` of the draft gather is specialized (1 / multiple of 16 /
    other) though it only bounds the rows: warmup's verification steps of 200,
    3 and 2 rows never compile the multiple-of-16 class a step of 16 requests
    x 2 rows uses."""
    [(gather, witness)] = _missing(results["pristine"])[GATHER]
    assert gather["num_logits"] == ("i32", "D")
    assert witness == "k=1: verify step, 16 reqs x 1 drafts [greedy]"
    assert [k["num_logits"] for k in _startup(results["pristine"], GATHER)] == [("i32", "")]


def test_pristine_misses_logprob_widths_warmup_never_asks(results: dict[str, Any]) -> None:
    """Logprobs are specialized on their number (the sampled token plus the
    request's ``logprobs``): start-up asks for 5 (``for_sampler_warmup``), 1
    and 20 (prompt logprobs), so 0 and 15 compile after it."""
    by_witness = {witness: key for key, witness in _missing(results["pristine"])[LOGPROBS]}
    assert by_witness.keys() == {
        "k=1: prefill-only step, 1 reqs [t0.7+logprobs=0]",
        "k=1: prefill-only step, 1 reqs [t0.7+logprobs=15]",
    }
    none = by_witness["k=1: prefill-only step, 1 reqs [t0.7+logprobs=0]"]
    assert none["topk"] == ("constexpr", 1) and none["TOPK_BLOCK_SIZE"] == ("constexpr", 1)
    fifteen = by_witness["k=1: prefill-only step, 1 reqs [t0.7+logprobs=15]"]
    assert fifteen["topk"] == ("i32", "D") and fifteen["TOPK_BLOCK_SIZE"] == ("constexpr", 16)
    warmed_widths = {k["TOPK_BLOCK_SIZE"][1] for k in _startup(results["pristine"], LOGPROBS)}
    assert warmed_widths == {2, 8, 32}


def test_pristine_positive_controls(results: dict[str, Any]) -> None:
    """Keys start-up compiles are found by both sides (same encoding)."""
    pristine = results["pristine"]
    bf16_gumbel = [k for k in _runtime(pristine, GUMBEL) if k["logits_ptr"] == ("*bf16", "D")]
    assert len(bf16_gumbel) == 1 and bf16_gumbel[0] in _startup(pristine, GUMBEL)
    assert len(_startup(pristine, GUMBEL)) == 1  # the model-dtype one only

    resample = {
        (k["target_logits_ptr"][0], k["SKIP_MASKED_BLOCKS"][1]): k
        for k in _runtime(pristine, RESAMPLE)
    }
    assert set(resample) == {("*bf16", False), ("*fp32", True), ("*fp32", False)}
    warmed = _startup(pristine, RESAMPLE)
    assert resample["*bf16", False] in warmed and resample["*fp32", True] in warmed

    # The MTP drafter samples greedily from model-dtype logits: one key, warmed.
    assert _runtime(pristine, ARGMAX) == _startup(pristine, ARGMAX)
    assert _runtime(pristine, ARGMAX)[0]["X"] == ("*bf16", "D")


def _patched(results: dict[str, Any]) -> dict[str, Any]:
    if "patched" not in results:
        pytest.skip("no 0.34.0 series")
    return results["patched"]


def test_patched_launches_no_more_than_pristine(results: dict[str, Any]) -> None:
    """The series warms, or merges variants (a kernel no longer specialized on
    a request's choice): the same kernels, no more keys, no more misses."""
    patched = _patched(results)["kernels"]
    pristine = results["pristine"]["kernels"]
    launched = {k for k, row in pristine.items() if row["runtime"]}
    assert {k for k, row in patched.items() if row["runtime"]} == launched
    for kernel in launched:
        assert len(patched[kernel]["runtime"]) <= len(pristine[kernel]["runtime"]), kernel
        assert len(patched[kernel]["missing"]) <= len(pristine[kernel]["missing"]), kernel


def test_patched_misses_nothing(results: dict[str, Any]) -> None:
    patched = _patched(results)
    if not _series_fixes_sampling():
        pytest.skip("the 0.34.0 series touches none of SAMPLING_FILES: no sampling fix yet")
    assert _missing(patched) == {}
