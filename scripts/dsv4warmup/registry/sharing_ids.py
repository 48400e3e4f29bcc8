"""The ids patch 0010 gathers from each rank for a deployment's registry (CPU).

    python -m dsv4warmup.registry.sharing_ids <flash|pro>

Collects the JIT warmup registrations ``vllm warmup-kernels`` would warm for the
deployment (the tree's CLI on CPU, platform answering as an H200, ``--dry-run``)
and prints one JSON list: per kernel, its name and the id
``jit_warmup_sharing._item_ids`` gives it, or null where its backend is not
shared (the registry's own ``jit_backend``). Every Triton and TileLang kernel
writes one stand-in cache directory here, so two processes print equal ids
exactly where their rank processes would share the kernel's compiles.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from dsv4warmup.serving import FLASH, PRO

from . import cpu_cli, engine, prewarm


def item_ids(variant: str) -> list[tuple[str, Any]]:
    with cpu_cli.cpu_hosted_gpu():
        from vllm.model_executor.warmup import jit_warmup_sharing
        from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry

        collected: list[Any] = []
        warmup_keys = JitWarmupRegistry.warmup_keys

        def keep(self: Any) -> Any:
            items = warmup_keys(self)
            collected.extend(items)
            return items

        JitWarmupRegistry.warmup_keys = keep  # type: ignore[method-assign]
        cfg = FLASH if variant == "flash" else PRO
        model = str(engine.model_dir(cfg))
        answer = prewarm.run_cli(["warmup-kernels", *prewarm.serve_flags(cfg, model), "--dry-run"])
        if answer["exit_code"] not in (0, None):
            raise RuntimeError(answer["stderr"][-3000:])
        shared_cache_dir = jit_warmup_sharing.shared_cache_dir
        jit_warmup_sharing.shared_cache_dir = lambda b: "cache" if b else None
        try:
            ids = jit_warmup_sharing._item_ids(collected, jit_warmup_sharing.jit_backend)
        finally:
            jit_warmup_sharing.shared_cache_dir = shared_cache_dir
        return [
            (type(kernel).__qualname__, i) for (kernel, _), i in zip(collected, ids, strict=True)
        ]


def main(argv: list[str]) -> None:
    (variant,) = argv
    print(json.dumps(item_ids(variant)))


if __name__ == "__main__":
    main(sys.argv[1:])
