"""Why 0.33.0 patch 0009 elaborates every TileLang key before any compiles
(CPU; TileLang installed, a 0.33.0 tree on ``PYTHONPATH``; by hand).

    PYTHONPATH=<patched 0.33.0 tree>:scripts:<TileLang site> \\
        python scripts/bench/repro_tilelang_elaboration_race.py [--seconds 40] [--runs 3]

Each run is a fresh process: its main thread elaborates DeepSeek V4 Flash
``mhc_pre_big_fuse`` keys (split counts 1-16, both epilogues) in a loop and
hands each ``PrimFunc`` to a second thread, which does what a compile-pool
thread does first with it (``--beside``): ``script`` prints it, as
TileLang's disk cache key does; ``save_json`` serializes it, as a compiler
process's task does; ``after`` prints it only once every key is elaborated
(the order 0009 keeps; TileLang's ``par_compile`` keeps it too); ``none``
leaves it. Prints per mode the runs that ended normally and those that
aborted (with TileLang 0.1.12: ``script`` beside elaboration aborts with
``malloc(): unaligned tcache chunk detected``).
"""

from __future__ import annotations

import argparse
import queue
import subprocess
import sys
import threading
import time
from typing import Any

MODES = ("script", "save_json", "after", "none")


def _keys() -> list[tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    """``(jit_impl, args, kwargs)`` of each key, as the warmup elaborates it."""
    from bench_tilelang_elaboration import flash_pre_big_fuse_key
    from dsv4warmup.registry import platform

    platform.install(platform.H200)
    platform.install_device_properties(platform.H200)
    from vllm.model_executor.kernels.mhc import tilelang_kernels as kernels
    from vllm.model_executor.warmup import jit_warmup_tilelang_helper as helper

    calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    helper.compile_tilelang = lambda jit, *a, **k: calls.append((jit, a, k))
    kernels._MHC_PRE_BIG_FUSE_TILELANG_KERNEL.compile_many(
        [flash_pre_big_fuse_key(n, broadcast=b) for b in (False, True) for n in range(1, 17)]
    )
    return calls


def _child(mode: str, seconds: float) -> None:
    keys = _keys()
    import tvm  # TileLang's, on the path once TileLang is imported

    handed: queue.Queue[Any] = queue.Queue()
    elaborated: list[Any] = []

    def beside() -> None:
        while (prim_func := handed.get()) is not None:
            if mode == "script":
                prim_func.script(show_meta=True)
            elif mode == "save_json":
                tvm.ir.save_json(prim_func)

    thread = threading.Thread(target=beside)
    thread.start()
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        jit, args, kwargs = keys[n % len(keys)]
        prim_func = jit.get_tir(*args, **kwargs)
        if mode == "after":
            elaborated.append(prim_func)
        else:
            handed.put(prim_func)
        n += 1
    handed.put(None)
    thread.join()
    for prim_func in elaborated:
        prim_func.script(show_meta=True)
    print(f"{n} keys elaborated")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="per run")
    ap.add_argument("--runs", type=int, default=3, help="per mode")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.seconds)
        return
    print("| beside elaboration | runs ended normally | aborted (exit codes) |")
    print("|---|---|---|")
    for mode in args.modes.split(","):
        codes = []
        for _ in range(args.runs):
            cmd = [sys.executable, __file__, "--child", mode, "--seconds", str(args.seconds)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode == 1:
                sys.exit(f"error: {' '.join(cmd)}:\n{res.stderr[-3000:]}")
            codes.append(res.returncode)
        bad = [c for c in codes if c != 0]
        print(f"| {mode} | {codes.count(0)} | {len(bad)} {tuple(bad) if bad else ''} |")


if __name__ == "__main__":
    main()
