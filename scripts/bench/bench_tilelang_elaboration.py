"""TileLang elaboration cost of the mHC warmup keys, as is and with TileLang's
``mutate()`` memoized by code object (CPU; by hand).

    PYTHONPATH=<0.33.0 tree>:scripts:<tilelang> python scripts/bench/bench_tilelang_elaboration.py

On a warm disk cache the TileLang warmup still elaborates every key (its disk
cache key is the ``PrimFunc``'s script), on the warming thread, one key after
another: that is most of a warm start's TileLang time. ``T.reduce_*`` in
TileLang 0.1.12 defines its ``@T.macro`` inside the call, so every reduction of
every elaboration parses, rewrites and compiles the macro's source again
(``tilelang/language/eager/reduce_op.py``, ``ast.mutate``). The ``memoized``
run caches ``mutate()``'s rewritten code per code object and binds the closure
afresh each call (what a TileLang fix would do); it must give the same
``PrimFunc`` scripts, i.e. the same disk cache keys. Printed: seconds per key
(median of the rounds after the first) for both, and whether the scripts match.
Keys: DeepSeek V4 Flash's ``mhc_pre_big_fuse`` (hidden 4096, hc_mult 4) at
``n_splits`` 16 and 8, broadcast or not.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from typing import Any


def _memoize_mutate() -> None:
    from tilelang.language.eager import ast as tl_ast
    from tilelang.language.eager import builder as tl_builder

    rewritten: dict[Any, tuple[Any, str, Any]] = {}

    def mutate(func: Any) -> Any:
        nonlocals = tl_ast.utils.get_func_nonlocals(func)
        hit = rewritten.get(func.__code__)
        if hit is None:
            filename = tl_ast.inspect.getsourcefile(func) or tl_ast.inspect.getfile(func)
            mutator = tl_ast.DSLMutator(nonlocals, func.__globals__, tl_ast.Path(filename).name)
            tree = mutator.visit(tl_ast.utils.get_ast(func))
            make_closure = tl_ast.utils.get_compiled_object(
                tree, "make_closure", filename, func.__globals__
            )
            hit = (make_closure, tl_ast.ast.unparse(tree), mutator.extra_type_hints)
            rewritten[func.__code__] = hit
        make_closure, source, hints = hit
        return tl_ast.IRGenerator(
            gen=make_closure(**nonlocals), source=source, extra_type_hints=hints
        )

    tl_ast.mutate = mutate
    tl_builder.mutate = mutate


def flash_pre_big_fuse_key(n_splits: int, broadcast: bool) -> Any:
    """A DeepSeek V4 Flash ``mhc_pre_big_fuse`` compile key (hidden 4096,
    hc_mult 4); vLLM's platform must be set up before."""
    from vllm.model_executor.kernels.mhc import tilelang_kernels as tk

    return tk.MhcPreBigFuseTileLangKernel.CompileKey(
        hidden_size=4096,
        hc_mult=4,
        n_splits=n_splits,
        use_norm_weight=True,
        is_broadcast=broadcast,
        rms_eps=1e-6,
        hc_pre_eps=1e-6,
        hc_sinkhorn_eps=1e-6,
        hc_post_mult_value=2.0,
        sinkhorn_repeat=20,
        norm_eps=1e-6,
    )


def elaborate(rounds: int) -> dict[str, Any]:
    """Elaborate the keys ``rounds`` times in this process (no compile)."""
    from dsv4warmup.registry import platform

    platform.install(platform.H200)
    from vllm.model_executor.kernels.mhc import tilelang_kernels as tk
    from vllm.model_executor.warmup import jit_warmup_tilelang_helper as helper

    owner = tk._MHC_PRE_BIG_FUSE_TILELANG_KERNEL
    keys = [
        flash_pre_big_fuse_key(n_splits, broadcast)
        for broadcast in (False, True)
        for n_splits in (16, 8)
    ]
    seconds: list[list[float]] = []
    scripts: list[str] = []

    def elaborate_only(jit_impl: Any, *args: Any, **kwargs: Any) -> None:
        start = time.perf_counter()
        prim_func = jit_impl.get_tir(*args, **kwargs)
        seconds[-1].append(time.perf_counter() - start)
        scripts.append(hashlib.sha256(prim_func.script().encode()).hexdigest())

    helper.compile_tilelang = elaborate_only
    for _ in range(rounds):
        seconds.append([])
        owner.compile_many(keys)
    per_key = [s for r in seconds[1:] for s in r] or seconds[0]
    return {
        "keys": len(keys),
        "first_round_s": sum(seconds[0]),
        "median_per_key_s": statistics.median(per_key),
        "scripts": scripts[: len(keys)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--child", choices=("as-is", "memoized"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.child == "memoized":
            _memoize_mutate()
        print(json.dumps(elaborate(args.rounds)))
        return
    runs = {}
    for mode in ("as-is", "memoized"):
        res = subprocess.run(
            [sys.executable, __file__, "--child", mode, "--rounds", str(args.rounds)],
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode != 0:
            sys.exit(f"error: {mode}: exit {res.returncode}\n{res.stderr[-3000:]}")
        runs[mode] = json.loads(res.stdout.strip().splitlines()[-1])
    print("| TileLang mutate() | keys | first round s | median s per key (later rounds) |")
    print("|---|---|---|---|")
    for mode, r in runs.items():
        print(f"| {mode} | {r['keys']} | {r['first_round_s']:.3f} | {r['median_per_key_s']:.4f} |")
    same = runs["as-is"]["scripts"] == runs["memoized"]["scripts"]
    print(f"PrimFunc scripts (the disk cache keys) identical: {same}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
