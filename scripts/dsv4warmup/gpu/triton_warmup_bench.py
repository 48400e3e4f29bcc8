"""Cold- and warm-disk-cache cost of the Triton warmups (GPU; run by hand).

    python scripts/dsv4warmup/gpu/triton_warmup_bench.py [--cache-dir DIR]

Runs each group's start-up warmup for the report's configuration (DeepSeek V4
Flash, MTP k=1, max_num_seqs 256, block 256) in a child process twice: first
with an empty Triton cache directory (cold), then with the one it filled
(warm), and prints keys compiled and seconds per group.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def child(group: str) -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    import torch
    from dsv4warmup.serving import FLASH
    from triton.runtime.jit import JITFunction

    compiled: list[str] = []
    original = JITFunction._do_compile

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        compiled.append(self.fn.__name__)
        return original(self, *args, **kwargs)

    JITFunction._do_compile = counting  # type: ignore[method-assign]
    torch.zeros(1, device="cuda")  # CUDA context outside the timing
    start = time.perf_counter()
    if group == "spec_decode":
        from dsv4warmup.legacy import spec_decode
        from vllm.model_executor.warmup.triton_specialization import compile_triton_warmup

        compile_triton_warmup("spec decode", spec_decode.warmup_launches(FLASH))
    else:
        from dsv4warmup.legacy import sparse_mla
        from vllm.model_executor.warmup.sparse_mla_triton_warmup import (
            deepseek_v4_sparse_mla_key_warmup,
        )

        deepseek_v4_sparse_mla_key_warmup(*sparse_mla.key_warmup_args(FLASH))
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    by_kernel: dict[str, int] = {}
    for name in compiled:
        by_kernel[name] = by_kernel.get(name, 0) + 1
    print(json.dumps({"group": group, "seconds": round(seconds, 2), "compiled": by_kernel}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", choices=("spec_decode", "sparse_mla"))
    parser.add_argument("--cache-dir", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="triton-bench-"))
    print(
        f"Triton cache: {cache} (VLLM_TRITON_JIT_WARMUP_NUM_THREADS="
        f"{os.environ.get('VLLM_TRITON_JIT_WARMUP_NUM_THREADS', '4')})"
    )
    print(f"{'group':<12} {'cache':<5} {'keys':>5} {'seconds':>8}  per kernel")
    for group in ("spec_decode", "sparse_mla"):
        for label in ("cold", "warm"):
            env = dict(os.environ, TRITON_CACHE_DIR=str(cache / group))
            res = subprocess.run(
                [sys.executable, __file__, "--child", group],
                env=env,
                capture_output=True,
                text=True,
            )
            if res.returncode != 0:
                print(f"{group} {label}: failed\n{res.stderr[-3000:]}")
                continue
            row = json.loads(res.stdout.strip().splitlines()[-1])
            keys = sum(row["compiled"].values())
            print(f"{group:<12} {label:<5} {keys:>5} {row['seconds']:>8.2f}  {row['compiled']}")


if __name__ == "__main__":
    main()
