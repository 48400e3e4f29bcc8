"""Sparse-MLA Triton call sites of DeepSeek V4 on a machine without a GPU.

Two kernels:

* ``_build_c128a_topk_metadata_kernel`` (``vllm/models/deepseek_v4/sparse_mla.py``),
  launched by ``DeepseekV4FlashMLAMetadataBuilder.build`` for C128A layers;
* ``_combine_topk_swa_indices_kernel`` (``.../common/ops/cache_utils.py``),
  launched by ``DeepseekV4FlashMLAAttention._forward_prefill`` once per
  prefill chunk of every C4A, C128A and SWA-only layer (MTP included).

``runtime_keys`` drives that real code -- the real metadata builders (C128A,
C4A, SWA) built by their ``__init__`` from a stand-in ``VllmConfig``, the real
``MultiGroupBlockTable`` buffers, ``CommonAttentionMetadata`` laid out like
``GPUModelRunner._build_attention_metadata`` does, and the real
``DeepseekV4FlashMLAAttention.forward_mqa`` -- over a sweep of batches, and
records the exact Triton key of every launch (``triton_keys.record_launches``).
"GPU" tensors live on the ``meta`` device: no memory, but ``data_ptr()`` keeps
view offsets, so pointer alignment is keyed exactly as for CUDA buffers (whose
bases are aligned). Attention kernels (FlashMLA, KV gather) are no-ops.

``warmup_keys`` runs the startup warmup (``deepseek_v4_sparse_mla_key_warmup``)
on the same stand-in configuration and records what it compiles. Neither side
calls the other's key derivation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from unittest import mock

from dsv4warmup.legacy import max_num_blocks_per_req
from dsv4warmup.serving import ServingConfig, full_decode_graph_size

C128A_KERNEL = "_build_c128a_topk_metadata_kernel"
COMBINE_KERNEL = "_combine_topk_swa_indices_kernel"
KERNELS = (C128A_KERNEL, COMBINE_KERNEL)

Key = tuple[Any, ...]
KeysByKernel = dict[str, set[Key]]

_DEVICE = "meta"
_SWA_BLOCK_SIZE = 64  # DeepseekV4SWACache.block_size
_HEAD_DIM = 512
_PADDED_HEADS = 64
_NUM_KV_BLOCKS = 4096  # stand-in KV-cache size (block-table contents are not read)


# --- stand-in configuration -------------------------------------------------


def main_layer_ratios(cfg: ServingConfig) -> tuple[int, ...]:
    """Compress ratio of each attention layer type of the target model (the
    attention layer uses ``max(1, config ratio)``)."""
    return tuple(sorted({max(1, int(r)) for r in cfg.compress_ratios}))


def uses_mtp(cfg: ServingConfig) -> bool:
    return cfg.uses_mtp


def attention_layer_ratios(cfg: ServingConfig) -> tuple[int, ...]:
    """Ratios of every DeepSeek V4 attention layer: target + MTP (SWA only)."""
    ratios = set(main_layer_ratios(cfg))
    if uses_mtp(cfg):
        ratios.add(1)
    return tuple(sorted(ratios))


def make_vllm_config(cfg: ServingConfig, *, num_gpu_blocks: int | None = None) -> Any:
    """The parts of ``VllmConfig`` the builders, warmups and layers read."""
    hf_config = SimpleNamespace(
        model_type="deepseek_v4",
        hidden_size=cfg.hidden_size,
        index_topk=cfg.index_topk,
        sliding_window=cfg.sliding_window,
        compress_ratios=list(cfg.compress_ratios),
        num_nextn_predict_layers=cfg.num_nextn_predict_layers,
    )
    spec = None
    if cfg.num_speculative_tokens > 0 and cfg.speculative_method is not None:
        spec = SimpleNamespace(
            num_speculative_tokens=cfg.num_speculative_tokens,
            parallel_drafting=False,
            method=cfg.speculative_method,
            use_dspark=lambda: False,
        )
    return SimpleNamespace(
        model_config=SimpleNamespace(hf_config=hf_config, max_model_len=cfg.max_model_len),
        scheduler_config=SimpleNamespace(
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_num_seqs=cfg.max_num_seqs,
        ),
        cache_config=SimpleNamespace(
            block_size=cfg.block_size,
            cache_dtype="fp8_ds_mla" if cfg.kv_cache_dtype.startswith("fp8") else "auto",
            num_gpu_blocks=num_gpu_blocks,
        ),
        speculative_config=spec,
        parallel_config=SimpleNamespace(
            decode_context_parallel_size=1, cp_kv_cache_interleave_size=1
        ),
        compilation_config=SimpleNamespace(static_forward_context={}),
    )


def mla_spec(cfg: ServingConfig, compress_ratio: int) -> Any:
    import torch
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    return MLAAttentionSpec(
        block_size=cfg.block_size,
        num_kv_heads=1,
        head_size=_HEAD_DIM,
        dtype=torch.uint8,
        compress_ratio=compress_ratio,
        cache_dtype_str="fp8_ds_mla",
        alignment=576,
        model_version="deepseek_v4",
    )


def swa_spec(cfg: ServingConfig) -> Any:
    import torch
    from vllm.v1.kv_cache_interface import SlidingWindowMLASpec

    return SlidingWindowMLASpec(
        block_size=_SWA_BLOCK_SIZE,
        num_kv_heads=1,
        head_size=_HEAD_DIM,
        dtype=torch.uint8,
        sliding_window=cfg.sliding_window,
        cache_dtype_str="fp8_ds_mla",
        alignment=576,
        model_version="deepseek_v4",
    )


def make_flashmla_builder(
    cfg: ServingConfig,
    compress_ratio: int,
    *,
    device: str = _DEVICE,
    vllm_config: Any = None,
) -> Any:
    """A real ``DeepseekV4FlashMLAMetadataBuilder`` built by its ``__init__``."""
    import torch
    from vllm.models.deepseek_v4.sparse_mla import DeepseekV4FlashMLAMetadataBuilder

    spec = mla_spec(cfg, compress_ratio)
    return DeepseekV4FlashMLAMetadataBuilder(
        # AttentionGroup.create_metadata_builders: the group's kernel block size
        spec.copy_with_new_block_size(kernel_block_size(spec)),
        [f"model.layers.0.attn.r{compress_ratio}"],
        vllm_config if vllm_config is not None else make_vllm_config(cfg),
        torch.device(device),
    )


# --- runtime side -------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One scheduler step: decode query lengths first, then prefills as
    (query_len, seq_len); ``pad_to`` pads a uniform decode batch to a
    CUDA-graph size (padded requests have query length 0)."""

    decodes: tuple[tuple[int, int], ...] = ()
    prefills: tuple[tuple[int, int], ...] = ()
    pad_to: int | None = None

    @property
    def requests(self) -> tuple[tuple[int, int], ...]:
        return self.decodes + self.prefills


class Runner:
    """Persistent buffers of ``GPUModelRunner``, the DeepSeek V4 metadata
    builders and one attention layer per type, for one configuration; on the
    ``meta`` device (keys only) or on CUDA (the GPU tests run the kernels)."""

    def __init__(self, cfg: ServingConfig, device: str = _DEVICE) -> None:
        import torch
        from vllm.v1.attention.backends.mla.sparse_swa import (
            DeepseekSparseSWAMetadataBuilder,
        )

        self.cfg = cfg
        self.vllm_config = make_vllm_config(cfg, num_gpu_blocks=_NUM_KV_BLOCKS)
        self.device = device = torch.device(device)
        n_reqs, n_tokens = cfg.max_num_seqs, cfg.max_num_batched_tokens
        self.query_start_loc_cpu = torch.zeros(n_reqs + 1, dtype=torch.int32)
        self.query_start_loc = torch.zeros(n_reqs + 1, dtype=torch.int32, device=device)
        self.seq_lens_cpu = torch.zeros(n_reqs, dtype=torch.int32)
        self.seq_lens = torch.zeros(n_reqs, dtype=torch.int32, device=device)
        self.positions = torch.zeros(n_tokens, dtype=torch.int64, device=device)
        specs = (mla_spec(cfg, 128), swa_spec(cfg))
        # One block table and slot mapping per KV-cache group, shaped like
        # vllm/v1/worker/block_table.py's (kept out: it pulls in vllm.v1.utils).
        self.block_tables = [
            torch.zeros(
                (n_reqs, _block_table_width(spec, self.vllm_config, cfg.max_model_len)),
                dtype=torch.int32,
                device=device,
            )
            for spec in specs
        ]
        self.slot_mappings = [
            torch.zeros(n_tokens, dtype=torch.int64, device=device) for _ in specs
        ]
        self.builders = {
            ratio: make_flashmla_builder(cfg, ratio, device=device, vllm_config=self.vllm_config)
            for ratio in main_layer_ratios(cfg)
            if ratio > 1
        }
        self.swa_builder = DeepseekSparseSWAMetadataBuilder(
            specs[1], ["model.layers.0.attn.swa_cache"], self.vllm_config, device
        )
        self.layers = {
            ratio: _fake_flashmla_layer(cfg, ratio, device) for ratio in attention_layer_ratios(cfg)
        }
        # What bind_kv_cache leaves in the static forward context: the patched
        # C128A builder bounds block ids by its layers' KV caches.
        ctx = self.vllm_config.compilation_config.static_forward_context
        for ratio, builder in self.builders.items():
            for name in builder.layer_names:
                ctx[name] = self.layers[ratio]

    def common_metadata(self, batch: Batch, group: int) -> Any:
        import torch
        from vllm.v1.attention.backend import CommonAttentionMetadata

        qlens = [q for q, _ in batch.requests]
        slens = [s for _, s in batch.requests]
        num_reqs, num_tokens = len(qlens), sum(qlens)
        num_tokens_padded = batch.pad_to or num_tokens
        num_reqs_padded = num_reqs
        if batch.pad_to is not None:
            # Uniform decode padded to a CUDA-graph size (runner: batch_desc).
            num_reqs_padded = max(num_reqs, batch.pad_to // max(qlens))
        qsl = self.query_start_loc_cpu
        qsl[0] = 0
        qsl[1 : num_reqs + 1] = torch.tensor(qlens).cumsum(0)
        qsl[num_reqs + 1 :] = num_tokens
        self.seq_lens_cpu[:num_reqs] = torch.tensor(slens, dtype=torch.int32)
        self.seq_lens_cpu[num_reqs:] = 0
        if self.device.type != "meta":
            # Real values where the kernels run (the runner's H2D copies).
            q = torch.tensor(qlens)
            starts = torch.tensor(slens) - q
            positions = torch.zeros(num_tokens_padded, dtype=torch.int64)
            positions[:num_tokens] = torch.repeat_interleave(starts, q) + (
                torch.arange(num_tokens) - torch.repeat_interleave(qsl[:num_reqs].long(), q)
            )
            slots = torch.full((num_tokens_padded,), -1, dtype=torch.int64)
            slots[:num_tokens] = positions[:num_tokens] % 2  # block 0 (table is zeros)
            self.query_start_loc.copy_(qsl)
            self.seq_lens.copy_(self.seq_lens_cpu)
            self.positions[:num_tokens_padded].copy_(positions)
            self.slot_mappings[group][:num_tokens_padded].copy_(slots)
        return CommonAttentionMetadata(
            query_start_loc=self.query_start_loc[: num_reqs_padded + 1],
            query_start_loc_cpu=qsl[: num_reqs_padded + 1].clone(),
            seq_lens=self.seq_lens[:num_reqs_padded],
            seq_lens_cpu_upper_bound=self.seq_lens_cpu[:num_reqs_padded].clone(),
            num_reqs=num_reqs_padded,
            num_actual_tokens=num_tokens_padded,
            max_query_len=max(qlens),
            max_seq_len=max(slens),
            block_table_tensor=self.block_tables[group][:num_reqs_padded],
            slot_mapping=self.slot_mappings[group][:num_tokens_padded],
            causal=True,
            positions=self.positions[:num_tokens_padded],
        )

    def step(self, batch: Batch) -> None:
        """Build the metadata of one step and run every layer type's
        attention over it (kernel launches are recorded, not run)."""
        import torch
        from vllm.models.deepseek_v4.nvidia import flashmla

        flashmla_md = {
            ratio: builder.build(0, self.common_metadata(batch, 0))
            for ratio, builder in self.builders.items()
        }
        swa_md = self.swa_builder.build(0, self.common_metadata(batch, 1))
        num_tokens = swa_md.slot_mapping.shape[0]
        q = torch.empty(
            (num_tokens, _PADDED_HEADS, _HEAD_DIM), dtype=torch.bfloat16, device=self.device
        )
        for ratio, layer in self.layers.items():
            attn_metadata = {layer.swa_cache_layer.prefix: swa_md}
            if ratio in flashmla_md:
                attn_metadata[layer.prefix] = flashmla_md[ratio]
            context = SimpleNamespace(attn_metadata=attn_metadata)
            with mock.patch.object(flashmla, "get_forward_context", lambda c=context: c):
                layer.forward_mqa(q, None, self.positions[:num_tokens], torch.empty_like(q))


def _block_table_width(spec: Any, vllm_config: Any, max_model_len: int) -> int:
    """``MultiGroupBlockTable``'s row length: the spec's blocks per request,
    rounded up to a multiple of 128 // block_size for blocks <= 128, in
    kernel blocks (``BlockTable`` splits each KV-manager block into
    ``block_size // kernel_block_size`` of them)."""
    width = max_num_blocks_per_req(spec, vllm_config, max_model_len)
    if spec.block_size <= 128:
        step = 128 // spec.block_size
        width = -(-width // step) * step
    return width * (spec.block_size // kernel_block_size(spec))


def kernel_block_size(spec: Any) -> int:
    """The attention kernels' block size for the KV-cache group of ``spec``,
    as the worker picks it (``prepare_kernel_block_sizes``:
    ``select_common_block_size`` over the group's backends): 256 for the
    compressed MLA groups at any multiple of 256 (``--block-size 2048`` gives
    the builders 256-token blocks, 8 per KV-manager block), the SWA group's
    own 64."""
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekSparseSWABackend
    from vllm.v1.kv_cache_interface import SlidingWindowMLASpec
    from vllm.v1.worker.utils import select_common_block_size

    if isinstance(spec, SlidingWindowMLASpec):
        backends: list[Any] = [DeepseekSparseSWABackend]
    else:
        backends = mla_group_backends()
    return select_common_block_size(spec.block_size, backends)


def mla_group_backends() -> list[Any]:
    """The attention backends of the compressed MLA KV-cache group: the C4A /
    C128A layers' and their compressors' state (the group ``--block-size``
    applies to)."""
    from vllm.models.deepseek_v4.compressor import CompressorBackend
    from vllm.models.deepseek_v4.sparse_mla import DeepseekV4FlashMLABackend

    return [DeepseekV4FlashMLABackend, CompressorBackend]


def _fake_flashmla_layer(cfg: ServingConfig, ratio: int, device: Any = _DEVICE) -> Any:
    """A ``DeepseekV4FlashMLAAttention`` with the attributes ``forward_mqa``
    reads, without building its weights."""
    import torch
    from vllm.models.deepseek_v4.attention import DeepseekV4Attention
    from vllm.models.deepseek_v4.nvidia.flashmla import DeepseekV4FlashMLAAttention

    layer = DeepseekV4FlashMLAAttention.__new__(DeepseekV4FlashMLAAttention)
    torch.nn.Module.__init__(layer)
    layer.prefix = f"model.layers.r{ratio}.attn"
    layer.compress_ratio = ratio
    layer.window_size = cfg.sliding_window
    layer.max_model_len = cfg.max_model_len
    layer.max_num_batched_tokens = cfg.max_num_batched_tokens
    layer.scale = _HEAD_DIM**-0.5
    layer.attn_sink = torch.zeros(_PADDED_HEADS, device=device)
    # -1: "no index", what the indexer leaves in unused entries (on CUDA the
    # C4A decode path reads it).
    layer.topk_indices_buffer = torch.full(
        (cfg.max_num_batched_tokens, cfg.index_topk), -1, dtype=torch.int32, device=device
    )
    cache_shape = (_NUM_KV_BLOCKS, 2, 584)
    layer.kv_cache = torch.empty(cache_shape, dtype=torch.uint8, device=device)
    layer.swa_cache_layer = SimpleNamespace(
        prefix=f"{layer.prefix}.swa_cache",
        kv_cache=torch.empty(cache_shape, dtype=torch.uint8, device=device),
    )
    assert layer.PREFILL_CHUNK_SIZE == DeepseekV4Attention.PREFILL_CHUNK_SIZE
    return layer


class _Workspace:
    device: Any = _DEVICE

    def get_simultaneous(self, *specs: tuple[tuple[int, ...], Any]) -> list[Any]:
        import torch

        return [torch.empty(shape, dtype=dtype, device=self.device) for shape, dtype in specs]


@contextlib.contextmanager
def no_attention_kernels(device: Any = _DEVICE) -> Iterator[None]:
    """Attention kernels and the FlashMLA planner are outside this audit; no
    pinned host memory without a GPU."""
    from vllm.models.deepseek_v4.nvidia import flashmla
    from vllm.utils import torch_utils
    from vllm.v1.attention.backends.mla.sparse_swa import (
        DeepseekSparseSWAMetadataBuilder,
    )

    def no_tile_scheduler(self: Any, num_decode_tokens: int) -> dict[str, Any]:
        # Placeholders for the FlashMLA planner state (its kernel is stubbed).
        return {name: SimpleNamespace() for name in ("swaonly", "c4a", "c128a")}

    with (
        mock.patch.object(torch_utils, "PIN_MEMORY", False),
        mock.patch.object(flashmla, "dequantize_and_gather_k_cache", lambda *a, **k: None),
        mock.patch.object(flashmla, "flash_mla_sparse_fwd", lambda *a, **k: None),
        mock.patch.object(flashmla, "flash_mla_with_kvcache", lambda *a, **k: (None, None)),
        mock.patch.object(
            flashmla,
            "current_workspace_manager",
            type("Workspace", (_Workspace,), {"device": device}),
        ),
        mock.patch.object(
            DeepseekSparseSWAMetadataBuilder, "build_tile_scheduler", no_tile_scheduler
        ),
    ):
        yield


def _boundary_values(lo: int, hi: int, steps: Sequence[int]) -> list[int]:
    """Values in [lo, hi] at and around multiples of each step (k*step - 1,
    k*step, k*step + 1) for a few k at both ends, plus the ends."""
    out = {lo, hi}
    for step in steps:
        for k in (1, 2, 3, 7, 8, 9, hi // step - 1, hi // step):
            out.update(k * step + d for d in (-1, 0, 1))
    return sorted(v for v in out if lo <= v <= hi)


def scenarios(cfg: ServingConfig) -> Iterator[Batch]:
    """A realistic sweep: pure decode (q = 1 and MTP 1 + k, CUDA-graph
    padded), single and multi-request prefill, chunked prefill with long
    prefixes, mixed batches, and many short prefills beside a long one (the
    chunked attention then rebases ``query_start_loc`` per chunk)."""
    spec = cfg.num_speculative_tokens if cfg.speculative_method else 0
    threshold = 1 + spec
    mnbt, mml, seqs = cfg.max_num_batched_tokens, cfg.max_model_len, cfg.max_num_seqs
    decode_qs = sorted({1, threshold})
    batch_sizes = [b for b in _boundary_values(1, seqs, (16,)) if b <= seqs]
    ctx = min(mml - threshold, 4000)

    # Pure decode, eager and CUDA-graph padded.
    for q in decode_qs:
        for b in batch_sizes:
            if b * q > mnbt:
                continue
            decodes = tuple((q, ctx + q) for _ in range(b))
            yield Batch(decodes=decodes)
            pad_to = full_decode_graph_size(cfg.capture_sizes, b, q, seqs)
            if pad_to is not None and q == threshold:
                yield Batch(decodes=decodes, pad_to=pad_to)
    # Mixed decode query lengths (MTP with rejected drafts).
    if threshold > 1 and seqs >= 3:
        yield Batch(decodes=((1, min(100, mml)), (threshold, min(200, mml)), (1, min(300, mml))))

    min_prefill = threshold + 1
    # Compressed lengths change at multiples of each layer's compress ratio.
    ratios = tuple(r for r in attention_layer_ratios(cfg) if r > 1)
    lengths = _boundary_values(min_prefill, min(mnbt, mml), (16, 128, *ratios))
    prefixes = [0] + _boundary_values(1, mml - min_prefill, (16, 128, 512, *ratios))
    # Single prefills: whole prompts, and chunks after a cached prefix.
    for q in lengths:
        yield Batch(prefills=((q, q),))
    for prefix in prefixes:
        for q in (min_prefill, 17, 128, mnbt):
            if min_prefill <= q <= mnbt and prefix + q <= mml:
                yield Batch(prefills=((q, prefix + q),))
    # One or several prefills (each within max_model_len); with decodes in
    # front (0..5 of them).
    for n in (1, 2, 3, 4, 5, 6, 8, 9, 17, 33):
        for num_decodes in (0, 1, 2, 3, 5):
            if n + num_decodes > seqs:
                continue
            q = max(min_prefill, min(300, (mnbt - num_decodes) // n, mml))
            if n * q + num_decodes > mnbt:
                continue
            for prefix in (0, 1000, mml - q - 1):
                if prefix < 0 or prefix + q > mml:
                    continue
                prefills = tuple((q - (i % 2), prefix + q - (i % 2) + i) for i in range(n))
                if any(s > mml or ql < min_prefill for ql, s in prefills):
                    continue
                decodes = tuple((1, ctx) for _ in range(num_decodes))
                yield Batch(decodes=decodes, prefills=prefills)
    # Many short prompts beside one long one: the prefill workspace splits
    # them into several chunks, at many different chunk starts.
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
                decodes = tuple((1, ctx) for _ in range(num_decodes))
                short = ((min_prefill, min_prefill),) * num_short
                for prefills in (
                    (*short, (long_q, long_s)),
                    ((long_q, long_s), *short),
                ):
                    yield Batch(decodes=decodes, prefills=prefills)
                # The long request first, then one more after the short ones.
                if num_short >= 2 and left - long_q >= min_prefill:
                    tail = (min(left - long_q, 31), min(mml, 300))
                    if tail[0] >= min_prefill and tail[0] <= tail[1]:
                        yield Batch(
                            decodes=decodes,
                            prefills=((long_q, long_s), *short[:-1], tail),
                        )


def _gathered_width(q: int, s: int, ratio: int, window: int) -> int:
    """Row width a prefill request needs in the attention workspace
    (compressed prefix + SWA gather, as DeepseekSparseSWAMetadata plans it)."""
    compressed = 0 if ratio <= 1 else s // ratio
    return compressed + q + min(max(s - q, 0), window - 1)


def chunk_boundary_scenarios(cfg: ServingConfig) -> Iterator[Batch]:
    """Prefill batches whose first workspace chunk closes after exactly
    ``c`` requests: a long request sized for that, ``c - 1`` short prompts,
    then one prompt of assorted length (its chunk starts at ``c``)."""
    threshold = 1 + (cfg.num_speculative_tokens if cfg.speculative_method else 0)
    min_prefill = threshold + 1
    mnbt, mml, window = (
        cfg.max_num_batched_tokens,
        cfg.max_model_len,
        cfg.sliding_window,
    )
    tails = sorted(
        {
            (q, s)
            for q, s in (
                (min_prefill, min_prefill),
                (min_prefill, 6),
                (min_prefill, 200),
                (16, 16),
                (17, 17),
                (min_prefill, 129),
                (17, 255),
                (32, 300),
                (64, 2049),
                (32, 2048 + 16),
                (100, 4096 + 37),
                (min_prefill, 65),
                (16, 64),
                (33, 68),
                (48, 5000),
                (16, 143),
                (min_prefill, 4),
            )
            if min_prefill <= q <= s <= mml
        }
    )
    # (chunk start, decodes in front): every alignment of the chunk's slices
    # of query_start_loc / seq_lens (start + decodes) and gather_lens (start).
    starts = ((4, 0), (4, 1), (5, 0), (6, 2), (7, 1), (9, 3), (34, 0))
    for ratio in attention_layer_ratios(cfg):
        area = 4 * ((0 if ratio <= 1 else -(-mml // ratio)) + window + mnbt)
        for c, num_decodes in starts:
            if c + 1 + num_decodes > cfg.max_num_seqs:
                continue
            if True:
                budget = mnbt - num_decodes - (c - 1) * min_prefill
                # The cheapest long request with c * width <= area < (c + 1) * width.
                long = None
                for s in sorted({mml, mml // 2, mml // 4, 4096, 2048, 1024}, reverse=True):
                    if s > mml:
                        continue
                    for q in range(min_prefill, min(s, budget) + 1):
                        w = _gathered_width(q, s, ratio, window)
                        if w * (c + 1) > area:
                            if w * c <= area:
                                long = (q, s)
                            break
                    if long is not None:
                        break
                if long is None:
                    continue
                decodes = tuple((1, min(1000, mml)) for _ in range(num_decodes))
                short = ((min_prefill, min_prefill),) * (c - 1)
                for tail in tails:
                    if num_decodes + long[0] + (c - 1) * min_prefill + tail[0] <= mnbt:
                        yield Batch(decodes=decodes, prefills=(long, *short, tail))


def sweep(cfg: ServingConfig) -> list[Batch]:
    """The realistic sweep, then the chunk-boundary batches: only batches
    vLLM's scheduler could build for ``cfg`` (``ServingConfig.schedulable``);
    a key only an impossible batch launches is no runtime key."""
    batches = [*scenarios(cfg), *chunk_boundary_scenarios(cfg)]
    return [b for b in batches if cfg.schedulable(b.requests)]


def launched_keys(cfg: ServingConfig, batches: Iterable[Batch]) -> KeysByKernel:
    """Exact keys the real call sites launch for ``batches``, in order."""
    from dsv4warmup.triton_keys import keys_by_kernel, record_launches

    runner = Runner(cfg)
    with no_attention_kernels(), record_launches() as recorded:
        for batch in batches:
            runner.step(batch)
    keys = keys_by_kernel([r for r in recorded if not r.warmup])
    return {name: keys.get(name, set()) for name in KERNELS}


def runtime_keys(cfg: ServingConfig) -> KeysByKernel:
    """Exact keys the real call sites launch over the sweep."""
    return launched_keys(cfg, sweep(cfg))


def key_witness_batches(cfg: ServingConfig) -> list[Batch]:
    """The sweep's batches that launch a key no earlier batch launched: run
    in order, they launch every runtime key of the sweep, each binary at least
    once, in a fraction of the batches (for slow checkers such as memcheck)."""
    from dsv4warmup.triton_keys import record_launches

    runner = Runner(cfg)
    seen: set[tuple[str, Any]] = set()
    witnesses = []
    with no_attention_kernels(), record_launches() as recorded:
        for batch in sweep(cfg):
            start = len(recorded)
            runner.step(batch)
            new = {(r.kernel, r.key) for r in recorded[start:] if not r.warmup} - seen
            if new:
                seen |= new
                witnesses.append(batch)
    return witnesses


def witness_keys(cfg: ServingConfig) -> KeysByKernel:
    """Keys the real call sites launch for the batches the combine warmup
    derived its keys from: each warmup key must be among them (it is
    reachable), else the warmup compiles something serving never runs."""
    from vllm.models.deepseek_v4.common.ops.cache_utils import (
        combine_topk_swa_chunk_witnesses,
    )

    threshold = 1 + (cfg.num_speculative_tokens if cfg.speculative_method else 0)
    batches = set()
    for ratio in attention_layer_ratios(cfg):
        witnesses = combine_topk_swa_chunk_witnesses(
            compress_ratio=ratio,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_num_seqs=cfg.max_num_seqs,
            max_model_len=cfg.max_model_len,
            window_size=cfg.sliding_window,
            decode_threshold=threshold,
            prefill_chunk_size=4,
        )
        for w in witnesses.values():
            decodes = ((1, min(1000, cfg.max_model_len)),) * w.num_decodes
            batches.add(Batch(decodes=decodes, prefills=w.prefills))
    return launched_keys(cfg, sorted(batches, key=repr))


# --- warmup side ----------------------------------------------------------------


def warmup_vllm_config(cfg: ServingConfig) -> Any:
    """Stand-in ``VllmConfig`` whose static forward context holds one layer of
    each attention type the model loads (target + MTP)."""
    vllm_config = make_vllm_config(cfg)
    ctx = vllm_config.compilation_config.static_forward_context
    for ratio in attention_layer_ratios(cfg):
        layer = _fake_flashmla_layer(cfg, ratio)
        ctx[layer.prefix] = layer
    return vllm_config


WARMUP_MODULE = "vllm.model_executor.warmup.sparse_mla_triton_warmup"


def has_patched_warmup() -> bool:
    """Whether the importable tree carries the series' key-derived warmup
    (upstream 0.26.0 has the module, with a hard-coded case tuple)."""
    import importlib

    return hasattr(importlib.import_module(WARMUP_MODULE), "deepseek_v4_sparse_mla_key_warmup")


def warmup_keys(cfg: ServingConfig) -> KeysByKernel:
    """Exact keys the startup warmup compiles."""
    if not has_patched_warmup():
        return _pristine_warmup_keys(cfg)
    return _patched_warmup_keys(cfg)


# An attention backend of DeepSeek V4's sparse MLA on NVIDIA, by the name
# upstream's warmup gates on.
_PRISTINE_DSV4_BACKEND = "FLASHMLA_SPARSE_DSV4"


def _pristine_worker(cfg: ServingConfig, device: Any) -> Any:
    """A stand-in ``Worker`` carrying what upstream's
    ``sparse_mla_triton_warmup_if_needed`` reads."""
    backend = SimpleNamespace(get_name=lambda: _PRISTINE_DSV4_BACKEND)
    hf_config = SimpleNamespace(sliding_window=cfg.sliding_window)
    runner = SimpleNamespace(
        is_pooling_model=False,
        device=device,
        attn_groups=[[SimpleNamespace(backend=backend)]],
        vllm_config=SimpleNamespace(model_config=SimpleNamespace(hf_config=hf_config)),
    )
    return SimpleNamespace(
        model_runner=runner,
        scheduler_config=SimpleNamespace(max_num_batched_tokens=cfg.max_num_batched_tokens),
    )


def _planned_runner(cfg: ServingConfig, vllm_config: Any) -> Any:
    """A stand-in runner with the KV cache config the engine core's planner
    gives DeepSeek V4 (``get_kv_cache_configs``, checked on 0.26.0 and 0.25.1):
    the attention layers' MLA group keeps ``--block-size`` blocks, the SWA
    caches 64-token ones."""
    ctx = vllm_config.compilation_config.static_forward_context
    groups = [
        SimpleNamespace(
            layer_names=[name for name, layer in ctx.items() if layer.compress_ratio > 1],
            kv_cache_spec=SimpleNamespace(block_size=cfg.block_size),
        ),
        SimpleNamespace(
            layer_names=[f"{name}.swa_cache" for name in ctx],
            kv_cache_spec=SimpleNamespace(block_size=_SWA_BLOCK_SIZE),
        ),
    ]
    return SimpleNamespace(
        vllm_config=vllm_config, kv_cache_config=SimpleNamespace(kv_cache_groups=groups)
    )


def _pristine_warmup_keys(cfg: ServingConfig) -> KeysByKernel:
    """What upstream 0.26.0's own warmup compiles of our kernels: it launches
    ``combine_topk_swa_indices`` for ``_DSV4_COMBINE_TOPK_SWA_WARMUP_CASES``
    (real launches, recorded, not run) and never the C128A kernel."""
    import importlib

    import torch

    from dsv4warmup.triton_keys import keys_by_kernel, record_launches

    module = importlib.import_module(WARMUP_MODULE)

    def fail(msg: str, *args: Any, **kwargs: Any) -> None:
        # Upstream logs and swallows warmup errors; an audit must not.
        raise RuntimeError("upstream sparse-MLA warmup failed: " + msg % args)

    # CPU tensors: launches are recorded, never run; the warmup reads some
    # sizes back on the host.
    worker = _pristine_worker(cfg, torch.device("cpu"))
    with mock.patch.object(module.logger, "warning", fail), record_launches() as recorded:
        module.sparse_mla_triton_warmup_if_needed(worker)
    keys = keys_by_kernel(list(recorded))
    return {name: keys.get(name, set()) for name in KERNELS}


def key_warmup_args(cfg: ServingConfig) -> tuple[Any, ...]:
    """The arguments ``sparse_mla_triton_warmup_if_needed`` passes to the
    series' ``deepseek_v4_sparse_mla_key_warmup``: the stand-in config and,
    from patch 0010 on, the C128A group's KV-manager block size read off a
    runner with the planner's KV cache config."""
    import importlib
    import inspect

    module = importlib.import_module(WARMUP_MODULE)
    vllm_config = warmup_vllm_config(cfg)
    args: tuple[Any, ...] = (vllm_config,)
    if len(inspect.signature(module.deepseek_v4_sparse_mla_key_warmup).parameters) > 1:
        args += (module._c128a_kv_block_size(_planned_runner(cfg, vllm_config)),)
    return args


def _patched_warmup_keys(cfg: ServingConfig) -> KeysByKernel:
    """What the series' start-up warmup compiles: ``sparse_mla_triton_warmup_if_needed``
    ends with ``deepseek_v4_sparse_mla_key_warmup(vllm_config, <C128A group's
    KV-manager block size read off the runner>)`` (patch 0010; before it, no
    second argument)."""
    import importlib

    from dsv4warmup.triton_keys import keys_by_kernel, record_launches

    module = importlib.import_module(WARMUP_MODULE)
    with record_launches() as recorded:
        module.deepseek_v4_sparse_mla_key_warmup(*key_warmup_args(cfg))
    keys = keys_by_kernel([r for r in recorded if r.warmup])
    return {name: keys.get(name, set()) for name in KERNELS}
