"""mHC TileLang call sites on a machine without a GPU.

The CUDA DeepSeek V4 model calls five TileLang wrappers
(``vllm/model_executor/kernels/mhc/tilelang.py``); each launches
``@tilelang.jit`` factories of ``tilelang_kernels.py`` whose compile key is
the factory plus its static (non-tensor) arguments (``num_tokens`` is
``T.dynamic``). The wrappers pick those arguments through the pure helpers
of ``tilelang_dispatch.py``. This module records keys without compiling:

* the factories are replaced by recorders that store the key TileLang itself
  caches the kernel under (checked against ``JITFunc._parse_phase1_key`` when
  the real ``tilelang`` package imports; otherwise the same rule re-stated:
  every argument that is not a tensor, by name, as passed);
* ``tilelang_kernels`` is imported as on CUDA (platform checks answer "CUDA"),
  with a stand-in ``tilelang`` package when the real one is not installed;
* tensors live on the ``meta`` device; the SM count and DeepGEMM availability
  are the configuration's; DeepGEMM's ``tf32_hc_prenorm_gemm`` is a no-op, or
  raises like vLLM's placeholder when DeepGEMM is "missing".

Runtime side: ``capture_call_sites`` runs the real model code --
``DeepseekV4Model.forward`` of the target, ``DeepSeekV4MTP.forward`` and
``compute_logits`` of the MTP draft, built by their real ``__init__`` with
attention, MoE, embeddings and linear layers stubbed -- at sampled token
counts, recording the keys launched at the factories and the dispatch-helper
calls the wrappers made. Model code on meta tensors costs milliseconds per
pass, so the sweep over *every* token count (``runtime_keys``) calls those
dispatch helpers, with the arguments the wrappers passed, for each count;
``CallSites.launched == CallSites.selected`` at the sampled counts shows the
helpers' keys are what the wrappers launch.

Warmup side: ``run_warmup`` runs vLLM's warmup (site collection from the same
model objects, key enumeration, wrapper calls) and records what it launches
at the factories. It never sees the runtime side's data.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import types
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from dsv4warmup.serving import ServingConfig

KERNELS_MODULE = "vllm.model_executor.kernels.mhc.tilelang_kernels"
WRAPPERS_MODULE = "vllm.model_executor.kernels.mhc.tilelang"
DISPATCH_MODULE = "vllm.model_executor.kernels.mhc.tilelang_dispatch"

# A compile key as TileLang's JITImpl caches it: static arguments, by name.
StaticKey = tuple[tuple[str, Any], ...]
KeysByKernel = dict[str, set[StaticKey]]

# DeepSeek V4 config.json values ServingConfig does not carry (yet).
DEFAULT_HC_EPS = 1e-6
DEFAULT_HC_SINKHORN_ITERS = 20


def _cfg_value(cfg: ServingConfig, name: str, default: Any) -> Any:
    return getattr(cfg, name, default)


def deep_gemm_of(cfg: ServingConfig) -> bool:
    """Whether DeepGEMM is available in ``cfg`` (real deployments: yes)."""
    return bool(_cfg_value(cfg, "deep_gemm", True))


# --------------------------------------------------------------------------
# TileLang stand-in and recorders
# --------------------------------------------------------------------------


def real_tilelang_available() -> bool:
    if isinstance(sys.modules.get("tilelang"), _StubModule):
        return False
    try:
        importlib.import_module("tilelang")
    except (ImportError, OSError, RuntimeError):  # missing, or its libraries
        return False
    return True


class _StubModule(types.ModuleType):
    """Attribute access answers a placeholder (``tilelang.PassConfigKey.X``,
    ``tilelang.JITKernel`` in annotations)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.__name__}.{name}")


class _Placeholder:
    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> _Placeholder:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self._name}.{name}")

    def __repr__(self) -> str:
        return self._name

    def __hash__(self) -> int:
        return hash(self._name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Placeholder) and other._name == self._name


class _StubJIT:
    """What ``@tilelang.jit`` returns under the stand-in: keeps the function
    and its signature; never compiles."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.orig_func = func
        self.signature = inspect.signature(func)
        self.__name__ = func.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"stub TileLang kernel {self.__name__} called unrecorded")


def _stub_tilelang() -> dict[str, types.ModuleType]:
    tilelang = _StubModule("tilelang")
    language = _StubModule("tilelang.language")

    def jit(func: Callable[..., Any] | None = None, **_: Any) -> Any:
        if func is None:
            return _StubJIT
        return _StubJIT(func)

    # What 0.34.0's compile_many asks before locking a key: a stand-in builds
    # nothing into a cache.
    env = _StubModule("tilelang.env")
    env.is_cache_enabled = lambda: False  # type: ignore[attr-defined]
    tilelang.jit = jit  # type: ignore[attr-defined]
    tilelang.language = language  # type: ignore[attr-defined]
    tilelang.env = env  # type: ignore[attr-defined]
    return {"tilelang": tilelang, "tilelang.language": language, "tilelang.env": env}


def _is_factory(obj: Any) -> bool:
    return type(obj).__name__ in ("JITImpl", "_StubJIT")


def emulated_static_key(
    arg_names: list[str], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> StaticKey:
    """TileLang 0.1.9's in-memory key (``JITFunc._parse_phase1_key``): the
    positional arguments by parameter name, plus the keyword arguments, minus
    the tensors, sorted by name. Defaults that are not passed do not appear."""
    import torch

    named = dict(kwargs)
    named.update(zip(arg_names, args, strict=False))
    return tuple(sorted((k, v) for k, v in named.items() if not isinstance(v, torch.Tensor)))


@dataclass
class KeyRecorder:
    """Keys launched since the last ``reset``, by kernel name."""

    keys: KeysByKernel = field(default_factory=dict)
    calls: int = 0
    checked_against_tilelang: int = 0
    # the first call's (factory, args, kwargs) per key
    first_calls: dict[tuple[str, StaticKey], tuple[Any, tuple, dict]] = field(default_factory=dict)

    def reset(self) -> KeysByKernel:
        keys, self.keys = self.keys, {}
        return keys

    def add(self, kernel: str, key: StaticKey) -> None:
        self.calls += 1
        self.keys.setdefault(kernel, set()).add(key)


class _FactoryRecorder:
    def __init__(self, name: str, factory: Any, recorder: KeyRecorder) -> None:
        self.name = name
        self.factory = factory
        self.recorder = recorder
        self.arg_names = list(factory.signature.parameters)
        func = getattr(factory, "func", None)
        self.parse_phase1 = getattr(func, "_parse_phase1_key", None)
        self.checked: set[StaticKey] = set()

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        key = emulated_static_key(self.arg_names, args, kwargs)
        if self.parse_phase1 is not None and key not in self.checked:
            # Real TileLang: its own key for this call must be the same.
            real = self.parse_phase1(*args, **dict(kwargs))[0]
            if real != key:
                raise AssertionError(f"{self.name}: TileLang key {real} != {key}")
            self.checked.add(key)
            self.recorder.checked_against_tilelang += 1
        self.recorder.first_calls.setdefault((self.name, key), (self.factory, args, kwargs))
        self.recorder.add(self.name, key)


def _import_models() -> None:
    """The DeepSeek V4 CUDA model modules import on the CPU platform as they
    are; import them before the platform is made to look like CUDA."""
    importlib.import_module("vllm.models.deepseek_v4.nvidia.model")
    importlib.import_module("vllm.models.deepseek_v4.nvidia.mtp")
    importlib.import_module(WRAPPERS_MODULE)


@contextlib.contextmanager
def _cuda_platform() -> Iterator[None]:
    from vllm.platforms import current_platform

    with contextlib.ExitStack() as stack:
        for name, value in (
            ("is_cuda_alike", True),
            ("is_cuda", True),
            ("is_arch_support_pdl", False),
        ):
            stack.enter_context(mock.patch.object(current_platform, name, lambda v=value: v))
        yield


# Modules imported under the CUDA disguise (see forget_cuda_imports).
_DISGUISED: list[str] = []


def _kernels_module() -> types.ModuleType:
    """``tilelang_kernels`` as imported on CUDA (cached in ``sys.modules``)."""
    if KERNELS_MODULE in sys.modules:
        return sys.modules[KERNELS_MODULE]
    _import_models()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_cuda_platform())
        from vllm.utils import import_utils

        stack.enter_context(mock.patch.object(import_utils, "has_tilelang", lambda: True))
        if not real_tilelang_available():
            for name, module in _stub_tilelang().items():
                sys.modules[name] = module
                _DISGUISED.append(name)
        _DISGUISED.append(KERNELS_MODULE)
        return importlib.import_module(KERNELS_MODULE)


def forget_cuda_imports() -> None:
    """Drop the kernels module imported as on CUDA and the stand-in
    ``tilelang``, so later imports in this process see the real platform."""
    while _DISGUISED:
        name = _DISGUISED.pop()
        sys.modules.pop(name, None)
        parent, _, child = name.rpartition(".")
        if parent in sys.modules and getattr(sys.modules[parent], child, None):
            delattr(sys.modules[parent], child)


def _clear_caches(*modules: types.ModuleType) -> None:
    """Forget cached SM counts and plans (functools caches)."""
    for module in modules:
        for value in vars(module).values():
            clear = getattr(value, "cache_clear", None)
            if callable(clear):
                clear()


@contextlib.contextmanager
def recording(sm_count: int, deep_gemm: bool) -> Iterator[KeyRecorder]:
    """Record the TileLang keys every mHC wrapper call launches, on a device
    with ``sm_count`` SMs and with or without DeepGEMM."""
    import torch

    kernels = _kernels_module()
    wrappers = importlib.import_module(WRAPPERS_MODULE)
    dispatch = sys.modules.get(DISPATCH_MODULE, wrappers)  # absent before the patch
    import vllm.utils.deep_gemm as deep_gemm_utils

    recorder = KeyRecorder()

    def tf32_hc_prenorm_gemm(*args: Any, **kwargs: Any) -> None:
        if not deep_gemm:
            deep_gemm_utils._missing()

    props = types.SimpleNamespace(multi_processor_count=sm_count)
    with contextlib.ExitStack() as stack:
        for name, value in list(vars(kernels).items()):
            if _is_factory(value):
                stack.enter_context(
                    mock.patch.object(kernels, name, _FactoryRecorder(name, value, recorder))
                )
        stack.enter_context(
            mock.patch.object(torch.cuda, "get_device_properties", lambda *_: props)
        )
        stack.enter_context(
            mock.patch.object(deep_gemm_utils, "is_deep_gemm_supported", lambda: deep_gemm)
        )
        stack.enter_context(
            mock.patch.object(deep_gemm_utils, "tf32_hc_prenorm_gemm", tf32_hc_prenorm_gemm)
        )
        stack.callback(_clear_caches, kernels, wrappers, dispatch)
        _clear_caches(kernels, wrappers, dispatch)
        yield recorder


# --------------------------------------------------------------------------
# The real DeepSeek V4 CUDA model, with everything but mHC stubbed
# --------------------------------------------------------------------------


def _pass_through_attention(*args: Any, **kwargs: Any) -> Any:
    from torch import nn

    class Attention(nn.Module):
        def forward(self, positions: Any, x: Any, _: Any = None) -> Any:
            return x

    return Attention()


def _pass_through_moe(*args: Any, **kwargs: Any) -> Any:
    from torch import nn

    class MoE(nn.Module):
        def forward(self, x: Any, input_ids: Any = None) -> Any:
            return x

    return MoE()


def _embedding(num_embeddings: int, embedding_dim: int, *args: Any, **kwargs: Any) -> Any:
    import torch
    from torch import nn

    class Embedding(nn.Module):
        def forward(self, input_ids: Any) -> Any:
            return torch.zeros(
                input_ids.shape[0],
                embedding_dim,
                dtype=torch.bfloat16,
                device=input_ids.device,
            )

    return Embedding()


def _identity_linear(*args: Any, **kwargs: Any) -> Any:
    from torch import nn

    return nn.Identity()


def _shared_head(config: Any, *args: Any, **kwargs: Any) -> Any:
    from torch import nn

    head = nn.Module()
    head.norm = nn.Module()
    head.norm.weight = nn.Parameter(torch_empty(config.hidden_size), requires_grad=False)
    head.norm.variance_epsilon = config.rms_norm_eps
    head.head = nn.Identity()
    return head


def torch_empty(*shape: int) -> Any:
    import torch

    return torch.empty(*shape, dtype=torch.bfloat16)


class _LogitsProcessor:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, head: Any, hidden_states: Any) -> Any:
        return hidden_states


class _PPGroup:
    is_first_rank = True
    is_last_rank = True
    rank_in_group = 0
    world_size = 1


def hf_config(cfg: ServingConfig, num_hidden_layers: int = 2) -> Any:
    return types.SimpleNamespace(
        model_type="deepseek_v4",
        hidden_size=cfg.hidden_size,
        hc_mult=cfg.hc_mult,
        rms_norm_eps=cfg.rms_norm_eps,
        hc_eps=_cfg_value(cfg, "hc_eps", DEFAULT_HC_EPS),
        hc_sinkhorn_iters=_cfg_value(cfg, "hc_sinkhorn_iters", DEFAULT_HC_SINKHORN_ITERS),
        num_hidden_layers=num_hidden_layers,
        num_nextn_predict_layers=cfg.num_nextn_predict_layers,
        vocab_size=cfg.vocab_size,
        index_topk=cfg.index_topk,
    )


def _vllm_config(cfg: ServingConfig) -> Any:
    import torch

    hf = hf_config(cfg)
    ns = types.SimpleNamespace
    return ns(
        model_config=ns(hf_config=hf, dtype=torch.bfloat16),
        scheduler_config=ns(max_num_batched_tokens=cfg.max_num_batched_tokens),
        quant_config=None,
        parallel_config=ns(enable_expert_parallel=False),
        kernel_config=ns(moe_backend="auto"),
        speculative_config=ns(draft_model_config=ns(hf_config=hf)),
    )


@contextlib.contextmanager
def _model_stubs() -> Iterator[None]:
    import torch
    from vllm.distributed import parallel_state

    model = sys.modules["vllm.models.deepseek_v4.nvidia.model"]
    mtp = sys.modules["vllm.models.deepseek_v4.nvidia.mtp"]
    patches = [
        (model, "_select_dsv4_attn_cls", lambda vllm_config: _pass_through_attention),
        (model, "DeepseekV4MoE", _pass_through_moe),
        (model, "VocabParallelEmbedding", _embedding),
        (model, "get_pp_group", _PPGroup),
        (parallel_state, "get_pp_group", _PPGroup),
        (torch.cuda, "Stream", lambda *a, **k: None),
        (mtp, "ReplicatedLinear", _identity_linear),
        (mtp, "VocabParallelEmbedding", _embedding),
        (mtp, "SharedHead", _shared_head),
        (mtp, "LogitsProcessor", _LogitsProcessor),
        (mtp, "fused_mtp_input_rmsnorm", lambda emb, pos, prev, *a: (emb, prev)),
        (mtp, "mtp_shared_head_rmsnorm", lambda hidden_states, *a: hidden_states),
    ]
    with contextlib.ExitStack() as stack:
        for owner, name, value in patches:
            stack.enter_context(mock.patch.object(owner, name, value))
        yield


@dataclass
class Models:
    target: Any
    draft: Any | None


def _finalize_broadcast(target: Any) -> None:
    """What load_weights does for the broadcast first layer (vLLM >= 0.26)."""
    finalize = getattr(target, "finalize_mhc_broadcast_weights", None)
    if finalize is not None:
        finalize()


def has_broadcast_pre() -> bool:
    """Whether the tree's first layer broadcasts (T, H) embeddings (0.26+);
    0.25.1 repeats them to (T, hc_mult, H) and runs the plain pre."""
    return hasattr(importlib.import_module(WRAPPERS_MODULE), "mhc_pre_broadcast_tilelang")


def build_models(cfg: ServingConfig, device: str = "meta") -> Models:
    """The target ``DeepseekV4Model`` (two layers, one pipeline stage) and,
    with MTP, the ``DeepSeekV4MTP`` draft, on ``device`` (the meta device:
    no memory; a GPU: small random parameters)."""
    import torch
    from torch import nn
    from vllm.config import CompilationConfig
    from vllm.model_executor import custom_op

    _import_models()
    model_mod = sys.modules["vllm.models.deepseek_v4.nvidia.model"]
    mtp_mod = sys.modules["vllm.models.deepseek_v4.nvidia.mtp"]
    vllm_config = _vllm_config(cfg)
    # RMSNorm (a CustomOp) asks the current compilation config how to dispatch.
    compilation_config = CompilationConfig(custom_ops=["none"])
    with (
        _model_stubs(),
        mock.patch.object(custom_op, "get_cached_compilation_config", lambda: compilation_config),
        torch.device(device),
    ):
        target = model_mod.DeepseekV4Model(vllm_config=vllm_config, prefix="model")
        _finalize_broadcast(target)
        target.norm = nn.Identity()  # the final RMSNorm runs after hc_head
        draft = None
        if cfg.uses_mtp:
            draft = mtp_mod.DeepSeekV4MTP(vllm_config=vllm_config, prefix="mtp")
        if device != "meta":
            with torch.no_grad():
                for model in (target, draft):
                    for param in model.parameters() if model is not None else ():
                        param.normal_(0.0, 0.01)
                _finalize_broadcast(target)
    return Models(target, draft)


def _forward_all(models: Models, num_tokens: int, deep_gemm: bool) -> None:
    """One target forward and one MTP step (forward + logits) with
    ``num_tokens`` tokens, through the real model code (inside
    ``_model_stubs``)."""
    import torch

    meta = models.target.hc_head_fn.device
    ids = torch.zeros(num_tokens, dtype=torch.int64, device=meta)
    positions = torch.zeros(num_tokens, dtype=torch.int64, device=meta)
    hidden, hc_mult = models.target.config.hidden_size, models.target.hc_mult
    _tolerate_missing_deep_gemm(
        lambda _: models.target.forward(ids, positions, None), num_tokens, deep_gemm
    )
    if models.draft is not None:
        prev = torch.zeros(num_tokens, hc_mult * hidden, dtype=torch.bfloat16, device=meta)
        embeds = torch.zeros(num_tokens, hidden, dtype=torch.bfloat16, device=meta)
        out = models.draft.forward(ids, positions, prev, inputs_embeds=embeds)
        models.draft.compute_logits(out)


# --------------------------------------------------------------------------
# Dispatch-helper calls the wrappers make
# --------------------------------------------------------------------------

# The key-selection helpers the wrappers call (tilelang_dispatch). The plans
# take the token count first; the post / hc_head keys do not depend on it.
PLAN_HELPERS = ("mhc_pre_plan", "mhc_pre_broadcast_plan", "mhc_fused_post_pre_plan")
KEY_HELPERS = ("mhc_post_key", "hc_head_key")


@dataclass(frozen=True)
class HelperCall:
    """One dispatch-helper call a wrapper made, minus the token count."""

    helper: str
    args: tuple[Any, ...]

    def keys(self, num_tokens: int) -> KeysByKernel:
        dispatch = importlib.import_module(DISPATCH_MODULE)
        fn = getattr(dispatch, self.helper)
        if self.helper in PLAN_HELPERS:
            # The uncached function: a sweep would only churn the cache.
            keys = fn.__wrapped__(num_tokens, *self.args).keys
        else:
            keys = (fn(*self.args),)
        by_kernel: KeysByKernel = {}
        for key in keys:
            by_kernel.setdefault(key.kernel, set()).add(key.static_args)
        return by_kernel


class _HelperRecorder:
    def __init__(self) -> None:
        self.calls: set[tuple[HelperCall, int | None]] = set()

    def proxy(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def record(*args: Any) -> Any:
            if name in PLAN_HELPERS:
                self.calls.add((HelperCall(name, args[1:]), args[0]))
            else:
                self.calls.add((HelperCall(name, args), None))
            return fn(*args)

        return record

    def reset(self) -> set[tuple[HelperCall, int | None]]:
        calls, self.calls = self.calls, set()
        return calls


@contextlib.contextmanager
def _recording_helpers() -> Iterator[_HelperRecorder]:
    wrappers = importlib.import_module(WRAPPERS_MODULE)
    recorder = _HelperRecorder()
    with contextlib.ExitStack() as stack:
        for name in PLAN_HELPERS + KEY_HELPERS:
            if not hasattr(wrappers, name):
                continue  # e.g. 0.25.1 has no broadcast first-layer path
            proxy = recorder.proxy(name, getattr(wrappers, name))
            stack.enter_context(mock.patch.object(wrappers, name, proxy))
        yield recorder


# --------------------------------------------------------------------------
# Runtime and warmup key sets
# --------------------------------------------------------------------------


def torch_tf32_hc_prenorm_gemm(x: Any, fn: Any, out: Any, sqrsum: Any, num_split: int) -> None:
    """DeepGEMM's split-K pre-norm GEMM in torch (partial sums over K): GPU
    runs take the DeepGEMM deployment's mHC keys where DeepGEMM is absent."""
    parts = zip(x.float().tensor_split(num_split, 1), fn.tensor_split(num_split, 1), strict=True)
    for i, (xs, fs) in enumerate(parts):
        out[i] = xs @ fs.t()
        sqrsum[i] = xs.square().sum(-1)


@contextlib.contextmanager
def deep_gemm_mode(enabled: bool) -> Iterator[None]:
    """Make vLLM see DeepGEMM as usable or not; where it is wanted but not
    installed, :func:`torch_tf32_hc_prenorm_gemm` runs its GEMM, so the mHC
    wrappers take the DeepGEMM deployment's TileLang keys on a GPU."""
    import vllm.utils.deep_gemm as deep_gemm
    from vllm.utils.import_utils import has_deep_gemm

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(deep_gemm, "is_deep_gemm_supported", lambda: enabled))
        if enabled and not has_deep_gemm():
            stack.enter_context(
                mock.patch.object(deep_gemm, "tf32_hc_prenorm_gemm", torch_tf32_hc_prenorm_gemm)
            )
        yield


def token_counts(cfg: ServingConfig) -> list[int]:
    """Token counts a forward pass can see: 1..max_num_batched_tokens and the
    CUDA graph capture sizes."""
    counts = set(range(1, cfg.max_num_batched_tokens + 1))
    counts.update(cfg.capture_sizes)
    return sorted(counts)


def sample_token_counts(max_tokens: int, *, seed: int = 0, random_count: int = 40) -> list[int]:
    """Token counts to run the model code at: every count up to 130 (small-FMA
    and pre-norm GEMM thresholds), both sides of 1024 and of every multiple
    of 64 (DeepGEMM's block_m: split-K changes there), the maximum, and a
    random sample."""
    import random

    counts = set(range(1, 131)) | {1023, 1024, 1025, max_tokens}
    for multiple in range(64, max_tokens + 1, 64):
        counts.update((multiple, multiple + 1))
    rng = random.Random(seed)
    counts.update(rng.randint(1, max_tokens) for _ in range(random_count))
    return sorted(t for t in counts if 1 <= t <= max_tokens)


def _tolerate_missing_deep_gemm(
    run: Callable[[int], None], num_tokens: int, deep_gemm: bool
) -> None:
    try:
        run(num_tokens)
    except RuntimeError as exc:
        # Without DeepGEMM the target's first layer (broadcast pre) fails in
        # vLLM's DeepGEMM placeholder: nothing after it runs.
        if deep_gemm or "DeepGEMM" not in str(exc):
            raise


@dataclass
class CallSites:
    """What the model code did at the sampled token counts."""

    # dispatch-helper calls whose keys were all launched (the call completed)
    helper_calls: set[HelperCall]
    # keys recorded at the factories, per sampled token count
    launched: dict[int, KeysByKernel]
    # per sampled token count, keys the completed helper calls select
    selected: dict[int, KeysByKernel]
    # helper calls whose keys were not launched (their wrapper failed)
    failed: set[HelperCall]


def capture_call_sites(
    cfg: ServingConfig, counts: Iterable[int], *, deep_gemm: bool | None = None
) -> CallSites:
    """Run the target and MTP forward passes at ``counts`` (meta tensors),
    recording the keys launched and the dispatch-helper calls made."""
    deep_gemm = deep_gemm_of(cfg) if deep_gemm is None else deep_gemm
    models = build_models(cfg)
    result = CallSites(set(), {}, {}, set())
    with (
        recording(cfg.sm_count, deep_gemm) as recorder,
        _recording_helpers() as helpers,
        _model_stubs(),
    ):
        for num_tokens in counts:
            _forward_all(models, num_tokens, deep_gemm)
            launched = recorder.reset()
            selected: KeysByKernel = {}
            for call, _ in helpers.reset():
                keys = call.keys(num_tokens)
                done = all(v <= launched.get(k, set()) for k, v in keys.items())
                if done:
                    result.helper_calls.add(call)
                    selected = merge([selected, keys])
                else:
                    result.failed.add(call)
            result.launched[num_tokens] = launched
            result.selected[num_tokens] = selected
    result.failed -= result.helper_calls
    return result


# Completed helper calls per configuration (the token range aside).
_CALL_SITES: dict[tuple[Any, ...], set[HelperCall]] = {}


def helper_calls(cfg: ServingConfig, *, deep_gemm: bool | None = None) -> set[HelperCall]:
    """The dispatch-helper calls the model code makes for ``cfg``."""
    deep_gemm = deep_gemm_of(cfg) if deep_gemm is None else deep_gemm
    identity = (
        cfg.replace(max_num_batched_tokens=0, cudagraph_capture_sizes=()),
        deep_gemm,
    )
    if identity not in _CALL_SITES:
        counts = sample_token_counts(cfg.max_num_batched_tokens, random_count=0)
        counts = [t for t in counts if t <= 130]
        _CALL_SITES[identity] = capture_call_sites(cfg, counts, deep_gemm=deep_gemm).helper_calls
    return _CALL_SITES[identity]


def runtime_keys_by_tokens(
    cfg: ServingConfig, counts: Iterable[int], *, deep_gemm: bool | None = None
) -> dict[int, KeysByKernel]:
    """Keys the model's mHC calls select at each token count: the dispatch
    helpers the wrappers call, with the arguments they were called with."""
    calls = helper_calls(cfg, deep_gemm=deep_gemm)
    return {t: merge(call.keys(t) for call in calls) for t in counts}


def merge(keys: Iterable[KeysByKernel]) -> KeysByKernel:
    merged: KeysByKernel = {}
    for by_kernel in keys:
        for kernel, static in by_kernel.items():
            merged.setdefault(kernel, set()).update(static)
    return merged


def has_dispatch_helpers() -> bool:
    """Whether the tree selects its keys in ``tilelang_dispatch`` (patch
    0006); upstream 0.26.0 chooses them inside the wrappers."""
    import importlib.util

    return importlib.util.find_spec(DISPATCH_MODULE) is not None


def runtime_keys(cfg: ServingConfig, *, deep_gemm: bool | None = None) -> KeysByKernel:
    """Every key the DeepSeek V4 CUDA forward passes (target and MTP draft)
    select over ``cfg``'s token counts."""
    if not has_dispatch_helpers():
        return _pristine_runtime_keys(cfg, deep_gemm=deep_gemm)
    return merge(runtime_keys_by_tokens(cfg, token_counts(cfg), deep_gemm=deep_gemm).values())


def pristine_token_counts(cfg: ServingConfig) -> list[int]:
    """Token counts the pristine runtime side runs the model code at."""
    counts = set(sample_token_counts(cfg.max_num_batched_tokens, random_count=0))
    counts.update(cfg.capture_sizes)
    return sorted(counts)


def _pristine_runtime_keys(cfg: ServingConfig, *, deep_gemm: bool | None) -> KeysByKernel:
    """Without the dispatch helpers there is no pure key function to sweep
    every token count with: record what the model code launches at the
    sampled counts (every count up to 130, both sides of each multiple of
    64, the capture sizes, the maximum). A lower bound of the runtime keys,
    enough to show what upstream's warmup leaves to the first requests."""
    deep_gemm = deep_gemm_of(cfg) if deep_gemm is None else deep_gemm
    return merge(launched_keys_by_tokens(cfg, pristine_token_counts(cfg), deep_gemm).values())


def launched_keys_by_tokens(
    cfg: ServingConfig, counts: Iterable[int], deep_gemm: bool
) -> dict[int, KeysByKernel]:
    """What the model code launches at each token count, recorded at the
    ``@tilelang.jit`` factories: works on any tree, upstream 0.26.0 included."""
    models = build_models(cfg)
    launched: dict[int, KeysByKernel] = {}
    with recording(cfg.sm_count, deep_gemm) as recorder, _model_stubs():
        for num_tokens in counts:
            _forward_all(models, num_tokens, deep_gemm)
            launched[num_tokens] = recorder.reset()
    return launched


@dataclass
class WarmupResult:
    launched: KeysByKernel  # recorded at the factories while the warmup ran
    enumerated: KeysByKernel  # what the warmup's key derivation selected
    launches: int  # wrapper calls the warmup made
    keys_per_launch: list[int]  # new keys each launch covers


def run_warmup(cfg: ServingConfig, *, deep_gemm: bool | None = None) -> WarmupResult:
    """Run vLLM's NVIDIA mHC warmup on the built models, recording."""
    from vllm.model_executor.warmup import deepseek_v4_mhc_warmup as warmup

    deep_gemm = deep_gemm_of(cfg) if deep_gemm is None else deep_gemm
    models = build_models(cfg)
    sites = warmup.collect_mhc_call_sites([models.target, models.draft])
    counts = warmup.mhc_warmup_token_counts(cfg.max_num_batched_tokens, cfg.capture_sizes)
    launches = warmup.mhc_warmup_launches(
        sites, counts, use_deep_gemm=deep_gemm, num_sms=cfg.sm_count
    )
    with recording(cfg.sm_count, deep_gemm) as recorder:
        warmed, total = warmup.nvidia_mhc_warmup(
            sites, counts, use_deep_gemm=deep_gemm, num_sms=cfg.sm_count
        )
    if warmed != total:
        raise AssertionError(f"warmup launched {warmed} of {total} keys")
    enumerated: KeysByKernel = {}
    for launch in launches:
        for key in launch.keys:
            enumerated.setdefault(key.kernel, set()).add(key.static_args)
    return WarmupResult(
        recorder.keys,
        enumerated,
        len(launches),
        [len(launch.keys) for launch in launches],
    )


def has_patched_warmup() -> bool:
    """Whether the tree's mHC warmup is the series' (patch 0007)."""
    module = importlib.import_module("vllm.model_executor.warmup.deepseek_v4_mhc_warmup")
    return hasattr(module, "collect_mhc_call_sites")


def warmup_keys(cfg: ServingConfig, *, deep_gemm: bool | None = None) -> KeysByKernel:
    """Every key the warmup launches for ``cfg``."""
    if not has_patched_warmup():
        return _pristine_warmup_keys(cfg, deep_gemm=deep_gemm)
    return run_warmup(cfg, deep_gemm=deep_gemm).launched


def _pristine_warmup_keys(cfg: ServingConfig, *, deep_gemm: bool | None) -> KeysByKernel:
    """Upstream 0.26.0's ``deepseek_v4_mhc_warmup`` on the same models, as
    ``kernel_warmup`` calls it (the target; the MTP draft too, for good
    measure), recording. It looks for ``hc_pre`` / ``hc_post`` on the
    decoder layers, which the NVIDIA model does not define, so it launches
    nothing there."""
    from vllm.model_executor.warmup.deepseek_v4_mhc_warmup import deepseek_v4_mhc_warmup

    deep_gemm = deep_gemm_of(cfg) if deep_gemm is None else deep_gemm
    models = build_models(cfg)
    with recording(cfg.sm_count, deep_gemm) as recorder, _model_stubs():
        for model in (models.target, models.draft):
            if model is not None:
                deepseek_v4_mhc_warmup(
                    model,
                    max_tokens=cfg.max_num_batched_tokens,
                    cudagraph_capture_sizes=list(cfg.capture_sizes),
                )
    return recorder.keys


def count(keys: KeysByKernel) -> int:
    return sum(len(v) for v in keys.values())


def diff(runtime: KeysByKernel, warm: KeysByKernel) -> tuple[KeysByKernel, KeysByKernel]:
    """(runtime keys the warmup misses, warmup keys the runtime never uses)."""
    kernels = set(runtime) | set(warm)
    missed = {k: runtime.get(k, set()) - warm.get(k, set()) for k in kernels}
    wasted = {k: warm.get(k, set()) - runtime.get(k, set()) for k in kernels}
    return (
        {k: v for k, v in missed.items() if v},
        {k: v for k, v in wasted.items() if v},
    )
