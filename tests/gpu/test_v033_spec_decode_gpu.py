"""vLLM 0.33.0's spec-decode kernels on a GPU, patched tree: after the start-up
warmup of the JIT registry, a serving sweep of the real call sites compiles
nothing, and every launch writes what the torch references write.

Per model runner: the registrations the runner's start-up really keeps
(``dsv4warmup.registry.spec_decode.warm_registry``: the real objects built in the
lifecycle's steps, the runner's active steps read from its source) go into a
real ``JitWarmupRegistry`` whose ``warmup()`` compiles them; then
``spec_decode.run_call_sites`` drives, on CUDA tensors, the V1 drafter's
``prepare_next_token_ids_padded`` / ``prepare_inputs_padded`` /
``prepare_inputs`` / draft-step metadata updates over every batch size and
sampled-token width (V1 only: V2 never calls them) and DeepSeek V4's MTP
``compute_logits`` (both). Compiles are counted with Triton's
``jit_post_compile_hook``; a launch with a fresh key at the end proves the
counter counts. vLLM's own ``tests/v1/spec_decode/test_eagle_step_kernel.py``
passes on the tree.

Run on the GPU lab with ``pytest -m gpu`` and ``DSV4_VLLM_TREE`` set to the
patched 0.33.0 tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from compile_counters import launch_fresh_triton_key
from dsv4warmup.registry.lifecycle import available_runners, selected

pytestmark = [pytest.mark.gpu, pytest.mark.forked]


def _need_cuda() -> None:
    # The CPU-hosted platform stand-in (dsv4warmup.registry.platform) hides the
    # GPUs unless a device is named before CUDA starts.
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


def _kernels() -> dict[str, Any]:
    """The audit rows' kernels the tree has (0.34.0 removed the EAGLE
    helpers with Model Runner V1)."""
    import importlib.util

    from vllm.models.deepseek_v4.common.ops.fused_mtp_input_rmsnorm import (
        MTPSharedHeadRMSNormKernel,
    )

    kernels: dict[str, Any] = {
        "MTPSharedHeadRMSNormKernel.kernel": MTPSharedHeadRMSNormKernel.kernel
    }
    if importlib.util.find_spec("vllm.v1.spec_decode.utils") is not None:
        from vllm.v1.spec_decode import utils

        for name in (
            "eagle_step_slot_mapping_metadata_kernel",
            "eagle_prepare_inputs_padded_kernel",
            "eagle_prepare_next_token_padded_kernel",
        ):
            kernels[name] = getattr(utils, name)
    return kernels


@pytest.fixture
def jit_compiles() -> Iterator[list[str]]:
    """Empty in-memory caches for the four kernels, then every JIT compile
    of them (disk-cache hits included), by audit row name."""
    _need_cuda()
    from triton import knobs

    kernels = _kernels()
    rows = {id(k): name for name, k in kernels.items()}
    for kernel in kernels.values():
        kernel.device_caches.clear()
    compiles: list[str] = []
    previous = knobs.runtime.jit_post_compile_hook

    def hook(*, fn: Any, **kwargs: Any) -> Any:
        row = rows.get(id(getattr(fn, "jit_function", None)))
        if row is not None:
            compiles.append(row)
        if previous:
            return previous(fn=fn, **kwargs)
        return None

    knobs.runtime.jit_post_compile_hook = hook
    try:
        yield compiles
    finally:
        knobs.runtime.jit_post_compile_hook = previous


def _configs() -> dict[str, tuple[Any, dict[str, Any]]]:
    from dsv4warmup.serving import FLASH, PRO

    return {
        # the report's deployment
        "flash-k1-256": (FLASH, {}),
        # the runner widens the block table to 1564 columns (100000 / 64)
        "flash-k3-64-100000": (
            FLASH.replace(num_speculative_tokens=3, max_num_seqs=64, max_model_len=100000),
            {},
        ),
        "pro-k2-40": (
            PRO.replace(num_speculative_tokens=2, max_num_seqs=40, max_model_len=8192),
            {},
        ),
        "flash-k4-24-unpadded": (
            FLASH.replace(num_speculative_tokens=4, max_num_seqs=24, max_model_len=4000),
            {"padded": False},
        ),
    }


@pytest.mark.parametrize("runner", available_runners())
@pytest.mark.parametrize("name", list(_configs()))
def test_warmup_then_call_sites_compile_nothing(
    jit_compiles: list[str], name: str, runner: str
) -> None:
    import torch
    from dsv4warmup.legacy import spec_decode as cs
    from dsv4warmup.registry import spec_decode as sd

    cfg, kw = _configs()[name]
    config = sd.vllm_config(cfg, runner)
    sd.warm_registry(config, runner).warmup()
    torch.cuda.synchronize()
    warmed = list(jit_compiles)
    expected = {"MTPSharedHeadRMSNormKernel.kernel"}
    if runner == "v1":
        expected |= {"eagle_prepare_inputs_padded_kernel", "eagle_prepare_next_token_padded_kernel"}
        if cfg.num_speculative_tokens > 1:
            expected.add("eagle_step_slot_mapping_metadata_kernel")
    assert expected <= set(warmed)

    # As the worker does after warmup, in the mode that fails on a compile.
    from vllm.utils import jit_monitor

    jit_monitor.activate(mode="error")
    seen: set[str] = set()

    def check(kernel: str, io: dict[str, Any]) -> None:
        seen.add(kernel)
        cs.check_outputs(kernel, io)

    with selected(runner):
        steps = sd.run_call_sites(cfg, device="cuda", check=check, eagle=runner == "v1", **kw)
    torch.cuda.synchronize()
    assert steps > 0
    assert cs.MTP_NORM_KERNEL in seen
    assert jit_compiles == warmed, f"compiled after warmup: {jit_compiles[len(warmed) :]}"

    # Positive control: a fresh key compiles, and the monitor (which runs
    # before this test's hook) fails it. The hook itself saw the warmup's.
    with pytest.raises(RuntimeError, match="Triton kernel JIT compilation during inference"):
        launch_fresh_triton_key()
    torch.cuda.synchronize()


def test_vllm_eagle_step_kernel_tests_pass() -> None:
    """vLLM's own tests of the step kernel (including the patch's check that
    every KV layout launches the warmed variant)."""
    _need_cuda()
    tree = Path(os.environ["DSV4_VLLM_TREE"])
    if not (tree / "tests/v1/spec_decode/test_eagle_step_kernel.py").is_file():
        pytest.skip("no EAGLE step kernel in this tree (0.34.0 removed it with Model Runner V1)")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--noconftest", "-q", "-rf", "-p", "no:cacheprovider"]
        + [str(tree / "tests/v1/spec_decode/test_eagle_step_kernel.py")],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
