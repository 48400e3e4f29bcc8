# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Compile-only Triton warmup over the specializations a call site can produce.

Triton keys every compiled binary on the *specialization* of each argument:

* an ``int`` equal to 1 becomes the constant 1 (its own binary);
* an ``int`` divisible by 16 gets a divisibility attribute, any other ``int``
  gets none; values outside int32 switch the argument type to ``i64``;
* a pointer is keyed on its element type and on whether its address is
  16-byte aligned;
* ``tl.constexpr`` arguments are keyed by value.

A warmup therefore does not need the runtime's values, only one representative
per class that the runtime can reach. The helpers here turn "this argument
takes values in [lo, hi]" into those representatives and compile each distinct
launch once with ``JITFunction.warmup`` (no kernel runs, no device memory).
"""

import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from vllm.logger import init_logger
from vllm.triton_utils import triton

logger = init_logger(__name__)

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class WarmupPointer:
    """Compile-only stand-in for a tensor argument.

    Triton reads only ``dtype`` and ``data_ptr()`` of a tensor argument to
    build the key, so this compiles the same binary as a real tensor with the
    same element type and alignment, without allocating anything.
    """

    dtype: torch.dtype
    aligned: bool = True

    def data_ptr(self) -> int:
        # One element past an aligned address is unaligned for every dtype
        # narrower than 16 bytes, which is what an offset view produces.
        return 0 if self.aligned else self.dtype.itemsize


def int_key_class(value: int) -> tuple[str, str]:
    """Triton's key class of a non-constexpr ``int`` argument."""
    if value == 1:
        return ("constexpr", "1")
    width = "i32" if _INT32_MIN <= value <= _INT32_MAX else "i64"
    return (width, "D" if value % 16 == 0 else "")


def int_key_reps(lo: int, hi: int) -> tuple[int, ...]:
    """One value of every Triton key class that the range [lo, hi] contains.

    Used for arguments that vary at run time (token counts, request counts,
    lengths): warming these values covers every value in the range.
    """
    if lo > hi:
        return ()
    reps: dict[tuple[str, str], int] = {}

    def consider(value: int) -> None:
        if lo <= value <= hi:
            reps.setdefault(int_key_class(value), value)

    consider(1)
    for bound_lo, bound_hi in (
        (max(lo, _INT32_MIN), min(hi, _INT32_MAX)),
        (max(lo, _INT32_MAX + 1), hi),
        (lo, min(hi, _INT32_MIN - 1)),
    ):
        if bound_lo > bound_hi:
            continue
        # The smallest multiple of 16 and the smallest non-multiple (other
        # than 1) in the sub-range, if any.
        first_div = -(-bound_lo // 16) * 16
        consider(first_div)
        for value in range(bound_lo, min(bound_hi, bound_lo + 18) + 1):
            if value != 1 and value % 16 != 0:
                consider(value)
                break
    return tuple(sorted(reps.values()))


@dataclass(frozen=True)
class TritonWarmupLaunch:
    """One compile-only launch: the kernel and the arguments the call site
    would pass (tensors may be :class:`WarmupPointer`)."""

    kernel: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def kernel_name(self) -> str:
        fn = getattr(self.kernel, "fn", None)
        return getattr(fn, "__name__", repr(self.kernel))

    def key(self) -> tuple[Any, ...]:
        """A hashable summary that is equal for launches Triton keys alike."""
        params = getattr(self.kernel, "params", None) or ()
        constexpr_nums = {p.num for p in params if p.is_constexpr}
        runtime_names = {p.name for p in params if not p.is_constexpr}

        def summarize(arg: Any, by_value: bool) -> Any:
            if by_value:
                # constexprs and launch options (num_warps, ...) key by value.
                return ("=", repr(arg))
            if isinstance(arg, WarmupPointer):
                return ("*", str(arg.dtype), arg.aligned)
            if isinstance(arg, torch.Tensor):
                return ("*", str(arg.dtype), arg.data_ptr() % 16 == 0)
            if isinstance(arg, bool) or not isinstance(arg, int):
                return ("=", repr(arg))
            return int_key_class(arg)

        return (
            self.kernel_name,
            tuple(summarize(a, i in constexpr_nums) for i, a in enumerate(self.args)),
            tuple(
                sorted(
                    (k, summarize(v, k not in runtime_names))
                    for k, v in self.kwargs.items()
                )
            ),
        )


def unique_launches(
    launches: Iterable[TritonWarmupLaunch],
) -> list[TritonWarmupLaunch]:
    seen: dict[tuple[Any, ...], TritonWarmupLaunch] = {}
    for launch in launches:
        seen.setdefault(launch.key(), launch)
    return list(seen.values())


def _num_compile_threads() -> int:
    """Compiler threads for one warmup (``VLLM_TRITON_JIT_WARMUP_NUM_THREADS``)."""
    import vllm.envs as envs

    return envs.VLLM_TRITON_JIT_WARMUP_NUM_THREADS


def _load_compiled(kernel: Any) -> None:
    """Load a compiled variant onto the current device and build its launcher,
    as its first launch would. The launcher is a C module built by the host
    compiler (then cached on disk): ~0.3 s per variant that warmup would
    otherwise leave to the first request. Nothing runs on the GPU."""
    init_handles = getattr(kernel, "_init_handles", None)
    if init_handles is not None:
        init_handles()


def compile_triton_warmup(
    what: str, launches: Iterable[TritonWarmupLaunch]
) -> tuple[int, int]:
    """Compile each distinct launch once and load it (:func:`_load_compiled`);
    never raises.

    Returns ``(compiled, failed)``. A failure is logged with the kernel and
    its arguments and does not stop the server: the kernel then compiles on
    first use, as it would without warmup.
    """
    todo = unique_launches(launches)
    if not todo:
        return 0, 0
    start = time.perf_counter()
    failed = 0

    def report(launch: TritonWarmupLaunch) -> None:
        nonlocal failed
        failed += 1
        logger.warning(
            "%s warmup: compiling %s for %s failed; it will compile on first use.",
            what,
            launch.kernel_name,
            launch.key()[1:],
            exc_info=True,
        )

    num_threads = min(_num_compile_threads(), len(todo))
    if num_threads > 1 and hasattr(triton, "AsyncCompileMode"):
        with (
            ThreadPoolExecutor(max_workers=num_threads) as pool,
            triton.AsyncCompileMode(pool, ignore_errors=True),
        ):
            pending = []
            for launch in todo:
                try:
                    pending.append(
                        (
                            launch,
                            launch.kernel.warmup(
                                *launch.args, grid=(1,), **launch.kwargs
                            ),
                        )
                    )
                except Exception:
                    report(launch)
            for launch, future in pending:
                try:
                    _load_compiled(
                        future.result() if hasattr(future, "result") else future
                    )
                except Exception:
                    report(launch)
    else:
        for launch in todo:
            try:
                _load_compiled(
                    launch.kernel.warmup(*launch.args, grid=(1,), **launch.kwargs)
                )
            except Exception:
                report(launch)
    logger.info(
        "%s warmup: compiled %d Triton key(s) in %.2f s%s.",
        what,
        len(todo) - failed,
        time.perf_counter() - start,
        f" ({failed} failed)" if failed else "",
    )
    return len(todo) - failed, failed
