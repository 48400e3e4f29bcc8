"""mHC TileLang warmup of a vLLM 0.33.0 tree on a GPU.

After the real ``JitWarmupRegistry.warmup()`` over the registrations the runner
collects (the target model built inside an active registry, as both runners'
``load_model`` does; the MTP draft built outside it, as the drafter's
``load_model`` is), the DeepSeek V4 CUDA forward passes -- target and MTP draft,
real model code with attention and MoE stubbed -- compile nothing at any token
count up to max_num_batched_tokens. A fresh key compiles in the same test (the
counter works). vLLM's own mHC tests (TileLang against torch references)
fail nothing on the patched tree that they do not fail on the pristine one.

Needs the tree's pinned TileLang (0.1.12) on the GPU machine; without DeepGEMM
there, its split-k pre-norm GEMM runs as a torch stand-in (the TileLang keys it
leads to are the DeepGEMM deployment's). ``DSV4_VLLM_TREE`` names the tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from compile_counters import builds, tilelang_compiles

pytestmark = [pytest.mark.gpu, pytest.mark.forked]

MAX_TOKENS = 2048


def _need_cuda() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("tilelang")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


def _tree() -> Path:
    return Path(os.environ["DSV4_VLLM_TREE"])


@pytest.mark.parametrize("deep_gemm", [True, False], ids=["deep-gemm", "tilelang-gemm"])
def test_registry_warmup_then_forward_passes_compile_nothing(deep_gemm: bool) -> None:
    _need_cuda()
    import torch
    from dsv4warmup.registry import mhc
    from dsv4warmup.serving import FLASH

    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    cfg = FLASH.replace(max_num_batched_tokens=MAX_TOKENS, sm_count=sm_count)
    with mhc.deployment_on_cuda(cfg, deep_gemm) as (_, models, registry):
        # With 0.33.0's compiler processes (its 0011) the warmup's compiles run
        # outside this process, which then reads each kernel from disk.
        with builds() as warmup_builds:
            registry.warmup()
        tilelang_kernels = sum(n for (be, _, _), n in warmup_builds.items() if be == "tilelang")
        assert tilelang_kernels, "the registry made no TileLang kernel"

        # As the worker does after warmup, in the mode that fails on a compile.
        from vllm.utils import jit_monitor

        jit_monitor.activate(mode="error")
        with tilelang_compiles() as compiled, mhc._model_stubs(call_time=True):
            with torch.inference_mode():
                for num_tokens in range(1, MAX_TOKENS + 1):
                    mhc.forward_all(models, num_tokens)
            torch.cuda.synchronize()
            assert compiled == [], sorted(set(compiled))

            # Positive control: a hidden size no layer has is a new key.
            from vllm.model_executor.kernels.mhc.tilelang import mhc_post_tilelang

            hidden = 2048
            x = torch.randn(3, hidden, device="cuda", dtype=torch.bfloat16)
            residual = torch.randn(3, 4, hidden, device="cuda", dtype=torch.bfloat16)
            post = torch.rand(3, 4, 1, device="cuda")
            comb = torch.rand(3, 4, 4, device="cuda")
            with pytest.raises(RuntimeError, match="during inference"):
                mhc_post_tilelang(x, residual, post, comb)
            torch.cuda.synchronize()
        # The counter saw the fresh key's compile begin (the monitor
        # raises inside TileLang's compile, after the counter).
        assert compiled == ["mhc_post_tilelang"], compiled


def _failing(tree: Path) -> tuple[set[str], str]:
    """Test ids of vLLM's ``tests/kernels/mhc/`` that fail or error on ``tree``."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--noconftest", "-q", "-rfE", "-p", "no:cacheprovider"]
        + [str(tree / "tests/kernels/mhc")],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=1800,
        env=dict(os.environ, PYTHONPATH=str(tree)),
    )
    ids = {
        line.split()[1]
        for line in result.stdout.splitlines()
        if line.startswith(("FAILED ", "ERROR ")) and len(line.split()) > 1
    }
    assert ids or result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return ids, result.stdout[-200:]


def test_vllm_mhc_tests_fail_nothing_pristine_passes() -> None:
    """vLLM's tests/kernels/mhc/ (TileLang kernels against torch references,
    dispatch and compile-only warmup, the series' every-token-count key test):
    whatever fails on the patched tree fails on the pristine one too (the lab
    fails some on both: its ``vllm._C`` stub, no vLLM conftest).
    ``DSV4_V033_PRISTINE_TREE`` names the pristine tree."""
    _need_cuda()
    pristine = os.environ.get("DSV4_V033_PRISTINE_TREE")
    if not pristine:
        pytest.skip("DSV4_V033_PRISTINE_TREE is not set")
    patched, summary = _failing(_tree())
    baseline, _ = _failing(Path(pristine))
    print(f"patched: {summary.strip()}; fails on both: {len(patched & baseline)}")
    assert patched <= baseline, sorted(patched - baseline)
