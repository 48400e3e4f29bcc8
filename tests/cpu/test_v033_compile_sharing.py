"""Patch 0010 (0.33.0) across real processes: the ranks of a gloo
tensor-parallel group run the JIT warmup registry over a DeepSeek V4 Triton
kernel (``CombineTopkSwaIndicesKernel``), each launch built for sm90 by
Triton's compiler into ``TRITON_CACHE_DIR``, so what the registry counts as
compiled or loaded is Triton's own disk-cache verdict
(:mod:`dsv4warmup.registry.sharing_rank`).

* Ranks sharing one cache directory build every binary once between them:
  their compiles add up to the keys, each compiles part and loads the rest.
* In the same run, a rank with its own cache directory shares nothing and
  compiles every key itself (the counters' positive control, and the
  fallback that keeps a rank that cannot read the others' binaries correct).
* For the report's deployment, two processes with different hash seeds give
  every Triton and TileLang kernel the same id (what the ranks gather), so
  a real node shares all of them (:mod:`dsv4warmup.registry.sharing_ids`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dsv4warmup import toolchains, trees
from dsv4warmup.paths import REPO

BASE = "0.33.0"


def _run_ranks(tree: Path, caches: list[Path], work: Path) -> list[dict[str, Any]]:
    """One process per rank (rank i writes ``caches[i]``); their results."""
    path = [*map(str, toolchains.extra_python_path(BASE)), str(tree), str(REPO / "scripts")]
    procs = []
    for rank, cache in enumerate(caches):
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(path),
            TRITON_CACHE_DIR=str(cache),
            VLLM_TRITON_JIT_WARMUP_NUM_THREADS="1",
        )
        cmd = [sys.executable, "-m", "dsv4warmup.registry.sharing_rank"]
        cmd += ["--rank", str(rank), "--world", str(len(caches))]
        cmd += ["--store", str(work / "store"), "--out", str(work / f"rank{rank}.json")]
        procs.append(
            subprocess.Popen(
                cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    logs = [proc.communicate(timeout=600)[0] for proc in procs]
    for proc, log in zip(procs, logs, strict=True):
        assert proc.returncode == 0, log[-4000:]
    return [json.loads((work / f"rank{rank}.json").read_text()) for rank in range(len(caches))]


def test_ranks_sharing_a_cache_build_each_binary_once(tmp_path: Path) -> None:
    shared, own = tmp_path / "shared", tmp_path / "own"
    r0, r1, r2 = _run_ranks(trees.patched_tree(BASE), [shared, shared, own], tmp_path)
    keys = r0["keys"]
    assert keys >= 4 and r1["keys"] == r2["keys"] == keys
    # Every key reached Triton's compiler on every rank (a build or a load).
    assert [r["built"] for r in (r0, r1, r2)] == [keys] * 3
    # Ranks 0 and 1: each binary built once between them, each built part.
    assert r0["compiled"] + r1["compiled"] == keys
    assert abs(r0["compiled"] - r1["compiled"]) <= 1
    assert r0["compiled"] + r0["loaded"] == r1["compiled"] + r1["loaded"] == keys
    # Rank 2, its own cache: shares nothing, builds all (the counters see builds).
    assert (r2["compiled"], r2["loaded"]) == (keys, 0)
    assert len(list(shared.rglob("*.cubin"))) == keys


def test_report_deployment_kernels_have_one_id_in_every_process() -> None:
    tree = trees.patched_tree(BASE)
    path = [*map(str, toolchains.extra_python_path(BASE)), str(tree), str(REPO / "scripts")]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "dsv4warmup.registry.sharing_ids", "flash"],
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(path), PYTHONHASHSEED=seed),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in ("1", "2")
    ]
    outs = [proc.communicate(timeout=900) for proc in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, err[-4000:]
    first, second = (json.loads(out.strip().splitlines()[-1]) for out, _ in outs)
    assert first == second
    ids = [item_id for _, item_id in first if item_id is not None]
    names = {item_id[1].rsplit(".", 1)[-1] for item_id in ids}
    # Every Triton and TileLang kernel of the deployment (CuTeDSL ones are not
    # shared), decorator-made ones (the sampler's) named by their function.
    assert len(ids) >= 20
    assert {"BuildC128ATopkMetadataKernel", "MhcPreBigFuseTileLangKernel", "_topk_topp"} <= names


@pytest.mark.parametrize("bad", ["2/2", "0", "a/2", "0/2/x", ""])
def test_rank_of_world_is_checked(bad: str) -> None:
    from dsv4warmup.registry.tp_group import parse

    assert parse("1/4") == (1, 4)
    with pytest.raises(ValueError, match="not rank/world"):
        parse(bad)
