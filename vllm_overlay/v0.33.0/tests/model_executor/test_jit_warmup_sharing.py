# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vllm.model_executor.warmup import jit_warmup_sharing
from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry, VllmJitKernel
from vllm.model_executor.warmup.jit_warmup_sharing import (
    WarmupShares,
    share_compiles,
    shared_cache_dir,
)


class Kernel(VllmJitKernel["Kernel.CompileKey"]):
    @dataclass(frozen=True)
    class CompileKey:
        tokens: int

    def __init__(self, compiled: list[Any] | None = None) -> None:
        self.compiled = compiled if compiled is not None else []
        super().__init__()

    def get_warmup_keys(self, max_tokens: int) -> list[CompileKey]:
        return [self.CompileKey(tokens) for tokens in range(1, max_tokens + 1)]

    def compile(self, compile_key: CompileKey) -> None:
        self.compiled.append((self, compile_key))


class OtherKernel(Kernel):
    pass


def _items(*kernels: tuple[Kernel, int]) -> list[tuple[Any, dict[Any, None]]]:
    return [(kernel, dict.fromkeys(kernel.get_warmup_keys(n))) for kernel, n in kernels]


def _share(
    monkeypatch: pytest.MonkeyPatch,
    items_per_rank: list[list[tuple[Any, dict[Any, None]]]],
    cache_per_rank: list[str | None],
    backend_of: Any = lambda kernel: "tilelang",
) -> list[WarmupShares]:
    """Each rank's shares, the gather answered with every rank's item ids
    (``cache_per_rank``: the cache directory each rank's backends write)."""

    def ids(rank: int) -> list[Any]:
        with monkeypatch.context() as m:
            m.setattr(
                jit_warmup_sharing,
                "shared_cache_dir",
                lambda b: cache_per_rank[rank] if b else None,
            )
            return jit_warmup_sharing._item_ids(items_per_rank[rank], backend_of)

    gathered = [ids(rank) for rank in range(len(items_per_rank))]

    def all_gather_object(out: list[Any], obj: Any, group: Any = None) -> None:
        out[:] = gathered

    monkeypatch.setattr("torch.distributed.all_gather_object", all_gather_object)
    shares = []
    for rank, items in enumerate(items_per_rank):
        group = SimpleNamespace(
            world_size=len(items_per_rank),
            rank_in_group=rank,
            cpu_group=None,
            barrier=lambda: None,
        )
        monkeypatch.setattr(jit_warmup_sharing, "_tp_group", lambda g=group: g)
        monkeypatch.setattr(
            jit_warmup_sharing,
            "shared_cache_dir",
            lambda b, r=rank: cache_per_rank[r] if b else None,
        )
        shares.append(share_compiles(items, backend_of))
    return shares


def _keys(items: list[tuple[Any, dict[Any, None]]]) -> list[tuple[Any, Any]]:
    return [(kernel, key) for kernel, keys in items for key in keys]


@pytest.mark.parametrize("num_ranks", [2, 3, 4])
def test_ranks_sharing_a_cache_compile_disjoint_shares_of_every_key(
    monkeypatch: pytest.MonkeyPatch, num_ranks: int
) -> None:
    kernel, other = Kernel(), OtherKernel()
    items = _items((kernel, 7), (other, 2))
    shares = _share(monkeypatch, [items] * num_ranks, ["host:1:2"] * num_ranks)

    firsts = [_keys(share.first) for share in shares]
    everything = _keys(items)
    assert sorted(map(repr, sum(firsts, []))) == sorted(map(repr, everything))
    for share, first in zip(shares, firsts):
        assert share.wait is not None
        # Each rank ends with every key: its own share, then the others'.
        assert sorted(map(repr, first + _keys(share.then))) == sorted(
            map(repr, everything)
        )
        assert share.num_shared_keys == 9
        assert share.num_own_keys == len(first)
        # Dealt round-robin: shares differ by at most one key.
        assert len(first) in (9 // num_ranks, -(-9 // num_ranks))


def test_ranks_listing_kernels_in_another_order_deal_them_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kernel, other = Kernel(), OtherKernel()
    shares = _share(
        monkeypatch,
        [_items((kernel, 5), (other, 3)), _items((other, 3), (kernel, 5))],
        ["host:1:2", "host:1:2"],
    )
    first = [set(map(repr, _keys(share.first))) for share in shares]
    assert not first[0] & first[1]
    assert len(first[0] | first[1]) == 8


def test_ranks_listing_keys_in_another_order_deal_them_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A key set built from a set of strings is ordered per process.
    kernel = Kernel()
    keys = kernel.get_warmup_keys(6)
    shares = _share(
        monkeypatch,
        [[(kernel, dict.fromkeys(keys))], [(kernel, dict.fromkeys(reversed(keys)))]],
        ["host:1:2", "host:1:2"],
    )
    first = [set(map(repr, _keys(share.first))) for share in shares]
    assert all(share.wait is not None for share in shares)
    assert not first[0] & first[1]
    assert len(first[0] | first[1]) == 6


@pytest.mark.parametrize(
    ("max_tokens", "caches"),
    [
        ((4, 5), ("host:1:2", "host:1:2")),  # different keys
        ((4, 4), ("host:1:2", "host:1:3")),  # different cache directories
        ((4, 4), ("host:1:2", "other:1:2")),  # different hosts
        ((4, 4), (None, None)),  # no shared disk cache
    ],
)
def test_nothing_is_shared_without_the_same_keys_and_cache(
    monkeypatch: pytest.MonkeyPatch,
    max_tokens: tuple[int, int],
    caches: tuple[str | None, str | None],
) -> None:
    kernel = Kernel()
    items = [_items((kernel, n)) for n in max_tokens]
    for share, own in zip(_share(monkeypatch, items, list(caches)), items):
        assert share.first == own
        assert share.then == []
        assert share.wait is None


def test_only_kernels_held_alike_are_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel, other = Kernel(), OtherKernel()
    shares = _share(
        monkeypatch,
        [_items((kernel, 4), (other, 2)), _items((kernel, 4), (other, 3))],
        ["host:1:2", "host:1:2"],
    )
    for share, n_other in zip(shares, (2, 3)):
        # Both wait: some kernel is shared.
        assert share.wait is not None
        assert share.num_shared_keys == 4
        assert [len(keys) for k, keys in share.first if k is other] == [n_other]
        assert all(k is kernel for k, _ in share.then)


def test_kernels_without_a_shared_backend_are_compiled_by_every_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    items = _items((Kernel(), 4))
    shares = _share(monkeypatch, [items, items], ["h:1:2"] * 2, lambda kernel: None)
    assert all(share.first == items and share.wait is None for share in shares)


def test_triton_derived_keys_are_identified_across_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.model_executor.warmup.jit_warmup_triton_helper import (
        TritonCompileKey,
        TritonJitKey,
    )

    def key(function_id: int, device: int, *cache_keys: str) -> TritonCompileKey:
        return TritonCompileKey(
            frozenset(TritonJitKey(function_id, "fn", device, c) for c in cache_keys),
            inputs=(),
        )

    kernel = Kernel()
    # The JIT function's id and the device are process-local.
    ranks = [
        [(kernel, dict.fromkeys([key(0x1000, 0, "a", "b"), key(0x1000, 0, "c")]))],
        [(kernel, dict.fromkeys([key(0x2000, 1, "c"), key(0x2000, 1, "b", "a")]))],
    ]
    shares = _share(monkeypatch, ranks, ["host:1:2", "host:1:2"])
    assert all(share.wait is not None for share in shares)
    assert [share.num_own_keys for share in shares] == [1, 1]


def test_single_process_is_not_shared() -> None:
    items = _items((Kernel(), 3))
    share = share_compiles(items, lambda kernel: "triton")
    assert share.first == items and share.wait is None


def test_shared_cache_dir_names_the_directory_not_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    knobs = pytest.importorskip("triton").knobs
    (tmp_path / "a").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a")
    seen = []
    for path in ("a", "link", "b"):
        monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / path))
        seen.append(shared_cache_dir("triton"))
    assert seen[0] is not None and seen[0] == seen[1] != seen[2]
    assert (tmp_path / "b").is_dir()
    monkeypatch.setattr(knobs.compilation, "always_compile", True)
    assert shared_cache_dir("triton") is None
    assert shared_cache_dir("cutedsl") is None


def test_registry_compiles_its_share_waits_then_loads_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[Any] = []
    kernel = Kernel(events)
    keys = list(kernel.get_warmup_keys(4))
    shares = WarmupShares(
        first=[(kernel, dict.fromkeys(keys[::2]))],
        then=[(kernel, dict.fromkeys(keys[1::2]))],
        wait=lambda: events.append("wait"),
        num_own_keys=2,
        num_shared_keys=4,
    )
    monkeypatch.setattr(jit_warmup_sharing, "share_compiles", lambda *a: shares)

    JitWarmupRegistry(None).warmup([(kernel, dict.fromkeys(keys))])

    assert events == [
        (kernel, keys[0]),
        (kernel, keys[2]),
        "wait",
        (kernel, keys[1]),
        (kernel, keys[3]),
    ]


def test_registry_waits_for_the_group_when_its_share_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class FailingKernel(Kernel):
        def compile(self, compile_key: Kernel.CompileKey) -> None:
            raise RuntimeError("compile failed")

    events: list[str] = []
    kernel = FailingKernel()
    keys = dict.fromkeys(kernel.get_warmup_keys(2))
    shares = WarmupShares(first=[(kernel, keys)], wait=lambda: events.append("wait"))
    monkeypatch.setattr(jit_warmup_sharing, "share_compiles", lambda *a: shares)

    with pytest.raises(RuntimeError, match="compile failed"):
        JitWarmupRegistry(None).warmup([(kernel, keys)])
    assert events == ["wait"]


def test_registry_without_keys_still_waits_for_the_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []
    shares = WarmupShares(first=[], wait=lambda: events.append("wait"))
    monkeypatch.setattr(jit_warmup_sharing, "share_compiles", lambda *a: shares)
    assert not JitWarmupRegistry(None).warmup([]).compiled
    assert events == ["wait"]
