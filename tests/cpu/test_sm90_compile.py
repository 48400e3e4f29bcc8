"""Every Triton key the start-up warmup compiles builds for sm90 (H100/H200)
with Triton's real compiler on this CPU-only machine (the wheel ships ptxas).

The interpreter tests check the kernels' semantics; this checks that the
compiler accepts each warmed variant (control flow, specializations) as a GPU
would build it, so a warmup compile cannot fail there for reasons the CPU
suite could have seen.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dsv4warmup.triton_keys import compile_launches_for_sm90

CONFIGS = {
    "flash-mtp-k1": {},
    "flash-mtp-k3-1m": {"num_speculative_tokens": 3, "max_model_len": 1 << 20, "max_num_seqs": 17},
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_warmed_triton_key_builds_for_sm90(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("VLLM_TRITON_JIT_WARMUP_NUM_THREADS", "1")
    from vllm.model_executor.warmup import deepseek_v4_warmup as prewarm
    from vllm.model_executor.warmup.triton_specialization import compile_triton_warmup

    launches = prewarm.triton_launches(prewarm.DeepseekV4WarmupConfig(**CONFIGS[name]))
    with compile_launches_for_sm90() as built:
        compiled, failed = compile_triton_warmup("sm90 build", launches)
    assert failed == 0
    assert compiled == len(built) > 0
    assert all(kernel.asm.get("cubin") for _, kernel in built)
    kernels = {launch.kernel for launch, _ in built}
    assert "_build_c128a_topk_metadata_kernel" in kernels
    if CONFIGS[name].get("num_speculative_tokens", 1) > 1:
        assert "eagle_step_slot_mapping_metadata_kernel" in kernels
