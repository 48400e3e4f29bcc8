"""mHC TileLang kernels of a registry-era vLLM tree (0.33.0, 0.34.0): runtime keys,
registrations, compiles.

DeepSeek V4's NVIDIA model runs mHC through five wrappers
(``vllm/model_executor/kernels/mhc/tilelang.py``) over the ``VllmTileLangJitKernel``
classes of ``tilelang_kernels.py``; each class launches one of eight
``@tilelang.jit`` factories. TileLang 0.1.12 (0.33.0's pin) caches a factory's
kernels by its phase-1 key -- every argument that is not a tensor, defaults
applied -- plus a phase-2 key from ``T.const`` shape variables, which these
factories do not use (``num_tokens`` is ``T.dynamic``). A key here is that
phase-1 key as a sorted tuple of ``(name, value)``.

* :func:`record_compiles` replaces the factories by recorders: a runtime call
  (``factory(*args)``) and a warmup compile (``compile_tilelang`` ->
  ``factory.compile(*args)``) record the key and compile nothing. When the real
  ``tilelang`` imports, each new key is checked against TileLang's own binder.
* :func:`runtime_keys` builds the real target ``DeepseekV4Model`` and the real
  ``DeepSeekV4MTP`` draft from the tree's ``VllmConfig`` (attention, MoE,
  embeddings and projections stubbed, meta tensors) and runs their forward
  passes -- and the draft's ``compute_logits`` -- at every token count a
  forward can see: 1..max_num_batched_tokens (both runners bound every target
  and draft pass by it; CUDA-graph sizes are inside that range).
* :func:`register` builds the same two models inside the lifecycle steps where
  the runners build them (``target_model``: the runner's
  ``model_loader.load_model``; ``drafter_model``: the drafter's / speculator's
  ``load_model``), so their ``register_warmup`` calls are recorded.

The device is the installed platform's (:mod:`.platform`): its SM count feeds
``compute_num_split``, its capability the fused post + pre config. DeepGEMM is
"installed" (vLLM's CUDA wheels vendor it); whether vLLM uses it is the tree's
own ``is_deep_gemm_supported()`` (``VLLM_USE_DEEP_GEMM``). DeepGEMM's
``tf32_hc_prenorm_gemm`` is a no-op.

TileLang 0.1.12 installs and imports on CPU (``pip install --no-deps --target
DIR tilelang==0.1.12 apache-tvm-ffi==0.1.11 'z3-solver<4.15.5' ml-dtypes
torch-c-dlpack-ext``, DIR on ``PYTHONPATH`` after Triton's): with it every key
is checked against its binder. Without it the 0.26.0 driver's stand-in
package is used; the key rule is the same.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

from dsv4warmup.legacy.mhc import _stub_tilelang, _StubModule, torch_tf32_hc_prenorm_gemm
from dsv4warmup.serving import ServingConfig

from . import platform

KERNELS_MODULE = "vllm.model_executor.kernels.mhc.tilelang_kernels"
WRAPPERS_MODULE = "vllm.model_executor.kernels.mhc.tilelang"
MODEL_MODULE = "vllm.models.deepseek_v4.nvidia.model"
MTP_MODULE = "vllm.models.deepseek_v4.nvidia.mtp"

# The @tilelang.jit factories of tilelang_kernels.py (audit rows).
KERNELS: tuple[str, ...] = (
    "mhc_pre_big_fuse_tilelang",
    "mhc_pre_big_fuse_with_norm_tilelang",
    "mhc_pre_big_fuse_broadcast_with_norm_tilelang",
    "mhc_fused_tilelang",
    "mhc_post_tilelang",
    "hc_prenorm_gemm_tilelang",
    "hc_prenorm_gemm_block_m_tilelang",
    "hc_head_fuse_tilelang",
)

Key = tuple[tuple[str, Any], ...]
KeysByKernel = dict[str, set[Key]]

# Target layers built for the runtime side: layer 0 (broadcast pre) and two
# more (fused post + pre between layers); deeper layers repeat layer 1's calls.
RUNTIME_TARGET_LAYERS = 3


# --------------------------------------------------------------------------
# TileLang: the real package when it imports, else a stand-in
# --------------------------------------------------------------------------


def real_tilelang_available() -> bool:
    if isinstance(sys.modules.get("tilelang"), _StubModule):
        return False
    try:
        importlib.import_module("tilelang")
        importlib.import_module("tilelang.language")
    except Exception:  # missing, or its native libraries
        return False
    return True


def _install_stand_in() -> None:
    """The 0.26.0 driver's stand-in ``tilelang``, findable by import specs
    (0.33.0's ``has_tilelang`` asks ``importlib.util.find_spec``)."""
    for name, module in _stub_tilelang().items():
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = module


def _is_tensor(value: Any) -> bool:
    """A runtime tensor or a compile-only ``TileLangWarmupTensor``."""
    import torch

    return isinstance(value, torch.Tensor) or (
        hasattr(value, "dtype") and hasattr(value, "shape") and hasattr(value, "stride")
    )


def static_key(factory: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Key:
    """TileLang 0.1.12's phase-1 key of ``factory(*args, **kwargs)``: every
    parameter that is not a tensor, defaults applied, by name."""
    bound = factory.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return tuple(sorted((k, v) for k, v in bound.arguments.items() if not _is_tensor(v)))


def _tilelang_key(factory: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Key | None:
    """The same key from the real TileLang's own argument binder, if present."""
    func = getattr(factory, "func", None)
    binder = getattr(func, "_argument_binder", None)
    if binder is None:
        return None
    return tuple(sorted(binder.bind(args, kwargs).compile_kwargs.items()))


class _FactoryRecorder:
    """Stands in for one factory: records keys; compiles and launches nothing."""

    def __init__(self, name: str, factory: Any, sink: KeysByKernel) -> None:
        self.__name__ = name
        self.factory = factory
        self.signature = factory.signature
        self.sink = sink
        self.checked: set[Key] = set()

    def _record(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        key = static_key(self.factory, args, kwargs)
        if key not in self.checked:
            real = _tilelang_key(self.factory, args, kwargs)
            if real is not None and real != key:
                raise AssertionError(f"{self.__name__}: TileLang key {real} != {key}")
            self.checked.add(key)
        self.sink.setdefault(self.__name__, set()).add(key)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self._record(args, kwargs)

    def compile(self, *args: Any, **kwargs: Any) -> None:
        self._record(args, kwargs)

    def par_compile(self, configs: Iterable[Any], num_workers: int | None = None) -> list[None]:
        configs = list(configs)
        for cfg in configs:
            if isinstance(cfg, dict):
                self._record((), cfg)
            else:
                self._record(tuple(cfg), {})
        return [None] * len(configs)


# --------------------------------------------------------------------------
# The tree's mHC modules as on the installed CUDA device
# --------------------------------------------------------------------------


def _gpu() -> platform.Gpu:
    gpu = platform.installed_gpu()
    if gpu is None:
        raise RuntimeError("install a platform first (dsv4warmup.registry.platform.install)")
    return gpu


def gpu_for(cfg: ServingConfig) -> platform.Gpu:
    """The GPU whose SM count ``cfg`` names: the installed one if it agrees."""
    installed = platform.installed_gpu()
    if installed is not None and installed.sm_count == cfg.sm_count:
        return installed
    for gpu in (platform.H200, platform.B200):
        if gpu.sm_count == cfg.sm_count:
            return gpu
    raise ValueError(f"no known GPU with {cfg.sm_count} SMs")


def kernels_module() -> types.ModuleType:
    """``tilelang_kernels`` imported as on CUDA (the platform must be CUDA)."""
    if KERNELS_MODULE in sys.modules:
        return sys.modules[KERNELS_MODULE]
    from vllm.platforms import current_platform

    if not current_platform.is_cuda():
        raise RuntimeError(
            "needs a CUDA platform: a GPU, or dsv4warmup.registry.platform.install()"
        )
    with contextlib.ExitStack() as stack:
        if not real_tilelang_available():
            _install_stand_in()
        from vllm.utils import import_utils

        stack.enter_context(mock.patch.object(import_utils, "has_tilelang", lambda: True))
        importlib.import_module("vllm.tilelang_utils")
        return importlib.import_module(KERNELS_MODULE)


def _clear_caches() -> None:
    import vllm.utils.deep_gemm as deep_gemm

    kernels = kernels_module()
    for fn in (
        kernels.compute_num_split,
        kernels._fused_post_pre_single_pass_supported,
        deep_gemm.is_deep_gemm_supported,
    ):
        fn.cache_clear()


@contextlib.contextmanager
def _device(
    prenorm_gemm: Callable[..., Any] = lambda *a, **k: None,
    *,
    real_gpu: bool = False,
) -> Iterator[types.ModuleType]:
    """The installed GPU's SM count (the real one with ``real_gpu``),
    DeepGEMM installed (its split-k pre-norm GEMM is ``prenorm_gemm``: a no-op
    on CPU, a torch stand-in on a GPU without DeepGEMM), and fresh caches of
    everything derived from them."""
    import torch
    import vllm.utils.deep_gemm as deep_gemm
    from vllm.utils import import_utils

    kernels = kernels_module()
    with contextlib.ExitStack() as stack:
        if not real_gpu:
            props = types.SimpleNamespace(multi_processor_count=_gpu().sm_count)
            stack.enter_context(
                mock.patch.object(torch.cuda, "get_device_properties", lambda *_: props)
            )
        stack.enter_context(mock.patch.object(import_utils, "has_deep_gemm", lambda: True))
        stack.enter_context(mock.patch.object(deep_gemm, "has_deep_gemm", lambda: True))
        stack.enter_context(mock.patch.object(deep_gemm, "tf32_hc_prenorm_gemm", prenorm_gemm))
        _clear_caches()
        stack.callback(_clear_caches)
        yield kernels


def deep_gemm_used() -> bool:
    """The tree's ``is_deep_gemm_supported()`` on the installed device."""
    import vllm.utils.deep_gemm as deep_gemm

    with _device():
        return deep_gemm.is_deep_gemm_supported()


@contextlib.contextmanager
def record_compiles() -> Iterator[KeysByKernel]:
    """While active, every factory call or compile records its key (by
    factory name) instead of compiling."""
    keys: KeysByKernel = {}
    with _device() as kernels, contextlib.ExitStack() as stack:
        for name in KERNELS:
            factory = getattr(kernels, name)
            if isinstance(factory, _FactoryRecorder):
                factory = factory.factory  # nested recording
            stack.enter_context(
                mock.patch.object(kernels, name, _FactoryRecorder(name, factory, keys))
            )
        yield keys


# --------------------------------------------------------------------------
# The real DeepSeek V4 CUDA model with everything but mHC stubbed
# --------------------------------------------------------------------------


class _CallStub:
    """Stands in for a kernel object at call time; registering is a no-op."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def register_warmup(self, *args: Any, **kwargs: Any) -> None:
        pass


def _module(cls_name: str, forward: Callable[..., Any]) -> Callable[..., Any]:
    def build(*args: Any, **kwargs: Any) -> Any:
        from torch import nn

        cls = type(cls_name, (nn.Module,), {"forward": lambda self, *a, **k: forward(*a, **k)})
        return cls()

    return build


def _attention(vllm_config: Any) -> Callable[..., Any]:
    return _module("Attention", lambda positions, x, *_: x)


def _embedding(num_embeddings: int, embedding_dim: int, *args: Any, **kwargs: Any) -> Any:
    import torch

    return _module(
        "Embedding",
        lambda ids: torch.zeros(
            ids.shape[0], embedding_dim, dtype=torch.bfloat16, device=ids.device
        ),
    )()


def _shared_head(config: Any, *args: Any, **kwargs: Any) -> Any:
    from torch import nn
    from vllm.model_executor.layers.layernorm import RMSNorm

    head = nn.Module()
    head.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
    head.head = nn.Identity()
    return head


class _PPGroup:
    is_first_rank = True
    is_last_rank = True
    rank_in_group = 0
    world_size = 1


@contextlib.contextmanager
def _model_stubs(*, call_time: bool) -> Iterator[None]:
    """Stub what is not mHC. ``call_time`` also replaces the MTP layer's
    Triton kernels (their registrations stay real when building for
    :func:`register`; their launches are not this group's)."""
    import torch
    from vllm.distributed import parallel_state

    model = importlib.import_module(MODEL_MODULE)
    mtp = importlib.import_module(MTP_MODULE)
    patches: list[tuple[Any, str, Any]] = [
        (model, "_select_dsv4_attn_cls", _attention),
        (model, "DeepseekV4MoE", _module("MoE", lambda x, *_: x)),
        (model, "VocabParallelEmbedding", _embedding),
        (model, "get_pp_group", _PPGroup),
        (parallel_state, "get_pp_group", _PPGroup),
        (torch.cuda, "Stream", lambda *a, **k: None),
        (mtp, "ReplicatedLinear", lambda *a, **k: _module("Linear", lambda x: x)()),
        (mtp, "VocabParallelEmbedding", _embedding),
        (mtp, "SharedHead", _shared_head),
        (mtp, "LogitsProcessor", lambda *a, **k: lambda head, hidden_states: hidden_states),
    ]
    if call_time:
        patches += [
            (
                mtp,
                "_FUSED_MTP_INPUT_RMSNORM_KERNEL",
                _CallStub(lambda emb, pos, prev, *a: (emb, prev)),
            ),
            (
                mtp,
                "_MTP_SHARED_HEAD_RMSNORM_KERNEL",
                _CallStub(lambda hidden_states, *a: hidden_states),
            ),
        ]
    with contextlib.ExitStack() as stack:
        for owner, name, value in patches:
            if hasattr(owner, name):
                stack.enter_context(mock.patch.object(owner, name, value))
        yield


@dataclass
class Models:
    target: Any
    draft: Any | None


def _build_target(vllm_config: Any, device: str, num_layers: int | None = None) -> Any:
    import torch
    from torch import nn

    model = importlib.import_module(MODEL_MODULE)
    hf = vllm_config.model_config.hf_config
    with contextlib.ExitStack() as stack:
        if num_layers is not None:
            stack.enter_context(mock.patch.object(hf, "num_hidden_layers", num_layers))
        stack.enter_context(torch.device(device))
        target = model.DeepseekV4Model(vllm_config=vllm_config, prefix="model")
    target.finalize_mhc_broadcast_weights()  # what load_weights does last
    target.norm = nn.Identity()  # the final RMSNorm runs after hc_head
    return target


def _build_draft(vllm_config: Any, device: str) -> Any | None:
    import torch

    spec = vllm_config.speculative_config
    if spec is None or spec.method != "mtp":
        return None
    mtp = importlib.import_module(MTP_MODULE)
    with torch.device(device):
        # load_eagle_model -> get_model(vllm_config, model_config=draft): the
        # model class gets the target's VllmConfig.
        return mtp.DeepSeekV4MTP(vllm_config=vllm_config, prefix="")


@contextlib.contextmanager
def _construction(vllm_config: Any, **device: Any) -> Iterator[None]:
    """What building or running the models needs: the device (``_device``
    keywords) and the current ``VllmConfig``."""
    from vllm.config import set_current_vllm_config

    with (
        _device(**device),
        contextlib.redirect_stdout(sys.stderr),
        set_current_vllm_config(vllm_config),
    ):
        yield


def build_models(vllm_config: Any, *, device: str = "meta") -> Models:
    """The target (``RUNTIME_TARGET_LAYERS`` layers) and the MTP draft."""
    with _construction(vllm_config), _model_stubs(call_time=True):
        return Models(
            _build_target(vllm_config, device, RUNTIME_TARGET_LAYERS),
            _build_draft(vllm_config, device),
        )


@contextlib.contextmanager
def on_cuda(vllm_config: Any, prenorm_gemm: Any = None) -> Iterator[tuple[Models, Any]]:
    """The models on CUDA with random weights and a real ``JitWarmupRegistry``
    of what they register, as the runners do it: the target built inside the
    active registry (``load_model``), the MTP draft outside it (the drafter's
    ``load_model``). Run ``forward_all`` inside ``_model_stubs(call_time=True)``
    while this is active. ``prenorm_gemm`` stands in for DeepGEMM's GEMM."""
    import torch
    from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry

    registry = JitWarmupRegistry(vllm_config)
    with _construction(vllm_config, prenorm_gemm=prenorm_gemm, real_gpu=True):
        with _model_stubs(call_time=False):
            with registry.activate():
                target = _build_target(vllm_config, "cuda", RUNTIME_TARGET_LAYERS)
            draft = _build_draft(vllm_config, "cuda")
        with torch.no_grad():
            for model in (target, draft):
                for param in model.parameters() if model is not None else ():
                    param.normal_(0.0, 0.01)
        with _model_stubs(call_time=False):  # its pipeline-parallel rank
            target.finalize_mhc_broadcast_weights()  # for the new weights
        yield Models(target, draft), registry


def register(vllm_config: Any, runner: str) -> None:
    """Build the real target and MTP draft, each in the set-up step where
    ``runner`` builds it, so their mHC ``register_warmup`` calls are recorded."""
    from . import lifecycle

    del runner  # both runners build the target in load_model, the draft in the drafter's
    with _construction(vllm_config), _model_stubs(call_time=False):
        with lifecycle.step("target_model"):
            _build_target(vllm_config, "meta")
        with lifecycle.step("drafter_model"):
            _build_draft(vllm_config, "meta")


# --------------------------------------------------------------------------
# Runtime side
# --------------------------------------------------------------------------


def forward_all(models: Models, num_tokens: int) -> None:
    """One target forward and one draft step (forward + logits) with
    ``num_tokens`` tokens (inside ``_model_stubs(call_time=True)``)."""
    import torch

    device = models.target.hc_head_fn.device
    ids = torch.zeros(num_tokens, dtype=torch.int64, device=device)
    positions = torch.zeros(num_tokens, dtype=torch.int64, device=device)
    models.target.forward(ids, positions, None)
    if models.draft is not None:
        hidden, hc_mult = models.target.config.hidden_size, models.target.hc_mult
        prev = torch.zeros(num_tokens, hc_mult * hidden, dtype=torch.bfloat16, device=device)
        embeds = torch.zeros(num_tokens, hidden, dtype=torch.bfloat16, device=device)
        out = models.draft.forward(ids, positions, prev, inputs_embeds=embeds)
        models.draft.compute_logits(out)


def launched_by_tokens(vllm_config: Any, counts: Iterable[int]) -> dict[int, KeysByKernel]:
    """Keys the target and draft passes launch at each token count."""
    models = build_models(vllm_config)
    out: dict[int, KeysByKernel] = {}
    with record_compiles() as keys, _model_stubs(call_time=True), _no_grad():
        for num_tokens in counts:
            forward_all(models, num_tokens)
            out[num_tokens] = {k: set(v) for k, v in keys.items()}
            keys.clear()
    return out


@contextlib.contextmanager
def _no_grad() -> Iterator[None]:
    import torch

    with torch.no_grad():
        yield


def token_counts(vllm_config: Any) -> list[int]:
    """Token counts a target or draft forward pass can see: only what vLLM's
    scheduler can put in one step for this configuration -- at most
    max_num_batched_tokens, and at most max_num_seqs requests of at most
    max_model_len tokens each -- plus the CUDA-graph capture size such a
    count is padded up to (within max_num_batched_tokens)."""
    sched = vllm_config.scheduler_config
    max_tokens = sched.max_num_batched_tokens
    bound = min(max_tokens, sched.max_num_seqs * vllm_config.model_config.max_model_len)
    sizes = sorted(s for s in vllm_config.compilation_config.cudagraph_capture_sizes or [])
    counts = set(range(1, bound + 1))
    padded = {next((s for s in sizes if s >= t), t) for t in counts}
    return sorted(counts | {s for s in padded if s <= max_tokens})


def _witness(runner: str, num_tokens: int, cfg: ServingConfig, draft: bool) -> str:
    per_req = min(num_tokens, cfg.max_model_len)
    reqs = -(-num_tokens // per_req)
    what = "target forward + MTP draft step 0" if draft else "target forward"
    return (
        f"{runner}: {what}, {num_tokens} tokens (prefill: {reqs} req(s) of <= {per_req} "
        f"new tokens; deep_gemm={'on' if deep_gemm_used() else 'off'})"
    )


_RUNTIME_CACHE: dict[tuple[Any, ...], dict[str, dict[Key, int]]] = {}


def runtime_first_counts(cfg: ServingConfig) -> dict[str, dict[Key, int]]:
    """Per kernel, every runtime key with the smallest token count giving it."""
    from . import engine

    gpu = gpu_for(cfg)
    vllm_config = engine.vllm_config(cfg, gpu)
    ident = (cfg, gpu, deep_gemm_used())
    if ident not in _RUNTIME_CACHE:
        first: dict[str, dict[Key, int]] = {}
        for t, keys in launched_by_tokens(vllm_config, token_counts(vllm_config)).items():
            for kernel, found in keys.items():
                for key in found:
                    first.setdefault(kernel, {}).setdefault(key, t)
        _RUNTIME_CACHE[ident] = first
    return _RUNTIME_CACHE[ident]


def runtime_keys(cfg: ServingConfig, runner: str) -> dict[str, dict[Key, str]]:
    """Every key the real mHC call sites of ``runner`` launch over ``cfg``'s
    token counts, each with one witness batch.

    Both runners run the target and the draft at any count up to
    max_num_batched_tokens (mixed prefill/decode batches, spec-decode query
    lengths and CUDA-graph padding all land inside that range), and mHC keys
    depend on the count only; the runner changes the witness text alone.
    """
    first = runtime_first_counts(cfg)
    draft = cfg.uses_mtp
    return {
        kernel: {key: _witness(runner, t, cfg, draft) for key, t in keys.items()}
        for kernel, keys in first.items()
    }


def count(keys: dict[str, Any]) -> int:
    return sum(len(v) for v in keys.values())


# --------------------------------------------------------------------------
# One interpreter's report over several cases (run per tree by the tests)
# --------------------------------------------------------------------------


@contextlib.contextmanager
def deep_gemm_env(enabled: bool) -> Iterator[None]:
    """``VLLM_USE_DEEP_GEMM`` as a deployment sets it (read when the cached
    ``is_deep_gemm_supported`` is next evaluated)."""
    import os

    previous = os.environ.get("VLLM_USE_DEEP_GEMM")
    os.environ["VLLM_USE_DEEP_GEMM"] = "1" if enabled else "0"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("VLLM_USE_DEEP_GEMM", None)
        else:
            os.environ["VLLM_USE_DEEP_GEMM"] = previous


@contextlib.contextmanager
def deployment_on_cuda(cfg: ServingConfig, deep_gemm: bool) -> Iterator[tuple[Any, Models, Any]]:
    """``cfg``'s vLLM config on this GPU, and :func:`on_cuda`'s models and
    registry for it, with the mHC keys of a deployment with or without
    DeepGEMM (where DeepGEMM is absent its split-K GEMM runs in torch)."""
    from . import engine

    with deep_gemm_env(deep_gemm):
        vllm_config = engine.vllm_config(cfg, "machine")
        with on_cuda(vllm_config, torch_tf32_hc_prenorm_gemm) as (models, registry):
            yield vllm_config, models, registry


def report(cfg: ServingConfig, deep_gemm: bool) -> dict[str, Any]:
    """Runtime keys (with witnesses) and warmed keys per runner, keys as
    ``repr`` strings: ``{runner: {kernel: {"runtime": {key: witness},
    "warmed": [key]}}}``."""
    from . import engine, lifecycle

    out: dict[str, Any] = {}
    with deep_gemm_env(deep_gemm):
        vllm_config = engine.vllm_config(cfg, gpu_for(cfg))
        for runner in lifecycle.available_runners():
            runtime = runtime_keys(cfg, runner)
            warmed = lifecycle.warmed_keys(vllm_config, runner, [register], [record_compiles])
            out[runner] = {
                kernel: {
                    "runtime": {repr(k): w for k, w in runtime.get(kernel, {}).items()},
                    "warmed": sorted(repr(k) for k in warmed.keys.get(kernel, set())),
                }
                for kernel in KERNELS
            }
    return out


def main(argv: list[str]) -> None:
    """``python -m dsv4warmup.registry.mhc CASES_JSON``: CASES_JSON is a list of
    ``{"name", "cfg": ServingConfig fields, "deep_gemm"}``; prints one JSON
    line ``{name: report}``."""
    import json
    import logging

    logging.disable(logging.WARNING)
    results: dict[str, Any] = {}
    with contextlib.redirect_stdout(sys.stderr):
        for case in json.loads(argv[0]):
            fields = dict(case["cfg"])
            for name in ("cudagraph_capture_sizes", "compress_ratios"):
                if isinstance(fields.get(name), list):
                    fields[name] = tuple(fields[name])
            results[case["name"]] = report(ServingConfig(**fields), case["deep_gemm"])
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])


def owns(kernel: Any) -> bool:
    """The mHC TileLang owners registered for warmup (the audit's filter)."""
    return type(kernel).__module__.startswith("vllm.model_executor.kernels.mhc.")
