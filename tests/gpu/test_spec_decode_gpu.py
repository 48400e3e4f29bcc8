"""Spec-decode helper kernels on a GPU: after vLLM's startup warmup, the real
call sites (``dsv4warmup.legacy.spec_decode``: proposer methods, DeepSeek
V4's MTP ``compute_logits``) swept over every batch size and sampled-token
width compile nothing, and every launch's outputs equal the torch references.
The warmup compiles exactly as many binaries per kernel as the CPU key audit
predicts. vLLM's own ``tests/v1/spec_decode/test_eagle_step_kernel.py`` and the
patched tree's ``test_spec_decode_triton_warmup.py`` pass.

Run on the GPU lab (``../gpu-lab``) with ``pytest -m gpu``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import pytest_outcomes

pytestmark = [pytest.mark.gpu, pytest.mark.forked]


def _need_cuda() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


@pytest.fixture
def jit_compiles() -> Iterator[list[tuple[str, bool]]]:
    """Empty in-memory caches for the four kernels, then every JIT compile of
    them as (kernel, is_manual_warmup), disk-cache hits included."""
    _need_cuda()
    from triton import knobs
    from vllm.models.deepseek_v4.common.ops.fused_mtp_input_rmsnorm import (
        _mtp_shared_head_rmsnorm_kernel,
    )
    from vllm.v1.spec_decode import utils

    kernels = (
        utils.eagle_step_slot_mapping_metadata_kernel,
        utils.eagle_prepare_inputs_padded_kernel,
        utils.eagle_prepare_next_token_padded_kernel,
        _mtp_shared_head_rmsnorm_kernel,
    )
    for kernel in kernels:
        kernel.device_caches.clear()
    names = {kernel.fn.__name__ for kernel in kernels}
    compiles: list[tuple[str, bool]] = []
    previous = knobs.runtime.jit_post_compile_hook

    def hook(*, fn, is_manual_warmup, **kwargs):  # type: ignore[no-untyped-def]
        if fn.name in names:
            compiles.append((fn.name, is_manual_warmup))
        if previous:
            return previous(fn=fn, is_manual_warmup=is_manual_warmup, **kwargs)
        return None

    knobs.runtime.jit_post_compile_hook = hook
    try:
        yield compiles
    finally:
        knobs.runtime.jit_post_compile_hook = previous


def _configs() -> dict[str, tuple[object, dict[str, bool]]]:
    from dsv4warmup.serving import FLASH, PRO

    base = FLASH.replace(max_model_len=8192)
    return {
        "flash-k1-256": (FLASH, {}),
        "flash-k3-64": (base.replace(num_speculative_tokens=3, max_num_seqs=64), {}),
        "pro-k2-40": (PRO.replace(num_speculative_tokens=2, max_num_seqs=40), {}),
        "flash-k2-unpadded": (
            base.replace(num_speculative_tokens=2, max_num_seqs=24),
            {"padded_drafter_batch": False},
        ),
        "eagle-k4-block16": (
            base.replace(
                speculative_method="eagle", num_speculative_tokens=4, max_num_seqs=33, block_size=16
            ),
            {},
        ),
        "eagle-k2-mrope-one-block": (
            base.replace(
                speculative_method="eagle",
                num_speculative_tokens=2,
                max_num_seqs=17,
                block_size=256,
                max_model_len=256,
                vocab_size=32001,
            ),
            {"mrope": True},
        ),
    }


@pytest.mark.parametrize("name", list(_configs()))
def test_warmup_then_call_sites_compile_nothing(jit_compiles, name: str) -> None:
    import torch
    from dsv4warmup.legacy import spec_decode as cs
    from vllm.model_executor.warmup.spec_decode_triton_warmup import warmup_spec_decode_triton

    cfg, kw = _configs()[name]
    padded = kw.get("padded_drafter_batch", True)
    warmup_spec_decode_triton(cs.warmup_params(cfg, padded_drafter_batch=padded))
    warmed = list(jit_compiles)
    assert warmed and all(is_warmup for _, is_warmup in warmed)
    # As many binaries per kernel as the CPU audit's exact keys.
    expected = cs.warmup_keys(cfg, padded_drafter_batch=padded)
    per_kernel = {k: sum(1 for n, _ in warmed if n == k) for k in expected}
    assert per_kernel == {k: len(v) for k, v in expected.items()}

    seen: set[str] = set()

    def check(kernel: str, io: dict) -> None:  # type: ignore[type-arg]
        seen.add(kernel)
        cs.check_outputs(kernel, io)

    assert cs.run_call_sites(cfg, device="cuda", check=check, **kw) > 0
    torch.cuda.synchronize()
    assert seen == set(expected)
    assert jit_compiles == warmed, f"compiled after warmup: {jit_compiles[len(warmed) :]}"


def test_vllm_spec_decode_kernel_tests_pass(tmp_path: Path) -> None:
    """vLLM's test_eagle_step_kernel.py (the wrapper's signature is
    unchanged) and the patched tree's own warmup test: all pass (junit
    outcomes: none skipped, none errored)."""
    _need_cuda()
    tree = Path(os.environ["DSV4_VLLM_TREE"])
    tests = [tree / "tests/v1/spec_decode/test_eagle_step_kernel.py"]
    own = tree / "tests/v1/spec_decode/test_spec_decode_triton_warmup.py"
    if own.exists():
        tests.append(own)
    report = tmp_path / "report.xml"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--noconftest", "-q", "-rf", "-p", "no:cacheprovider"]
        + [f"--junitxml={report}"]
        + [str(t) for t in tests],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    tail = result.stdout[-6000:] + result.stderr[-2000:]
    assert result.returncode == 0, tail
    outcomes = pytest_outcomes(report)
    assert outcomes and set(outcomes.values()) == {"passed"}, outcomes
    for test in tests:
        assert any(test.stem in name for name in outcomes), (test, tail)
