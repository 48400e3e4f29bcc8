"""GPU memory over the sparse-MLA call-site sweep (GPU; run by hand).

    python scripts/dsv4warmup/gpu/sweep_memory.py [--max-model-len N] [--every K] [--warmup]

Steps ``callsites.sparse_mla.Runner`` through the sweep the GPU test uses and
prints allocated / peak CUDA memory every K batches, and the batch and memory
when an allocation fails: the flash-4k sweep ran out of the H200's memory under
compute-sanitizer, which a leak in the harness or one oversized batch explains.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


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
    args = parser.parse_args()

    cfg = FLASH.replace(max_model_len=args.max_model_len)
    gib = 2.0**30
    if args.warmup:
        from vllm.model_executor.warmup.sparse_mla_triton_warmup import (
            deepseek_v4_sparse_mla_key_warmup,
        )

        deepseek_v4_sparse_mla_key_warmup(callsites.warmup_vllm_config(cfg))
        print(f"after warmup {torch.cuda.memory_allocated() / gib:.2f} GiB")
    runner = callsites.Runner(cfg, device="cuda")
    batches = callsites.sweep(cfg)
    print(f"{len(batches)} batches; after set-up {torch.cuda.memory_allocated() / gib:.2f} GiB")
    with callsites.no_attention_kernels("cuda"):
        for i, batch in enumerate(batches):
            torch.cuda.reset_peak_memory_stats()
            try:
                runner.step(batch)
                torch.cuda.synchronize()
            except torch.OutOfMemoryError as exc:
                print(f"batch {i} out of memory: {batch}\n{str(exc)[:300]}")
                return 1
            peak = torch.cuda.max_memory_allocated() / gib
            if i % args.every == 0 or peak > 4:
                now = torch.cuda.memory_allocated() / gib
                print(
                    f"batch {i}: allocated {now:.2f} GiB, step peak {peak:.2f} GiB  {batch}"[:400]
                )
    print("sweep done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
