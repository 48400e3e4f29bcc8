"""Compile counters shared by the GPU tests. Each counts in-memory cache
misses (a compile, or a load from the disk cache), by kernel name; a test
using one must also see it count a compile it knows happens."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from unittest import mock

from dsv4warmup.registry.cache_keys import tilelang_kernel_name, triton_kernel_name


@contextlib.contextmanager
def triton_compiles() -> Iterator[Counter[str]]:
    """Triton: ``JITFunction._do_compile`` runs once per in-memory cache miss,
    whether or not the disk cache has the binary. Keyed by the kernel's
    ``__qualname__`` (``BuildC128ATopkMetadataKernel.kernel`` for a kernel a
    0.33.0 class holds, the function name otherwise)."""
    from triton.runtime.jit import JITFunction

    counts: Counter[str] = Counter()
    original = JITFunction._do_compile

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        counts[self.fn.__qualname__] += 1
        return original(self, *args, **kwargs)

    with mock.patch.object(JITFunction, "_do_compile", counting):
        yield counts


@contextlib.contextmanager
def tilelang_compiles() -> Iterator[list[str]]:
    """TileLang: ``JITImpl.compile`` runs on every ``@tilelang.jit`` in-memory
    cache miss (and for ``compile_tilelang``), by factory name; independent
    of TileLang's log settings."""
    from tilelang.jit import JITImpl

    compiled: list[str] = []
    real_compile = JITImpl.compile

    def compile_and_count(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        compiled.append(self.func.orig_func.__name__)
        return real_compile(self, *args, **kwargs)

    with mock.patch.object(JITImpl, "compile", compile_and_count):
        yield compiled


@contextlib.contextmanager
def builds() -> Iterator[Counter[tuple[str, str, bool]]]:
    """Binaries built vs. read from the disk cache: ``(backend, kernel,
    from_disk)`` counts. Triton reports every ``compile()`` to
    ``knobs.compilation.listener`` with ``cache_hit``; TileLang's
    ``JITKernel`` is made with ``from_database=True`` when it is a disk load.
    Without TileLang (a CPU-only Triton bake) only Triton is counted."""
    import inspect

    from triton import knobs

    try:
        from tilelang.jit.kernel import JITKernel
    except ImportError:
        JITKernel = None  # noqa: N806

    counts: Counter[tuple[str, str, bool]] = Counter()
    previous = knobs.compilation.listener

    def listener(*, src, cache_hit, **kwargs):  # type: ignore[no-untyped-def]
        counts[("triton", triton_kernel_name(src), bool(cache_hit))] += 1
        if previous is not None:
            previous(src=src, cache_hit=cache_hit, **kwargs)

    if JITKernel is None:
        knobs.compilation.listener = listener
        try:
            yield counts
        finally:
            knobs.compilation.listener = previous
        return
    original_init = JITKernel.__init__
    signature = inspect.signature(original_init)

    def init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        from_disk = signature.bind(self, *args, **kwargs).arguments.get("from_database", False)
        original_init(self, *args, **kwargs)
        name = tilelang_kernel_name(getattr(self, "prim_func", None))
        counts[("tilelang", name, bool(from_disk))] += 1

    knobs.compilation.listener = listener
    try:
        with mock.patch.object(JITKernel, "__init__", init):
            yield counts
    finally:
        knobs.compilation.listener = previous


def totals(counts: Counter[tuple[str, str, bool]]) -> dict[str, int]:
    """:func:`builds`' counts summed per backend: ``{"triton_built": n,
    "triton_read": n, "tilelang_built": n, "tilelang_read": n}``."""
    out = {f"{be}_{what}": 0 for be in ("triton", "tilelang") for what in ("built", "read")}
    for (backend, _, from_disk), n in counts.items():
        out[f"{backend}_{'read' if from_disk else 'built'}"] += n
    return out


def built(counts: Counter[tuple[str, str, bool]]) -> dict[str, int]:
    """The kernels :func:`builds` saw compiled (not read from disk)."""
    out: dict[str, int] = {}
    for (backend, name, from_disk), n in counts.items():
        if not from_disk:
            out[f"{backend}:{name}"] = out.get(f"{backend}:{name}", 0) + n
    return out


def launch_fresh_triton_key() -> None:
    """A positive control: one Triton launch with a key no warmup has (the MTP
    shared-head norm at hidden size 1000; no DeepSeek V4 model has it)."""
    import torch
    from vllm.models.deepseek_v4.common.ops.fused_mtp_input_rmsnorm import (
        _MTP_SHARED_HEAD_RMSNORM_KERNEL,
    )

    x = torch.randn(3, 1000, dtype=torch.bfloat16, device="cuda")
    weight = torch.ones(1000, dtype=torch.bfloat16, device="cuda")
    _MTP_SHARED_HEAD_RMSNORM_KERNEL(x, weight, 1e-6)


@contextlib.contextmanager
def launcher_builds() -> Iterator[list[tuple[str, float]]]:
    """Host modules Triton builds with the C compiler, as ``(name, seconds)``:
    a kernel's launcher (``__triton_launcher``), built at its first launch
    when the Triton cache current then lacks it, and the driver's utilities
    (``cuda_utils``). ``compile_module_from_src`` calls ``_build`` only on a
    disk-cache miss."""
    import time

    from triton.runtime import build

    built: list[tuple[str, float]] = []
    real_build = build._build

    def timed_build(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        try:
            return real_build(name, *args, **kwargs)
        finally:
            built.append((name, time.perf_counter() - began))

    with mock.patch.object(build, "_build", timed_build):
        yield built
