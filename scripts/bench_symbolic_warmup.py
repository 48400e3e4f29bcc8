"""Warm-start TileLang warmup of the mHC pre epilogues with and without 0.33.0
patch 0012's symbolic split count (CPU or GPU host; by hand).

    PYTHONPATH=<patched 0.33.0 tree>:scripts:<TileLang site> TILELANG_CACHE_DIR=<dir> \\
        python scripts/bench_symbolic_warmup.py [--rounds 2] [--threads 2] [--sms 132]

The keys are the report deployment's ``MhcPreBigFuseTileLangKernel`` keys
(DeepSeek V4 Flash, hidden 4096, with DeepGEMM): the broadcast epilogue at
each split count DeepGEMM's split-k estimate picks for 1 to 8192 tokens, the
``with_norm`` one at those and the fused post + pre GEMM's. Each run is a fresh
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
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HIDDEN, HC = 4096, 4


def _keys(kernels: Any) -> list[Any]:
    from bench_tilelang_elaboration import flash_pre_big_fuse_key

    broadcast, with_norm = set(), set()
    for tokens in range(1, 8193):
        blocks = (tokens + 63) // 64
        broadcast.add(kernels.compute_num_split(64, HIDDEN, blocks))
        with_norm.add(kernels.compute_num_split(64, HC * HIDDEN, blocks))
        fused = kernels.mhc_fused_post_pre_split_config(tokens, HIDDEN, HC)
        if fused is not None:
            with_norm.add(fused[1])
    return [
        flash_pre_big_fuse_key(n, broadcast=is_broadcast)
        for is_broadcast, splits in ((True, broadcast), (False, with_norm))
        for n in sorted(splits)
    ]


def _one(symbolic: bool, sms: int) -> dict[str, Any]:
    """In this process: time compile_many of every key."""
    import torch

    if not torch.cuda.is_available():
        from types import SimpleNamespace
        from unittest import mock

        from dsv4warmup.v033 import platform

        platform.install(platform.H200)
        props = SimpleNamespace(multi_processor_count=sms)
        mock.patch.object(torch.cuda, "get_device_properties", lambda *_: props).start()
    from vllm.model_executor.kernels.mhc import tilelang_kernels as kernels

    kernel = kernels._MHC_PRE_BIG_FUSE_TILELANG_KERNEL
    if not symbolic:
        type(kernel).symbolic_warmup_args = ()
    keys = _keys(kernels)
    start = time.perf_counter()
    kernel.compile_many(keys)
    return {"keys": len(keys), "seconds": time.perf_counter() - start}


def _entries() -> int:
    root = Path(os.environ["TILELANG_CACHE_DIR"])
    return sum(1 for p in root.rglob("device_kernel.cu")) if root.is_dir() else 0


def _run(symbolic: bool, args: argparse.Namespace) -> dict[str, Any]:
    before = _entries()
    env = dict(os.environ, VLLM_TILELANG_JIT_WARMUP_NUM_THREADS=str(args.threads))
    mode = "symbolic" if symbolic else "static"
    cmd = [sys.executable, __file__, "--one", mode, "--sms", str(args.sms)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
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
    args = ap.parse_args()
    if args.one:
        print(json.dumps(_one(args.one == "symbolic", args.sms)))
        return
    if "TILELANG_CACHE_DIR" not in os.environ:
        sys.exit("error: set TILELANG_CACHE_DIR (a folder of its own)")
    first = "cold" if _entries() == 0 else "first (the cache folder was not empty)"
    runs = [(f"{first}, with 0012", _run(True, args))]
    for i in range(args.rounds):
        order = (True, False) if i % 2 == 0 else (False, True)
        for symbolic in order:
            name = f"warm, {'with 0012' if symbolic else 'every key elaborated'}"
            runs.append((name, _run(symbolic, args)))
    print(f"{runs[0][1]['keys']} keys, {args.threads} compile threads")
    print("| run | compile_many s | cache entries added | fell back |")
    print("|---|---|---|---|")
    for name, r in runs:
        print(f"| {name} | {r['seconds']:.2f} | {r['added']} | {r['fell_back']} |")
    if any(r["added"] for name, r in runs[1:]):
        sys.exit("error: a warm run compiled: its keys differ from the cold run's")


if __name__ == "__main__":
    main()
