"""A gloo tensor-parallel group of separate processes, for running 0.33.0's
JIT warmup registry as the ranks of one node run it (patch 0010 shares cold
compiles between them) without GPUs or a serving engine.

The world is joined through a file store; the tensor-parallel and pipeline
groups are vLLM's own ``GroupCoordinator`` on CPU (gloo) groups without
device communicators: the registry's gather and barrier are all that run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def tensor_parallel_group(rank: int, world: int, store: Path) -> Iterator[None]:
    """This process as rank ``rank`` of a ``world``-rank TP group (one stage)."""
    import torch.distributed as dist
    from vllm.distributed import parallel_state as ps

    dist.init_process_group("gloo", init_method=f"file://{store}", world_size=world, rank=rank)
    try:
        ps._TP = ps.GroupCoordinator([list(range(world))], rank, "gloo", False, group_name="tp")
        ps._PP = ps.GroupCoordinator(
            [[r] for r in range(world)], rank, "gloo", False, group_name="pp"
        )
        yield
    finally:
        ps._TP = ps._PP = None
        dist.destroy_process_group()


def parse(rank_of_world: str) -> tuple[int, int]:
    """``rank/world`` (the ``DSV4_TP_RANK`` variable) as two ints."""
    rank, _, world = rank_of_world.partition("/")
    if not (rank.isdigit() and world.isdigit() and int(rank) < int(world)):
        raise ValueError(f"not rank/world: {rank_of_world!r}")
    return int(rank), int(world)
