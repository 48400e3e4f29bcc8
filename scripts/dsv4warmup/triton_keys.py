"""Exact Triton cache keys on a machine without a GPU.

Triton 3.6 binds a launch's arguments through a generated *binder*; its second
result is the specialization that, with the options, forms the in-memory cache
key. We build the same binder for an sm90 target (the H100/H200 the report is
about) and record it for every launch, instead of running the kernel.

This is Triton-internal API, pinned to triton 3.6.0 (vLLM 0.26.0's pin); the
GPU tests check the same keys against real caches.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

_TARGET_ARCH = 90
_WARP_SIZE = 32


@functools.cache
def _backend() -> Any:
    import triton
    from triton.backends.compiler import GPUTarget

    return triton.compiler.make_backend(GPUTarget("cuda", _TARGET_ARCH, _WARP_SIZE))


@functools.cache
def _binder(fn: Any) -> Any:
    from triton.runtime.jit import create_function_from_signature

    return create_function_from_signature(fn.signature, fn.params, _backend())


def kernel_name(kernel: Any) -> str:
    """The function's qualified name (0.33.0 keeps kernels as static methods
    named ``kernel`` on their owner classes), or its name for a nested one."""
    fn = getattr(kernel, "fn", kernel)
    qualname = getattr(fn, "__qualname__", None)
    if qualname and "<locals>" not in qualname:
        return str(qualname)
    return getattr(fn, "__name__", repr(kernel))


def exact_key(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The specialization and options Triton would key this launch on."""
    from triton.runtime.jit import MockTensor

    args = tuple(MockTensor.wrap_dtype(a) for a in args)
    _, specialization, options = _binder(kernel)(
        *args, **kwargs, debug=False, instrumentation_mode=""
    )
    return (
        tuple(tuple(s) for s in specialization),
        tuple(sorted((k, repr(v)) for k, v in options.items())),
    )


@dataclass(frozen=True)
class RecordedLaunch:
    kernel: str
    key: tuple[Any, ...]
    warmup: bool


# Parameter names of every kernel recorded in this process, in signature order
# (a key's specialization has one entry per parameter): what lets two trees'
# keys be compared parameter by parameter when a patch adds one.
_PARAM_NAMES: dict[str, tuple[str, ...]] = {}


def param_names(kernel: str) -> tuple[str, ...]:
    """The parameters of ``kernel`` (recorded in this process), in order."""
    return _PARAM_NAMES[kernel]


@contextlib.contextmanager
def _intercepted_runs(on_launch: Any) -> Iterator[None]:
    """``JITFunction.run`` (every ``kernel[grid](...)`` and
    ``kernel.warmup(...)``) calls ``on_launch(kernel, args, kwargs, warmup)``
    instead of compiling or running."""
    from triton.runtime.jit import JITFunction

    original = JITFunction.run

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        on_launch(self, args, kwargs, warmup)
        return None

    JITFunction.run = run  # type: ignore[method-assign]
    try:
        yield
    finally:
        JITFunction.run = original  # type: ignore[method-assign]


def _recorded(
    kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any], warmup: bool
) -> RecordedLaunch:
    name = kernel_name(kernel)
    _PARAM_NAMES[name] = tuple(kernel.arg_names)
    return RecordedLaunch(name, exact_key(kernel, args, kwargs), warmup)


@contextlib.contextmanager
def record_launches() -> Iterator[list[RecordedLaunch]]:
    """Record the exact key of every ``kernel[grid](...)`` and
    ``kernel.warmup(...)`` instead of compiling or running it."""
    recorded: list[RecordedLaunch] = []
    with (
        _quiet_warmup_logs(),
        _intercepted_runs(lambda *launch: recorded.append(_recorded(*launch))),
    ):
        yield recorded


@contextlib.contextmanager
def _quiet_warmup_logs() -> Iterator[None]:
    """While launches are only recorded, the warmups' "compiled N key(s)"
    lines would be false; their warnings still show."""
    warmup_logger = logging.getLogger("vllm.model_executor.warmup")
    level = warmup_logger.level
    warmup_logger.setLevel(max(logging.WARNING, level))
    try:
        yield
    finally:
        warmup_logger.setLevel(level)


def keys_by_kernel(launches: list[RecordedLaunch]) -> dict[str, set[tuple[Any, ...]]]:
    out: dict[str, set[tuple[Any, ...]]] = {}
    for launch in launches:
        out.setdefault(launch.kernel, set()).add(launch.key)
    return out


W = TypeVar("W")


class Witnesses(Generic[W]):
    """Exact keys of the launches recorded while :meth:`recording` is active,
    per kernel, each with the first witness (a description of the batch) that
    produced it."""

    def __init__(self, kernels: Collection[str] | None = None) -> None:
        # Given kernels, only those are kept, each listed even if never launched.
        self.keys: dict[str, dict[tuple[Any, ...], W]] = {k: {} for k in kernels or ()}
        self._kept = None if kernels is None else frozenset(self.keys)
        self._recorded: list[RecordedLaunch] | None = None

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        with record_launches() as recorded:
            self._recorded = recorded
            try:
                yield
            finally:
                self._recorded = None

    @contextlib.contextmanager
    def batch(self, witness: W, *, warmup: bool = False) -> Iterator[None]:
        """Credit the launches made inside to ``witness``. Only a batch that
        says so may call ``kernel.warmup``: elsewhere a warmup launch is a
        step doing start-up's work, which no sweep should rely on."""
        recorded = self._recorded
        assert recorded is not None, "batch() outside recording()"
        start = len(recorded)
        try:
            yield
        finally:
            for launch in recorded[start:]:
                assert warmup or not launch.warmup, (launch.kernel, witness)
                if self._kept is None or launch.kernel in self._kept:
                    self.keys.setdefault(launch.kernel, {}).setdefault(launch.key, witness)
            del recorded[start:]


def compile_for_sm90(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Build this launch's exact variant for sm90 with Triton's own compiler,
    as ``JITFunction._do_compile`` would on an H100/H200 (the wheel ships
    ptxas: no GPU or driver needed). Returns the ``CompiledKernel``."""
    import triton
    from triton.runtime.jit import MockTensor

    args = tuple(MockTensor.wrap_dtype(a) for a in args)
    kwargs = dict(kwargs, debug=False, instrumentation_mode="")
    bound_args, specialization, options = _binder(kernel)(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(
        _backend(), kwargs, bound_args, specialization, options
    )
    source = triton.compiler.ASTSource(kernel, signature, constexprs, attrs)
    return triton.compile(source, target=_backend().target, options=options.__dict__)


@contextlib.contextmanager
def compile_launches_for_sm90() -> Iterator[list[tuple[RecordedLaunch, Any]]]:
    """Like :func:`record_launches`, but also build each launch's variant
    for sm90 (:func:`compile_for_sm90`) instead of running it."""
    built: list[tuple[RecordedLaunch, Any]] = []

    def build(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any], warmup: bool) -> None:
        launch = _recorded(kernel, args, kwargs, warmup)
        built.append((launch, compile_for_sm90(kernel, args, kwargs)))

    with _intercepted_runs(build):
        yield built
