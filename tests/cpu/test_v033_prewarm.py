"""``vllm warmup-kernels`` (0.33.0 series) on CPU: the tree's own CLI ``main()``
with the platform answering as an H200 (:mod:`dsv4warmup.registry.cpu_cli`).

* For the report's deployment (``FLASH``) and each model runner, what the
  pre-warm compiles for the kernel groups' kernels equals what the recorded
  start-up lifecycle (:func:`dsv4warmup.registry.lifecycle.warmed_keys`) compiles
  once the drafter's registrations are active (as the groups' runner patches
  make them): exact Triton/TileLang keys of the non-dry-run warmup, and the
  compile keys ``--dry-run`` lists. Needs the groups' drivers
  (``dsv4warmup.registry.{spec_decode,sparse_mla,mhc}``); skipped without them.
* ``--dry-run --json`` prints one JSON object on stdout and no logs there.
* Invalid configurations get vLLM's answer: one ``error:`` line on stderr,
  exit 2, no traceback; a model that is not DeepSeek V4 warms what it
  registers; ``enable_jit_warmup=false`` does nothing and says so.

The tree is ``DSV4_V033_PATCHED_TREE`` (e.g. a dev tree) or
``trees.patched_tree("0.33.0")``; skipped when it has no ``warmup-kernels``.
"""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from dsv4warmup import trees
from dsv4warmup.paths import PATCHES, REPO
from dsv4warmup.registry.audit import GROUPS
from helpers import v033_tree_pytest

SCRIPTS = REPO / "scripts"
MODULE = "dsv4warmup.registry.prewarm"
RUNNERS = ("v2", "v1")
ENV = {"v2": {"VLLM_USE_V2_MODEL_RUNNER": "1"}, "v1": {"VLLM_USE_V2_MODEL_RUNNER": "0"}}
ERROR_PREFIX = "vllm warmup-kernels: error: "


def _tree() -> Path:
    override = os.environ.get("DSV4_V033_PATCHED_TREE")
    if override:
        tree = Path(override)
    elif (PATCHES / "v0.33.0").is_dir():
        tree = trees.patched_tree("0.33.0")
    else:
        pytest.skip("no patched 0.33.0 tree (patches/v0.33.0 not generated yet)")
    if not (tree / "vllm/entrypoints/cli/warmup_kernels.py").is_file():
        pytest.skip(f"{tree} has no vllm warmup-kernels")
    return tree


def _groups() -> list[str]:
    """The kernel groups whose lifecycle drivers this branch has."""
    return [g for g in GROUPS if (SCRIPTS / "dsv4warmup/registry" / f"{g}.py").is_file()]


def _model_dirs(root: Path) -> dict[str, Path]:
    """config.json cases: missing, not JSON, a folder, and a non-DeepSeek model."""
    dirs = {name: root / name for name in ("missing", "not_json", "folder", "llama")}
    for path in dirs.values():
        path.mkdir()
    (dirs["not_json"] / "config.json").write_text('{"architectures": ["Deepseek')
    (dirs["folder"] / "config.json").mkdir()
    (dirs["llama"] / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 256,
                "intermediate_size": 512,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "num_hidden_layers": 2,
                "vocab_size": 1024,
                "max_position_embeddings": 2048,
                "torch_dtype": "bfloat16",
            }
        )
    )
    return dirs


def _flash(*flags: str) -> dict[str, Any]:
    return {"serving": {}, "argv": [*flags, "--dry-run"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every subprocess of this module at once (2 cores: 5 interpreters)."""
    tree = _tree()
    dirs = _model_dirs(tmp_path_factory.mktemp("models"))
    invalid = {
        "block size 7": _flash("--block-size", "7"),
        "max-num-batched-tokens -5": _flash("--max-num-batched-tokens", "-5"),
        "max-num-batched-tokens 0": _flash("--max-num-batched-tokens", "0"),
        "hf-config-path missing": _flash("--hf-config-path", "/nonexistent"),
        "config.json missing": ["warmup-kernels", str(dirs["missing"]), "--dry-run"],
        "config.json not JSON": ["warmup-kernels", str(dirs["not_json"]), "--dry-run"],
        "config.json unreadable": ["warmup-kernels", str(dirs["folder"]), "--dry-run"],
    }
    other = {
        # TP 4 pre-warmed on a host with one GPU (an image build); before the
        # Llama case, whose kernels the process's registry state would keep.
        "one GPU": {
            "serving": {},
            "argv": ["--dry-run", "--json"],
            "env": {"DSV4_CPU_HOSTED_GPU_COUNT": "1"},
        },
        "llama": ["warmup-kernels", str(dirs["llama"]), "--dry-run", "--json"],
        "disabled": {
            "serving": {},
            "argv": ["--kernel-config", '{"enable_jit_warmup": false}', "--json"],
        },
    }
    cases = {**invalid, **other}
    jobs = {"cases": ("cli", json.dumps(list(cases.values())))}
    for runner in RUNNERS:
        # The warmup first: vLLM's log handlers follow the first run's streams,
        # and its closing log line is checked.
        cli: list[dict[str, Any]] = [
            {"serving": {}, "argv": ["--dry-run", "--json"], "env": ENV[runner]}
        ]
        if _groups():
            cli.insert(0, {"serving": {}, "argv": ["--json"], "env": ENV[runner], "record": True})
            jobs[f"lifecycle {runner}"] = ("lifecycle", json.dumps({"runner": runner}))
        jobs[f"cli {runner}"] = ("cli", json.dumps(cli))
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {
            name: pool.submit(trees.json_from_tree, tree, "-m", MODULE, mode, arg)
            for name, (mode, arg) in jobs.items()
        }
        out = {name: f.result() for name, f in futures.items()}
    out["case answers"] = dict(zip(cases, out.pop("cases"), strict=True))
    out["invalid"] = list(invalid)
    return out


def _summary(answer: dict[str, Any]) -> dict[str, Any]:
    assert answer["exit_code"] == 0, answer["stderr"][-3000:]
    lines = answer["stdout"].strip().splitlines()
    assert len(lines) == 1, "stdout holds the JSON summary only"
    return json.loads(lines[0])


@pytest.mark.parametrize("runner", RUNNERS)
def test_prewarm_compiles_what_the_runner_lifecycle_compiles(
    runs: dict[str, Any], runner: str
) -> None:
    if not _groups():
        pytest.skip("no kernel-group drivers (dsv4warmup.registry.<group>) on this branch")
    lifecycle = runs[f"lifecycle {runner}"]
    warmed, dry_run = runs[f"cli {runner}"]
    listed = {k["name"]: sorted(k["keys"]) for k in _summary(dry_run)["kernels"]}
    compiled = _summary(warmed)
    assert compiled["deployment"]["model_runner"] == runner
    assert compiled["deployment"]["speculative_method"] == "mtp"
    assert {k["name"]: sorted(k["keys"]) for k in compiled["kernels"]} == listed
    for row in lifecycle["kernels"]:
        want = lifecycle["keys"].get(row, [])
        assert warmed["keys"].get(row, []) == want, f"{runner}: {row}"
        for name in lifecycle["rows"].get(row, []):
            assert listed.get(name) == lifecycle["compile_keys"][name], f"{runner}: {name}"
    # The drafter's kernel is among them (its registration needs the drafter step).
    assert "MTPSharedHeadRMSNormKernel" in listed
    # The registry's closing line says what was warmed and how (patch 0006).
    (line,) = [
        x for x in warmed["stderr"].splitlines() if "INFO" in x and "JIT kernel warmup:" in x
    ]
    n_keys, n_kernels = compiled["num_keys"], len(compiled["kernels"])
    assert f"JIT kernel warmup: {n_keys} compile keys of {n_kernels} kernels in " in line

    def per_backend(counts: dict[str, int]) -> str:
        return ", ".join(f"{n} {b}" for b, n in sorted(counts.items())) or "0"

    assert line.endswith(
        f"compiled: {per_backend(compiled['compiled'])}; "
        f"loaded from the disk caches: {per_backend(compiled['loaded_from_cache'])}."
    ), line


def test_each_runner_collects_its_own_set_up(runs: dict[str, Any]) -> None:
    """Both runners build the MTP drafter; only V1 builds the EAGLE proposer
    with its registry active (V2 builds its speculator outside it)."""
    listed = {
        runner: {k["name"] for k in _summary(runs[f"cli {runner}"][-1])["kernels"]}
        for runner in RUNNERS
    }
    eagle = {"_eagle_prepare_inputs_padded", "_eagle_prepare_next_token_padded"}
    for runner in RUNNERS:
        assert {"MTPSharedHeadRMSNormKernel", "MhcPreBigFuseTileLangKernel"} <= listed[runner]
    assert eagle <= listed["v1"] and not eagle & listed["v2"]
    assert "_rejection_greedy_sample" in listed["v1"]


def test_dry_run_json_is_the_only_stdout(runs: dict[str, Any]) -> None:
    summary = _summary(runs["cli v2"][-1])
    assert summary["dry_run"] is True and summary["enable_jit_warmup"] is True
    assert summary["deployment"]["tensor_parallel_size"] == 4
    assert summary["num_keys"] == sum(len(k["keys"]) for k in summary["kernels"]) > 0
    assert {"triton", "tilelang"} <= {k["backend"] for k in summary["kernels"]}
    assert summary["compiled"] == {} and summary["loaded_from_cache"] == {}


@pytest.mark.parametrize(
    "case",
    [
        "block size 7",
        "max-num-batched-tokens -5",
        "max-num-batched-tokens 0",
        "hf-config-path missing",
        "config.json missing",
        "config.json not JSON",
        "config.json unreadable",
    ],
)
def test_invalid_configuration_is_one_line_and_exit_2(runs: dict[str, Any], case: str) -> None:
    answer = runs["case answers"][case]
    assert answer["exit_code"] == 2, answer["stderr"][-3000:]
    assert "Traceback" not in answer["stderr"]
    errors = [line for line in answer["stderr"].splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(errors) == 1, answer["stderr"][-3000:]
    assert len(errors[0]) > len(ERROR_PREFIX) + 10
    assert answer["stdout"] == ""


def test_model_that_is_not_deepseek_v4_warms_what_it_registers(runs: dict[str, Any]) -> None:
    summary = _summary(runs["case answers"]["llama"])
    assert summary["deployment"]["architecture"] == "LlamaForCausalLM"
    assert all(k["keys"] for k in summary["kernels"])


def test_disabled_jit_warmup_does_nothing_and_says_so(runs: dict[str, Any]) -> None:
    summary = _summary(runs["case answers"]["disabled"])
    assert summary["enable_jit_warmup"] is False
    assert summary["kernels"] == [] and summary["compiled"] == {}


def test_one_gpu_host_prewarms_a_tp4_deployment(runs: dict[str, Any]) -> None:
    """An image build host with one GPU warms what the TP 4 node would: vLLM's
    "world size > GPUs" check is for starting workers, which this does not."""
    one_gpu = _summary(runs["case answers"]["one GPU"])
    eight_gpus = _summary(runs["cli v2"][-1])
    assert one_gpu["deployment"]["tensor_parallel_size"] == 4

    def keys(summary: dict[str, Any]) -> dict[str, list[str]]:
        # CuTeDSL keys hold the CPU stand-in's mocked cutlass dtypes (their ids vary).
        return {
            k["name"]: sorted(re.sub(r" id='\d+'", "", key) for key in k["keys"])
            for k in summary["kernels"]
        }

    assert keys(one_gpu) == keys(eight_gpus)


def _tree_tests_pass(*files: str, env: dict[str, str] | None = None) -> None:
    """The patched tree's own test ``files`` pass, none skipped."""
    tree = _tree()
    res = v033_tree_pytest(tree, *(tree / f for f in files), env=env)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert " passed" in res.stdout and "skipped" not in res.stdout, res.stdout[-2000:]


def test_tree_tests_of_the_command_pass_on_a_one_gpu_host() -> None:
    """The tree's own tests of ``vllm warmup-kernels``, the offline warmup and
    the registry pass with the platform answering as a one-GPU host (an
    image build machine, the GPU lab): nothing there may need TP x PP GPUs."""
    _tree_tests_pass(
        "tests/entrypoints/unit_tests/test_warmup_kernels_cli.py",
        "tests/model_executor/test_offline_warmup.py",
        "tests/model_executor/test_jit_warmup.py",
        env={"DSV4_CPU_HOSTED_GPU_COUNT": "1"},
    )


def test_tree_tests_of_the_tilelang_compile_pool_pass() -> None:
    """Patch 0009's own tests (no TileLang, no GPU): every key elaborated on
    the dispatching thread before any compiles (elaborating beside a pool
    thread's TVM calls corrupted the heap), compiles in the pool (a barrier
    fails serial ones) while the Triton pool runs, a key dispatched after the
    pool started compiled on the caller after it, every key in the JIT's call
    cache, the first error re-raised after the rest, one thread = the serial
    path; with the registry's tests beside."""
    _tree_tests_pass(
        "tests/model_executor/test_jit_warmup_tilelang_parallel.py",
        "tests/model_executor/test_jit_warmup.py",
    )


def test_tree_tests_of_the_tilelang_compiler_processes_pass() -> None:
    """Patch 0011's own tests (real processes, a stand-in TileLang package):
    a key is built in the pool thread's compiler process, which imports no
    vLLM, then read here and counted as a compile; a warm cache starts no
    process; a failed compile is compiled again here and raises; after a
    process exits the rest compile here; no processes without a disk cache."""
    _tree_tests_pass(
        "tests/model_executor/test_jit_warmup_tilelang_compiler.py",
        "tests/model_executor/test_jit_warmup_tilelang_parallel.py",
    )


def test_tree_tests_of_compile_sharing_pass() -> None:
    """Patch 0010's own tests: ranks that hold a kernel's keys alike and write
    one cache directory compile disjoint round-robin shares of them (in any
    kernel order), nothing is shared otherwise, and the registry compiles its
    share, waits for the group (also after a failed compile, also without
    keys), then the rest; with the registry's tests beside."""
    _tree_tests_pass(
        "tests/model_executor/test_jit_warmup_sharing.py", "tests/model_executor/test_jit_warmup.py"
    )
