"""Several warmers on one TileLang cache folder, one killed mid-compile (CPU or GPU host; by hand).

    PYTHONPATH=<0.34.0 tree>:scripts:<tilelang> TILELANG_DEFAULT_TARGET='{"kind":"cuda","arch":"sm_90a"}' \\
        python scripts/bench/bench_tilelang_shared_cache.py [--warmers 4] [--kill-after 10] [--keys 2]

What TileLang's own disk cache does when TP ranks, DP ranks or containers warm the same keys
into one shared folder at once, with no lock or collective of vLLM's: ``--warmers`` processes
start together on an empty folder, each compiling the same DeepSeek V4 Flash
``mhc_pre_big_fuse`` keys (``MhcPreBigFuseTileLangKernel.compile_many``, one key per split
count); ``--kill-after`` seconds in, the first warmer gets SIGKILL. Then a fresh process loads
every key from the folder. Printed: each warmer's wall time and how many keys it built and how
many it read from disk; whether the killed warmer left anything the others or the loader
could not use (a torn entry fails to load or is rebuilt); the loader's builds (0 when every
binary loads) and the entries and leftover staging files in the folder. A per-key build lock
would show one build per key in all; without one every warmer that misses builds it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULT = "result: "


def warm(keys: int) -> dict[str, Any]:
    """Compile (or load) ``keys`` mHC keys into ``TILELANG_CACHE_DIR``."""
    import torch

    if not torch.cuda.is_available():
        from dsv4warmup.registry import platform

        platform.install(platform.H200)
    import tilelang  # noqa: F401  (puts its TVM on the path)
    from bench_tilelang_elaboration import flash_pre_big_fuse_key
    from compile_counters import builds
    from vllm.model_executor.kernels.mhc import tilelang_kernels as tk

    splits = (16, 8, 4, 2, 1)[:keys]
    start = time.perf_counter()
    with builds() as counts:
        tk.MhcPreBigFuseTileLangKernel().compile_many(
            [flash_pre_big_fuse_key(n, broadcast=False) for n in splits]
        )
    seconds = round(time.perf_counter() - start, 2)
    built = sum(n for (be, _, disk), n in counts.items() if be == "tilelang" and not disk)
    read = sum(n for (be, _, disk), n in counts.items() if be == "tilelang" and disk)
    return {"built": built, "read": read, "seconds": seconds}


def _spawn(cache: Path, keys: int) -> subprocess.Popen[str]:
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache))
    return subprocess.Popen(
        [sys.executable, __file__, "--one", "--keys", str(keys)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, Any] | str:
    out, err = proc.communicate()
    lines = [line for line in out.splitlines() if line.startswith(RESULT)]
    if proc.returncode != 0 or not lines:
        return f"exit {proc.returncode}: {err.strip().splitlines()[-1] if err.strip() else ''}"
    return json.loads(lines[-1][len(RESULT) :])


def _wait_for_a_held_lock(cache: Path, timeout: float = 300.0) -> None:
    """Until some lock file under ``cache`` is held (a non-blocking flock fails)."""
    import fcntl

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in cache.rglob("*.lock"):
            with open(path) as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return
                fcntl.flock(f, fcntl.LOCK_UN)
        time.sleep(0.05)
    raise TimeoutError("no build lock taken: does the tree lock its TileLang keys?")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warmers", type=int, default=4)
    ap.add_argument("--kill-after", type=float, default=10.0, help="seconds; 0: kill none")
    ap.add_argument("--keys", type=int, default=2, choices=range(1, 6))
    ap.add_argument(
        "--kill-holder",
        action="store_true",
        help="start warmer 0 alone and the others once it holds a key's build lock "
        "(a tree with per-key locks), so the killed warmer is the builder",
    )
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    here = Path(__file__).resolve()
    sys.path[:0] = [str(here.parent), str(here.parents[2] / "tests" / "gpu")]
    if args.one:
        print(RESULT + json.dumps(warm(args.keys)), flush=True)
        return

    cache = Path(tempfile.mkdtemp(prefix="tilelang-shared-"))
    print(f"# {args.warmers} warmers, {args.keys} keys each, one cache folder {cache}")
    start = time.perf_counter()
    warmers = [_spawn(cache, args.keys)]
    if args.kill_holder:
        _wait_for_a_held_lock(cache)
        print(f"warmer 0 holds a build lock {time.perf_counter() - start:.1f} s in")
    warmers += [_spawn(cache, args.keys) for _ in range(args.warmers - 1)]
    if args.kill_after > 0:
        time.sleep(args.kill_after)
        warmers[0].send_signal(signal.SIGKILL)
        print(f"warmer 0 killed (SIGKILL) {time.perf_counter() - start:.1f} s in")
    for i, proc in enumerate(warmers):
        result = _result(proc)
        print(f"warmer {i}: {result} (done {time.perf_counter() - start:.1f} s after the start)")
    loader = _result(_spawn(cache, args.keys))
    print(f"fresh loader: {loader}")
    print(f"cache folder: {sorted(p.name for p in cache.iterdir())}")
    staging = [str(p.relative_to(cache)) for p in cache.rglob("*") if ".tmp" in p.name]
    print(f"temporary files left: {staging}")


if __name__ == "__main__":
    main()
