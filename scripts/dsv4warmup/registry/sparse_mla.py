"""Sparse-MLA Triton call sites of DeepSeek V4 on registry-era vLLM (0.33.0, 0.34.0), on a CPU.

Two kernels (audit rows by the Triton function's ``__qualname__``):

* ``BuildC128ATopkMetadataKernel.kernel`` (``vllm/models/deepseek_v4/sparse_mla.py``),
  launched by ``DeepseekV4SparseMLAMetadataBuilder._build_c128a_metadata`` for
  the C128A KV cache group of every step;
* ``CombineTopkSwaIndicesKernel.kernel`` (``.../common/ops/cache_utils.py``),
  launched by ``DeepseekV4FlashMLAAttention._forward_prefill`` once per
  prefill chunk of every C4A, C128A and SWA-only (MTP) layer.

The runtime side builds the tree's real objects the way a worker does -- the
real ``VllmConfig`` (``engine.vllm_config``), every DeepSeek V4 attention layer
of the target and the MTP draft by its ``__init__`` (on the ``meta`` device),
the KV cache specs, groups, layout and block count through the engine core's
planner, the attention groups and metadata builders through
``init_attn_backend``, the KV cache views through ``init_kv_cache`` -- and
then runs each batch of a sweep through the runner's metadata path
(V2: ``build_attn_metadata``; V1, where the tree has it (0.33.0):
``GPUModelRunner._build_attention_metadata``'s ``CommonAttentionMetadata``
layout and ``AttentionGroup.build_metadata``) and
the layers' real ``forward_mqa``, recording the exact Triton key of every
launch (``triton_keys.record_launches``). "GPU" tensors live on ``meta``: no
memory, but ``data_ptr()`` keeps view offsets, so pointer alignment is keyed as
for CUDA buffers. FlashMLA and the other compiled ops are no-ops.

``register`` constructs the objects whose construction registers these
kernels for warmup: the target's DeepSeek V4 attention layers (one per layer
type) and the MTP draft's.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import sys
import types
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

from dsv4warmup.registry import lifecycle
from dsv4warmup.serving import ServingConfig, full_decode_graph_size

C128A_KERNEL = "BuildC128ATopkMetadataKernel.kernel"
COMBINE_KERNEL = "CombineTopkSwaIndicesKernel.kernel"
KERNELS: tuple[str, ...] = (C128A_KERNEL, COMBINE_KERNEL)

Key = tuple[Any, ...]

_DEVICE = "meta"
# KV cache bytes offered to the planner (any size gives the same keys).
_KV_CACHE_BYTES = 20 << 30
_CUTEDSL_OPS = "vllm.models.deepseek_v4.nvidia.ops.sparse_attn_compress_cutedsl"


# --- a DeepSeek V4 model's layers on a CPU ------------------------------------


class _NoDeviceObject:
    """Stands in for ``torch.cuda.Event`` / ``torch.cuda.Stream``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


class _NoWarmup:
    def register_warmup(self, *args: Any, **kwargs: Any) -> None:
        pass


def _stub_attr(name: str) -> Any:
    # dunders stay missing: module scanners (hypothesis, inspect) probe them
    if name.startswith("__"):
        raise AttributeError(name)
    return _NoWarmup()


def _cuda_to_meta_mode() -> Any:
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._device import _device_constructors

    constructors = _device_constructors()

    class CudaToMeta(TorchFunctionMode):
        """Tensors the layers create on the GPU (or the default device) go
        to ``meta``."""

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = dict(kwargs or {})
            device = kwargs.get("device")
            if device is not None and torch.device(device).type == "cuda":
                kwargs["device"] = _DEVICE
            elif device is None and func in constructors:
                kwargs["device"] = _DEVICE
            return func(*args, **kwargs)

    return CudaToMeta()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _init_distributed() -> None:
    """A one-rank gloo group: the layers read their TP rank and size."""
    from vllm.distributed import parallel_state

    if parallel_state.model_parallel_is_initialized():
        return
    parallel_state.init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
        backend="gloo",
    )
    parallel_state.initialize_model_parallel(1, 1)


@contextlib.contextmanager
def model_env(vllm_config: Any) -> Iterator[None]:
    """What building DeepSeek V4's layers and metadata builders for
    ``vllm_config`` needs besides a GPU: its current config, a distributed
    group, and stand-ins for DeepGEMM and (without ``cutlass``) the CuTeDSL
    ops module."""
    from vllm.config import set_current_vllm_config

    if _CUTEDSL_OPS not in sys.modules:
        try:
            __import__(_CUTEDSL_OPS)
        except ImportError:  # no `cutlass` here
            stub = types.ModuleType(_CUTEDSL_OPS)
            stub.__getattr__ = _stub_attr  # type: ignore[method-assign]
            sys.modules[_CUTEDSL_OPS] = stub
    with set_current_vllm_config(vllm_config):
        _init_distributed()
        with mock.patch(
            "vllm.model_executor.layers.sparse_attn_indexer.has_deep_gemm", lambda: True
        ):
            yield


@contextlib.contextmanager
def meta_layers() -> Iterator[None]:
    """Layers built inside hold their GPU tensors on ``meta`` (no memory;
    no CUDA events or streams)."""
    import torch

    with (
        _cuda_to_meta_mode(),
        mock.patch.object(torch.cuda, "Event", _NoDeviceObject),
        mock.patch.object(torch.cuda, "Stream", _NoDeviceObject),
    ):
        yield


def attention_class(vllm_config: Any) -> type:
    """The DeepSeek V4 attention class the NVIDIA model builds."""
    from vllm.models.deepseek_v4.nvidia.model import _select_dsv4_attn_cls

    return _select_dsv4_attn_cls(vllm_config)


def layer_ratio(hf_config: Any, index: int) -> int:
    """``DeepseekV4Attention``'s compress ratio for layer ``index`` (MTP
    layers come after the target's and are SWA-only). Checkpoint-style
    configs (what 0.26.0 / 0.25.1 read) list ``compress_ratios`` per layer."""
    if index < hf_config.num_hidden_layers:
        ratios = getattr(hf_config, "compress_ratios", None)
        if ratios is not None:
            return max(1, int(ratios[index]))
        return max(1, hf_config.compress_rates.get(hf_config.layer_types[index], 0))
    return 1


def layer_indices(hf_config: Any, *, target: bool, one_per_ratio: bool) -> list[int]:
    """Target (or MTP) layer indices; with ``one_per_ratio`` the first of
    each compress ratio."""
    if target:
        indices = list(range(hf_config.num_hidden_layers))
    else:
        first = hf_config.num_hidden_layers
        indices = list(range(first, first + hf_config.num_nextn_predict_layers))
    if not one_per_ratio:
        return indices
    seen: dict[int, int] = {}
    for i in indices:
        seen.setdefault(layer_ratio(hf_config, i), i)
    return sorted(seen.values())


def build_attention_layers(vllm_config: Any, indices: Iterable[int]) -> dict[int, Any]:
    """Real attention layers ``model.layers.<i>.attn`` (constructed inside
    :func:`model_env`), sharing one top-k buffer as the model's do."""
    import torch

    hf_config = vllm_config.model_config.hf_config
    cls = attention_class(vllm_config)
    topk_indices_buffer = torch.empty(
        vllm_config.scheduler_config.max_num_batched_tokens,
        hf_config.index_topk,
        dtype=torch.int32,
    )
    return {
        i: cls(
            vllm_config,
            prefix=f"model.layers.{i}.attn",
            topk_indices_buffer=topk_indices_buffer,
        )
        for i in indices
    }


# --- the KV cache and metadata builders, as a worker sets them up -------------


@dataclass
class Model:
    """One configuration's layers, KV cache and attention groups."""

    cfg: ServingConfig
    runner: str
    vllm_config: Any
    layers: dict[int, Any]  # by layer index, target then MTP
    kv_cache_config: Any
    attn_groups: list[list[Any]]
    kernel_block_sizes: list[int]
    device: str = _DEVICE

    @property
    def hf_config(self) -> Any:
        return self.vllm_config.model_config.hf_config

    def forward_layers(self) -> dict[int, Any]:
        """One layer per compress ratio (target and MTP): every kernel key
        a step launches depends on the layer only through its ratio."""
        out: dict[int, Any] = {}
        for layer in self.layers.values():
            out.setdefault(layer.compress_ratio, layer)
        return dict(sorted(out.items()))


def block_table_width(spec: Any, vllm_config: Any) -> int:
    """Columns of the block table of a KV cache group with ``spec``, as the
    runners size it (``get_block_table_width``: ``vllm.v1.worker.block_table``
    in 0.33.0, ``vllm.v1.kv_cache_interface`` from 0.34.0 on)."""
    import vllm.v1.kv_cache_interface as kv_cache_interface

    width_fn = getattr(kv_cache_interface, "get_block_table_width", None)
    if width_fn is None:
        from vllm.v1.worker.block_table import get_block_table_width as width_fn
    return int(
        width_fn(
            spec.max_num_blocks_per_req(vllm_config, vllm_config.model_config.max_model_len),
            spec.block_size,
            token_alignment=spec.block_table_token_alignment,
        )
    )


def _vllm_config(cfg: ServingConfig, runner: str, device: str) -> Any:
    from dsv4warmup.registry import engine, platform

    with lifecycle.selected(runner):
        if device.startswith("cuda"):
            return engine.vllm_config(cfg, "machine")
        # Before anything imports vLLM: it decides on import what the platform is.
        gpu = platform.GPUS.get(os.environ.get("DSV4_GPU", "h200"), platform.H200)
        return engine.vllm_config(cfg, gpu)


def build_model(
    cfg: ServingConfig,
    runner: str,
    device: str = _DEVICE,
    kv_cache_bytes: int = _KV_CACHE_BYTES,
) -> Model:
    """Everything the metadata path reads, built as the worker and the
    engine core do for ``cfg``. The layers' weights stay on ``meta``; the KV
    cache, metadata builders and runner buffers go to ``device`` (``meta``:
    keys only; ``cuda``: the GPU tests run the kernels)."""
    import torch

    vllm_config = _vllm_config(cfg, runner, device)
    from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        record_kv_cache_layout,
        resolve_kv_cache_layout,
    )
    from vllm.v1.core.kv_cache_planning import (
        get_global_kv_cache_groups,
        get_kv_cache_configs,
    )
    from vllm.v1.worker.gpu.attn_utils import (
        get_kv_cache_spec,
        init_attn_backend,
        init_kv_cache,
    )

    if not device.startswith("cuda"):
        # SM count of the configured GPU (the CPU-hosted platform has none).
        type(current_platform).num_compute_units = classmethod(  # type: ignore[method-assign]
            lambda cls, device_id=0: cfg.sm_count
        )
    hf_config = vllm_config.model_config.hf_config
    indices = layer_indices(hf_config, target=True, one_per_ratio=False)
    if cfg.uses_mtp:
        indices += layer_indices(hf_config, target=False, one_per_ratio=False)
    dev = torch.device(device)
    with lifecycle.selected(runner), model_env(vllm_config):
        with meta_layers():
            layers = build_attention_layers(vllm_config, indices)
        specs = get_kv_cache_spec(vllm_config)
        layouts = [
            layout.name
            for layout in get_supported_kv_cache_layouts(get_current_attn_backends(vllm_config))
        ]
        layout = resolve_kv_cache_layout(vllm_config, [layouts], list(specs.values()))
        record_kv_cache_layout(vllm_config.cache_config, layout.name)
        groups = get_global_kv_cache_groups(vllm_config, [specs])
        (kv_cache_config,) = get_kv_cache_configs(vllm_config, [specs], [kv_cache_bytes], groups)
        attn_groups, _, kernel_block_sizes = init_attn_backend(kv_cache_config, vllm_config, dev)
        init_kv_cache(
            vllm_config.compilation_config.static_forward_context,
            kv_cache_config,
            dev,
            kernel_block_sizes,
            vllm_config,
            attn_groups=(g for gs in attn_groups for g in gs),
        )
    model = Model(
        cfg, runner, vllm_config, layers, kv_cache_config, attn_groups, kernel_block_sizes, device
    )
    if device != _DEVICE:
        # What forward_mqa reads of the layers besides their KV caches.
        topk = torch.full(
            (vllm_config.scheduler_config.max_num_batched_tokens, hf_config.index_topk),
            -1,
            dtype=torch.int32,
            device=dev,
        )
        for layer in model.forward_layers().values():
            layer.topk_indices_buffer = topk
            layer.attn_sink = torch.nn.Parameter(
                torch.zeros(layer.attn_sink.shape, device=dev), requires_grad=False
            )
    return model


# Metadata builders whose kernels this audit covers; the other groups'
# builders (indexer, compressor states) launch other kernels only.
_AUDITED_BACKENDS = ("FLASHMLA_SPARSE_DSV4", "DEEPSEEK_SPARSE_SWA")


def audited_groups(model: Model) -> list[list[Any]]:
    return [
        [g for g in groups if g.backend.get_name() in _AUDITED_BACKENDS]
        for groups in model.attn_groups
    ]


# --- batches -------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One scheduler step: decodes first, then prefills, as (query_len,
    seq_len); ``pad_to``: a uniform decode batch replayed in a FULL CUDA
    graph of that many tokens."""

    decodes: tuple[tuple[int, int], ...] = ()
    prefills: tuple[tuple[int, int], ...] = ()
    pad_to: int | None = None

    @property
    def requests(self) -> tuple[tuple[int, int], ...]:
        return self.decodes + self.prefills

    def describe(self) -> str:
        def runs(reqs: Sequence[tuple[int, int]]) -> str:
            out: list[str] = []
            for req in reqs:
                if out and out[-1].startswith(f"{req}"):
                    head, _, n = out[-1].partition(" x")
                    out[-1] = f"{head} x{int(n or 1) + 1}"
                else:
                    out.append(f"{req}")
            return "[" + ", ".join(out) + "]"

        kind = "decode" if not self.prefills else "prefill" if not self.decodes else "mixed"
        parts = [f"{kind}: {len(self.requests)} reqs"]
        if self.decodes:
            parts.append(f"decodes (q, seq) {runs(self.decodes)}")
        if self.prefills:
            parts.append(f"prefills (q, seq) {runs(self.prefills)}")
        if self.pad_to:
            parts.append(f"FULL CUDA graph of {self.pad_to} tokens")
        return "; ".join(parts)


def _boundary_values(lo: int, hi: int, steps: Sequence[int]) -> list[int]:
    """Values in [lo, hi] at and around multiples of each step, plus the ends."""
    out = {lo, hi}
    for step in steps:
        for k in (1, 2, 3, 7, 8, 9, hi // step - 1, hi // step):
            out.update(k * step + d for d in (-1, 0, 1))
    return sorted(v for v in out if lo <= v <= hi)


def decode_query_len(cfg: ServingConfig) -> int:
    return 1 + (cfg.num_speculative_tokens if cfg.speculative_method else 0)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def c128a_widths(max_model_len: int) -> list[int]:
    """Every C128A top-k width a step can use: powers of two from 128,
    capped at the buffers' width (as ``_build_c128a_metadata`` picks it)."""
    cap = _cdiv(_cdiv(max_model_len, 128), 128) * 128
    widths, w = [], 128
    while w < cap:
        widths.append(w)
        w *= 2
    return [*widths, cap]


def c128a_width_seq_lens(max_model_len: int) -> list[int]:
    """For each C128A width, the longest sequence of a batch that uses it."""
    out = []
    for w in c128a_widths(max_model_len):
        out.append(min(max_model_len, (w + 1) * 128 - 1))
    return sorted(set(out))


def scenarios(cfg: ServingConfig, capture_sizes: Sequence[int]) -> Iterator[Batch]:
    """Pure decode (eager and CUDA-graph padded, q = 1 and 1 + k), single,
    chunked and multi-request prefills, mixed batches, many short prompts
    beside a long one."""
    threshold = decode_query_len(cfg)
    mnbt, mml, seqs = cfg.max_num_batched_tokens, cfg.max_model_len, cfg.max_num_seqs
    batch_sizes = [b for b in _boundary_values(1, seqs, (16,)) if b <= seqs]
    # contexts before the step's new tokens (0 when max_model_len < 1 + k)
    long_ctx = sorted({max(0, min(mml - threshold, c)) for c in (4000, *c128a_width_seq_lens(mml))})
    # a request never exceeds max_model_len: the scheduler trims its drafts
    for q in sorted({1, min(threshold, mml)}):
        for b in batch_sizes:
            if b * q > mnbt:
                continue
            for ctx in long_ctx[:1] + long_ctx[-1:]:
                decodes = tuple((q, ctx + q) for _ in range(b))
                yield Batch(decodes=decodes)
                pad_to = full_decode_graph_size(capture_sizes, b, q, seqs)
                if pad_to is not None and q == threshold:
                    yield Batch(decodes=decodes, pad_to=pad_to)
    if threshold > 1 and seqs >= 3:
        yield Batch(decodes=((1, 100), (threshold, 200), (1, 300)))
    # max_model_len < 1 + k: every step is decode-classified, any query length
    if mml < threshold:
        for q in range(2, mml):
            yield Batch(decodes=((q, mml),))

    min_prefill = threshold + 1
    lengths = _boundary_values(min_prefill, min(mnbt, mml), (16, 128))
    prefixes = [0] + _boundary_values(1, mml - min_prefill, (16, 128, 512))
    for q in lengths:
        yield Batch(prefills=((q, q),))
    for prefix in prefixes:
        for q in (min_prefill, 17, 128, mnbt):
            if min_prefill <= q <= mnbt and prefix + q <= mml:
                yield Batch(prefills=((q, prefix + q),))
    for n in (2, 3, 4, 5, 6, 8, 9, 17, 33):
        for num_decodes in (0, 1, 2, 3, 5):
            if n + num_decodes > seqs:
                continue
            q = max(min_prefill, min(300, (mnbt - num_decodes) // n))
            if n * q + num_decodes > mnbt:
                continue
            for prefix in (0, 1000, mml - q - 1):
                if prefix < 0 or prefix + q > mml:
                    continue
                prefills = tuple((q - (i % 2), prefix + q - (i % 2) + i) for i in range(n))
                if any(s > mml or ql < min_prefill for ql, s in prefills):
                    continue
                decodes = tuple((1, long_ctx[0]) for _ in range(num_decodes))
                yield Batch(decodes=decodes, prefills=prefills)
    for num_short in (4, 5, 6, 7, 9, 15, 33, 100, 250):
        for num_decodes in (0, 1, 3):
            if num_short + 1 + num_decodes > seqs:
                continue
            left = mnbt - num_decodes - num_short * min_prefill
            if left < min_prefill:
                continue
            for long_q, long_s in (
                (left, min(mml, left)),
                (min(left, 2048), mml),
                (min(left, 200), mml),
                (min(left, 17), min(mml, 4 * 128 + 5)),
            ):
                if long_q < min_prefill or long_q > long_s:
                    continue
                decodes = tuple((1, long_ctx[0]) for _ in range(num_decodes))
                short = ((min_prefill, min_prefill),) * num_short
                yield Batch(decodes=decodes, prefills=(*short, (long_q, long_s)))
                yield Batch(decodes=decodes, prefills=((long_q, long_s), *short))


def _gathered_width(q: int, s: int, ratio: int, window: int) -> int:
    """Row width a prefill request takes in the attention workspace
    (``DeepseekSparseSWAMetadata.get_prefill_chunk_plan``)."""
    compressed = 0 if ratio <= 1 else s // ratio
    return compressed + q + min(max(s - q, 0), window - 1)


def chunk_boundary_scenarios(cfg: ServingConfig, prefill_chunk_size: int) -> Iterator[Batch]:
    """Prefill batches whose first workspace chunk closes after exactly
    ``c`` requests: a long request sized for that, ``c - 1`` short prompts,
    then prompts of assorted lengths from request ``c`` on. The chunk's
    slices of ``query_start_loc`` / ``seq_lens`` start at ``decodes + c``,
    of ``gather_lens`` at ``c``: every alignment of both, for every layer
    ratio and C128A top-k width."""
    threshold = decode_query_len(cfg)
    min_prefill = threshold + 1
    mnbt, mml, window = cfg.max_num_batched_tokens, cfg.max_model_len, cfg.sliding_window
    tails = sorted(
        {
            (q, s)
            for q, s in (
                (min_prefill, min_prefill),
                (min_prefill, 200),
                (16, 16),
                (17, 255),
                (32, 300),
                (64, 2049),
            )
            if min_prefill <= q <= s <= mml
        }
    )
    starts = ((5, 0), (4, 1), (6, 2), (7, 1), (9, 3), (5, 3), (6, 0), (7, 0))
    ratios = sorted({max(1, r) for r in cfg.compress_ratios} | ({1} if cfg.uses_mtp else set()))
    seq_lens = sorted({mml, *c128a_width_seq_lens(mml), 4096, 2048}, reverse=True)
    for ratio in ratios:
        compressed_cap = 0 if ratio <= 1 else -(-mml // ratio)
        area = prefill_chunk_size * (compressed_cap + window + mnbt)
        for c, num_decodes in starts:
            if c + 1 + num_decodes > cfg.max_num_seqs:
                continue
            budget = mnbt - num_decodes - (c - 1) * min_prefill - min_prefill
            for s in seq_lens:
                if s > mml:
                    continue
                # The cheapest long request with c * width <= area < (c + 1) * width.
                long = None
                for q in range(min_prefill, min(s, budget) + 1):
                    w = _gathered_width(q, s, ratio, window)
                    if w * (c + 1) > area:
                        if w * c <= area:
                            long = (q, s)
                        break
                if long is None:
                    continue
                decodes = tuple((1, min(1000, mml)) for _ in range(num_decodes))
                short = ((min_prefill, min_prefill),) * (c - 1)
                for tail in tails:
                    if num_decodes + long[0] + (c - 1) * min_prefill + tail[0] <= mnbt:
                        yield Batch(decodes=decodes, prefills=(long, *short, tail))


def capture_sizes(model: Model) -> list[int]:
    sizes = model.vllm_config.compilation_config.cudagraph_capture_sizes or []
    return sorted(sizes)


def sweep(model: Model, *, quick: bool = False) -> list[Batch]:
    """The realistic sweep, then the chunk-boundary batches; ``quick``: the
    chunk-boundary batches and one decode batch (the CPU tests' sweep). Only
    batches vLLM's scheduler could build for the configuration
    (``ServingConfig.schedulable``):
    1 … max_num_seqs requests, at most max_num_batched_tokens new tokens,
    every sequence within max_model_len."""
    from vllm.models.deepseek_v4.attention import DeepseekV4Attention

    cfg = model.cfg
    boundary = chunk_boundary_scenarios(cfg, DeepseekV4Attention.PREFILL_CHUNK_SIZE)
    if quick:
        decode = Batch(decodes=((1, min(4000, cfg.max_model_len)),))
        batches = [decode, *boundary]
    else:
        batches = [*scenarios(cfg, capture_sizes(model)), *boundary]
    return list(dict.fromkeys(b for b in batches if cfg.schedulable(b.requests)))


# --- one step through a runner's metadata path ----------------------------------


@dataclass
class _Step:
    """Host-side numbers of one step, laid out as the runners lay them out."""

    num_reqs: int
    num_reqs_padded: int
    num_tokens: int
    num_tokens_padded: int
    query_start_loc_cpu: Any  # [num_reqs_padded + 1] int32
    seq_lens_cpu: Any  # [num_reqs_padded] int32 (upper bound)
    max_query_len: int
    max_seq_len: int

    def positions(self) -> Any:
        """[num_tokens_padded] int64: each token's position (padding: 0)."""
        import torch

        qsl = self.query_start_loc_cpu.long()
        qlens = qsl[1 : self.num_reqs + 1] - qsl[: self.num_reqs]
        starts = self.seq_lens_cpu[: self.num_reqs].long() - qlens
        out = torch.zeros(self.num_tokens_padded, dtype=torch.int64)
        tokens = torch.arange(self.num_tokens)
        out[: self.num_tokens] = torch.repeat_interleave(starts - qsl[: self.num_reqs], qlens)
        out[: self.num_tokens] += tokens
        return out

    def slot_mapping(self, block_size: int) -> Any:
        """[num_tokens_padded] int64: real tokens write within block 0 (the
        block tables hold zeros), padding tokens -1."""
        out = self.positions() % block_size
        out[self.num_tokens :] = -1
        return out


def _host_step(batch: Batch, decode_len: int) -> _Step:
    import torch

    qlens = [q for q, _ in batch.requests]
    slens = [s for _, s in batch.requests]
    num_reqs, num_tokens = len(qlens), sum(qlens)
    num_tokens_padded, num_reqs_padded = num_tokens, num_reqs
    if batch.pad_to is not None:
        # FULL graph of a uniform decode batch: padded requests own no
        # tokens (query_start_loc repeats the last value).
        num_tokens_padded = batch.pad_to
        num_reqs_padded = max(num_reqs, batch.pad_to // decode_len)
    qsl = torch.zeros(num_reqs_padded + 1, dtype=torch.int32)
    qsl[1 : num_reqs + 1] = torch.tensor(qlens, dtype=torch.int32).cumsum(0)
    qsl[num_reqs + 1 :] = num_tokens
    seq = torch.zeros(num_reqs_padded, dtype=torch.int32)
    seq[:num_reqs] = torch.tensor(slens, dtype=torch.int32)
    return _Step(
        num_reqs,
        num_reqs_padded,
        num_tokens,
        num_tokens_padded,
        qsl,
        seq,
        max(qlens),
        max(slens),
    )


class _Runner:
    """Persistent device buffers of one runner (``model.device``)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.groups = audited_groups(model)
        self.device = model.device
        self.real = model.device != _DEVICE  # the kernels run: fill real values
        self.group_block_sizes = [
            g.kv_cache_spec.block_size for g in model.kv_cache_config.kv_cache_groups
        ]

    def attn_metadata(self, batch: Batch) -> dict[str, Any]:
        raise NotImplementedError

    def step(self, batch: Batch) -> None:
        """Build one step's attention metadata and run every layer type's
        ``forward_mqa`` over it (launches recorded, not run)."""
        import torch
        from vllm.models.deepseek_v4.nvidia import flashmla

        metadata = self.attn_metadata(batch)
        hf = self.model.hf_config
        num_tokens = _host_step(batch, decode_query_len(self.model.cfg)).num_tokens_padded
        device = self.model.device
        for layer in self.model.forward_layers().values():
            q = torch.empty(
                (num_tokens, layer.padded_heads, hf.head_dim),
                dtype=torch.bfloat16,
                device=device,
            )
            positions = torch.zeros(num_tokens, dtype=torch.int64, device=device)
            context = types.SimpleNamespace(attn_metadata=metadata)
            with mock.patch.object(flashmla, "get_forward_context", lambda c=context: c):
                layer.forward_mqa(q, None, positions, torch.empty_like(q))


class V2Runner(_Runner):
    """Model Runner V2 (``vllm/v1/worker/gpu/model_runner.py``): the
    ``InputBuffers``, ``BlockTables``' forward-pass tables and its
    ``[num_groups, max_num_tokens]`` slot mappings, and ``build_attn_metadata``
    called with ``DefaultModelState.prepare_attn``'s arguments. The MTP
    draft's prefill step reuses these metadata (``TargetDependentARSpeculator``);
    its decode steps have no prefill and no C128A layer."""

    def __init__(self, model: Model) -> None:
        import torch
        from vllm.v1.worker.gpu.input_batch import InputBuffers

        super().__init__(model)
        vc = model.vllm_config
        self.max_num_reqs = vc.scheduler_config.max_num_seqs
        self.max_num_tokens = vc.scheduler_config.max_num_batched_tokens
        self.input_buffers = InputBuffers(
            self.max_num_reqs, self.max_num_tokens, torch.device(self.device)
        )
        widths = [
            block_table_width(group.kv_cache_spec, vc)
            for group in model.kv_cache_config.kv_cache_groups
        ]
        self.input_block_tables = [
            torch.zeros((self.max_num_reqs, w), dtype=torch.int32, device=self.device)
            for w in widths
        ]
        self.slot_mappings = torch.zeros(
            len(widths), self.max_num_tokens, dtype=torch.int64, device=self.device
        )

    def attn_metadata(self, batch: Batch) -> dict[str, Any]:
        import numpy as np
        import torch
        from vllm.v1.worker.gpu.attn_utils import build_attn_metadata

        s = _host_step(batch, decode_query_len(self.model.cfg))
        full = batch.pad_to is not None
        num_reqs = s.num_reqs_padded if full else s.num_reqs
        num_tokens = s.num_tokens_padded if full else s.num_tokens
        # prepare_attn: block tables of num_reqs_padded rows, slot mappings of
        # num_tokens_after_padding columns.
        block_tables = tuple(bt[: s.num_reqs_padded] for bt in self.input_block_tables)
        slot_mappings = self.slot_mappings[:, : s.num_tokens_padded]
        buffers = self.input_buffers
        if self.real:  # prepare_inputs / prepare_attn's device writes
            n = s.num_reqs_padded
            buffers.query_start_loc[: n + 1].copy_(s.query_start_loc_cpu)
            buffers.seq_lens[:n].copy_(s.seq_lens_cpu)
            buffers.positions[: s.num_tokens_padded].copy_(s.positions())
            for g, block_size in enumerate(self.group_block_sizes):
                slot_mappings[g].copy_(s.slot_mapping(block_size))
        return build_attn_metadata(
            attn_groups=self.groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_gpu=buffers.query_start_loc[: s.num_reqs_padded + 1][: num_reqs + 1],
            query_start_loc_cpu=s.query_start_loc_cpu[: num_reqs + 1],
            max_query_len=s.max_query_len,
            seq_lens=buffers.seq_lens[: s.num_reqs_padded],
            max_seq_len=s.max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.model.kv_cache_config,
            seq_lens_cpu_upper_bound=s.seq_lens_cpu,
            positions=buffers.positions[: s.num_tokens_padded],
            is_prefilling=torch.from_numpy(
                np.array(
                    [q > 1 for q, _ in batch.requests] + [False] * (s.num_reqs_padded - s.num_reqs)
                )
            ),
            req_idx=np.arange(s.num_reqs_padded, dtype=np.int32),
        )


class V1Runner(_Runner):
    """Model Runner V1 (``vllm/v1/worker/gpu_model_runner.py``,
    ``VLLM_USE_V2_MODEL_RUNNER=0``): one ``BlockTable`` per KV cache group
    (its own slot-mapping buffer), ``CommonAttentionMetadata`` laid out as
    ``_build_attention_metadata`` lays it out, each group's metadata from
    ``AttentionGroup.build_metadata``. The MTP draft (``EagleProposer``) first
    pass builds its SWA metadata from the target's common metadata
    (``set_inputs_first_pass`` without extra slots), the same batch layout."""

    def __init__(self, model: Model) -> None:
        import torch

        super().__init__(model)
        vc = model.vllm_config
        self.max_num_reqs = vc.scheduler_config.max_num_seqs
        self.max_num_tokens = vc.scheduler_config.max_num_batched_tokens
        dev = torch.device(self.device)
        self.query_start_loc = torch.zeros(self.max_num_reqs + 1, dtype=torch.int32, device=dev)
        self.seq_lens = torch.zeros(self.max_num_reqs, dtype=torch.int32, device=dev)
        self.positions = torch.zeros(self.max_num_tokens, dtype=torch.int64, device=dev)
        self.block_tables = []
        self.slot_mappings = []
        for group in model.kv_cache_config.kv_cache_groups:
            width = block_table_width(group.kv_cache_spec, vc)
            self.block_tables.append(
                torch.zeros((self.max_num_reqs, width), dtype=torch.int32, device=dev)
            )
            self.slot_mappings.append(
                torch.zeros(self.max_num_tokens, dtype=torch.int64, device=dev)
            )

    def attn_metadata(self, batch: Batch) -> dict[str, Any]:
        from vllm.v1.attention.backend import CommonAttentionMetadata

        s = _host_step(batch, decode_query_len(self.model.cfg))
        if self.real:  # _prepare_inputs' H2D copies
            n = s.num_reqs_padded
            self.query_start_loc[: n + 1].copy_(s.query_start_loc_cpu)
            self.seq_lens[:n].copy_(s.seq_lens_cpu)
            self.positions[: s.num_tokens_padded].copy_(s.positions())
        out: dict[str, Any] = {}
        for gid, groups in enumerate(self.groups):
            if not groups:
                continue
            if self.real:
                block_size = self.group_block_sizes[gid]
                self.slot_mappings[gid][: s.num_tokens_padded].copy_(s.slot_mapping(block_size))
            cm = CommonAttentionMetadata(
                query_start_loc=self.query_start_loc[: s.num_reqs_padded + 1],
                query_start_loc_cpu=s.query_start_loc_cpu,
                seq_lens=self.seq_lens[: s.num_reqs_padded],
                seq_lens_cpu_upper_bound=s.seq_lens_cpu,
                num_reqs=s.num_reqs_padded,
                num_actual_tokens=s.num_tokens_padded,
                max_query_len=s.max_query_len,
                max_seq_len=s.max_seq_len,
                block_table_tensor=self.block_tables[gid][: s.num_reqs_padded],
                slot_mapping=self.slot_mappings[gid][: s.num_tokens_padded],
                causal=True,
                positions=self.positions[: s.num_tokens_padded],
            )
            for group in groups:
                metadata = group.build_metadata(cm)
                for name in group.layer_names:
                    out[name] = metadata
        return out


@contextlib.contextmanager
def no_device_ops(device: str = _DEVICE) -> Iterator[None]:
    """What needs a GPU is out of this audit: the FlashMLA kernels and
    planner, pinned host memory; the workspace is the real manager on
    ``meta``."""
    import torch
    from vllm.models.deepseek_v4.nvidia import flashmla
    from vllm.utils import torch_utils
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekSparseSWAMetadataBuilder
    from vllm.v1.worker import workspace

    def no_tile_scheduler(self: Any, num_decode_tokens: int) -> dict[str, Any]:
        return {name: types.SimpleNamespace() for name in ("swaonly", "c4a", "c128a", "c1a", "c2a")}

    manager = workspace.WorkspaceManager(torch.device(device))
    with (
        mock.patch.object(torch_utils, "PIN_MEMORY", False),
        mock.patch.object(torch.accelerator, "empty_cache", lambda: None),
        mock.patch.object(flashmla, "flash_mla_sparse_fwd", lambda *a, **k: None),
        mock.patch.object(flashmla, "flash_mla_with_kvcache", lambda *a, **k: (None, None)),
        mock.patch.object(flashmla, "current_workspace_manager", lambda: manager),
        mock.patch.object(
            DeepseekSparseSWAMetadataBuilder, "build_tile_scheduler", no_tile_scheduler
        ),
    ):
        yield


def make_runner(model: Model) -> _Runner:
    return V2Runner(model) if model.runner == "v2" else V1Runner(model)


def witness_batches(model: Model, batches: Iterable[Batch]) -> dict[str, dict[Key, Batch]]:
    """Exact keys the call sites launch for ``batches``, each with the
    first batch that launched it."""
    from dsv4warmup.triton_keys import Witnesses

    runner = make_runner(model)
    w = Witnesses[Batch](KERNELS)
    with lifecycle.selected(model.runner), no_device_ops(model.device), w.recording():
        for batch in batches:
            with w.batch(batch):
                runner.step(batch)
    return w.keys


def run_batches(model: Model, batches: Iterable[Batch]) -> None:
    """Run the steps for real (``model.device`` a GPU): the GPU tests."""
    runner = make_runner(model)
    with lifecycle.selected(model.runner), no_device_ops(model.device):
        for batch in batches:
            runner.step(batch)


def launched_keys(model: Model, batches: Iterable[Batch]) -> dict[str, dict[Key, str]]:
    """:func:`witness_batches`, each witness described."""
    return {
        kernel: {key: batch.describe() for key, batch in keys.items()}
        for kernel, keys in witness_batches(model, batches).items()
    }


@functools.cache
def _model(cfg: ServingConfig, runner: str) -> Model:
    return build_model(cfg, runner)


def runtime_keys(cfg: ServingConfig, runner: str) -> dict[str, dict[Key, str]]:
    """Every key the runner's real call sites launch over the sweep of
    ``cfg``, mapped to one witness batch."""
    model = _model(cfg, runner)
    return launched_keys(model, sweep(model))


# --- warmup registration --------------------------------------------------------


def _step(name: str) -> Any:
    return lifecycle.step(name)


def register(vllm_config: Any, runner: str) -> None:
    """Construct what registers these kernels for warmup, where the runner
    constructs it: the target model's DeepSeek V4 attention layers (its
    ``load_model``), then the MTP draft's (the drafter's ``load_model``).
    One layer per compress ratio: the layers of one ratio register the
    same (kernel, arguments)."""
    hf_config = vllm_config.model_config.hf_config
    spec = vllm_config.speculative_config
    # The layers register themselves by name in the static forward context:
    # build them in an empty one, so that the caller's stays as it was.
    with (
        mock.patch.object(vllm_config.compilation_config, "static_forward_context", {}),
        lifecycle.selected(runner),
        model_env(vllm_config),
        meta_layers(),
    ):
        with _step("target_model"):
            build_attention_layers(
                vllm_config, layer_indices(hf_config, target=True, one_per_ratio=True)
            )
        if spec is not None and spec.method in ("mtp", "deepseek_mtp"):
            with _step("drafter_model"):
                build_attention_layers(
                    vllm_config, layer_indices(hf_config, target=False, one_per_ratio=True)
                )


# --- command line (the CPU tests run it in a fresh interpreter per tree) -------


def _serving_config(spec: str) -> ServingConfig:
    """``flash`` / ``pro``, optionally with JSON overrides: ``flash:{"max_model_len": 4096}``."""
    import json

    from dsv4warmup.serving import FLASH, PRO

    name, _, overrides = spec.partition(":")
    base = {"flash": FLASH, "pro": PRO}[name]
    return base.replace(**json.loads(overrides)) if overrides else base


def audit(cfg: ServingConfig, runners: Sequence[str], *, quick: bool) -> dict[str, Any]:
    """Per runner and kernel: the runtime keys with their witnesses, the keys
    the real start-up lifecycle warms, and for every missing key whether its
    witness batch alone launches it again. Keys as ``repr`` strings."""
    out: dict[str, Any] = {}
    for runner in runners:
        model = _model(cfg, runner)
        found = witness_batches(model, sweep(model, quick=quick))
        with lifecycle.selected(runner):
            warmed = lifecycle.warmed_keys(model.vllm_config, runner, [register]).keys
        rows: dict[str, Any] = {}
        for kernel in KERNELS:
            warm = warmed.get(kernel, set())
            missing = {key: batch for key, batch in found[kernel].items() if key not in warm}
            replayed = {}
            for key, batch in missing.items():
                again = witness_batches(model, [batch])[kernel]
                replayed[repr(key)] = key in again
            rows[kernel] = {
                "runtime": {repr(k): b.describe() for k, b in found[kernel].items()},
                "warmed": sorted(repr(k) for k in warm),
                "replayed": replayed,
            }
        out[runner] = rows
    return out


def main(argv: Sequence[str] | None = None) -> None:
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m dsv4warmup.registry.sparse_mla")
    parser.add_argument("config", help="flash | pro, optionally :{json overrides}")
    parser.add_argument("--runners", help="comma-separated (default: every runner of the tree)")
    parser.add_argument("--quick", action="store_true", help="the chunk-boundary sweep only")
    args = parser.parse_args(argv)
    if args.runners:
        runners: Sequence[str] = args.runners.split(",")
    else:
        runners = lifecycle.available_runners()
    result = audit(_serving_config(args.config), runners, quick=args.quick)
    print(json.dumps(result))


if __name__ == "__main__":
    tree = os.environ.get("DSV4_VLLM_TREE")
    if tree:
        # vLLM caches model inspection per model package hash in one file per
        # class: a tree of its own keeps pristine and patched runs from
        # invalidating each other's (each miss re-imports vLLM in a subprocess).
        os.environ.setdefault("VLLM_CACHE_ROOT", os.path.join(tree, ".vllm-cache"))
    main()


def warm_registry(vllm_config: Any, runner: str) -> Any:
    """A real ``JitWarmupRegistry`` of what ``runner``'s start-up registers of
    these two kernels (:func:`register`); call its ``warmup()``."""
    owners = ("BuildC128ATopkMetadataKernel", "CombineTopkSwaIndicesKernel")
    return lifecycle.warm_registry(
        vllm_config, runner, register, keep=lambda kernel: type(kernel).__name__ in owners
    )
