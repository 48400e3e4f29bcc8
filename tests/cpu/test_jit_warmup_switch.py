"""``VLLM_DSV4_JIT_WARMUP=0`` (registered in ``vllm/envs.py``) skips every
start-up warmup the series adds, through the real ``kernel_warmup`` entry
points the call-site drivers drive; unset, they warm. The pre-warm entry
point names the disk caches it fills."""

from __future__ import annotations

from typing import Any

import pytest
from dsv4warmup.callsites import mhc, sparse_mla, spec_decode
from dsv4warmup.serving import FLASH

SWITCH = "VLLM_DSV4_JIT_WARMUP"


def _warmed(cfg: Any) -> dict[str, int]:
    keys: dict[str, set[Any]] = {}
    keys.update(spec_decode.warmup_keys(cfg))
    keys.update(sparse_mla.warmup_keys(cfg))
    keys.update(mhc.warmup_keys(cfg, deep_gemm=True))
    return {kernel: len(v) for kernel, v in keys.items() if v}


def test_switch_is_registered_in_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm.envs as envs

    monkeypatch.delenv(SWITCH, raising=False)
    assert envs.VLLM_DSV4_JIT_WARMUP is True
    monkeypatch.setenv(SWITCH, "0")
    assert envs.VLLM_DSV4_JIT_WARMUP is False


def test_switch_off_skips_every_warmup(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = FLASH.replace(max_num_batched_tokens=512, max_model_len=8192, max_num_seqs=16)
    monkeypatch.delenv(SWITCH, raising=False)
    on = _warmed(cfg)
    # Every family is warmed by default: sparse MLA, EAGLE/MTP helpers, mHC.
    assert "_build_c128a_topk_metadata_kernel" in on
    assert "eagle_prepare_inputs_padded_kernel" in on
    assert any(k.startswith("mhc_") for k in on), on
    monkeypatch.setenv(SWITCH, "0")
    assert _warmed(cfg) == {}


def test_prewarm_names_the_caches_it_fills(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from vllm.model_executor.warmup import deepseek_v4_warmup as prewarm

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    dirs = prewarm.cache_dirs()
    assert dirs["Triton"] == str(tmp_path / "triton")
