"""Make a registry-era tree (0.33.0, 0.34.0) import and configure as on an NVIDIA GPU, on a CPU.

vLLM's CUDA platform imports its compiled op library, and some modules query
it at import time; model inspection imports the FlashAttention extension. The
stand-ins answer "not supported" (as ``shared/gpu-lab``'s stub does), and
``current_platform`` becomes a CUDA platform whose device queries answer for
the configured GPU. Nothing here launches a kernel: a kernel that needs a
compiled op fails loudly.

PDL support is not answered here: 0.34.0 patch 0016 makes the CUDA platform
read it from ``get_device_capability``, as it reads everything else. On a tree
without it, ``is_arch_support_pdl`` asks ``torch.cuda`` and says False, and
the mHC TileLang kernels elaborate without PDL (keys a GPU server never reads).
"""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass
from typing import Any

_STUB_MODULES = (
    "vllm._C_stable_libtorch",
    "vllm._C",
    "vllm._moe_C",
    "vllm.vllm_flash_attn._vllm_fa2_C",
)
_CAPABILITY_QUERIES = (
    "cutlass_scaled_mm_supports_fp8",
    "cutlass_scaled_mm_supports_block_fp8",
    "cutlass_scaled_mm_supports_fp4",
    "cutlass_group_gemm_supported",
    "mxfp4_experts_quant_supported",
)


@dataclass(frozen=True)
class Gpu:
    name: str
    capability: tuple[int, int]
    sm_count: int
    memory_gib: int


H100 = Gpu("NVIDIA H100 80GB HBM3", (9, 0), 132, 80)
H200 = Gpu("NVIDIA H200", (9, 0), 132, 141)
B200 = Gpu("NVIDIA B200", (10, 0), 148, 180)
GPUS = {"h100": H100, "h200": H200, "b200": B200}

_installed: Gpu | None = None


def _stub_compiled_ops() -> None:
    for name in _STUB_MODULES:
        sys.modules.setdefault(name, types.ModuleType(name))
    if getattr(_stub_compiled_ops, "lib", None) is not None:
        return  # a second Library would drop the first one's ops when it dies
    import torch

    lib = torch.library.Library("_C", "FRAGMENT")
    for op in _CAPABILITY_QUERIES:
        try:
            lib.define(f"{op}(int cuda_device_capability) -> bool")
            lib.impl(op, lambda cap: False, "CompositeExplicitAutograd")
        except RuntimeError:
            pass  # defined by an earlier call in this process
    _stub_compiled_ops.lib = lib  # type: ignore[attr-defined]  # keep it alive


def install(gpu: Gpu = H200) -> Any:
    """Make ``vllm.platforms.current_platform`` a CUDA platform for ``gpu``.

    Call before anything reads ``current_platform``; a second call with
    another GPU swaps the answers of the same platform object.
    """
    global _installed
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    _stub_compiled_ops()
    import vllm.platforms as platforms
    from vllm.platforms.cuda import CudaPlatformBase
    from vllm.platforms.interface import DeviceCapability

    class CpuHostedCudaPlatform(CudaPlatformBase):
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            assert _installed is not None
            return DeviceCapability(*_installed.capability)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            assert _installed is not None
            return _installed.name

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            assert _installed is not None
            return _installed.memory_gib << 30

        @classmethod
        def is_fully_connected(cls, physical_device_ids: list[int]) -> bool:
            return True

        @classmethod
        def device_count(cls) -> int:
            # An 8-GPU node unless told otherwise (a one-GPU image build host).
            return int(os.environ.get("DSV4_CPU_HOSTED_GPU_COUNT", "8"))

    _installed = gpu
    if not isinstance(platforms._current_platform, CpuHostedCudaPlatform):
        platforms._current_platform = CpuHostedCudaPlatform()
    return platforms._current_platform


def installed_gpu() -> Gpu | None:
    return _installed


def device_properties(gpu: Gpu) -> Any:
    """What kernels read from ``torch.cuda.get_device_properties`` (SM count)."""
    return types.SimpleNamespace(
        name=gpu.name,
        major=gpu.capability[0],
        minor=gpu.capability[1],
        multi_processor_count=gpu.sm_count,
        total_memory=gpu.memory_gib << 30,
    )


def install_device_properties(gpu: Gpu) -> None:
    """Make ``torch.cuda.get_device_properties`` answer for ``gpu`` in this
    process (no GPU to ask)."""
    import torch

    torch.cuda.get_device_properties = lambda device=None: device_properties(gpu)  # type: ignore[assignment]
