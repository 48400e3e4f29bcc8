"""``VLLM_DSV4_JIT_WARMUP=0`` (registered in ``vllm/envs.py``) makes each
start-up warmup adapter the series adds return before deriving or compiling
anything; unset, each goes on to its work. The pre-warm entry point names the
disk caches it fills."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest

SWITCH = "VLLM_DSV4_JIT_WARMUP"


def test_switch_is_registered_in_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm.envs as envs

    monkeypatch.delenv(SWITCH, raising=False)
    assert envs.VLLM_DSV4_JIT_WARMUP is True
    monkeypatch.setenv(SWITCH, "0")
    assert envs.VLLM_DSV4_JIT_WARMUP is False


def _adapters_reaching_their_work() -> set[str]:
    """Call each adapter; name those that got past the switch to their work
    (the work itself is replaced by a recorder)."""
    from vllm.model_executor.warmup import (
        deepseek_v4_mhc_warmup,
        sparse_mla_triton_warmup,
        spec_decode_triton_warmup,
    )

    reached: set[str] = set()

    def recorder(name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> None:
            reached.add(name)

        return record

    model = SimpleNamespace(config=SimpleNamespace(model_type="deepseek_v4"))
    with (
        mock.patch.object(
            sparse_mla_triton_warmup,
            "deepseek_v4_sparse_mla_warmup_launches",
            recorder("sparse_mla"),
        ),
        mock.patch.object(sparse_mla_triton_warmup, "compile_triton_warmup", recorder("x")),
        mock.patch.object(
            spec_decode_triton_warmup,
            "spec_decode_triton_warmup_params",
            recorder("spec_decode"),
        ),
        mock.patch.object(deepseek_v4_mhc_warmup, "_deepseek_v4_mhc_warmup_cuda", recorder("mhc")),
        mock.patch.object(deepseek_v4_mhc_warmup.current_platform, "is_cuda", lambda: True),
    ):
        sparse_mla_triton_warmup.deepseek_v4_sparse_mla_key_warmup(SimpleNamespace())
        spec_decode_triton_warmup.spec_decode_triton_warmup(
            SimpleNamespace(speculative_config=object())
        )
        deepseek_v4_mhc_warmup.deepseek_v4_mhc_warmup(model, max_tokens=8)  # type: ignore[arg-type]
    return reached - {"x"}


def test_switch_off_skips_every_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SWITCH, raising=False)
    assert _adapters_reaching_their_work() == {"sparse_mla", "spec_decode", "mhc"}
    monkeypatch.setenv(SWITCH, "0")
    assert _adapters_reaching_their_work() == set()


def test_prewarm_names_the_caches_it_fills(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from vllm.model_executor.warmup import deepseek_v4_warmup as prewarm

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    assert prewarm.cache_dirs()["Triton"] == str(tmp_path / "triton")
