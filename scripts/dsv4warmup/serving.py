"""Serving configurations the audit and the tests sweep.

A :class:`ServingConfig` is the plain-parameter view of ``vllm serve`` flags and
the model's ``config.json`` that the warmups consume. ``FLASH`` is the report's
deployment: DeepSeek V4 Flash, TP4, fp8 KV cache, block 256, MTP with one
speculative token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass


def default_cudagraph_capture_sizes(
    max_num_seqs: int,
    num_speculative_tokens: int,
    max_num_batched_tokens: int | None = None,
    *,
    full_decode_graphs: bool = True,
) -> list[int]:
    """vLLM 0.26.0's default capture sizes (``performance_mode="balanced"``).

    ``VllmConfig._set_cudagraph_sizes``: the largest size is
    ``min(max_num_seqs * (1 + k) * 2, 512)``, capped by
    ``max_num_batched_tokens``; the sizes are 1, 2, 4, multiples of 8 below 256,
    multiples of 16 from 256, plus ``max_num_batched_tokens`` when it fits.
    With speculative decoding the V1 runner then rounds every size up to a
    multiple of ``1 + k`` (dropping those past the largest) when decode runs
    in FULL CUDA graphs, as in the default FULL_AND_PIECEWISE mode
    (``CompilationConfig.adjust_cudagraph_sizes_for_spec_decode``).
    """
    query_len = 1 + num_speculative_tokens
    largest = min(max_num_seqs * query_len * 2, 512)
    if max_num_batched_tokens is not None:
        largest = min(largest, max_num_batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= largest]
    if largest >= 8:
        sizes += range(8, min(largest + 1, 256), 8)
    if largest >= 256:
        sizes += range(256, largest + 1, 16)
    if max_num_batched_tokens is not None and max_num_batched_tokens <= largest:
        sizes.append(max_num_batched_tokens)
    sizes = sorted(set(sizes))
    if full_decode_graphs and query_len > 1 and sizes:
        largest = sizes[-1]
        rounded = sorted({-(-s // query_len) * query_len for s in sizes})
        rounded = [s for s in rounded if s <= largest]
        if not rounded and query_len <= largest:
            rounded = [query_len]
        sizes = rounded
    return sizes


def full_decode_graph_size(
    capture_sizes: Sequence[int], num_reqs: int, query_len: int, max_num_seqs: int
) -> int | None:
    """Tokens of the FULL CUDA graph a uniform decode batch (``num_reqs``
    requests of ``query_len`` tokens) replays in, or None when it runs
    without attention padding (PIECEWISE or eager).

    vLLM captures FULL decode graphs only up to ``max_num_seqs * query_len``
    tokens (V1 ``CudagraphDispatcher.initialize_cudagraph_keys``, V2
    ``CudaGraphManager._init_candidates``), so the padded request count never
    passes ``max_num_seqs``; a batch whose smallest fitting capture size is
    larger replays a PIECEWISE graph, its metadata unpadded.
    """
    limit = max_num_seqs * query_len
    for size in sorted(capture_sizes):
        if size >= num_reqs * query_len and size % query_len == 0:
            return size if size <= limit else None
    return None


@dataclass(frozen=True)
class ServingConfig:
    # vllm serve flags
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 65536
    block_size: int = 256
    kv_cache_dtype: str = "fp8"
    num_speculative_tokens: int = 1
    speculative_method: str | None = "mtp"
    tensor_parallel_size: int = 4
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    # model config.json
    hidden_size: int = 4096
    vocab_size: int = 129280
    hc_mult: int = 4
    index_topk: int = 512
    sliding_window: int = 128
    compress_ratios: tuple[int, ...] = (4, 128)
    num_nextn_predict_layers: int = 1
    rms_norm_eps: float = 1e-6
    hc_eps: float = 1e-6
    hc_sinkhorn_iters: int = 20
    # device
    sm_count: int = 132
    deep_gemm: bool = True  # vLLM uses DeepGEMM (VLLM_USE_DEEP_GEMM; 0.26.0/0.25.1 drivers)

    @property
    def capture_sizes(self) -> tuple[int, ...]:
        if self.cudagraph_capture_sizes is not None:
            return tuple(self.cudagraph_capture_sizes)
        return tuple(
            default_cudagraph_capture_sizes(
                self.max_num_seqs, self.num_speculative_tokens, self.max_num_batched_tokens
            )
        )

    @property
    def uses_mtp(self) -> bool:
        """DeepSeek V4's own MTP head drafts (vLLM's names for the method)."""
        return (
            self.speculative_method in ("mtp", "deepseek_mtp")
            and self.num_speculative_tokens > 0
            and self.num_nextn_predict_layers > 0
        )

    def schedulable(self, requests: Sequence[tuple[int, int]]) -> bool:
        """Whether vLLM's scheduler could build a step of ``requests`` (query
        length, sequence length) for this configuration: 1 … max_num_seqs
        requests, at most max_num_batched_tokens new tokens, every sequence
        within max_model_len."""
        return (
            0 < len(requests) <= self.max_num_seqs
            and sum(q for q, _ in requests) <= self.max_num_batched_tokens
            and all(0 < q <= s <= self.max_model_len for q, s in requests)
        )

    def replace(self, **changes: object) -> ServingConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


FLASH = ServingConfig()
PRO = ServingConfig(hidden_size=7168, index_topk=1024)

# Configuration-space boundaries of the sparse-MLA metadata keys that the CPU
# audit found (docs/config-space.md), run through the real kernels on the GPU too.
SPARSE_MLA_BOUNDARIES = {
    # KV-manager blocks of 8 kernel blocks (0.26.0 / 0.25.1: patch 0010)
    "pro-127-block2048": PRO.replace(max_model_len=127, block_size=2048),
    # one request, no MTP, capture size 2 > max_num_seqs: no FULL decode graph,
    # decodes run unpadded (full_decode_graph_size)
    "flash-one-seq": FLASH.replace(
        max_model_len=4096,
        max_num_seqs=1,
        num_speculative_tokens=0,
        speculative_method=None,
        cudagraph_capture_sizes=(2,),
    ),
}
