"""vLLM 0.33.0's spec-decode kernels for DeepSeek V4 + MTP, pristine beside patched.

Per model runner (V2, the default, and V1), :func:`dsv4warmup.registry.spec_decode.report`
gives the keys the real call sites launch over a small sweep and the keys the
tree's real start-up lifecycle warms (``lifecycle.warmed_keys``). Each tree runs
in its own interpreter (``trees.json_from_tree``), the two trees side by side.

* The pristine audit finds what the audit of 0.33.0 found: the MTP shared-head
  norm is never warmed (its registration is made while the draft model is
  built, outside an active registry, in both runners), and the V1 runner's
  EAGLE step kernel is warmed for block-table widths the runner does not use
  (the runner aligns them) while 27 keys are compiled.
* Patched: every launched key is warmed, in both runners.
* Patched launches what pristine launches, except the step kernel's one
  intentional change (one variant, its scalars no longer specialized).
* The patched step kernel, run by the Triton interpreter, writes what the
  pristine kernel and a torch reference write.
* 0.34.0 (the same drivers): Model Runner V2 only, no EAGLE helper (V1 and
  ``vllm/v1/spec_decode/utils.py`` are gone); pristine misses the MTP norm as
  0.33.0 does (the speculator's ``load_model`` still runs outside the active
  registry), patched warms it and launches the same key.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

STEP = "eagle_step_slot_mapping_metadata_kernel"
PREPARE = "eagle_prepare_inputs_padded_kernel"
NEXT = "eagle_prepare_next_token_padded_kernel"
NORM = "MTPSharedHeadRMSNormKernel.kernel"
KERNELS = (STEP, PREPARE, NEXT, NORM)

# A: V1 drafts k=2 over a block table the runner widens from 1563 to 1564
#    columns (100000 tokens of 64, aligned to 128 tokens); 20 requests reach
#    the 1 / multiple-of-16 / other batch classes.
# B: the report's k=1, DeepSeek V4 Pro's hidden size, 4 requests.
SWEEP: list[dict[str, Any]] = [
    {"num_speculative_tokens": 2, "max_model_len": 100000, "max_num_seqs": 20},
    {"model": "pro", "num_speculative_tokens": 1, "max_num_seqs": 4},
]

STEP_CASES: list[dict[str, Any]] = [
    # positions inside, at and past max_model_len; CUDA-graph padding slots
    dict(
        block_size=64,
        max_model_len=100000,
        n_blocks_per_req=1564,
        positions=[0, 63, 99998, 99999, 150000, 64],
        seq_lens=[1, 64, 99999, 100000, 5, 65],
        input_batch_size=8,
    ),
    # a batch of one; a block index clamped to the table's last column
    dict(
        block_size=16,
        max_model_len=4096,
        n_blocks_per_req=100,
        positions=[2000],
        seq_lens=[2001],
        input_batch_size=1,
    ),
    # a one-column table (stride 1)
    dict(
        block_size=256,
        max_model_len=65536,
        n_blocks_per_req=1,
        positions=[5, 300],
        seq_lens=[6, 301],
        input_batch_size=4,
    ),
    # block size 1 (formerly the constexpr 1)
    dict(
        block_size=1,
        max_model_len=17,
        n_blocks_per_req=17,
        positions=[15, 16, 3],
        seq_lens=[16, 17, 4],
        input_batch_size=3,
    ),
]

_INTERPRET = """
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
from dsv4warmup.registry import platform
platform.install()
from dsv4warmup.registry import spec_decode as sd
cases = [sd.StepCase(**c) for c in json.loads(sys.argv[1])]
print(json.dumps(sd.interpret_step(cases)))
"""


def _patched_tree(base: str = "0.33.0") -> Path | None:
    """The ``base`` tree with its series applied (for 0.33.0,
    ``DSV4_V033_PATCHED_TREE`` names another one, e.g. a dev tree, while the
    series is regenerated); None while there is no series."""
    from dsv4warmup import trees
    from dsv4warmup.paths import PATCHES

    override = os.environ.get("DSV4_V033_PATCHED_TREE")
    if override and base == "0.33.0":
        return Path(override).resolve()
    if not (PATCHES / f"v{base}" / "series").exists():
        return None
    return trees.patched_tree(base)


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    from dsv4warmup import trees

    sweep, cases = json.dumps(SWEEP), json.dumps(STEP_CASES)
    jobs = {}
    for name, tree in (("pristine", trees.pristine_tree("0.33.0")), ("patched", _patched_tree())):
        if tree is not None:
            jobs[name] = (tree, "-m", "dsv4warmup.registry.spec_decode", "report", sweep)
            jobs[f"{name}_interpret"] = (tree, "-c", _INTERPRET, cases)
    v034 = (("pristine", trees.pristine_tree("0.34.0")), ("patched", _patched_tree("0.34.0")))
    for name, tree in v034:
        if tree is not None:
            jobs[f"{name}_0.34.0"] = (
                tree,
                "-m",
                "dsv4warmup.registry.spec_decode",
                "report",
                sweep,
            )
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(trees.json_from_tree, *job) for name, job in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


def _patched(results: dict[str, Any], name: str = "patched") -> Any:
    if name not in results:
        pytest.skip(f"no series for {name} yet (DSV4_V033_PATCHED_TREE names a 0.33.0 one)")
    return results[name]


def _rows(report: list[dict[str, Any]]) -> dict[tuple[int, str, str], dict[str, Any]]:
    rows = {}
    for i, entry in enumerate(report):
        for runner, data in entry["runners"].items():
            for kernel in data["runtime"]:
                runtime, warmed = data["runtime"][kernel], set(data["warmed"][kernel])
                missing = {k: w for k, w in runtime.items() if k not in warmed}
                rows[(i, runner, kernel)] = dict(
                    runtime=len(runtime),
                    warmed=len(warmed),
                    missing=len(missing),
                    wasted=len(warmed - set(runtime)),
                    witnesses=sorted(missing.values(), key=lambda w: (len(w), w)),
                    keys=set(runtime),
                )
    return rows


# (runtime, warmed, missing, wasted) per (sweep index, runner, kernel)
PRISTINE_COUNTS = {
    (0, "v2", STEP): (0, 0, 0, 0),
    (0, "v2", PREPARE): (0, 0, 0, 0),
    (0, "v2", NEXT): (0, 0, 0, 0),
    (0, "v2", NORM): (1, 0, 1, 0),
    (0, "v1", STEP): (3, 27, 3, 27),
    (0, "v1", PREPARE): (3, 3, 0, 0),
    (0, "v1", NEXT): (9, 9, 0, 0),
    (0, "v1", NORM): (1, 0, 1, 0),
    (1, "v2", STEP): (0, 0, 0, 0),
    (1, "v2", PREPARE): (0, 0, 0, 0),
    (1, "v2", NEXT): (0, 0, 0, 0),
    (1, "v2", NORM): (1, 0, 1, 0),
    (1, "v1", STEP): (0, 18, 0, 18),
    (1, "v1", PREPARE): (2, 2, 0, 0),
    (1, "v1", NEXT): (4, 4, 0, 0),
    (1, "v1", NORM): (1, 0, 1, 0),
}


def test_pristine_audit_reports_the_gaps(results: dict[str, Any]) -> None:
    rows = _rows(results["pristine"])
    counts = {
        key: (r["runtime"], r["warmed"], r["missing"], r["wasted"]) for key, r in rows.items()
    }
    assert counts == PRISTINE_COUNTS
    # Witnesses: the smallest batch that launches each missing key.
    assert rows[(0, "v1", STEP)]["witnesses"][0] == (
        "v1 padded drafter batch: 1 reqs, no drafts, k=2, drafter block size 64, "
        "block table 1564 cols"
    )
    assert rows[(0, "v2", NORM)]["witnesses"] == ["v2: draft step, 1 reqs sampled, k=2"]
    assert rows[(1, "v1", NORM)]["witnesses"] == ["v1: draft step, 1 reqs sampled, k=1"]
    # Why the norm is missed: the drafter's model is built in an inactive step.
    for entry in results["pristine"]:
        for data in entry["runners"].values():
            assert "drafter_model" not in data["active"]


def test_pristine_0_34_0_misses_the_mtp_norm_on_model_runner_v2(results: dict[str, Any]) -> None:
    rows = _rows(results["pristine_0.34.0"])
    counts = {
        key: (r["runtime"], r["warmed"], r["missing"], r["wasted"]) for key, r in rows.items()
    }
    # V2 only; the EAGLE helpers are no rows (the tree does not define them).
    assert counts == {key: c for key, c in PRISTINE_COUNTS.items() if key[1:] == ("v2", NORM)}
    assert rows[(0, "v2", NORM)]["witnesses"] == ["v2: draft step, 1 reqs sampled, k=2"]
    assert rows[(0, "v2", NORM)]["keys"] == _rows(results["pristine"])[(0, "v2", NORM)]["keys"]
    for entry in results["pristine_0.34.0"]:
        assert set(entry["runners"]) == {"v2"}
        assert "drafter_model" not in entry["runners"]["v2"]["active"]


def test_patched_0_34_0_warms_the_mtp_norm(results: dict[str, Any]) -> None:
    rows = _rows(_patched(results, "patched_0.34.0"))
    pristine = _rows(results["pristine_0.34.0"])
    assert rows.keys() == pristine.keys()
    for key, r in rows.items():
        assert (r["runtime"], r["warmed"], r["missing"], r["wasted"]) == (1, 1, 0, 0), key
        assert r["keys"] == pristine[key]["keys"], key
    for entry in _patched(results, "patched_0.34.0"):
        assert "drafter_model" in entry["runners"]["v2"]["active"]


def test_patched_warms_every_launched_key(results: dict[str, Any]) -> None:
    rows = _rows(_patched(results))
    missing = {key: r["witnesses"] for key, r in rows.items() if r["missing"]}
    assert missing == {}
    for (_, _, kernel), r in rows.items():
        if kernel == NORM:
            assert r["runtime"] == r["warmed"] == 1
    for entry in _patched(results):
        for data in entry["runners"].values():
            assert "drafter_model" in data["active"]
    # The step kernel: one variant per block size 1, 2, 4, ..., 256 (block_size
    # stays a constexpr), whatever the layout; k=1 never launches it.
    assert rows[(0, "v1", STEP)]["warmed"] == rows[(1, "v1", STEP)]["warmed"] == 9


def test_patched_launches_what_pristine_launches(results: dict[str, Any]) -> None:
    pristine, patched = _rows(results["pristine"]), _rows(_patched(results))
    assert pristine.keys() == patched.keys()
    for key in pristine:
        kernel = key[2]
        if kernel == STEP:
            # Intentional: the scalars but block_size are no longer
            # specialized, so every batch of a configuration (one drafter
            # block size) launches one variant.
            assert patched[key]["runtime"] == min(pristine[key]["runtime"], 1), key
        else:
            assert patched[key]["keys"] == pristine[key]["keys"], key


def test_patched_step_kernel_matches_pristine_and_reference(results: dict[str, Any]) -> None:
    pristine = results["pristine_interpret"]
    patched = _patched(results, "patched_interpret")
    for case, old, new in zip(STEP_CASES, pristine, patched, strict=True):
        assert new["got"] == new["ref"], case
        assert new["got"] == old["got"], case
