"""Bake the report's deployment's JIT warmup caches on a CPU-only machine, as a
CPU-only image builder would, with a 0.34.0 tree's real registries.

The registrations are those of the sparse-MLA, spec-decode and (unless
``--no-tilelang``) mHC groups of ``FLASH`` on Model Runner V2 (the mHC keys of
a deployment without DeepGEMM, or with it: ``--deep-gemm-keys``), made by the
same drivers the GPU tests use (:mod:`dsv4warmup.gpu.serving_start`); then each
registry's real ``warmup()`` compiles:

* Triton through its own compiler and ptxas, its driver answering for an
  sm_90 GPU (:func:`.lifecycle.cpu_triton_driver`, plus the current stream a
  compile-only launch asks for);
* TileLang for ``TILELANG_DEFAULT_TARGET`` (set it to
  ``{"kind": "cuda", "arch": "sm_90a"}``), with the CUDA toolkit's nvcc.

Nothing launches. The binaries go to the default caches under ``HOME``
(``~/.triton/cache``, ``~/.tilelang/cache``), what a server with no cache
variable reads once patch 0013 is applied. Bake at the absolute path the
server will read from: a Triton cache entry lists its files by absolute path.

``python -m dsv4warmup.registry.cpu_bake [--no-tilelang | --deep-gemm-keys]
[--key-log FILE [--keys-only]] [--compile-factors-first]`` in an interpreter
that imports the tree, with the server's Python, Triton and TileLang (Triton's
key hashes its installed binary, one per Python); prints one JSON line (builds
and disk reads per backend, seconds).
``--key-log`` logs every part of every cache key (:mod:`.cache_keys`);
``--keys-only`` logs the TileLang group's keys and builds nothing.
``--compile-factors-first`` computes, untimed, what a serving start with
torch.compile computes before its JIT warmup: the compiler's cache factors
(``VllmBackend`` names the compile cache folder by them), which include
Triton's ``triton_key()``, a hash of its installed binary paid once per process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]


def registries(
    tilelang: bool, triton: bool = True, deep_gemm: bool = False
) -> list[tuple[Any, contextlib.AbstractContextManager[Any]]]:
    """``(registry, context its warmup runs in)`` per group, registrations
    made; ``triton=False`` leaves out the Triton-only groups; ``deep_gemm``:
    the mHC keys of a deployment with DeepGEMM (the report's)."""
    from dsv4warmup.serving import FLASH

    from . import engine, lifecycle, mhc, sparse_mla, spec_decode

    # sparse-MLA first: its layers ask whether CuTeDSL exists (cached), which
    # the other drivers' stand-ins would answer.
    model = sparse_mla.build_model(FLASH, "v2")
    out: list[tuple[Any, contextlib.AbstractContextManager[Any]]] = []
    if triton:
        out += [
            (sparse_mla.warm_registry(model.vllm_config, "v2"), contextlib.nullcontext()),
            (
                spec_decode.warm_registry(spec_decode.vllm_config(FLASH, "v2"), "v2"),
                contextlib.nullcontext(),
            ),
        ]
    if tilelang:
        # As mhc.deployment_on_cuda(cfg, deep_gemm) on the GPU.
        with mhc.deep_gemm_env(deep_gemm):
            with lifecycle.selected("v2"):
                config = engine.vllm_config(FLASH)
            registry = lifecycle.warm_registry(config, "v2", mhc.register)
        stack = contextlib.ExitStack()
        stack.enter_context(mhc.deep_gemm_env(deep_gemm))
        stack.enter_context(mhc._device())
        out.append((registry, stack))
    return out


def bake(
    tilelang: bool,
    key_log: Path | None = None,
    keys_only: bool = False,
    deep_gemm: bool = False,
    compile_factors_first: bool = False,
) -> dict[str, Any]:
    import os

    if sys.version_info < (3, 11, 8):
        # Concurrent ast.parse fails on older 3.11 ("AST constructor recursion
        # depth mismatch", CPython gh-106905): compile Triton keys serially.
        os.environ.setdefault("VLLM_TRITON_JIT_WARMUP_NUM_THREADS", "1")
    sys.path.insert(0, str(REPO / "tests" / "gpu"))
    from compile_counters import builds, totals

    from . import cache_keys, lifecycle

    # Keys only: the TileLang group, nothing built (Triton computes its key
    # only on the way to a build).
    groups = registries(tilelang, triton=not keys_only, deep_gemm=deep_gemm)
    if compile_factors_first:
        from vllm.compilation.compiler_interface import InductorAdaptor

        InductorAdaptor(use_aot_compile=False).compile_factors(groups[0][0].vllm_config)
    began = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(lifecycle.cpu_triton_driver())
        counts = stack.enter_context(builds())
        if key_log is not None:
            stack.enter_context(cache_keys.record(key_log, build=not keys_only))
        for registry, context in groups:
            with context:
                registry.warmup()
    out: dict[str, Any] = {"seconds": round(time.perf_counter() - began, 2)}
    out.update(totals(counts))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-tilelang", action="store_true", help="Triton groups only")
    parser.add_argument(
        "--key-log",
        type=Path,
        help="a JSON-lines file: the parts of every cache key (dsv4warmup.registry.cache_keys)",
    )
    parser.add_argument(
        "--keys-only",
        action="store_true",
        help="with --key-log: log the TileLang group's keys, build nothing",
    )
    parser.add_argument(
        "--deep-gemm-keys",
        action="store_true",
        help="the mHC keys of a deployment with DeepGEMM (the report's)",
    )
    parser.add_argument(
        "--compile-factors-first",
        action="store_true",
        help="first compute (untimed) the compiler factors a torch.compile start hashes",
    )
    args = parser.parse_args(argv)
    if args.keys_only and (args.key_log is None or args.no_tilelang):
        parser.error("--keys-only needs --key-log and the TileLang group")
    if args.deep_gemm_keys and args.no_tilelang:
        parser.error("--deep-gemm-keys needs the TileLang group")
    result = bake(
        not args.no_tilelang,
        args.key_log,
        args.keys_only,
        args.deep_gemm_keys,
        args.compile_factors_first,
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
