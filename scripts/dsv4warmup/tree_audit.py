"""The key-coverage audit of the vLLM tree importable in this interpreter.

Runs inside a tree's interpreter (``python -m dsv4warmup.tree_audit``, started
by :func:`dsv4warmup.audit.rows_for_tree`): the registry-era drivers
(:mod:`dsv4warmup.registry`) for 0.33.0 and later, one kernel group per call; the
frozen legacy drivers (:mod:`dsv4warmup.legacy`) for 0.25.1 and 0.26.0.
Prints the rows as JSON on its last line.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .generation import tree_is_registry_era
from .rows import Row
from .serving import FLASH, ServingConfig

# The legacy drivers' kernel groups (0.25.1 / 0.26.0).
GROUPS = ("spec_decode", "sparse_mla", "mhc")


def rows_for(
    cfg: ServingConfig,
    group: str | None = None,
    runner_fails: Callable[[str, BaseException], bool] | None = None,
) -> list[Row]:
    """Audit the vLLM tree importable in this process (registry era: one kernel
    group; ``runner_fails`` as in :func:`dsv4warmup.registry.audit.rows_for`)."""
    if tree_is_registry_era(Path(os.environ.get("DSV4_VLLM_TREE", "."))):
        from .registry import audit as registry_audit

        return registry_audit.rows_for(cfg, None if group is None else (group,), runner_fails)
    rows: list[Row] = []
    for group in GROUPS:
        mod: Any = importlib.import_module(f"dsv4warmup.legacy.{group}")
        runtime = mod.runtime_keys(cfg)
        warm = mod.warmup_keys(cfg)
        for kernel in sorted(set(runtime) | set(getattr(mod, "KERNELS", ())) | set(warm)):
            rt, wk = set(runtime.get(kernel, ())), set(warm.get(kernel, ()))
            rows.append(Row(kernel, len(rt), len(wk), len(rt - wk), len(wk - rt), group))
    return rows


def main() -> None:  # subprocess entry: rows of the importable tree as JSON
    overrides = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    # JSON has no tuples: ServingConfig's sequence fields are (hashable) tuples
    overrides = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    cfg = FLASH.replace(**overrides) if overrides else FLASH
    rows = rows_for(cfg, sys.argv[2] if len(sys.argv) > 2 else None)
    sys.stdout.write("\n" + json.dumps([r.as_dict() for r in rows]) + "\n")


if __name__ == "__main__":
    main()
