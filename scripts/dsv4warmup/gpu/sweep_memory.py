"""GPU memory over the sparse-MLA call-site sweep (GPU; run by hand).

    python scripts/dsv4warmup/gpu/sweep_memory.py [--max-model-len N] [--every K]
        [--warmup] [--no-sync] [--max-batches N] [--census-at I]
        [--memory-fraction F]

Steps ``callsites.sparse_mla.Runner`` through the sweep the GPU test uses and
prints allocated / peak CUDA memory every K batches. The flash sweeps ran out
of the H200's memory under compute-sanitizer memcheck (only there), so the
first time more than 1 GiB is still held after a batch it says what holds it:
the live CUDA tensors by shape, which frames outlived their calls and what
holds them, and whether a ``gc.collect()`` frees them (garbage in reference
cycles). ``--census-at`` asks for the same census at a fixed batch, to compare
a run under the sanitizer with one without.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

GIB = 2.0**30


def live_cuda_tensors() -> list[Any]:
    import torch

    out = []
    for obj in gc.get_objects():
        try:
            if isinstance(obj, torch.Tensor) and obj.is_cuda:
                out.append(obj)
        except Exception:  # objects whose isinstance check raises (lazy proxies)
            continue
    return out


def describe_holders(tensors: list[Any]) -> None:
    """Print the live CUDA tensors by (shape, dtype), then what keeps them
    alive (:func:`describe_retention`)."""
    census: Counter[tuple[str, str]] = Counter()
    for t in tensors:
        census[(str(tuple(t.shape)), str(t.dtype))] += t.untyped_storage().nbytes()
    print(f"  {len(tensors)} live CUDA tensors; biggest groups (bytes of storage):")
    for (shape, dtype), nbytes in census.most_common(8):
        print(f"    {nbytes / GIB:8.3f} GiB  {shape} {dtype}")
    tensors.clear()  # the census must not be one of the holders it reports
    describe_retention()


def _where(frame: Any) -> str:
    code = frame.f_code
    return f"{Path(code.co_filename).name}:{frame.f_lineno} {code.co_name}"


def _label(obj: Any) -> str:
    """A short description of a referrer: its type and what it is."""
    import types

    kind = type(obj).__name__
    if isinstance(obj, types.FrameType):
        return f"frame {_where(obj)}"
    if isinstance(obj, types.TracebackType):
        return f"traceback -> {_where(obj.tb_frame)}"
    if isinstance(obj, BaseException):
        return f"{kind}: {str(obj)[:120]!r}"
    if isinstance(obj, dict):
        return f"dict keys={list(obj)[:6]!r}"[:200]
    if isinstance(obj, (list, tuple, set)):
        items = list(obj)[:4]
        return f"{kind} len={len(obj)} of {[type(i).__name__ for i in items]}"
    if isinstance(obj, (types.FunctionType, types.MethodType)):
        return f"{kind} {getattr(obj, '__qualname__', '?')}"
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__}"
    if isinstance(obj, type):
        return f"class {obj.__qualname__}"
    return f"{kind} ({type(obj).__module__})"


def describe_retention(depth: int = 7) -> None:
    """Where the frames that outlived their calls come from, which exceptions
    and tracebacks are alive, and the referrer chain (depth levels, skipping
    this census's own objects) of one retained frame. Also the process-wide
    hooks that can keep frames: trace/profile functions and sys.monitoring
    tools."""
    import os
    import types

    current = set()
    f: Any = sys._getframe()
    while f is not None:
        current.add(id(f))
        f = f.f_back
    objects = gc.get_objects()
    retained = [o for o in objects if isinstance(o, types.FrameType) and id(o) not in current]
    exceptions = [o for o in objects if isinstance(o, BaseException)]
    tracebacks = sum(isinstance(o, types.TracebackType) for o in objects)
    del objects
    by_location = Counter(_where(fr) for fr in retained)
    print(f"  {len(retained)} frames outside the current stack; by code location:")
    for where, n in by_location.most_common(10):
        print(f"    {n:6d}  {where}")
    print(f"  {len(exceptions)} live exceptions, {tracebacks} tracebacks; by type and text:")
    for text, n in Counter(_label(e) for e in exceptions).most_common(8):
        print(f"    {n:6d}  {text}")
    monitoring = getattr(sys, "monitoring", None)
    tools = [] if monitoring is None else [monitoring.get_tool(i) for i in range(6)]
    print(f"  sys.gettrace()={sys.gettrace()!r} sys.getprofile()={sys.getprofile()!r}")
    print(f"  sys.monitoring tools={tools!r}")
    env = sorted(
        k
        for k in os.environ
        if any(s in k for s in ("CUDA", "NV", "SANITIZER", "PRELOAD", "TORCH", "TRITON"))
    )
    print(f"  environment: {env}")
    exceptions.clear()
    if not retained:
        return
    # Walk up from the most common retained location, one referrer per level
    # (the first that is not this census's own bookkeeping).
    common = by_location.most_common(1)[0][0]
    obj: Any = next(fr for fr in retained if _where(fr) == common)
    retained.clear()
    own = {id(sys._getframe())}  # this frame holds obj; the lists above are emptied
    for level in range(depth):
        referrers = gc.get_referrers(obj)
        own.add(id(referrers))
        # Holders before callees: a frame's other referrers are the frames
        # it called (their f_back), which lead down, not out.
        others = sorted(
            (r for r in referrers if id(r) not in own),
            key=lambda r: isinstance(r, types.FrameType),
        )
        print(f"    level {level}: {_label(obj)}  <- {len(others)} referrer(s)")
        for r in others[:5]:
            print(f"        {_label(r)}")
        if not others:
            break
        obj = others[0]
        del referrers, others


def main() -> int:
    import torch
    from dsv4warmup.legacy import sparse_mla as callsites
    from dsv4warmup.serving import FLASH

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument(
        "--warmup",
        action="store_true",
        help="run the sparse-MLA warmup first, as the GPU test does",
    )
    parser.add_argument(
        "--no-sync",
        action="store_true",
        help="synchronize only at the end, as test_sweep_after_warmup_compiles_nothing does",
    )
    parser.add_argument("--max-batches", type=int, default=None)
    parser.add_argument(
        "--census-at",
        type=int,
        default=None,
        help="also describe what holds memory after this batch (to compare runs)",
    )
    parser.add_argument(
        "--memory-fraction",
        type=float,
        default=None,
        help="cap this process's CUDA memory (a leak then fails early, sparing neighbours)",
    )
    args = parser.parse_args()

    if args.memory_fraction:
        torch.cuda.set_per_process_memory_fraction(args.memory_fraction)
    cfg = FLASH.replace(max_model_len=args.max_model_len)
    if args.warmup:
        from vllm.model_executor.warmup.sparse_mla_triton_warmup import (
            deepseek_v4_sparse_mla_key_warmup,
        )

        deepseek_v4_sparse_mla_key_warmup(*callsites.key_warmup_args(cfg))
        print(f"after warmup {torch.cuda.memory_allocated() / GIB:.2f} GiB")
    runner = callsites.Runner(cfg, device="cuda")
    batches = callsites.sweep(cfg)[: args.max_batches]
    baseline = torch.cuda.memory_allocated()
    print(f"{len(batches)} batches; after set-up {baseline / GIB:.2f} GiB", flush=True)
    described = False
    with callsites.no_attention_kernels("cuda"):
        for i, batch in enumerate(batches):
            if not args.no_sync:
                torch.cuda.reset_peak_memory_stats()
            try:
                runner.step(batch)
                if not args.no_sync:
                    torch.cuda.synchronize()
            except torch.OutOfMemoryError as exc:
                print(f"batch {i} out of memory: {batch}\n{str(exc)[:300]}")
                describe_holders(live_cuda_tensors())
                return 1
            now = torch.cuda.memory_allocated()
            peak = torch.cuda.max_memory_allocated() / GIB
            first_growth = now - baseline > GIB and not described
            census = i == args.census_at or first_growth
            if i % args.every == 0 or peak > 4 or census:
                print(
                    f"batch {i}: allocated {now / GIB:.2f} GiB, peak {peak:.2f} GiB  {batch}"[:400],
                    flush=True,
                )
            if census:
                described = described or first_growth
                describe_holders(live_cuda_tensors())
                gc.collect()
                after = torch.cuda.memory_allocated()
                print(f"  after gc.collect(): {after / GIB:.2f} GiB", flush=True)
    torch.cuda.synchronize()
    print(f"sweep done; allocated {torch.cuda.memory_allocated() / GIB:.2f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
