"""A memory checker for Triton's interpreter (``TRITON_INTERPRET=1``): every
load or store a kernel issues outside its tensor arguments fails before it
touches memory. Shared by the C128A guard tests of every base."""

from __future__ import annotations

import numpy as np
import torch

SENTINEL = -1234567  # fills the margins around a guarded view


class OutOfBoundsAccess(AssertionError):
    pass


def _extent(arg: object) -> tuple[int, int] | None:
    if not isinstance(arg, torch.Tensor) or arg.numel() == 0:
        return None
    last = sum((n - 1) * s for n, s in zip(arg.shape, arg.stride(), strict=True))
    return arg.data_ptr(), arg.data_ptr() + (last + 1) * arg.element_size()


class MemoryChecker:
    """Fails every interpreted load/store outside the kernel's tensor
    arguments, before it touches memory."""

    def __init__(self) -> None:
        self.violations: list[tuple[str, list[str]]] = []
        self.ranges: list[tuple[int, int]] = []

    def __enter__(self) -> MemoryChecker:
        from triton.runtime import interpreter

        self._interpreter = interpreter
        builder = interpreter.interpreter_builder
        self._saved = (
            interpreter.GridExecutor._init_args_hst,
            builder.create_masked_load,
            builder.create_masked_store,
        )
        init_args, load, store = self._saved
        checker = self

        def init_args_hst(executor, args_dev, kwargs):  # type: ignore[no-untyped-def]
            args_hst, kwargs_hst = init_args(executor, args_dev, kwargs)
            checker.ranges = [
                r for a in (*args_hst, *kwargs_hst.values()) if (r := _extent(a)) is not None
            ]
            return args_hst, kwargs_hst

        def checked_load(ptrs, mask, other, *rest):  # type: ignore[no-untyped-def]
            checker.check("load", ptrs, mask)
            return load(ptrs, mask, other, *rest)

        def checked_store(ptrs, value, mask, *rest):  # type: ignore[no-untyped-def]
            checker.check("store", ptrs, mask)
            return store(ptrs, value, mask, *rest)

        interpreter.GridExecutor._init_args_hst = init_args_hst
        builder.create_masked_load = checked_load
        builder.create_masked_store = checked_store
        return self

    def __exit__(self, *exc: object) -> None:
        builder = self._interpreter.interpreter_builder
        self._interpreter.GridExecutor._init_args_hst = self._saved[0]
        del builder.create_masked_load, builder.create_masked_store

    def check(self, kind: str, ptrs, mask) -> None:  # type: ignore[no-untyped-def]
        addrs = np.asarray(ptrs.data).astype(np.uint64).reshape(-1)
        active = np.broadcast_to(
            np.asarray(mask.data, dtype=bool), np.asarray(ptrs.data).shape
        ).reshape(-1)
        addrs = addrs[active]
        if addrs.size == 0:
            return
        size = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        inside = np.zeros(addrs.shape, dtype=bool)
        for lo, hi in self.ranges:
            inside |= (addrs >= lo) & (addrs + size <= hi)
        if not inside.all():
            bad = [hex(int(a)) for a in addrs[~inside][:4]]
            self.violations.append((kind, bad))
            raise OutOfBoundsAccess(f"{kind} outside the kernel's tensors at {bad}")


def guarded(shape: tuple[int, ...], dtype: torch.dtype, fill: int) -> torch.Tensor:
    """A view of ``shape`` inside a larger tensor whose margins hold
    SENTINEL (checked after the launch)."""
    margin = 3
    big = torch.full(tuple(n + 2 * margin for n in shape), SENTINEL, dtype=dtype)
    view = big[tuple(slice(margin, margin + n) for n in shape)]
    view.fill_(fill)
    view._guard_base = big  # type: ignore[attr-defined]
    return view


def margins_untouched(view: torch.Tensor) -> bool:
    big = view._guard_base  # type: ignore[attr-defined]
    inner = torch.zeros_like(big, dtype=torch.bool)
    inner[tuple(slice(3, 3 + n) for n in view.shape)] = True
    return bool((big[~inner] == SENTINEL).all())
