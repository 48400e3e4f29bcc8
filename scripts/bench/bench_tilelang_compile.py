"""One mHC TileLang key's compile, alone, where its CPU time goes (CPU or GPU host; by hand).

    PYTHONPATH=<0.33.0 tree>:scripts:<tilelang> python scripts/bench/bench_tilelang_compile.py
        [--n-splits 16] [--no-broadcast]

Compiles one DeepSeek V4 Flash ``mhc_pre_big_fuse`` key (the kernel with 17 of
the report's 24 TileLang warmup keys) in this process, on an empty TileLang
cache, with nothing else running in it, and prints its wall time, the CPU
time of this process and of its children (nvcc), the most threads the process
had, and the seconds of each TVM pass. It tells whether a compile uses more
than one core (the warmup pool's throughput on a host follows from it) and
which lowering pass costs the most. Needs nvcc for the target
(``TILELANG_DEFAULT_TARGET``, e.g. ``{"kind":"cuda","arch":"sm_90a"}``), no GPU.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import tempfile
import threading
import time
from typing import Any


def _cpu_seconds() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-splits", type=int, default=16)
    ap.add_argument("--no-broadcast", action="store_true")
    args = ap.parse_args()
    os.environ["TILELANG_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilelang-compile-bench-")
    # Serial, in this process: the pool would move the compile elsewhere.
    os.environ["VLLM_TILELANG_JIT_WARMUP_NUM_THREADS"] = "1"

    import torch

    if not torch.cuda.is_available():
        # A CPU host: vLLM sees an H200 stand-in (the kernel module asks the platform).
        from dsv4warmup.registry import platform

        platform.install(platform.H200)
    import tilelang  # noqa: F401  (puts its TVM on the path)
    from bench_tilelang_elaboration import flash_pre_big_fuse_key
    from tvm.ir import transform
    from vllm.model_executor.kernels.mhc import tilelang_kernels as tk
    from vllm.model_executor.warmup import jit_warmup_tilelang_helper as helper

    helper.current_platform.is_cuda = lambda: True  # type: ignore[method-assign]
    passes: collections.Counter[str] = collections.Counter()
    run_pass = transform.Pass.__call__

    def timed_pass(self: Any, mod: Any) -> Any:
        start = time.perf_counter()
        try:
            return run_pass(self, mod)
        finally:
            passes[self.info.name] += time.perf_counter() - start

    transform.Pass.__call__ = timed_pass
    most_threads = [0]
    done = threading.Event()

    def count_threads() -> None:
        while not done.wait(0.02):
            most_threads[0] = max(most_threads[0], len(os.listdir("/proc/self/task")))

    key = flash_pre_big_fuse_key(args.n_splits, broadcast=not args.no_broadcast)
    threading.Thread(target=count_threads, daemon=True).start()
    own0, children0 = _cpu_seconds()
    start = time.perf_counter()
    tk._MHC_PRE_BIG_FUSE_TILELANG_KERNEL.compile_many([key])
    wall = time.perf_counter() - start
    own1, children1 = _cpu_seconds()
    done.set()
    print(f"key: {key}")
    print(
        f"wall {wall:.2f} s; CPU: this process {own1 - own0:.2f} s, children (nvcc) "
        f"{children1 - children0:.2f} s; most threads in the process {most_threads[0]}"
    )
    total = sum(passes.values())
    print(f"TVM passes: {total:.2f} s over {len(passes)}; the costliest:")
    for name, seconds in passes.most_common(5):
        print(f"  {seconds:7.3f} s  {100 * seconds / total:4.1f} %  {name}")


if __name__ == "__main__":
    main()
