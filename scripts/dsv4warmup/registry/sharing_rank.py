"""One rank of a CPU tensor-parallel group running the 0.33.0 JIT warmup
registry (patch 0010's shared cold compiles), for tests/cpu/test_v033_compile_sharing.py.

The registry warms as a rank of a gloo tensor-parallel group through the hook
``scripts/bench/bench_node_warmup.py`` runs on the GPU
(:func:`dsv4warmup.gpu.prewarm_runner.warm_as_a_tensor_parallel_rank`). The platform answers as an H200, and every Triton launch the
registry makes is built for sm90 with Triton's real compiler
(:func:`dsv4warmup.triton_keys.compile_launches_for_sm90`), so its disk cache
(``TRITON_CACHE_DIR``) and compile listener behave as on the GPU.

Writes one JSON object: the keys it warmed, what the registry counted as
compiled and loaded, and how many launches reached the compiler.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-model-len", type=int, default=4096)
    args = parser.parse_args(argv)

    from dsv4warmup.registry import platform

    platform.install(platform.H200)
    from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry
    from vllm.models.deepseek_v4.common.ops.cache_utils import (
        _COMBINE_TOPK_SWA_INDICES_KERNEL as combine,
    )

    from dsv4warmup.gpu.prewarm_runner import warm_as_a_tensor_parallel_rank
    from dsv4warmup.triton_keys import compile_launches_for_sm90

    # What CombineTopkSwaIndicesKernel.get_warmup_keys reads of a VllmConfig.
    hf_config = SimpleNamespace(index_topk=512, compress_ratios=[0, 4, 128], sliding_window=128)
    vllm_config = SimpleNamespace(
        model_config=SimpleNamespace(max_model_len=args.max_model_len, hf_config=hf_config),
        cache_config=SimpleNamespace(block_size=256),
        scheduler_config=SimpleNamespace(max_num_batched_tokens=8192),
    )
    keys = dict.fromkeys(combine.get_warmup_keys(vllm_config))
    start = time.perf_counter()
    # The GPU node bench's hook: the registry warms as a rank of the group.
    warm_as_a_tensor_parallel_rank(f"{args.rank}/{args.world}", args.store)
    with compile_launches_for_sm90() as built:
        counts = JitWarmupRegistry(vllm_config).warmup([(combine, keys)])
    result = {
        "rank": args.rank,
        "keys": len(keys),
        "compiled": counts.compiled.get("triton", 0),
        "loaded": counts.loaded.get("triton", 0),
        "built": len(built),
        "seconds": round(time.perf_counter() - start, 2),
    }
    args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
