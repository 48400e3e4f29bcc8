"""Run a 0.33.0 tree's ``vllm`` CLI on this CPU-only machine, as on an H200.

``python -m dsv4warmup.registry.cpu_cli warmup-kernels <model> [flags]`` runs the
tree's own ``vllm.entrypoints.cli.main.main()`` after :func:`install`. Model
constructors then build on fake tensors as they do on the GPU; what this
machine lacks is stood in for:

* the platform answers as an NVIDIA GPU (:mod:`.platform`), without pinned
  host memory;
* packages a CUDA install of vLLM brings but this machine has not (CuTeDSL
  ``cutlass``, ``cuda.bindings``, ``quack``, TileLang, DeepGEMM, FlashInfer, vLLM's
  FlashAttention CuTe sources) import as permissive stand-ins, so the code
  paths that exist on the GPU are taken (e.g. DeepGEMM present, as in vLLM's
  wheel, which vendors it);
* ``torch.cuda.Stream`` / ``Event`` construct (constructors keep side streams)
  and ``torch.cuda.get_device_properties`` answers for the GPU (SM count),
  ``torch.accelerator.current_device_index`` for device 0;
* compiled vLLM ops resolve to stand-ins that fail if called (constructors only
  look them up);
* Triton's driver is the lead's sm90 stand-in (:func:`.lifecycle.cpu_triton_driver`),
  so compile keys derive as on an H200.

Nothing here compiles or launches a kernel.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterator
from typing import Any
from unittest import mock

from . import platform

_STAND_IN_ROOTS = (
    "cutlass",
    "cuda",
    "quack",
    "tilelang",
    "deep_gemm",
    "flashinfer",  # the V1 sampler asks it whether it can sample
    # imported by the API server modules the CLI's main() loads, never used
    "uvicorn",
    "watchfiles",
    "orjson",
)
_STAND_IN_PREFIXES = ("vllm.vllm_flash_attn.cute",)
_OP_NAMESPACES = (
    "_C",
    "_moe_C",
    "_C_cache_ops",
    "_C_custom_ar",
    "_vllm_fa2_C",
    "_vllm_fa3_C",
    "_flashmla_C",
    "_flashmla_extension_C",
)


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(
        self,
        roots: tuple[str, ...] = _STAND_IN_ROOTS,
        prefixes: tuple[str, ...] = _STAND_IN_PREFIXES,
    ) -> None:
        self.roots = roots
        self.prefixes = prefixes

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.split(".")[0] in self.roots or name.startswith(self.prefixes):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        module = mock.MagicMock(name=spec.name)
        module.__path__ = []
        module.__spec__ = spec
        module.__name__ = spec.name
        if spec.name == "tilelang":
            # No disk cache to share or name (vLLM reads `from tilelang import
            # env`, the mock's attribute): else a directory called after the
            # mock's repr appears in the working directory.
            module.env.is_cache_enabled = lambda: False
        return module

    def exec_module(self, module: Any) -> None:
        pass


class _NoStream:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class _StandInOp:
    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"compiled op {self.__name__} called on the CPU stand-in")

    def __getattr__(self, name: str) -> Any:
        return _StandInOp(f"{self.__name__}.{name}")


def _permissive_op_namespaces() -> None:
    import torch
    import vllm._custom_ops  # noqa: F401  registers fakes for the ops that exist

    class Namespace:
        def __init__(self, original: Any) -> None:
            self._original = original

        def __getattr__(self, name: str) -> Any:
            try:
                return getattr(self._original, name)
            except AttributeError:
                if name.startswith("__"):
                    raise
                return _StandInOp(f"{self._original.name}.{name}")

    for namespace in _OP_NAMESPACES:
        torch.ops.__dict__[namespace] = Namespace(getattr(torch.ops, namespace))


_installed = False


def install(
    gpu: platform.Gpu = platform.H200,
    stand_ins: tuple[str, ...] | None = None,
    permissive_ops: bool = True,
) -> None:
    """Make this process import and build a 0.33.0 tree's models as on ``gpu``.

    Args:
        gpu: The GPU the platform answers as.
        stand_ins: Root packages to stand in for (default: every package a
            CUDA install brings that this machine lacks, and vLLM's
            FlashAttention CuTe sources); ``("tilelang",)`` leaves missing what
            the GPU lab lacks (:mod:`.lab_host`).
        permissive_ops: Resolve compiled ops the stub library lacks to
            stand-ins (off: a lookup of one fails, as on the lab).
    """
    global _installed
    if _installed:
        return
    current = platform.install(gpu)
    # Host buffers are plain memory here (no CUDA allocator to pin them).
    type(current).is_pin_memory_available = classmethod(lambda cls: False)  # type: ignore[method-assign,assignment]
    with contextlib.suppress(ImportError):
        import tvm_ffi  # noqa: F401  caches "no cuda.bindings" before the stand-ins
    if stand_ins is None:
        sys.meta_path.insert(0, _StandInFinder())
    else:
        sys.meta_path.insert(0, _StandInFinder(stand_ins, ()))
    import torch

    torch.cuda.Stream = _NoStream  # type: ignore[misc,assignment]
    torch.cuda.Event = _NoStream  # type: ignore[misc,assignment]
    platform.install_device_properties(gpu)
    torch.accelerator.current_device_index = lambda: 0  # type: ignore[assignment]
    if permissive_ops:
        _permissive_op_namespaces()
    _installed = True


@contextlib.contextmanager
def cpu_hosted_gpu(gpu: platform.Gpu = platform.H200) -> Iterator[None]:
    from . import lifecycle

    install(gpu)
    with lifecycle.cpu_triton_driver():
        yield


def main(argv: list[str]) -> None:
    with cpu_hosted_gpu():
        from vllm.entrypoints.cli.main import main as vllm_main

        sys.argv = ["vllm", *argv]
        vllm_main()


if __name__ == "__main__":
    main(sys.argv[1:])
