"""Serving configurations the audit and the tests sweep.

A :class:`ServingConfig` is the plain-parameter view of ``vllm serve`` flags and
the model's ``config.json`` that the warmups consume. ``FLASH`` is the report's
deployment: DeepSeek V4 Flash, TP4, fp8 KV cache, block 256, MTP with one
speculative token.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


def default_cudagraph_capture_sizes(max_num_seqs: int, num_speculative_tokens: int) -> list[int]:
    """vLLM's default capture sizes: 1, 2, 4, then multiples of 8 up to
    min(max_num_seqs * (1 + k) , 512)."""
    limit = min(max_num_seqs * (1 + num_speculative_tokens), 512)
    sizes = [s for s in (1, 2, 4) if s <= limit]
    sizes += list(range(8, limit + 1, 8))
    return sizes


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
    # device
    sm_count: int = 132

    @property
    def capture_sizes(self) -> tuple[int, ...]:
        if self.cudagraph_capture_sizes is not None:
            return tuple(self.cudagraph_capture_sizes)
        return tuple(
            default_cudagraph_capture_sizes(self.max_num_seqs, self.num_speculative_tokens)
        )

    def replace(self, **changes: object) -> "ServingConfig":
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


FLASH = ServingConfig()
PRO = ServingConfig(hidden_size=7168, index_topk=1024)
