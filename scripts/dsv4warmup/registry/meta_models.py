"""Build a registry-era tree's DeepSeek V4 target and MTP draft models on the meta device.

The model classes are the tree's own, constructed through the model loader's
``create_model`` exactly as the runners construct them (no weights are loaded):
every ``register_warmup`` call and every attention layer the constructors make
is the real one. What a CPU-only machine lacks is stood in for while building
(:func:`cpu_stand_ins`):

* vLLM's process groups: stand-ins with the configuration's world sizes;
* compiled ops vLLM binds at construction (``torch.ops._C.*``): stubs that
  raise when called;
* GPU-only packages the model imports (CuTe DSL, TileLang, ``cuda.bindings``,
  quack, DeepGEMM, FlashAttention's CuTe kernels), when not installed: modules whose
  attributes are mocks (nothing from them runs);
* ``torch.cuda.Stream`` / ``Event``: inert stand-ins;
* tensors the constructors place on the GPU: the meta device; page-locked
  host tensors: plain ones.

:func:`kv_cache_groups` then runs the engine core's own KV-cache grouping on
the layers' own KV-cache specs, as ``EngineCore._initialize_kv_caches`` does.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any
from unittest import mock

# Packages a DeepSeek V4 model imports that only exist on GPU machines.
_GPU_ONLY_MODULES = (
    "cutlass",
    "tilelang",
    "cuda",
    "quack",
    "deep_gemm",  # DeepSeek V4's sparse indexer refuses to build without it
    "vllm.vllm_flash_attn.cute",
)
_COMPILED_OP_NAMESPACES = ("_C", "_moe_C", "_C_cache_ops", "_C_custom_ar")


class MockModule(types.ModuleType):
    """A GPU-only package that is not installed: every attribute vLLM reads
    is a ``MagicMock``, made once."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = mock.MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


def _imported_by_vllm() -> bool:
    """Whether the import being resolved comes from a vLLM module (other
    packages probe for these names and must keep getting ImportError)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not (name.startswith("importlib") or name == __name__):
            return name == "vllm" or name.startswith("vllm.")
        frame = frame.f_back
    return False


class _MockModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: tuple[str, ...]) -> None:
        self.roots = roots
        self.created: list[str] = []

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if any(name == r or name.startswith(r + ".") for r in self.roots) and (
            _imported_by_vllm() or name.rpartition(".")[0] in self.created
        ):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = MockModule(spec.name)
        module.__path__ = []
        self.created.append(spec.name)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Torch on one intra-op thread: the drives' tensors are tiny or on
    ``meta``, where more threads only add overhead."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@functools.cache
def _missing_gpu_only_modules() -> tuple[str, ...]:
    missing = []
    for name in _GPU_ONLY_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return tuple(missing)


@contextlib.contextmanager
def _mock_modules() -> Iterator[None]:
    """The GPU-only packages that are not installed, as seen from vLLM's
    modules while the model is built; they leave ``sys.modules`` afterwards
    (the vLLM modules keep what they imported)."""
    finder = _MockModuleFinder(_missing_gpu_only_modules())
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in finder.created:
            if isinstance(sys.modules.get(name), MockModule):
                del sys.modules[name]


class _StubOp:
    """A compiled op (or one of its overloads) that is absent: raises when
    called."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, overload: str) -> Any:
        if overload.startswith("__"):
            raise AttributeError(overload)
        return _StubOp(f"{self.name}.{overload}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self.name} is a CPU stand-in")


@contextlib.contextmanager
def _stub_compiled_ops() -> Iterator[None]:
    import torch._ops as ops

    # Registers fake implementations of the compiled ops that exist
    # (``hasattr`` probes), so it must not see the stand-ins.
    import vllm._custom_ops  # noqa: F401

    original = ops._OpNamespace.__getattr__

    def getattr_(self: Any, name: str) -> Any:
        try:
            return original(self, name)
        except AttributeError:
            if self.name not in _COMPILED_OP_NAMESPACES:
                raise

            return _StubOp(f"torch.ops.{self.name}.{name}")

    ops._OpNamespace.__getattr__ = getattr_  # type: ignore[method-assign]
    try:
        yield
    finally:
        ops._OpNamespace.__getattr__ = original  # type: ignore[method-assign]


def _group(world_size: int, name: str) -> Any:
    return SimpleNamespace(
        world_size=world_size,
        rank_in_group=0,
        rank=0,
        local_rank=0,
        ranks=list(range(world_size)),
        is_first_rank=True,
        is_last_rank=True,
        unique_name=name,
        device_group=None,
        cpu_group=None,
        device_communicator=None,
        use_custom_op_call=False,
    )


@contextlib.contextmanager
def _process_groups(vllm_config: Any) -> Iterator[None]:
    """Rank 0 of each of vLLM's groups, sized as the configuration says."""
    import vllm.distributed.parallel_state as ps

    pc = vllm_config.parallel_config
    tp = pc.tensor_parallel_size
    dp = pc.data_parallel_size
    sizes = {
        "_WORLD": tp * pc.pipeline_parallel_size,
        "_INNER_DP_WORLD": 1,
        "_TP": tp,
        "_ETP": 1,
        "_DCP": pc.decode_context_parallel_size,
        "_PCP": pc.prefill_context_parallel_size,
        "_PP": pc.pipeline_parallel_size,
        "_DP": dp,
        "_EP": tp * dp if pc.enable_expert_parallel else 1,
        "_EPLB": 1,
    }
    saved = {name: getattr(ps, name, None) for name in sizes}
    for name, size in sizes.items():
        if saved[name] is None:
            setattr(ps, name, _group(size, name.strip("_").lower()))
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(ps, name, value)


class _InertCudaObject:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _cuda_to_meta_mode() -> Any:
    import torch
    from torch.overrides import TorchFunctionMode

    def is_cuda(device: Any) -> bool:
        try:
            return torch.device(device).type == "cuda"
        except (RuntimeError, TypeError):
            return False

    class CudaToMeta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = dict(kwargs or {})
            if "device" in kwargs and is_cuda(kwargs["device"]):
                kwargs["device"] = "meta"
            if kwargs.get("pin_memory"):
                kwargs["pin_memory"] = False
            name = getattr(func, "__name__", "")
            if name in ("cuda", "pin_memory"):
                return args[0]
            if name == "to":
                args = tuple(
                    "meta" if isinstance(a, (str, torch.device)) and is_cuda(a) else a for a in args
                )
            return func(*args, **kwargs)

    return CudaToMeta()


@contextlib.contextmanager
def cpu_stand_ins(vllm_config: Any) -> Iterator[None]:
    """What building a model needs of a GPU machine (see the module doc)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(_mock_modules())
        stack.enter_context(_stub_compiled_ops())
        stack.enter_context(_process_groups(vllm_config))
        stack.enter_context(mock.patch("torch.cuda.Stream", _InertCudaObject))
        stack.enter_context(mock.patch("torch.cuda.Event", _InertCudaObject))
        stack.enter_context(_cuda_to_meta_mode())
        yield


def create_model(vllm_config: Any, model_config: Any = None, prefix: str = "") -> Any:
    """``get_model`` up to (not including) weight loading, on the meta device:
    ``initialize_model`` under the model dtype, as ``BaseModelLoader.load_model``
    calls it through ``create_model`` (whose quantization log line needs
    packages this machine lacks)."""
    import torch
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    model_config = model_config or vllm_config.model_config
    with (
        cpu_stand_ins(vllm_config),
        set_default_torch_dtype(model_config.dtype),
        torch.device("meta"),
    ):
        return initialize_model(vllm_config=vllm_config, model_config=model_config, prefix=prefix)


def attention_layer_names(vllm_config: Any) -> set[str]:
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    return set(get_layers_from_vllm_config(vllm_config, AttentionLayerBase))  # type: ignore[type-abstract]


def mark_draft_layers(vllm_config: Any, target_layer_names: set[str]) -> set[str]:
    """As both runners' drafter ``load_model`` do: attention layers the draft
    model added are draft layers. Returns their names."""
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    layers = get_layers_from_vllm_config(vllm_config, AttentionLayerBase)  # type: ignore[type-abstract]
    names = set(layers) - target_layer_names
    for name in names:
        layers[name].is_draft_layer = True
    return names


def kv_cache_groups(vllm_config: Any) -> list[Any]:
    """The engine core's global KV-cache groups for the layers built so far:
    the V1 runner's ``get_kv_cache_spec``, the KV-cache layout resolved and
    recorded as ``EngineCore`` and the workers do, then
    ``get_global_kv_cache_groups``."""
    from vllm.v1.attention.backends.utils import resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm.v1.worker.worker_base import WorkerBase

    runner = SimpleNamespace(vllm_config=vllm_config, shared_kv_cache_layers={})
    with mock.patch("vllm.v1.worker.gpu_model_runner.has_ec_transfer", lambda: False):
        specs = GPUModelRunner.get_kv_cache_spec(runner)  # type: ignore[arg-type]
    worker = SimpleNamespace(vllm_config=vllm_config)
    if vllm_config.cache_config.kv_cache_layout is None:
        supported = WorkerBase.get_supported_kv_cache_layouts(worker)  # type: ignore[arg-type]
        layout = resolve_kv_cache_layout(vllm_config, [supported], list(specs.values()))
        WorkerBase.set_kv_cache_layout(
            worker,  # type: ignore[arg-type]
            layout.name,
            vllm_config.parallel_config.cp_kv_cache_interleave_size,
        )
    return get_global_kv_cache_groups(vllm_config, [specs])
