"""The GPU tests' pre-warm runner (:mod:`dsv4warmup.gpu.prewarm_runner`) in the
lab's Python environment (:mod:`dsv4warmup.registry.lab_host`): what the lab lacks
stays missing, and the runner's stand-ins get ``vllm warmup-kernels`` through
configuration and model building (``--dry-run``: nothing compiles on CPU).

The lab's first two GPU runs stopped exactly here (compiled ops its ``vllm._C``
stub lacks, looked up while vLLM configures the fusion passes and builds V1's
sampler); the control without the runner's op stubs must stop the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from dsv4warmup import trees
from dsv4warmup.paths import PATCHES

SERIES_KERNELS = {
    "BuildC128ATopkMetadataKernel",
    "CombineTopkSwaIndicesKernel",
    "MTPSharedHeadRMSNormKernel",
    "MhcPreBigFuseTileLangKernel",
}


def _run(tmp_path: Path, variant: str, runner: str, **env: str) -> subprocess.CompletedProcess:
    if not (PATCHES / "v0.33.0").is_dir():
        pytest.skip("no 0.33.0 series")
    tree = trees.patched_tree("0.33.0")
    return subprocess.run(
        [sys.executable, "-m", "dsv4warmup.registry.lab_host", str(tmp_path / "model"), variant]
        + ["--dry-run", "--json"],
        capture_output=True,
        text=True,
        env=dict(
            trees.python_env(tree),
            DSV4_CPU_HOSTED_GPU_COUNT="1",
            VLLM_USE_V2_MODEL_RUNNER="1" if runner == "v2" else "0",
            **env,
        ),
        timeout=600,
    )


@pytest.fixture(scope="module")
def flash_v2(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess:
    """The plain Flash / V2 run, which three tests read (about 20 s a run)."""
    return _run(tmp_path_factory.mktemp("flash-v2"), "flash", "v2")


@pytest.mark.parametrize("variant,runner", [("flash", "v2"), ("flash", "v1"), ("pro", "v2")])
def test_runner_gets_the_command_through_on_the_lab(
    tmp_path: Path, variant: str, runner: str, request: pytest.FixtureRequest
) -> None:
    if (variant, runner) == ("flash", "v2"):
        res = request.getfixturevalue("flash_v2")
    else:
        res = _run(tmp_path, variant, runner)
    assert res.returncode == 0, res.stderr[-4000:]
    # What the lab lacks (the lab has cuda.bindings; this machine has not).
    stood_in = next(x for x in res.stderr.splitlines() if x.startswith("lab: stand-ins for "))
    for package in ("cutlass", "quack", "flashinfer", "vllm.vllm_flash_attn.cute"):
        assert f"'{package}'" in stood_in, stood_in
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["dry_run"] is True and summary["num_keys"] > 0
    assert SERIES_KERNELS <= {k["name"] for k in summary["kernels"]}


def test_deep_gemm_keys_are_a_deep_gemm_deployment_s(
    tmp_path: Path, flash_v2: subprocess.CompletedProcess
) -> None:
    """``DSV4_DEEP_GEMM_KEYS=1`` where DeepGEMM is missing: the mHC epilogue
    keys follow DeepGEMM's split counts and the TileLang pre-norm GEMM (the
    fallback without DeepGEMM) is not registered; without it, the lab's own."""
    from dsv4warmup.gpu.prewarm_runner import DEEP_GEMM_KEYS_ENV

    def keys(res: subprocess.CompletedProcess) -> dict[str, int]:
        assert res.returncode == 0, res.stderr[-4000:]
        summary = json.loads(res.stdout.strip().splitlines()[-1])
        return {k["name"]: len(k["keys"]) for k in summary["kernels"]}

    with_dg = _run(tmp_path / "dg", "flash", "v2", **{DEEP_GEMM_KEYS_ENV: "1"})
    assert "lab: DeepGEMM answered present" in with_dg.stderr
    lab = flash_v2
    assert "DeepGEMM answered" not in lab.stderr
    dg, own = keys(with_dg), keys(lab)
    assert "HcPrenormGemmTileLangKernel" not in dg and own["HcPrenormGemmTileLangKernel"] > 0
    # the with-norm epilogue at each DeepGEMM split count, not the TileLang GEMM's one
    assert dg["MhcPreBigFuseTileLangKernel"] > own["MhcPreBigFuseTileLangKernel"]
    assert {k: v for k, v in dg.items() if "TileLang" not in k} == {
        k: v for k, v in own.items() if "TileLang" not in k
    }


def test_model_kernels_only_warms_those_kernels_with_all_their_keys(
    tmp_path: Path, flash_v2: subprocess.CompletedProcess
) -> None:
    """``DSV4_WARM_MODEL_KERNELS_ONLY=1``: the registry lists (and so warms) the
    model-specific kernels with every key a full run has for them, and nothing else;
    the full run (the control) has other kernels, which it drops."""
    from dsv4warmup.gpu.prewarm_runner import (
        MODEL_KERNELS_ONLY_ENV,
        SPARSE_MLA_KERNELS,
        SPEC_DECODE_KERNELS,
    )

    def kernels(res: subprocess.CompletedProcess) -> dict[str, tuple[str, list[str]]]:
        assert res.returncode == 0, res.stderr[-4000:]
        summary = json.loads(res.stdout.strip().splitlines()[-1])
        return {k["name"]: (k["backend"], k["keys"]) for k in summary["kernels"]}

    model_res = _run(tmp_path / "model", "flash", "v2", **{MODEL_KERNELS_ONLY_ENV: "1"})
    model, full = kernels(model_res), kernels(flash_v2)
    assert f"of {len(full)} kernels)" in model_res.stderr
    # the model-specific kernels, each with all of its keys
    assert model == {name: full[name] for name in model}
    assert SERIES_KERNELS <= set(model)
    assert (SPARSE_MLA_KERNELS | SPEC_DECODE_KERNELS) & set(full) <= set(model)
    # every mHC kernel (this deployment's TileLang kernels are all mHC ones)
    assert {name for name, (backend, _) in full.items() if backend == "tilelang"} <= set(model)
    # and no other kernel, of which the full run has some
    dropped = set(full) - set(model)
    assert dropped and not dropped & (SPARSE_MLA_KERNELS | SPEC_DECODE_KERNELS)


_STAND_IN_CACHE = """
from dsv4warmup.registry import cpu_cli, platform
cpu_cli.install(platform.H200, stand_ins=("tilelang",), permissive_ops=False)
from vllm.model_executor.warmup import jit_warmup_sharing
print(jit_warmup_sharing.shared_cache_dir("tilelang"))
"""


def test_the_stand_in_tilelang_has_no_disk_cache(tmp_path: Path) -> None:
    """TileLang stood in has no cache folder for the ranks to share (else one
    named after the mock's repr appears in the working directory)."""
    if not (PATCHES / "v0.33.0").is_dir():
        pytest.skip("no 0.33.0 series")
    res = subprocess.run(
        [sys.executable, "-c", _STAND_IN_CACHE],
        capture_output=True,
        text=True,
        env=trees.python_env(trees.patched_tree("0.33.0")),
        cwd=tmp_path,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "None"
    assert list(tmp_path.iterdir()) == []


def test_without_its_op_stubs_the_command_stops_as_on_the_lab(tmp_path: Path) -> None:
    res = _run(tmp_path, "flash", "v2", DSV4_LAB_HOST_NO_OP_STUBS="1")
    assert res.returncode != 0
    assert "'_OpNamespace' '_C' object has no attribute" in res.stderr, res.stderr[-3000:]


_POOL_TIMING = """
import json, time
from dsv4warmup.gpu import prewarm_runner
from vllm.model_executor.warmup import jit_warmup_sharing as sharing
# a rank of a group: its wait at the barrier takes 0.05 s
sharing.share_compiles = lambda items, backend_of: sharing.WarmupShares(
    first=items, wait=lambda: time.sleep(0.05))
from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry
# the registry's warmup takes 0.05 s
JitWarmupRegistry.warmup = lambda self, kernel_items=None: time.sleep(0.05)
timings = prewarm_runner._time_compiles()
JitWarmupRegistry.warmup(object())
from vllm.model_executor.warmup import jit_warmup_tilelang_helper as helper
from vllm.model_executor.warmup import jit_warmup_triton_helper as triton_helper
# the registry's pool, and inside it one kernel's compile_many entering again
with helper.tilelang_warmup_pool(5) as start_compiles:
    helper.compile_tilelang_warmup(lambda: time.sleep(0.05), 2)
    start_compiles()  # as the registry does before its Triton pool
    triton_helper.compile_triton_warmup(lambda: time.sleep(0.05), 3)
sharing.share_compiles([], None).wait()
print(json.dumps(timings))
"""


def test_pool_rows_count_the_outermost_pool_only() -> None:
    """The ``TileLang compile pool`` row: the registry's pool once, not again
    for each kernel's ``compile_many`` that re-enters it inside (the first H200
    bench showed 48 keys for 24 TileLang compiles); the pool's ``start``
    passes through the timing wrapper (the 2026-12-06 compiler-process bench lost it)."""
    if not (PATCHES / "v0.33.0").is_dir():
        pytest.skip("no 0.33.0 series")
    from dsv4warmup.gpu.prewarm_runner import POOL_ROW, REGISTRY_ROW, TRITON_POOL_ROW, WAIT_ROW

    rows = trees.json_from_tree(trees.patched_tree("0.33.0"), "-c", _POOL_TIMING)
    assert rows[POOL_ROW]["keys"] == 5
    assert 0.1 <= rows[POOL_ROW]["seconds"] < 5
    assert rows[TRITON_POOL_ROW]["keys"] == 3
    assert 0.05 <= rows[TRITON_POOL_ROW]["seconds"] < rows[POOL_ROW]["seconds"]
    assert rows[WAIT_ROW]["keys"] == 0 and 0.05 <= rows[WAIT_ROW]["seconds"] < 5
    registry = rows[REGISTRY_ROW]
    assert registry["keys"] == 0 and 0.05 <= registry["seconds"] < rows[POOL_ROW]["seconds"]


_PER_KEY_TIMING = """
import json, time, types
from vllm.model_executor.warmup import jit_warmup_tilelang_helper as helper
# the pool's compile of an elaborated key takes 0.2 s
helper._compile_elaborated = lambda jit_impl, prim_func, key, compilers: time.sleep(0.2)
from dsv4warmup.gpu import prewarm_runner
timings = prewarm_runner._time_compiles()

class Elaborated:  # elaborated here, compiled in the pool
    def __init__(self, name):
        self.func = types.SimpleNamespace(__name__=name)
    def get_tir(self, *args, **kwargs):
        time.sleep(0.02)
    def compile(self, *args, **kwargs):
        raise AssertionError("compiled in the pool")

class Whole:  # no elaboration step: compiled whole, serial
    func = types.SimpleNamespace(__name__="whole")
    def compile(self, *args, **kwargs):
        time.sleep(0.1)

with helper.tilelang_warmup_pool(2):
    helper.compile_tilelang(Elaborated("a"))
    helper.compile_tilelang(Elaborated("b"))
helper.compile_tilelang(Whole())
print(json.dumps(timings))
"""


def test_per_key_row_times_each_tilelang_compile_once() -> None:
    """``TileLang compile per key``: a pool key's compile on its pool thread
    (not its elaboration), a serial key's whole compile, each once; not a
    family (its seconds are the pool's)."""
    if not (PATCHES / "v0.33.0").is_dir():
        pytest.skip("no 0.33.0 series")
    from dsv4warmup.gpu.prewarm_runner import KEYS_ROW

    row = trees.json_from_tree(trees.patched_tree("0.33.0"), "-c", _PER_KEY_TIMING)[KEYS_ROW]
    assert row["per_key"] is True and row["keys"] == 3
    each = dict(row["each"])
    assert sorted(each) == ["a", "b", "whole"]
    assert 0.2 <= each["a"] < 1 and 0.2 <= each["b"] < 1
    assert 0.1 <= each["whole"] < 0.2
    assert row["seconds"] == pytest.approx(max(each.values()), abs=1e-3)
