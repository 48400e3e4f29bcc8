"""VLLM_DSV4_JIT_SENTINEL: off installs nothing; warn logs; raise raises."""

from __future__ import annotations

import importlib
import logging
import types

import pytest
from triton import knobs

SENTINEL = "vllm.model_executor.warmup.deepseek_v4_jit_sentinel"


@pytest.fixture
def sentinel(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", None)
    tl_logger = logging.getLogger("tilelang.jit.kernel")
    handlers = list(tl_logger.handlers)
    module = importlib.reload(importlib.import_module(SENTINEL))
    yield module
    tl_logger.handlers[:] = handlers


def _fake_compile(name: str) -> object:
    hook = knobs.runtime.jit_cache_hook
    fn = types.SimpleNamespace(module="vllm.x", name=name, jit_function=None)
    return hook(
        key=("key",),
        repr=f"{name}[num_warps=4](x: *i32)",
        fn=fn,
        compile={},
        is_manual_warmup=False,
        already_compiled=False,
    )


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


def test_warn_names_kernel_and_key(sentinel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sentinel.ENV, "warn")
    assert sentinel.arm() is True
    collect = _Collect()
    logging.getLogger(SENTINEL).addHandler(collect)  # vLLM loggers do not propagate
    try:
        assert _fake_compile("_build_c128a_topk_metadata_kernel") is None
        assert _fake_compile("some_other_kernel") is None
    finally:
        logging.getLogger(SENTINEL).removeHandler(collect)
    assert len(collect.messages) == 1
    assert "_build_c128a_topk_metadata_kernel" in collect.messages[0]
    assert "x: *i32" in collect.messages[0]


def test_raise_raises_for_triton_and_tilelang(sentinel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sentinel.ENV, "raise")
    assert sentinel.arm() is True
    with pytest.raises(sentinel.JitAfterWarmupError, match="_combine_topk_swa_indices_kernel"):
        _fake_compile("_combine_topk_swa_indices_kernel")
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
    _fake_compile("unrelated")
    assert len(calls) == 1
