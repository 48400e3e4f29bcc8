"""``scripts/bench/bench_warmup.py``'s bookkeeping (the GPU runs themselves are by hand):
kernels land in their family, seconds and keys add up, the table shows each run."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest
from dsv4warmup.paths import REPO


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location(
        "bench_warmup", REPO / "scripts/bench/bench_warmup.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TIMINGS = {
    "BuildC128ATopkMetadataKernel": {
        "module": "vllm.models.deepseek_v4.sparse_mla",
        "keys": 3,
        "seconds": 2.5,
    },
    "CombineTopkSwaIndicesKernel": {
        "module": "vllm.models.deepseek_v4.sparse_mla",
        "keys": 20,
        "seconds": 1.0,
    },
    "MTPSharedHeadRMSNormKernel": {
        "module": "vllm.models.deepseek_v4.common.ops.fused_mtp_input_rmsnorm",
        "keys": 1,
        "seconds": 0.25,
    },
    "_eagle_prepare_inputs_padded": {
        "module": "vllm.v1.spec_decode.utils",
        "keys": 1,
        "seconds": 0.5,
    },
    "MhcPreBigFuseTileLangKernel": {
        "module": "vllm.model_executor.kernels.mhc.tilelang",
        "keys": 4,
        "seconds": 30.0,
    },
    "HcHeadFusedTileLangKernel": {
        "module": "vllm.model_executor.kernels.mhc.tilelang",
        "keys": 1,
        "seconds": 5.0,
    },
    "_rejection_greedy_sample": {
        "module": "vllm.v1.sample.rejection_sampler",
        "keys": 2,
        "seconds": 0.1,
    },
    "TileLang compile pool": {
        "module": "vllm.model_executor.warmup.jit_warmup_tilelang_helper",
        "keys": 5,
        "seconds": 40.0,
        "pool": True,
    },
    "Triton compile pool": {
        "module": "vllm.model_executor.warmup.jit_warmup_triton_helper",
        "keys": 25,
        "seconds": 6.5,
        "pool": True,
    },
    "wait for the other ranks": {
        "module": "vllm.model_executor.warmup.jit_warmup_sharing",
        "keys": 0,
        "seconds": 2.25,
        "pool": True,
    },
    "registry warmup": {
        "module": "vllm.model_executor.warmup.jit_warmup",
        "keys": 0,
        "seconds": 48.5,
        "pool": True,
    },
    # per key, not a family: its seconds are already in the pool row
    "TileLang compile per key": {
        "module": "vllm.model_executor.warmup.jit_warmup_tilelang_helper",
        "keys": 3,
        "seconds": 9.5,
        "per_key": True,
        "each": [["mhc_pre_big_fuse", 9.5], ["hc_head", 2.0], ["mhc_pre_big_fuse", 4.0]],
    },
}


def test_families_add_up() -> None:
    families = _bench().by_family(TIMINGS)
    assert families["sparse-MLA"] == {"keys": 23, "seconds": 3.5}
    assert families["spec-decode"] == {"keys": 2, "seconds": 0.75}
    assert families["mHC"] == {"keys": 5, "seconds": 35.0}
    assert families["other"] == {"keys": 2, "seconds": 0.1}
    assert families["TileLang pool"] == {"keys": 5, "seconds": 40.0}
    assert families["Triton pool"] == {"keys": 25, "seconds": 6.5}
    assert families["wait"] == {"keys": 0, "seconds": 2.25}
    assert families["registry warmup"] == {"keys": 0, "seconds": 48.5}


def test_runs_plan_a_cold_run_per_tilelang_thread_count(tmp_path: Any) -> None:
    plan = _bench()._plan("cold,warm", "1,16", tmp_path)
    assert plan == [
        ("cold t=1", 1, tmp_path / "caches-1"),
        ("cold t=16", 16, tmp_path / "caches-16"),
        ("warm", 16, tmp_path / "caches-16"),
    ]
    assert _bench()._plan("cold,warm,copied", "4", tmp_path)[1:] == [
        ("warm", 4, tmp_path / "caches-4"),
        ("copied", 4, tmp_path / "copied-caches"),
    ]
    # TileLang alone on the last cold run's Triton cache, its own thread count
    assert _bench()._plan("cold,tilelang-cold:1,tilelang-cold,warm", "16,24", tmp_path)[2:] == [
        ("TileLang cold t=1", 1, tmp_path / "tilelang-cold-1"),
        ("TileLang cold t=24", 24, tmp_path / "tilelang-cold-24"),
        ("warm", 24, tmp_path / "caches-24"),
    ]
    # the report's kernels alone, cold on folders of their own; no cold run needed
    assert _bench()._plan("model-cold:16,model-cold", "4", tmp_path) == [
        ("model cold t=16", 16, tmp_path / "model-cold-16"),
        ("model cold t=4", 4, tmp_path / "model-cold-4"),
    ]
    for bad in (
        "tilelang-cold,cold",
        "cold,tilelang-cold:0",
        "cold,tilelang-cold:x",
        "model-cold:0",
        "model-cold:x",
    ):
        with pytest.raises(SystemExit):
            _bench()._plan(bad, "4", tmp_path)
    assert _bench()._plan("cold,warm", None, tmp_path) == [
        ("cold", None, tmp_path / "caches-None"),
        ("warm", None, tmp_path / "caches-None"),
    ]


def test_caches_prepared_for_each_run(tmp_path: Any) -> None:
    """Walk a plan as ``main`` does, each run leaving a Triton and a TileLang
    entry: ``TileLang cold`` starts with the cold run's Triton cache and no
    TileLang one, ``copied`` with everything the last run had."""
    bench = _bench()
    last = cold = None
    seen: dict[str, set[str]] = {}
    for name, _, caches in bench._plan("cold,copied,tilelang-cold:1,warm", "16", tmp_path):
        bench.prepare_caches(name, caches, last, cold)
        seen[name] = {str(p.relative_to(caches)) for p in caches.rglob("*") if p.is_file()}
        for backend in ("triton", "tilelang"):  # what the run writes
            (caches / backend).mkdir(parents=True, exist_ok=True)
            (caches / backend / f"{name}.bin").write_text(name)
        last = caches
        if name.startswith("cold"):
            cold = caches
    assert seen["cold t=16"] == set()
    assert seen["copied"] == {"triton/cold t=16.bin", "tilelang/cold t=16.bin"}
    # the cold run's Triton cache, not the last run's (copied wrote its own)
    assert seen["TileLang cold t=1"] == {"triton/cold t=16.bin"}
    assert seen["warm"] == {"triton/cold t=16.bin", "tilelang/cold t=16.bin"}


def test_table_shows_every_run() -> None:
    bench = _bench()
    run = {
        "wall_s": 80.0,
        "warmup_s": 57.0,
        "num_keys": 32,
        "compiled": {"triton": 27, "tilelang": 5},
        "loaded_from_cache": {},
        "families": bench.by_family(TIMINGS),
    }
    warm = dict(run, wall_s=25.0, warmup_s=3.0, compiled={}, loaded_from_cache={"triton": 27})
    text = bench.table({"cold": run, "warm": warm})
    assert "| family | keys | cold s | warm s |" in text
    assert "| mHC | 5 | 35.00 | 35.00 |" in text
    assert "| TileLang pool | 5 | 40.00 | 40.00 |" in text
    assert "| process wall | 32 | 80.00 | 25.00 |" in text
    assert "warm: compiled 0, loaded from the disk caches {'triton': 27}" in text
    each = TIMINGS["TileLang compile per key"]["each"]
    text = bench.table(
        {"cold": dict(run, tilelang_keys=each), "warm": dict(warm, tilelang_keys=each)}
    )
    assert (
        "cold: TileLang per key (3): slowest 9.5 s (mhc_pre_big_fuse), median 4.0 s, sum 15.5 s; "
        "slowest per kernel: mhc_pre_big_fuse 9.5, hc_head 2.0"
    ) in text
    # nothing compiled, no compile seconds to show
    assert "warm: TileLang per key" not in text
    # a model-cold run has no other kernels: each run's key count where they differ
    model_timings = {k: v for k, v in TIMINGS.items() if k != "_rejection_greedy_sample"}
    model = dict(run, num_keys=30, families=bench.by_family(model_timings))
    text = bench.table({"cold": run, "model cold t=16": model})
    assert "| other | 2 / 0 | 0.10 | 0.00 |" in text
    assert "| mHC | 5 | 35.00 | 35.00 |" in text
    assert "| process wall | 32 / 30 | 80.00 | 80.00 |" in text


def test_model_cold_runs_the_runner_on_the_reports_kernels(tmp_path: Any) -> None:
    bench = _bench()
    env = bench.runner_env(tmp_path, tmp_path / "c", "v2", 16, model_kernels_only=True)
    assert env[bench.MODEL_KERNELS_ONLY_ENV] == "1"
    assert env["VLLM_TILELANG_JIT_WARMUP_NUM_THREADS"] == "16"
    assert bench.MODEL_KERNELS_ONLY_ENV not in bench.runner_env(tmp_path, tmp_path / "c", "v2", 16)


def test_host_cpus_reports_what_compiles_may_use() -> None:
    host = _bench().host_cpus()
    assert host["affinity"] == len(os.sched_getaffinity(0)) >= 1
    assert host["cpu_count"] >= host["affinity"]
    if Path("/sys/fs/cgroup/cpu.max").is_file():
        assert "cgroup_cpus" in host


def test_node_table_sums_the_ranks() -> None:
    import sys

    sys.path.insert(0, str(REPO / "scripts" / "bench"))
    try:
        import bench_node_warmup as node
    finally:
        sys.path.remove(str(REPO / "scripts" / "bench"))
    families = _bench().by_family(TIMINGS)
    waited = dict(
        families,
        wait={"keys": 0, "seconds": 9.0},
        **{"registry warmup": {"keys": 0, "seconds": 55.25}},
    )
    runs = {
        "alone": {
            "node_wall_s": 150.0,
            "slowest_warmup_s": 120.0,
            "compiled": {"tilelang": 96, "triton": 904},
            "loaded_from_cache": {},
            "ranks": [{"families": families}] * 2,
        },
        "shared": {
            "node_wall_s": 60.0,
            "slowest_warmup_s": 31.5,
            "compiled": {"tilelang": 24, "triton": 904},
            "loaded_from_cache": {"tilelang": 72},
            "ranks": [{"families": families}, {"families": waited}],
        },
    }
    text = node.table(runs, 4)
    assert "| run (4 ranks) |" in text and "| wait s per rank |" in text
    assert "| registry warmup s per rank |" in text
    assert (
        "| shared | 60.0 | 31.5 | 48.5/55.2 | 40.0/40.0 | 6.5/6.5 | 2.2/9.0 "
        "| {'tilelang': 24, 'triton': 904} | {'tilelang': 72} |"
    ) in text
    assert "| alone | 150.0 | 120.0 |" in text and "| 0 |" in text
