"""Warm-start TileLang warmup of the mHC pre epilogues with and without 0.33.0
patch 0012's symbolic split count (CPU or GPU host; by hand).

    PYTHONPATH=<patched 0.33.0 tree>:scripts:<TileLang site> TILELANG_CACHE_DIR=<dir> \\
        python scripts/bench/bench_symbolic_warmup.py [--rounds 2] [--threads 2] [--sms 132]

The keys are the report deployment's ``MhcPreBigFuseTileLangKernel`` keys
(DeepSeek V4 Flash, 8192 tokens, with DeepGEMM) as the start-up warmup expands
them: the real target and MTP draft register their mHC warmups and the
registry expands them (``dsv4warmup.registry.lifecycle.warm_registry``), in a
CPU-only process whose platform answers as an H200 (``--sms`` SMs), so the
keys follow the tree's dispatch wherever the bench runs. Each run is a fresh
process timing ``compile_many`` of all of them through the TileLang compile
pool: first ``cold`` (with 0012; it fills the cache folder), then ``rounds``
pairs of warm runs, with the kernel's ``symbolic_warmup_args`` as declared
and emptied (every key elaborated, as without 0012), in alternating order.
Printed per run: seconds and the cache entries it added (a warm run must add
none: the specialized ``PrimFunc``s have the cache keys elaboration gives).
Without a GPU the platform answers as an H200 (``--sms`` SMs) and
``TILELANG_DEFAULT_TARGET`` should name sm_90a; compiles need nvcc.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MAX_TOKENS = 8192


def _registered_keys(sms: int) -> list[dict[str, Any]]:
    """In this process (no GPU): the kernel's keys the registry expands from
    the models' registrations, as keyword arguments of its ``CompileKey``."""
    import dataclasses

    from dsv4warmup.registry import engine, lifecycle, mhc, platform
    from dsv4warmup.serving import FLASH

    cfg = FLASH.replace(max_num_batched_tokens=MAX_TOKENS, sm_count=sms)
    gpu = mhc.gpu_for(cfg)
    platform.install(gpu)
    with mhc.deep_gemm_env(True):
        vllm_config = engine.vllm_config(cfg, gpu)
        kernel = mhc.kernels_module()._MHC_PRE_BIG_FUSE_TILELANG_KERNEL
        registry = lifecycle.warm_registry(
            vllm_config, "v2", mhc.register, keep=lambda k: k is kernel
        )
        with mhc.record_compiles():  # the SM count and DeepGEMM the keys read
            items = registry.warmup_keys()
    return [dataclasses.asdict(key) for _, keys in items for key in keys]


def _key_fields(sms: int) -> list[dict[str, Any]]:
    """``_registered_keys`` from a CPU-only process (it installs a platform)."""
    cmd = [sys.executable, __file__, "--keys", "--sms", str(sms)]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} exited {res.returncode}:\n{res.stderr[-3000:]}")
    fields = json.loads(res.stdout.strip().splitlines()[-1])
    if not fields:
        sys.exit("error: the registry expanded no MhcPreBigFuseTileLangKernel key")
    return fields


def _one(symbolic: bool, sms: int, fields: list[dict[str, Any]]) -> dict[str, Any]:
    """In this process: time compile_many of every key (``CompileKey`` fields)."""
    import torch

    if not torch.cuda.is_available():
        import dataclasses

        from dsv4warmup.registry import platform

        gpu = dataclasses.replace(platform.H200, sm_count=sms)
        platform.install(gpu)
        platform.install_device_properties(gpu)
    from vllm.model_executor.kernels.mhc import tilelang_kernels as kernels

    kernel = kernels._MHC_PRE_BIG_FUSE_TILELANG_KERNEL
    if not symbolic:
        type(kernel).symbolic_warmup_args = ()
    keys = [type(kernel).CompileKey(**f) for f in fields]
    start = time.perf_counter()
    kernel.compile_many(keys)
    return {"keys": len(keys), "seconds": time.perf_counter() - start}


def _entries() -> int:
    root = Path(os.environ["TILELANG_CACHE_DIR"])
    return sum(1 for p in root.rglob("device_kernel.cu")) if root.is_dir() else 0


def _run(symbolic: bool, args: argparse.Namespace, fields: list[dict[str, Any]]) -> dict[str, Any]:
    before = _entries()
    env = dict(os.environ, VLLM_TILELANG_JIT_WARMUP_NUM_THREADS=str(args.threads))
    mode = "symbolic" if symbolic else "static"
    cmd = [sys.executable, __file__, "--one", mode, "--sms", str(args.sms)]
    res = subprocess.run(cmd, input=json.dumps(fields), capture_output=True, text=True, env=env)
    if res.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} exited {res.returncode}:\n{res.stderr[-3000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    warned = [x for x in res.stderr.splitlines() if "elaborating each key" in x]
    return dict(out, added=_entries() - before, fell_back=bool(warned))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="TileLang compile pool threads")
    ap.add_argument("--sms", type=int, default=132, help="SM count without a GPU (H200)")
    ap.add_argument("--one", choices=("symbolic", "static"), help=argparse.SUPPRESS)
    ap.add_argument("--keys", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.keys:
        with contextlib.redirect_stdout(sys.stderr):
            keys = _registered_keys(args.sms)
        print(json.dumps(keys))
        return
    if args.one:
        print(json.dumps(_one(args.one == "symbolic", args.sms, json.load(sys.stdin))))
        return
    if "TILELANG_CACHE_DIR" not in os.environ:
        sys.exit("error: set TILELANG_CACHE_DIR (a folder of its own)")
    first = "cold" if _entries() == 0 else "first (the cache folder was not empty)"
    fields = _key_fields(args.sms)  # once: every run times the same keys
    runs = [(f"{first}, with 0012", _run(True, args, fields))]
    for i in range(args.rounds):
        order = (True, False) if i % 2 == 0 else (False, True)
        for symbolic in order:
            name = f"warm, {'with 0012' if symbolic else 'every key elaborated'}"
            runs.append((name, _run(symbolic, args, fields)))
    print(f"{runs[0][1]['keys']} keys, {args.threads} compile threads")
    print("| run | compile_many s | cache entries added | fell back |")
    print("|---|---|---|---|")
    for name, r in runs:
        print(f"| {name} | {r['seconds']:.2f} | {r['added']} | {r['fell_back']} |")
    if any(r["added"] for name, r in runs[1:]):
        sys.exit("error: a warm run compiled: its keys differ from the cold run's")


if __name__ == "__main__":
    main()
