# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Share a cold JIT warmup's compiles between the tensor-parallel ranks of a node.

The ranks of a tensor-parallel group register the same kernels with the same
compile keys and, on one node, usually read and write the same TileLang and
Triton disk caches. Each rank compiling every key builds every binary once per
rank, at the same time, on the same CPUs. Instead, each rank first compiles
its share of the keys whose disk cache it shares with other ranks, the group
waits until every share is built, and each rank then reads the others' shares
from the disk cache.

A kernel is shared only by ranks that hold it with the same compile keys and
write the same cache directory (same host, same inode: not two containers'
copies of one path). torch.compile gives each rank its own Triton cache unless
``TRITON_CACHE_DIR`` is set, so by default only TileLang keys are shared.
Whatever a rank does not find in the cache after the wait, it compiles itself.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KernelItems = list[tuple[Any, dict[Any, None]]]


@dataclass
class WarmupShares:
    """A rank's compiles before and after the group waits for every share."""

    first: KernelItems
    then: KernelItems = field(default_factory=list)
    # Waits until every rank of the group has compiled its share.
    wait: Callable[[], None] | None = None
    # Of the compile keys this rank shares with other ranks: its own share,
    # and all of them.
    num_own_keys: int = 0
    num_shared_keys: int = 0


def jit_backend(kernel: Any) -> str | None:
    """The compiler whose disk cache ``kernel`` writes on CUDA (``"triton"``,
    ``"tilelang"``), or None for kernels whose compiles are not shared."""
    from vllm.model_executor.warmup.offline_warmup import kernel_backend
    from vllm.platforms import current_platform

    if not current_platform.is_cuda():
        return None
    backend = kernel_backend(kernel)
    return backend if backend in ("triton", "tilelang") else None


def shared_cache_dir(backend: str | None) -> str | None:
    """Which directory ``backend`` writes compiled kernels to, as
    ``host:device:inode``; None if other processes cannot read them there."""
    try:
        if backend == "triton":
            from triton import knobs

            if knobs.compilation.always_compile:
                return None
            path = knobs.cache.dir
        elif backend == "tilelang":
            from tilelang import env as tilelang_env

            if not tilelang_env.is_cache_enabled():
                return None
            path = str(tilelang_env.TILELANG_CACHE_DIR)
        else:
            return None
        os.makedirs(path, exist_ok=True)
        stat = os.stat(path)
    except Exception:
        # Not installed, or no cache directory to write: nothing to share.
        return None
    return f"{socket.gethostname()}:{stat.st_dev}:{stat.st_ino}"


def _stable_repr(compile_key: Any) -> str:
    """A compile key as the same string in every rank's process.

    Triton-derived keys are described by their Triton cache keys: the JIT
    function's id and the device they also hold differ between processes.
    """
    jit_keys = getattr(compile_key, "jit_keys", None)
    if jit_keys is not None:
        return repr(sorted(repr(jit_key.cache_key) for jit_key in jit_keys))
    return repr(compile_key)


def _in_stable_order(compile_keys: dict[Any, None]) -> list[Any]:
    """The keys in an order every rank agrees on (a key set built from a set of
    strings is listed in another order in each process)."""
    return sorted(compile_keys, key=_stable_repr)


def _kernel_name(kernel: Any) -> str:
    """The kernel's class, or the function a decorator-made kernel wraps."""
    name = getattr(kernel, "__qualname__", None)
    if not isinstance(name, str):
        name = type(kernel).__qualname__
    return f"{getattr(kernel, '__module__', type(kernel).__module__)}.{name}"


# (cache directory, kernel type, number of keys, digest of the keys, occurrence)
ItemId = tuple[str, str, int, str, int]


def _item_ids(
    kernel_items: KernelItems, backend_of: Callable[[Any], str | None]
) -> list[ItemId | None]:
    """One id per kernel: equal on two ranks if they compile the same keys of
    the same kernel into the same cache directory; None if not shareable."""
    ids: list[ItemId | None] = []
    seen: dict[tuple[str, str, int, str], int] = defaultdict(int)
    cache_dirs: dict[str | None, str | None] = {}
    for kernel, compile_keys in kernel_items:
        backend = backend_of(kernel)
        if backend not in cache_dirs:
            cache_dirs[backend] = shared_cache_dir(backend)
        cache_dir = cache_dirs[backend]
        if cache_dir is None:
            ids.append(None)
            continue
        described = sorted(map(_stable_repr, compile_keys))
        digest = hashlib.sha256(repr(described).encode()).hexdigest()
        item = (cache_dir, _kernel_name(kernel), len(compile_keys), digest)
        # Two kernels of one class with the same keys stay two items.
        seen[item] += 1
        ids.append((*item, seen[item]))
    return ids


def _tp_group() -> Any | None:
    import torch.distributed

    from vllm.distributed import parallel_state

    if not (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and parallel_state.model_parallel_is_initialized()
    ):
        return None
    group = parallel_state.get_tp_group()
    return group if group.world_size > 1 else None


def share_compiles(
    kernel_items: KernelItems, backend_of: Callable[[Any], str | None]
) -> WarmupShares:
    """Split this rank's warmup into its share and the rest.

    A collective over the tensor-parallel group's CPU group when there is one:
    every rank of the group must call it, with or without keys.

    Args:
        kernel_items: ``(kernel, compile keys)`` pairs to warm, as
            ``JitWarmupRegistry.warmup_keys()`` returns them.
        backend_of: The JIT backend of a kernel (``"triton"``, ``"tilelang"``)
            or None for kernels whose compiles are not shared
            (:func:`jit_backend`).

    Returns:
        ``first`` (this rank's share and unshared kernels) and ``then`` (the
        other ranks' shares); ``wait`` is set when any kernel is shared in the
        group, and every rank must then call it between the two.

    """
    group = _tp_group()
    if group is None:
        return WarmupShares(kernel_items)

    import torch.distributed

    mine = _item_ids(kernel_items, backend_of)
    gathered: list[list[ItemId | None] | None] = [None] * group.world_size
    torch.distributed.all_gather_object(gathered, mine, group=group.cpu_group)
    holders: dict[ItemId, list[int]] = defaultdict(list)
    for rank, item_ids in enumerate(gathered):
        for item_id in item_ids or ():
            if item_id is not None:
                holders[item_id].append(rank)
    shared = {item_id: ranks for item_id, ranks in holders.items() if len(ranks) > 1}
    # Every rank sees the same ``gathered``: all of them wait, or none.
    if not shared:
        return WarmupShares(kernel_items)

    # Deal each group of ranks' shared keys round-robin, kernels in id order,
    # so that ranks listing kernels in different orders deal them alike.
    first_turn: dict[ItemId, int] = {}
    dealt: dict[tuple[int, ...], int] = defaultdict(int)
    for item_id in sorted(shared):
        dealer = tuple(shared[item_id])
        first_turn[item_id] = dealt[dealer]
        dealt[dealer] += item_id[2]

    me = group.rank_in_group
    shares = WarmupShares(first=[], wait=group.barrier)
    for (kernel, compile_keys), item_id in zip(kernel_items, mine, strict=True):
        ranks = shared.get(item_id) if item_id is not None else None
        if ranks is None:
            shares.first.append((kernel, compile_keys))
            continue
        assert item_id is not None
        own: dict[Any, None] = {}
        others: dict[Any, None] = {}
        dealt_keys = _in_stable_order(compile_keys)
        for turn, compile_key in enumerate(dealt_keys, first_turn[item_id]):
            (own if ranks[turn % len(ranks)] == me else others)[compile_key] = None
        if own:
            shares.first.append((kernel, own))
        if others:
            shares.then.append((kernel, others))
        shares.num_own_keys += len(own)
        shares.num_shared_keys += len(compile_keys)
    return shares
