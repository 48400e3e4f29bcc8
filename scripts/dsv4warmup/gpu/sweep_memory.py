"""GPU memory over the sparse-MLA call-site sweep (GPU; run by hand).

    python scripts/dsv4warmup/gpu/sweep_memory.py [--max-model-len N] [--every K]
        [--warmup] [--no-sync] [--max-batches N] [--memory-fraction F]

Steps ``callsites.sparse_mla.Runner`` through the sweep the GPU test uses and
prints allocated / peak CUDA memory every K batches. The flash sweeps ran out
of the H200's memory under compute-sanitizer memcheck (only there), so the
first time more than 1 GiB is still held after a batch it says what holds it:
the live CUDA tensors by shape, what refers to the biggest, and whether a
``gc.collect()`` frees them (garbage in reference cycles).
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
    """Print the live CUDA tensors by (shape, dtype) and the referrer chain
    (types only, two levels) of the biggest one."""
    census: Counter[tuple[str, str]] = Counter()
    for t in tensors:
        census[(str(tuple(t.shape)), str(t.dtype))] += t.untyped_storage().nbytes()
    print(f"  {len(tensors)} live CUDA tensors; biggest groups (bytes of storage):")
    for (shape, dtype), nbytes in census.most_common(8):
        print(f"    {nbytes / GIB:8.3f} GiB  {shape} {dtype}")
    if not tensors:
        return
    biggest = max(tensors, key=lambda t: t.untyped_storage().nbytes())
    for level1 in gc.get_referrers(biggest)[:6]:
        names = [type(r).__name__ for r in gc.get_referrers(level1)[:6]]
        print(f"    held by {type(level1).__name__} <- {names}")


def main() -> int:
    import torch
    from dsv4warmup.callsites import sparse_mla as callsites
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

        deepseek_v4_sparse_mla_key_warmup(callsites.warmup_vllm_config(cfg))
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
            if i % args.every == 0 or peak > 4 or (now - baseline > GIB and not described):
                print(
                    f"batch {i}: allocated {now / GIB:.2f} GiB, peak {peak:.2f} GiB  {batch}"[:400],
                    flush=True,
                )
            if now - baseline > GIB and not described:
                described = True
                describe_holders(live_cuda_tensors())
                gc.collect()
                after = torch.cuda.memory_allocated()
                print(f"  after gc.collect(): {after / GIB:.2f} GiB", flush=True)
    torch.cuda.synchronize()
    print(f"sweep done; allocated {torch.cuda.memory_allocated() / GIB:.2f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
