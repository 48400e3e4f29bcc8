"""Warmup leaves nothing to a kernel's first launch: each compiled variant is
loaded and its launcher built (``CompiledKernel._init_handles``), which on the
H200 cost ~0.3 s per kernel on the first request (docs/gpu-results.md)."""

from __future__ import annotations

from typing import Any

import pytest


class _Compiled:
    def __init__(self) -> None:
        self.loads = 0

    def _init_handles(self) -> None:
        self.loads += 1


class _Kernel:
    """Stands in for a JITFunction: ``warmup`` returns its compiled variant."""

    def __init__(self) -> None:
        self.compiled: list[_Compiled] = []

    def warmup(self, *args: Any, grid: Any, **kwargs: Any) -> _Compiled:
        self.compiled.append(_Compiled())
        return self.compiled[-1]


class _Failing(_Compiled):
    def _init_handles(self) -> None:
        raise RuntimeError("out of resources")


@pytest.mark.parametrize("threads", ["1", "4"])
def test_each_compiled_variant_is_loaded_once(threads: str, monkeypatch: Any) -> None:
    monkeypatch.setenv("VLLM_TRITON_JIT_WARMUP_NUM_THREADS", threads)
    from vllm.model_executor.warmup.triton_specialization import (
        TritonWarmupLaunch,
        compile_triton_warmup,
    )

    kernel = _Kernel()
    # Three launches, two keys (7 and 9 are both "not 1, not % 16").
    launches = [TritonWarmupLaunch(kernel, (n,)) for n in (1, 7, 9)]
    assert compile_triton_warmup("test", launches) == (2, 0)
    assert [c.loads for c in kernel.compiled] == [1, 1]


def test_a_variant_that_cannot_load_counts_as_failed(monkeypatch: Any) -> None:
    monkeypatch.setenv("VLLM_TRITON_JIT_WARMUP_NUM_THREADS", "1")
    from vllm.model_executor.warmup.triton_specialization import (
        TritonWarmupLaunch,
        compile_triton_warmup,
    )

    kernel = _Kernel()
    kernel.warmup = lambda *a, grid, **k: _Failing()  # type: ignore[method-assign]
    assert compile_triton_warmup("test", [TritonWarmupLaunch(kernel, (1,))]) == (0, 1)
