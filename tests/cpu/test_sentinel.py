"""VLLM_DSV4_JIT_SENTINEL: off installs nothing; warn logs; raise raises.

The Triton side goes through real compiles: ``JITFunction.run`` of a covered
kernel (``eagle_prepare_inputs_padded_kernel``) builds an sm90 binary with
Triton's own compiler (no GPU needed; a stand-in driver answers only "device
0, sm90"), and the hook it calls is the one the sentinel installed. A launch
whose key is already compiled calls no hook, a new key does. The TileLang side
reads TileLang's compile log line; without the tilelang package here, that
line is logged by hand (the GPU suite compiles for real).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import triton
from triton import knobs
from triton.backends.compiler import GPUTarget

SENTINEL = "vllm.model_executor.warmup.deepseek_v4_jit_sentinel"


@pytest.fixture
def sentinel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", None)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # compiles are real
    tl_logger = logging.getLogger("tilelang.jit.kernel")
    handlers = list(tl_logger.handlers)
    module = importlib.reload(importlib.import_module(SENTINEL))
    yield module
    tl_logger.handlers[:] = handlers


def test_off_installs_nothing(sentinel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sentinel.ENV, raising=False)
    handlers = len(logging.getLogger("tilelang.jit.kernel").handlers)
    assert sentinel.arm() is False
    assert knobs.runtime.jit_cache_hook is None
    assert len(logging.getLogger("tilelang.jit.kernel").handlers) == handlers


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class _Sm90Driver:
    """What ``JITFunction.run(warmup=True)`` asks the driver: the device,
    its stream and its target. Nothing is loaded or launched."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", 90, 32)


@contextlib.contextmanager
def _sm90(*kernels: Any) -> Iterator[None]:
    from triton.runtime.driver import driver

    previous = driver._active
    driver.set_active(_Sm90Driver())  # type: ignore[arg-type]
    try:
        yield
    finally:
        driver._active = previous
        for kernel in kernels:  # drop the stand-in device's binder and binaries
            kernel.device_caches.clear()


@triton.jit
def _unwatched_kernel(x_ptr, n):
    triton.language.store(x_ptr, n)


def _compile(num_reqs: int) -> Any:
    """``eagle_prepare_inputs_padded_kernel`` for ``num_reqs`` requests, as
    the patched warmup launches it: a real JIT compile unless cached."""
    import torch
    from vllm.model_executor.warmup.triton_specialization import WarmupPointer

    args = (*(WarmupPointer(torch.int32) for _ in range(5)), num_reqs)
    return _watched().warmup(*args, grid=(1,))


def _watched() -> Any:
    from vllm.v1.spec_decode.utils import eagle_prepare_inputs_padded_kernel

    return eagle_prepare_inputs_padded_kernel


def test_warn_names_kernel_and_key(sentinel, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setenv(sentinel.ENV, "warn")
    collect = _Collect()
    logging.getLogger(SENTINEL).addHandler(collect)  # vLLM loggers do not propagate
    try:
        with _sm90(_watched(), _unwatched_kernel):
            assert _compile(1).asm["cubin"]  # before arming: compiled, not reported
            assert sentinel.arm() is True
            _compile(1)  # cached: no compile, no report
            assert collect.messages == []
            assert _compile(7).asm["cubin"]  # new key: compiled and reported
            _unwatched_kernel.warmup(torch.empty(1, dtype=torch.int32), 3, grid=(1,))
    finally:
        logging.getLogger(SENTINEL).removeHandler(collect)
    assert len(collect.messages) == 1, collect.messages
    assert "eagle_prepare_inputs_padded_kernel" in collect.messages[0]
    # The key of the compile: 7 requests is an i32 without divisibility.
    assert "('*i32', 'D'), ('i32', '')]" in collect.messages[0]


def test_raise_raises_for_triton_and_tilelang(sentinel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sentinel.ENV, "raise")
    assert sentinel.arm() is True
    with _sm90(_watched()), pytest.raises(sentinel.JitAfterWarmupError, match="inputs_padded"):
        _compile(5)
    with pytest.raises(sentinel.JitAfterWarmupError, match="mhc_post_tilelang"):
        logging.getLogger("tilelang.jit.kernel").info(
            "TileLang begins to compile kernel `mhc_post_tilelang` with `out_idx=[]`"
        )
    # Other TileLang kernels pass.
    logging.getLogger("tilelang.jit.kernel").info(
        "TileLang begins to compile kernel `flash_attn_fwd` with `out_idx=[]`"
    )


def test_previous_hook_is_chained(sentinel, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", lambda **kw: calls.append(kw) or None)
    monkeypatch.setenv(sentinel.ENV, "warn")
    sentinel.arm()
    with _sm90(_watched()):
        _compile(1)
    assert [call["fn"].name for call in calls] == ["eagle_prepare_inputs_padded_kernel"]
