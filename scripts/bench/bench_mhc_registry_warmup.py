"""Cold and warm TileLang start-up of the report's deployment on a registry-era tree (GPU; by hand).

    python scripts/bench/bench_mhc_registry_warmup.py --runs core:cold,core+0011:cold,...
        --tree core=/tmp/lab-without/tree --tree core+0011=/tmp/lab-patched/tree
        [--site NAME=DIR] [--cache-of NAME=OTHER]
        [--deep-gemm-keys] [--max-num-batched-tokens 8192] [--json FILE]

Each run is a fresh process (``--one``) that builds DeepSeek V4 Flash's target and MTP
draft models on the GPU inside an active ``JitWarmupRegistry`` (as the runner's
``load_model`` does; :func:`dsv4warmup.registry.mhc.on_cuda`, attention and MoE stubbed)
and times the registry's real ``warmup()``: the mHC TileLang kernels, which hold every
TileLang key of the deployment. ``TREE:cold`` starts on an empty TileLang cache folder
of that tree's own; ``TREE:warm`` reuses the folder its last cold run filled (a second
start). Triton's cache is a fresh folder in every run, so each run compiles the same
Triton keys (the model's few Triton kernels); the TileLang compiles are what differs
between trees whose patches change how TileLang keys compile. Printed per run: the
registry warmup's seconds, TileLang binaries built and read from disk, and the
TileLang version; then the median per tree and kind.

``--site NAME=DIR`` puts ``DIR`` (e.g. a TileLang with a change applied) first on
``PYTHONPATH`` of tree ``NAME``'s runs; ``--cache-of NAME=OTHER`` gives ``NAME`` the
TileLang cache folder of tree ``OTHER``, so a warm run of one reads what the other
built (a run that builds nothing there computed the same cache keys); a cold run
of either empties the folder both use.

``--deep-gemm-keys``: vLLM is told DeepGEMM is there, so the keys are a DeepGEMM
deployment's (the mHC pre epilogues at each DeepGEMM split count), as the report's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULT_PREFIX = "result: "


def one_run(deep_gemm: bool, max_tokens: int) -> dict[str, Any]:
    """The registry warmup of this process's tree, with the caches the
    environment names (run in a fresh process)."""
    sys.path[:0] = [str(REPO / "scripts"), str(REPO / "tests" / "gpu")]
    import tilelang
    import torch
    from compile_counters import builds
    from dsv4warmup.registry import mhc
    from dsv4warmup.serving import FLASH

    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    cfg = FLASH.replace(max_num_batched_tokens=max_tokens, sm_count=sm_count)
    with mhc.deployment_on_cuda(cfg, deep_gemm) as (_, _, registry), builds() as counts:
        start = time.perf_counter()
        registry.warmup()
        seconds = time.perf_counter() - start
    tilelang_built = sum(n for (be, _, disk), n in counts.items() if be == "tilelang" and not disk)
    tilelang_read = sum(n for (be, _, disk), n in counts.items() if be == "tilelang" and disk)
    triton = sum(n for (be, _, _), n in counts.items() if be == "triton")
    return {
        "seconds": round(seconds, 2),
        "tilelang_built": tilelang_built,
        "tilelang_read": tilelang_read,
        "triton_compiles": triton,
        "tilelang": tilelang.__version__,
    }


def _run(tree: Path, site: str | None, cache: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ)
    first = f"{site}:{tree}" if site else str(tree)
    env["PYTHONPATH"] = f"{first}:{env.get('PYTHONPATH', '')}"
    env["DSV4_VLLM_TREE"] = str(tree)
    env["TILELANG_CACHE_DIR"] = str(cache)
    env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-triton-")
    cmd = [
        sys.executable,
        __file__,
        "--one",
        "--max-num-batched-tokens",
        str(args.max_num_batched_tokens),
    ]
    if args.deep_gemm_keys:
        cmd.append("--deep-gemm-keys")
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.run_timeout)
    wall = time.perf_counter() - start
    shutil.rmtree(env["TRITON_CACHE_DIR"], ignore_errors=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
        raise SystemExit(f"run on {tree} failed (exit {proc.returncode})")
    result = json.loads(lines[-1][len(RESULT_PREFIX) :])
    result["process_wall"] = round(wall, 2)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--tree", action="append", default=[], help="NAME=PATH of a tree")
    ap.add_argument("--site", action="append", default=[], help="NAME=DIR first on PYTHONPATH")
    ap.add_argument("--cache-of", action="append", default=[], help="NAME=OTHER: OTHER's cache")
    ap.add_argument("--runs", default="", help="NAME:cold|warm, comma-separated, in order")
    ap.add_argument("--deep-gemm-keys", action="store_true")
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--run-timeout", type=int, default=600)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        result = one_run(args.deep_gemm_keys, args.max_num_batched_tokens)
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return

    trees = dict(entry.split("=", 1) for entry in args.tree)
    sites = dict(entry.split("=", 1) for entry in args.site)
    shared = dict(entry.split("=", 1) for entry in args.cache_of)
    if not set(sites) | set(shared) | set(shared.values()) <= set(trees) or set(shared) & set(
        shared.values()
    ):
        raise SystemExit("--site and --cache-of name trees given with --tree (one level deep)")
    caches = {
        name: Path(tempfile.mkdtemp(prefix=f"bench-tilelang-{i}-"))
        for i, name in enumerate(trees)
        if name not in shared
    }
    caches.update({name: caches[other] for name, other in shared.items()})
    keys = "DeepGEMM keys" if args.deep_gemm_keys else "TileLang GEMM keys"
    print(f"# {keys}, max_num_batched_tokens {args.max_num_batched_tokens}, {os.cpu_count()} CPUs")
    results: list[dict[str, Any]] = []
    for run in filter(None, args.runs.split(",")):
        name, kind = run.split(":")
        if kind == "cold":
            shutil.rmtree(caches[name])
            caches[name].mkdir()
        elif kind != "warm":
            raise SystemExit(f"unknown run kind {kind!r}")
        run_result = _run(Path(trees[name]), sites.get(name), caches[name], args)
        result = {"tree": name, "kind": kind, **run_result}
        results.append(result)
        print(
            f"{name:>12} {kind:<4} registry warmup {result['seconds']:7.2f} s "
            f"(process {result['process_wall']:.1f} s); TileLang built {result['tilelang_built']}, "
            f"read {result['tilelang_read']}; Triton compiles {result['triton_compiles']}; "
            f"tilelang {result['tilelang']}",
            flush=True,
        )
    print("# median registry warmup seconds")
    for name in trees:
        for kind in ("cold", "warm"):
            values = [r["seconds"] for r in results if r["tree"] == name and r["kind"] == kind]
            if values:
                print(
                    f"{name:>12} {kind:<4} {statistics.median(values):7.2f} s over {len(values)} run(s)"
                )
    if args.json:
        args.json.write_text(json.dumps({"keys": keys, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
