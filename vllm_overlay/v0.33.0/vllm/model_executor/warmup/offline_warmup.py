# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Compile a deployment's JIT kernels into the disk caches ahead of serving.

Backs ``vllm warmup-kernels``. A worker's model runner collects JIT warmup
registrations while it builds its objects (``JitWarmupRegistry``) and compiles
them at startup. Here the same objects are built the same way, but on fake
tensors: no weights are read, no KV cache is allocated and no device memory is
used. Only the registry's compile-only warmup touches the GPU, and it leaves
its binaries in Triton's and TileLang's disk caches, where the next
``vllm serve`` with the same flags finds them.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator
from typing import Any, cast

import torch

from vllm.config import VllmConfig, set_current_vllm_config
from vllm.logger import init_logger
from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry, VllmJitKernel
from vllm.platforms import current_platform

logger = init_logger(__name__)


@contextlib.contextmanager
def _phase(what: str) -> Iterator[None]:
    """Note on any exception raised inside which set-up step raised it."""
    try:
        yield
    except Exception as e:
        e.add_note(what)
        raise


@contextlib.contextmanager
def _process_groups(vllm_config: VllmConfig, pp_rank: int) -> Iterator[None]:
    """The process groups as one rank of the deployment sees them.

    The process joins a one-process world; each model-parallel group then
    answers with the deployment's size and this rank's place in it (rank 0,
    except the pipeline stage), which is all that model constructors read.
    Nothing communicates on fake tensors, so no communicator is built.
    """
    from vllm.distributed import parallel_state as ps
    from vllm.utils.network_utils import (
        get_distributed_init_method,
        get_loopback_ip,
        get_open_port,
    )

    parallel = vllm_config.parallel_config
    tp = parallel.tensor_parallel_size
    pcp = parallel.prefill_context_parallel_size
    dp = parallel.data_parallel_size
    sizes = {
        "_TP": (tp, 0),
        "_DCP": (parallel.decode_context_parallel_size, 0),
        "_PCP": (pcp, 0),
        "_PP": (parallel.pipeline_parallel_size, pp_rank),
        "_DP": (dp, 0),
        "_EP": (dp * pcp * tp, 0),
        "_EPLB": (dp * pcp * tp, 0),
    }
    # initialize_model_parallel lays the world out as DP x PP x PCP x TP.
    single = copy.copy(vllm_config)
    single.parallel_config = copy.copy(parallel)
    single.parallel_config.data_parallel_size = 1
    single.parallel_config.enable_elastic_ep = False
    originals: dict[str, Any] = {}
    try:
        ps.init_distributed_environment(
            world_size=1,
            rank=0,
            distributed_init_method=get_distributed_init_method(
                get_loopback_ip(), get_open_port()
            ),
            local_rank=0,
            backend="gloo",
        )
        with set_current_vllm_config(single):
            ps.ensure_model_parallel_initialized(1, 1)
        originals = {name: getattr(ps, name) for name in (*sizes, "_ETP")}
        for name, (size, rank) in sizes.items():
            group = originals[name]
            if group is not None:
                view = copy.copy(group)
                view.ranks = list(range(size))
                view.world_size = size
                view.rank_in_group = view.rank = rank
                view.device_communicator = None
                view.mq_broadcaster = None
                setattr(ps, name, view)
        if originals["_ETP"] is originals["_TP"]:
            ps._ETP = ps._TP
        yield
    finally:
        for name, group in originals.items():
            setattr(ps, name, group)
        ps.destroy_model_parallel()
        ps.destroy_distributed_environment()


@contextlib.contextmanager
def _fake_tensors(device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    """Tensors created inside are fake: shapes, dtypes and devices, no memory."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from vllm.utils.torch_utils import set_default_torch_dtype

    with (
        warnings.catch_warnings(),
        set_default_torch_dtype(dtype),
        device,
        FakeTensorMode(allow_non_fake_inputs=True),
    ):
        # Layers note their weights' storage for reloading; fake tensors have
        # none and are never reloaded.
        warnings.filterwarnings(
            "ignore", message="Accessing the data pointer of FakeTensor"
        )
        yield


def _build_runner_objects(vllm_config: VllmConfig, device: torch.device) -> set[str]:
    """Build what the selected model runner builds with its registry active.

    Model Runner V2 activates its registry while it loads the target model,
    registers the sampling kernels in ``load_model`` and loads the drafter
    there too. The V1 runner's ``__init__`` is a ``JitWarmupRegistry.capture``
    method (sampler, rejection sampler, EAGLE/MTP proposer), then it loads the
    target model and the drafter.

    Returns:
        The names of the attention layers the drafter added.

    """
    from vllm.config import get_layers_from_vllm_config
    from vllm.distributed import get_pp_group
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.model_loader.utils import initialize_model

    model_config = vllm_config.model_config
    spec = vllm_config.speculative_config
    drafts = spec is not None and get_pp_group().is_last_rank
    draft_vllm_config = None

    if not vllm_config.use_v2_model_runner:
        from vllm.v1.sample.rejection_sampler import RejectionSampler
        from vllm.v1.sample.sampler import Sampler

        sampler = Sampler(
            logprobs_mode=model_config.logprobs_mode,
            use_fp64_gumbel=model_config.use_fp64_gumbel,
        )
        if drafts:
            assert spec is not None
            if spec.use_eagle() and not (
                spec.use_gemma4_mtp() or spec.use_step3p5_mtp() or spec.use_dflash()
            ):
                from torch._subclasses.fake_tensor import unset_fake_temporarily

                from vllm.v1.spec_decode.eagle import EagleProposer

                # Its host buffers keep NumPy views, which fake tensors cannot
                # give: device buffers go to the meta device instead.
                meta = torch.device("meta")
                with unset_fake_temporarily(), meta:
                    proposer = EagleProposer(vllm_config, meta, None)
                draft_vllm_config = proposer._create_draft_vllm_config()
            RejectionSampler(sampler, spec, device)

    initialize_model(vllm_config=vllm_config, model_config=model_config)

    layer_type = cast(type[Any], AttentionLayerBase)
    target_layers = set(get_layers_from_vllm_config(vllm_config, layer_type))
    if drafts:
        assert spec is not None
        if spec.draft_model_config is not None:
            if draft_vllm_config is None:
                draft_vllm_config = spec.apply_draft_overrides(vllm_config)
            initialize_model(
                vllm_config=draft_vllm_config, model_config=spec.draft_model_config
            )

    if (
        vllm_config.use_v2_model_runner
        and get_pp_group().is_last_rank
        and model_config.runner_type != "pooling"
        and (
            current_platform.is_rocm()
            or (current_platform.is_cuda() and spec is not None)
        )
    ):
        from vllm.v1.sample.ops.topk_topp_sampler import register_top_k_top_p_warmups

        register_top_k_top_p_warmups()
    return set(get_layers_from_vllm_config(vllm_config, layer_type)) - target_layers


def _plan_kv_cache(vllm_config: VllmConfig) -> Any:
    """The engine core's KV cache plan for this rank's layers.

    As ``EngineCore._initialize_kv_caches`` makes it, so a configuration that
    serving rejects there (e.g. a block size the layers cannot split) fails
    here too. The memory budget is nominal (the device's memory), since nothing
    is profiled; keys do not depend on the number of blocks.

    Returns:
        The ``KVCacheConfig``, or ``None`` for a model without KV cache.

    """
    from vllm.distributed.kv_transfer.kv_connector.utils import (
        get_current_attn_backends,
    )
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        record_kv_cache_layout,
        resolve_kv_cache_layout,
    )
    from vllm.v1.core.kv_cache_planning import (
        get_global_kv_cache_groups,
        get_kv_cache_configs,
    )
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    register_all_kvcache_specs(vllm_config)
    kv_cache_spec = get_kv_cache_spec(vllm_config)
    if not kv_cache_spec:
        return None
    backends = get_current_attn_backends(vllm_config)
    layouts = [layout.name for layout in get_supported_kv_cache_layouts(backends)]
    layout = resolve_kv_cache_layout(vllm_config, [layouts], kv_cache_spec.values())
    groups = get_global_kv_cache_groups(vllm_config, [kv_cache_spec])
    vllm_config.adjust_dcp_kv_cache_interleave_size(groups)
    record_kv_cache_layout(vllm_config.cache_config, layout.name)
    cache_config = vllm_config.cache_config
    memory = cache_config.kv_cache_memory_bytes or int(
        current_platform.get_device_total_memory() * cache_config.gpu_memory_utilization
    )
    (kv_cache_config,) = get_kv_cache_configs(
        vllm_config, [kv_cache_spec], [memory], groups
    )
    return kv_cache_config


def collect_jit_warmup_registry(vllm_config: VllmConfig) -> JitWarmupRegistry:
    """The JIT warmup registrations a worker of this deployment makes.

    Follows the model runner that ``vllm_config`` selects: the objects it
    builds with its registry active are built here in the same order, on fake
    tensors, after which the engine core's KV cache plan is made and, for Model
    Runner V2, the attention metadata builders are built from it. The KV cache
    itself is not allocated, so registrations made while binding it are not
    collected; the runner still makes and compiles those at startup.

    Args:
        vllm_config: The engine configuration, as ``vllm serve`` builds it.

    Returns:
        A registry holding the registrations of every pipeline stage, each
        built as rank 0 of its tensor-parallel group.

    """
    from vllm.v1.worker.gpu.attn_utils import init_attn_backend
    from vllm.v1.worker.workspace import init_workspace_manager

    registry = JitWarmupRegistry(vllm_config)
    device = torch.device(current_platform.device_type, 0)
    for pp_rank in range(vllm_config.parallel_config.pipeline_parallel_size):
        with (
            _process_groups(vllm_config, pp_rank),
            set_current_vllm_config(vllm_config),
            _fake_tensors(device, cast(torch.dtype, vllm_config.model_config.dtype)),
            registry.activate(),
        ):
            init_workspace_manager(device)
            # Stages build disjoint layers; some warmup keys read them back
            # from the forward context, as in a worker.
            with _phase("building the model runner's objects"):
                draft_layers = _build_runner_objects(vllm_config, device)
            with _phase("planning the KV cache"):
                kv_cache_config = _plan_kv_cache(vllm_config)
            if kv_cache_config is not None and vllm_config.use_v2_model_runner:
                # GPUModelRunner.initialize_kv_cache (V2) builds the metadata
                # builders with its registry active; the V1 runner does not.
                with _phase("building the attention metadata builders"):
                    init_attn_backend(
                        kv_cache_config,
                        vllm_config,
                        device,
                        draft_layer_names=draft_layers,
                    )
    logger.info(
        "Collected %d JIT warmup registrations (%s model runner).",
        len(registry),
        "V2" if vllm_config.use_v2_model_runner else "V1",
    )
    return registry


def kernel_name(kernel: VllmJitKernel[Any]) -> str:
    """A readable name: the kernel class, or the function a decorator wraps."""
    name = getattr(kernel, "__qualname__", None)
    return name if isinstance(name, str) else type(kernel).__qualname__


def describe_key(key: Any) -> str:
    """A compile key as a stable string (Triton's own cache keys, sorted)."""
    jit_keys = getattr(key, "jit_keys", None)
    if jit_keys is not None:
        return " | ".join(sorted(str(jit_key.cache_key) for jit_key in jit_keys))
    return repr(key)


def kernel_backend(kernel: VllmJitKernel[Any]) -> str:
    """The JIT compiler behind ``kernel``."""
    from vllm.model_executor.warmup.jit_warmup_cutedsl_helper import (
        VllmCuTeDSLJitKernel,
    )
    from vllm.model_executor.warmup.jit_warmup_tilelang_helper import (
        VllmTileLangJitKernel,
    )
    from vllm.model_executor.warmup.jit_warmup_triton_helper import (
        VllmTritonJitKernel,
    )

    for cls, backend in (
        (VllmTritonJitKernel, "triton"),
        (VllmTileLangJitKernel, "tilelang"),
        (VllmCuTeDSLJitKernel, "cutedsl"),
    ):
        if isinstance(kernel, cls):
            return backend
    return "other"


def cache_dirs() -> dict[str, str | None]:
    """Where Triton and TileLang keep their compiled kernels."""
    dirs: dict[str, str | None] = {"triton": None, "tilelang": None}
    with contextlib.suppress(Exception):
        from triton import knobs

        dirs["triton"] = knobs.cache.dir
    with contextlib.suppress(Exception):
        from tilelang import env as tilelang_env

        dirs["tilelang"] = str(tilelang_env.TILELANG_CACHE_DIR)
    return dirs
