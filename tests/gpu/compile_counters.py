"""Compile counters shared by the GPU tests. Each counts in-memory cache
misses (a compile, or a load from the disk cache), by kernel name; a test
using one must also see it count a compile it knows happens."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from unittest import mock


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
