"""Warm registry warmup on caches baked on this CPU-only machine, TileLang 0.1.15
as released vs with a TileLang change applied (CPU; by hand).

    PYTHONPATH=scripts python scripts/bench/bench_cpu_bake_warm_start.py \\
        [--patch patches/tilelang/v0.1.15/0001-*.patch] [--rounds 3] [--deep-gemm-keys] \\
        [--compile-factors-first]

The patched 0.34.0 tree's registrations of the report's deployment (the
sparse-MLA, spec-decode and mHC groups, :mod:`dsv4warmup.registry.cpu_bake`; the
mHC keys without DeepGEMM, or with it: ``--deep-gemm-keys``)
are baked once for sm_90a with the released TileLang into a fresh ``HOME``; then
each round runs the whole registry warmup on that ``HOME`` with the released and
with the changed TileLang, one fresh process each. Both must read every key and
build none (the change keeps the cache keys); printed: each run's seconds and
counts, then the median per TileLang. ``--compile-factors-first``: each warm
run first computes, untimed, the compiler factors a torch.compile start
computes before its JIT warmup (Triton's ``triton_key()`` among them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _registry_warmup(site: Path, flags: list[str]) -> dict[str, Any]:
    """One ``cpu_bake`` process on ``HOME``: it builds what is missing and
    reads the rest."""
    from dsv4warmup import trees

    args = ["-m", "dsv4warmup.registry.cpu_bake", *flags]
    result: dict[str, Any] = trees.json_from_tree(
        trees.patched_tree("0.34.0"), *args, toolchain=[site]
    )
    return result


def main() -> None:
    from dsv4warmup import tilelang_site

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = next((REPO / "patches" / "tilelang" / "v0.1.15").glob("0001-*.patch"))
    ap.add_argument("--patch", type=Path, default=default)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--deep-gemm-keys", action="store_true")
    ap.add_argument("--compile-factors-first", action="store_true")
    args = ap.parse_args()
    bake_flags = ["--deep-gemm-keys"] if args.deep_gemm_keys else []
    warm_flags = bake_flags + (["--compile-factors-first"] if args.compile_factors_first else [])

    for name in ("TRITON_CACHE_DIR", "TILELANG_CACHE_DIR"):
        os.environ.pop(name, None)
    os.environ["TILELANG_DEFAULT_TARGET"] = '{"kind": "cuda", "arch": "sm_90a"}'
    sites = {
        "released": tilelang_site.site_for_version("0.1.15"),
        "changed": tilelang_site.patched_site("0.1.15", args.patch),
    }
    os.environ["HOME"] = tempfile.mkdtemp(prefix="bench-cpu-bake-")
    cold = _registry_warmup(sites["released"], bake_flags)
    print(f"bake, released TileLang: {cold}", flush=True)
    warm: dict[str, list[float]] = {name: [] for name in sites}
    for _ in range(args.rounds):
        for name, site in sites.items():
            result = _registry_warmup(site, warm_flags)
            print(f"warm, {name:>8} TileLang: {result}", flush=True)
            if result["tilelang_built"] or result["triton_built"]:
                raise SystemExit(f"the {name} TileLang built on a baked HOME: {result}")
            warm[name].append(result["seconds"])
    for name, seconds in warm.items():
        print(f"median warm registry warmup, {name:>8}: {statistics.median(seconds):.2f} s")


if __name__ == "__main__":
    main()
