# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Pre-warm DeepSeek V4's model-specific JIT kernels offline.

The worker warms these kernels at start-up (``kernel_warmup``) from the loaded
model and runner. This entry point derives the same launches from ``vllm
serve``'s flags and the model's ``config.json``, without loading weights, so
Triton's and TileLang's disk caches can be filled before the server starts
(on the serving machine, or in an image build with the same GPU)::

    python -m vllm.model_executor.warmup.deepseek_v4_warmup \\
        --model /models/DeepSeek-V4-Flash --tensor-parallel-size 4 \\
        --kv-cache-dtype fp8 --block-size 256 \\
        --speculative-config '{"method": "mtp", "num_speculative_tokens": 1}'

Both paths go through the same code: the ``*_warmup_launches`` functions beside
each Triton kernel, ``compile_triton_warmup``, and for the mHC TileLang kernels
``mhc_warmup_launches`` / ``nvidia_mhc_warmup``. Only where the parameters come
from differs (a loaded model there, flags here).
"""

import argparse
import dataclasses
import inspect
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

import vllm.envs as envs
from vllm.utils.math_utils import cdiv

_MTP_METHODS = ("mtp", "deepseek_mtp")
# DeepseekV4SWACache: the MTP layer's only KV cache (block size fixed by the
# C4A page it shares).
_SWA_HEAD_DIM = 512


@dataclass(frozen=True)
class DeepseekV4WarmupConfig:
    """The serving parameters the DeepSeek V4 kernel keys depend on.

    Defaults: DeepSeek V4 Flash served with TP4, an fp8 KV cache, block size
    256 and MTP with one speculative token.
    """

    # vllm serve flags
    max_num_batched_tokens: int = 8192
    max_model_len: int = 65536
    max_num_seqs: int = 256
    block_size: int = 256
    kv_cache_dtype: str = "fp8"
    speculative_method: str | None = "mtp"
    num_speculative_tokens: int = 1
    parallel_drafting: bool = False
    disable_padded_drafter_batch: bool = False
    tensor_parallel_size: int = 4
    decode_context_parallel_size: int = 1
    cudagraph_capture_sizes: tuple[int, ...] = ()
    # config.json
    hidden_size: int = 4096
    vocab_size: int = 129280
    hc_mult: int = 4
    hc_eps: float = 1e-6
    hc_sinkhorn_iters: int = 20
    rms_norm_eps: float = 1e-6
    index_topk: int = 512
    sliding_window: int = 128
    compress_ratios: tuple[int, ...] = (4, 128)
    num_nextn_predict_layers: int = 1
    # device (None: ask the current GPU)
    num_sms: int | None = None
    use_deep_gemm: bool | None = None

    @property
    def uses_mtp(self) -> bool:
        return (
            self.speculative_method in _MTP_METHODS
            and self.num_speculative_tokens > 0
            and self.num_nextn_predict_layers > 0
        )

    def replace(self, **changes: Any) -> "DeepseekV4WarmupConfig":
        return dataclasses.replace(self, **changes)


_HF_CONFIG_FIELDS = (
    "hidden_size",
    "vocab_size",
    "hc_mult",
    "hc_eps",
    "hc_sinkhorn_iters",
    "rms_norm_eps",
    "index_topk",
    "sliding_window",
    "compress_ratios",
    "num_nextn_predict_layers",
)


def config_from_hf_config(
    hf_config: dict[str, Any], base: DeepseekV4WarmupConfig | None = None
) -> DeepseekV4WarmupConfig:
    """Model dimensions from a ``config.json`` dict over ``base``."""
    base = base or DeepseekV4WarmupConfig()
    changes: dict[str, Any] = {}
    for name in _HF_CONFIG_FIELDS:
        if hf_config.get(name) is not None:
            value = hf_config[name]
            changes[name] = tuple(value) if isinstance(value, list) else value
    return base.replace(**changes)


# --- launches ------------------------------------------------------------------


def _mtp_drafter_block_table(cfg: DeepseekV4WarmupConfig) -> Any:
    """The MTP drafter's block table as the runner builds it: the layer is
    SWA-only, so its KV group is the SWA cache's sliding-window MLA spec."""
    from vllm.model_executor.warmup.spec_decode_triton_warmup import DrafterBlockTable
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekV4SWACache
    from vllm.v1.kv_cache_interface import SlidingWindowMLASpec
    from vllm.v1.worker.block_table import MultiGroupBlockTable

    spec = SlidingWindowMLASpec(
        block_size=DeepseekV4SWACache.BLOCK_SIZE,
        num_kv_heads=1,
        head_size=_SWA_HEAD_DIM,
        dtype=torch.uint8,
        sliding_window=cfg.sliding_window,
    )
    parallel = SimpleNamespace(
        parallel_config=SimpleNamespace(
            decode_context_parallel_size=cfg.decode_context_parallel_size
        )
    )
    if hasattr(spec, "max_num_blocks_per_req"):
        max_blocks = spec.max_num_blocks_per_req(parallel, cfg.max_model_len)  # type: ignore[arg-type]
    else:  # vLLM < 0.26: the runner's formula
        max_blocks = cdiv(
            cfg.max_model_len, spec.block_size * cfg.decode_context_parallel_size
        )
    kwargs: dict[str, Any] = {}
    if "max_model_len" in inspect.signature(MultiGroupBlockTable).parameters:
        kwargs["max_model_len"] = cfg.max_model_len  # vLLM < 0.26
    tables = MultiGroupBlockTable(
        max_num_reqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        pin_memory=False,
        device=torch.device("cpu"),
        block_sizes=[spec.block_size],
        kernel_block_sizes=[spec.block_size],
        max_num_blocks=[max_blocks],
        **kwargs,
    )
    tensor = tables[0].get_device_tensor(1)
    return DrafterBlockTable(
        block_size=spec.block_size,
        n_blocks_per_req=tensor.shape[1],
        stride=tensor.stride(0),
    )


def spec_decode_params(cfg: DeepseekV4WarmupConfig) -> Any:
    """What ``spec_decode_triton_warmup_params`` derives from a running
    engine with DeepSeek V4's MTP drafter (an EAGLE-style proposer); None
    without speculative decoding."""
    from vllm.model_executor.warmup.spec_decode_triton_warmup import (
        SpecDecodeTritonWarmupParams,
    )

    if not cfg.uses_mtp:
        return None
    table = None
    if cfg.num_speculative_tokens > 1 and not cfg.parallel_drafting:
        table = _mtp_drafter_block_table(cfg)
    return SpecDecodeTritonWarmupParams(
        max_num_seqs=cfg.max_num_seqs,
        num_speculative_tokens=cfg.num_speculative_tokens,
        vocab_size=cfg.vocab_size,
        max_model_len=cfg.max_model_len,
        eagle_proposer=True,
        padded_drafter_batch=not cfg.disable_padded_drafter_batch,
        drafter_block_table=table,
        mtp_norm_hidden_size=cfg.hidden_size,
        mtp_norm_weight_dtype=torch.bfloat16,
        mtp_norm_eps=cfg.rms_norm_eps,
    )


def attention_compress_ratios(cfg: DeepseekV4WarmupConfig) -> set[int]:
    """Compress ratio of every attention layer the target and MTP models
    build (a layer uses ``max(1, ratio)``; the MTP layer is SWA-only)."""
    ratios = {max(1, int(r)) for r in cfg.compress_ratios}
    if cfg.uses_mtp:
        ratios.add(1)
    return ratios


def sparse_mla_launches(cfg: DeepseekV4WarmupConfig) -> list[Any]:
    """What ``deepseek_v4_sparse_mla_warmup_launches`` derives from the loaded
    CUDA (FlashMLA) attention layers."""
    from vllm.models.deepseek_v4.attention import DeepseekV4Attention
    from vllm.models.deepseek_v4.common.ops.cache_utils import (
        combine_topk_swa_indices_warmup_launches,
    )
    from vllm.models.deepseek_v4.sparse_mla import (
        build_c128a_topk_metadata_warmup_launches,
    )

    ratios = attention_compress_ratios(cfg)
    k = cfg.num_speculative_tokens if cfg.uses_mtp else 0
    launches = []
    if 128 in ratios:
        launches += build_c128a_topk_metadata_warmup_launches(
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_num_seqs=cfg.max_num_seqs,
            max_model_len=cfg.max_model_len,
            block_size=_c128a_kernel_block_size(cfg),
            num_speculative_tokens=k,
            parallel_drafting=cfg.parallel_drafting,
            decode_context_parallel_size=cfg.decode_context_parallel_size,
            kv_block_size=cfg.block_size,
        )
    launches += combine_topk_swa_indices_warmup_launches(
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_num_seqs=cfg.max_num_seqs,
        max_model_len=cfg.max_model_len,
        compress_ratios=ratios,
        index_topk=cfg.index_topk,
        window_size=cfg.sliding_window,
        num_speculative_tokens=k,
        parallel_drafting=cfg.parallel_drafting,
        prefill_chunk_size=DeepseekV4Attention.PREFILL_CHUNK_SIZE,
    )
    return launches


def _c128a_kernel_block_size(cfg: DeepseekV4WarmupConfig) -> int:
    """As the worker warmup reads it off the loaded CUDA layers: their
    backend's kernel block size (``--block-size`` may differ)."""
    from vllm.model_executor.warmup.sparse_mla_triton_warmup import (
        deepseek_v4_kernel_block_size,
    )
    from vllm.models.deepseek_v4.sparse_mla import DeepseekV4FlashMLABackend

    return deepseek_v4_kernel_block_size([DeepseekV4FlashMLABackend], cfg.block_size)


def triton_launches(cfg: DeepseekV4WarmupConfig) -> list[Any]:
    """Every Triton launch the start-up warmup compiles for ``cfg``."""
    from vllm.model_executor.warmup.spec_decode_triton_warmup import (
        spec_decode_triton_warmup_launches,
    )

    launches = sparse_mla_launches(cfg)
    params = spec_decode_params(cfg)
    if params is not None:
        launches += spec_decode_triton_warmup_launches(params)
    return launches


def mhc_call_sites(
    cfg: DeepseekV4WarmupConfig, device: torch.device | str
) -> dict[Any, Any]:
    """The mHC call sites ``collect_mhc_call_sites`` finds on the CUDA target
    (first pipeline stage) and MTP draft models, bound to zero
    tensors of the layers' shapes and dtypes."""
    from vllm.model_executor.kernels.mhc.tilelang_dispatch import (
        HcHeadParams,
        MhcCallSite,
        MhcPostParams,
        MhcPreParams,
    )
    from vllm.model_executor.warmup.deepseek_v4_mhc_warmup import BoundMhcCallSite
    from vllm.models.deepseek_v4.nvidia.model import (
        DeepseekV4DecoderLayer,
        DeepseekV4Model,
    )

    device = torch.device(device)
    hidden, hc = cfg.hidden_size, cfg.hc_mult
    mix_hc = (2 + hc) * hc

    def zeros(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(*shape, dtype=dtype, device=device)

    pre = MhcPreParams(
        hidden_size=hidden,
        hc_mult=hc,
        rms_eps=cfg.rms_norm_eps,
        hc_pre_eps=cfg.hc_eps,
        hc_sinkhorn_eps=cfg.hc_eps,
        hc_post_mult_value=DeepseekV4DecoderLayer.HC_POST_ALPHA,
        sinkhorn_repeat=cfg.hc_sinkhorn_iters,
        norm_eps=cfg.rms_norm_eps,
    )
    layer = dict(
        fn=zeros(mix_hc, hc * hidden),
        scale=zeros(3),
        base=zeros(mix_hc),
        norm_weight=zeros(hidden, dtype=torch.bfloat16),
    )
    # The target's first layer takes the (T, H) embedding through the
    # broadcast pre where the model finalizes its broadcast weights; the MTP
    # block (and the target without that path) starts with a plain pre.
    entries = ["fused_post_pre"]
    if hasattr(DeepseekV4Model, "finalize_mhc_broadcast_weights"):
        entries.append("pre_broadcast")
    else:
        entries.append("pre")
    if cfg.uses_mtp:
        entries.append("pre")
    sites: dict[Any, Any] = {}
    for entry in entries:
        site = MhcCallSite(entry, pre)  # type: ignore[arg-type]
        tensors = dict(layer)
        if entry == "pre_broadcast":
            # Only bases with the broadcast first layer bind its weights.
            tensors["fn_broadcast"] = zeros(mix_hc, hidden)
        sites[site] = BoundMhcCallSite(site, device, **tensors)
    post = MhcCallSite("post", MhcPostParams(hidden, hc))
    sites[post] = BoundMhcCallSite(post, device)
    head = MhcCallSite(
        "hc_head",
        HcHeadParams(
            hidden_size=hidden, hc_mult=hc, rms_eps=cfg.rms_norm_eps, hc_eps=cfg.hc_eps
        ),
    )
    sites[head] = BoundMhcCallSite(
        head, device, fn=zeros(hc, hc * hidden), scale=zeros(1), base=zeros(hc)
    )
    return sites


def mhc_token_counts(cfg: DeepseekV4WarmupConfig) -> list[int]:
    from vllm.model_executor.kernels.mhc.tilelang_dispatch import (
        mhc_warmup_token_counts,
    )

    return mhc_warmup_token_counts(
        cfg.max_num_batched_tokens, cfg.cudagraph_capture_sizes
    )


def resolve_device_facts(cfg: DeepseekV4WarmupConfig) -> DeepseekV4WarmupConfig:
    """Fill the SM count and DeepGEMM use from this machine, as the worker's
    warmup does (``device_num_sms``, ``is_deep_gemm_supported``)."""
    if cfg.num_sms is None:
        from vllm.model_executor.kernels.mhc.tilelang import device_num_sms

        cfg = cfg.replace(num_sms=device_num_sms())
    if cfg.use_deep_gemm is None:
        from vllm.utils.deep_gemm import is_deep_gemm_supported

        cfg = cfg.replace(use_deep_gemm=is_deep_gemm_supported())
    return cfg


# --- warming -------------------------------------------------------------------


@dataclass
class KernelWarmupResult:
    kernel: str
    keys: int
    failed: int = 0
    seconds: float = 0.0


@dataclass
class WarmupSummary:
    results: list[KernelWarmupResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> int:
        return sum(r.failed for r in self.results)


def warm(cfg: DeepseekV4WarmupConfig, *, progress: bool = False) -> WarmupSummary:
    """Compile every key of ``cfg`` on the current GPU: the Triton kernels
    (compile only, nothing runs) and the mHC TileLang kernels (each wrapper
    called once per new key on zero tensors)."""
    from vllm.model_executor.warmup.deepseek_v4_mhc_warmup import nvidia_mhc_warmup
    from vllm.model_executor.warmup.triton_specialization import (
        compile_triton_warmup,
        unique_launches,
    )

    detected = resolve_device_facts(cfg.replace(num_sms=None, use_deep_gemm=None))
    for name in ("num_sms", "use_deep_gemm"):
        given = getattr(cfg, name)
        if given is not None and given != getattr(detected, name):
            # The wrappers select keys from this machine; warming others would
            # count keys that were never compiled.
            raise ValueError(
                f"{name}={given} differs from this machine's "
                f"{getattr(detected, name)}; warm on the serving GPU model"
            )
    cfg = detected
    assert cfg.num_sms is not None and cfg.use_deep_gemm is not None
    started = time.perf_counter()
    by_kernel: dict[str, list[Any]] = {}
    for launch in unique_launches(triton_launches(cfg)):
        by_kernel.setdefault(launch.kernel_name, []).append(launch)
    bar = _progress(len(by_kernel) + 1, progress)
    summary = WarmupSummary()

    def record(result: KernelWarmupResult, t0: float) -> None:
        result.seconds = time.perf_counter() - t0
        summary.results.append(result)
        if bar is not None:
            bar.set_postfix_str(result.kernel)
            bar.update(1)

    for name, launches in by_kernel.items():
        t0 = time.perf_counter()
        compiled, failed = compile_triton_warmup(name, launches)
        record(KernelWarmupResult(name, compiled + failed, failed), t0)
    t0 = time.perf_counter()
    warmed, total = nvidia_mhc_warmup(
        mhc_call_sites(cfg, torch.device("cuda")),
        mhc_token_counts(cfg),
        use_deep_gemm=cfg.use_deep_gemm,
        num_sms=cfg.num_sms,
        num_threads=envs.VLLM_TRITON_JIT_WARMUP_NUM_THREADS,
    )
    torch.accelerator.synchronize()
    record(KernelWarmupResult("mHC TileLang kernels", total, total - warmed), t0)
    if bar is not None:
        bar.close()
    summary.seconds = time.perf_counter() - started
    return summary


def _progress(total: int, enabled: bool) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="DeepSeek V4 kernel warmup", unit="kernel")


def format_summary(summary: WarmupSummary) -> str:
    width = max([len(r.kernel) for r in summary.results] + [6])
    lines = [f"{'kernel':<{width}}  keys  failed  seconds"]
    for r in summary.results:
        lines.append(
            f"{r.kernel:<{width}}  {r.keys:>4}  {r.failed:>6}  {r.seconds:>7.2f}"
        )
    total = sum(r.keys for r in summary.results)
    lines.append(
        f"{'total':<{width}}  {total:>4}  {summary.failed:>6}  {summary.seconds:>7.2f}"
    )
    return "\n".join(lines)


# --- command line ----------------------------------------------------------------


# config.json fields a flag can override.
_INT_OVERRIDES = (
    "hidden_size",
    "vocab_size",
    "hc_mult",
    "index_topk",
    "sliding_window",
)


def make_arg_parser() -> argparse.ArgumentParser:
    d = DeepseekV4WarmupConfig()
    p = argparse.ArgumentParser(
        prog="python -m vllm.model_executor.warmup.deepseek_v4_warmup",
        description=(
            "Compile every JIT key of DeepSeek V4's Triton and TileLang kernels into "
            "the disk caches, for the given vllm serve flags (defaults: DeepSeek V4 "
            "Flash, TP4, fp8 KV cache, block 256, MTP k=1)."
        ),
    )
    p.add_argument("--model", help="model directory holding config.json")
    p.add_argument("--hf-config-path", help="config.json (or its directory)")
    p.add_argument(
        "--max-num-batched-tokens", type=int, default=d.max_num_batched_tokens
    )
    p.add_argument(
        "--max-model-len",
        type=int,
        help="default: config.json's max_position_embeddings as vllm serve, else "
        f"{d.max_model_len}",
    )
    p.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    p.add_argument("--block-size", type=int, default=d.block_size)
    # No key of these kernels depends on it; checked as the attention layer does.
    p.add_argument("--kv-cache-dtype", default=d.kv_cache_dtype)
    p.add_argument(
        "--tensor-parallel-size", "-tp", type=int, default=d.tensor_parallel_size
    )
    p.add_argument(
        "--decode-context-parallel-size",
        "-dcp",
        type=int,
        default=d.decode_context_parallel_size,
    )
    p.add_argument(
        "--speculative-config",
        type=json.loads,
        default={"method": "mtp", "num_speculative_tokens": 1},
        help='JSON as for vllm serve, e.g. \'{"method": "mtp", '
        '"num_speculative_tokens": 1}\'; "{}" for none',
    )
    p.add_argument(
        "--cudagraph-capture-sizes",
        type=int,
        nargs="*",
        default=[],
        help="extra CUDA-graph sizes (all up to --max-num-batched-tokens are warmed)",
    )
    for name in _INT_OVERRIDES:
        p.add_argument(
            f"--{name.replace('_', '-')}", type=int, help="overrides config.json"
        )
    p.add_argument(
        "--compress-ratios", type=int, nargs="+", help="override config.json"
    )
    return p


def _num_speculative_tokens(spec: dict[str, Any], cfg: DeepseekV4WarmupConfig) -> int:
    k = spec.get("num_speculative_tokens")
    if k is None and spec.get("method") in _MTP_METHODS:
        # vLLM's SpeculativeConfig takes the model's MTP layer count.
        return cfg.num_nextn_predict_layers
    method = spec.get("method")
    if method is not None and method not in _MTP_METHODS:
        raise SystemExit(
            f"--speculative-config method {method!r}: DeepSeek V4 serves "
            f"speculative decoding with its MTP head ({', '.join(_MTP_METHODS)})"
        )
    return int(k or 0)


class FlagError(ValueError):
    """A flag value this entry point refuses; the message names the flag."""


def _read_hf_config(path: str, flag: str) -> dict[str, Any]:
    """The model's ``config.json`` (``path`` or the file in that directory),
    checked to be a DeepSeek V4 config."""
    config_json = Path(path)
    if config_json.is_dir():
        config_json = config_json / "config.json"
    try:
        hf_config = json.loads(config_json.read_text())
    except OSError as e:
        raise FlagError(
            f"argument {flag}: cannot read {config_json}: {e.strerror}"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FlagError(f"argument {flag}: {config_json} is not JSON: {e}") from None
    model_type = hf_config.get("model_type") if isinstance(hf_config, dict) else None
    if model_type != "deepseek_v4":
        raise FlagError(
            f"argument {flag}: {config_json} is not a DeepSeek V4 config "
            f"(model_type {model_type!r}, expected 'deepseek_v4')"
        )
    return hf_config


def validate_args(args: argparse.Namespace) -> None:
    """Refuse the values ``vllm serve`` would refuse for DeepSeek V4, with one
    line naming the flag and what it accepts."""
    for name in (
        "max_num_batched_tokens",
        "max_model_len",
        "max_num_seqs",
        "tensor_parallel_size",
        "decode_context_parallel_size",
    ):
        value = getattr(args, name)
        if value is not None and value < 1:
            flag = "--" + name.replace("_", "-")
            raise FlagError(f"argument {flag}: must be >= 1, got {value}")
    if args.block_size < 1:
        raise FlagError(f"argument --block-size: must be >= 1, got {args.block_size}")
    _check_block_size(args.block_size)
    if args.decode_context_parallel_size > 1:
        # The engine core's KV-cache planner asserts this for the model's
        # sliding-window cache ("DCP not support sliding window.").
        raise FlagError(
            "argument --decode-context-parallel-size: vLLM does not support decode "
            "context parallelism with DeepSeek V4's sliding-window KV cache, got "
            f"{args.decode_context_parallel_size}"
        )
    _check_kv_cache_dtype(args.kv_cache_dtype)


def _check_block_size(block_size: int) -> None:
    """The worker's check: the KV-cache manager's blocks must split into the
    attention kernels' blocks (DeepSeek V4's FlashMLA takes 256 tokens)."""
    from vllm.models.deepseek_v4.compressor import CompressorBackend
    from vllm.models.deepseek_v4.sparse_mla import DeepseekV4FlashMLABackend
    from vllm.v1.worker.utils import select_common_block_size

    try:
        select_common_block_size(
            block_size, [DeepseekV4FlashMLABackend, CompressorBackend]
        )
    except ValueError as e:
        raise FlagError(
            f"argument --block-size: {' '.join(str(e).split())} (DeepSeek V4's "
            "attention kernels take 256-token KV blocks: use a multiple of 256)"
        ) from None


def _check_kv_cache_dtype(kv_cache_dtype: str) -> None:
    """What DeepSeek V4's CUDA attention layer checks at construction: the
    FlashMLA layout takes an fp8 KV cache only."""
    from vllm.models.deepseek_v4.attention import _resolve_dsv4_kv_cache_dtype
    from vllm.models.deepseek_v4.nvidia.model import _select_dsv4_attn_cls

    attn_cls = _select_dsv4_attn_cls(
        SimpleNamespace(attention_config=SimpleNamespace(backend=None))  # type: ignore[arg-type]
    )
    try:
        _resolve_dsv4_kv_cache_dtype(
            attn_cls.use_fp8_ds_mla_layout, kv_cache_dtype, None
        )
    except (AssertionError, ValueError) as e:
        raise FlagError(f"argument --kv-cache-dtype: {e}") from None


def config_from_args(args: argparse.Namespace) -> DeepseekV4WarmupConfig:
    cfg = DeepseekV4WarmupConfig()
    max_len_from_config = None
    path = args.hf_config_path or args.model
    if path:
        flag = "--hf-config-path" if args.hf_config_path else "--model"
        hf_config = _read_hf_config(path, flag)
        cfg = config_from_hf_config(hf_config, cfg)
        # Like vllm serve: without --max-model-len, the model's own maximum.
        max_len_from_config = hf_config.get("max_position_embeddings")
    spec = args.speculative_config or {}
    changes: dict[str, Any] = dict(
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len or max_len_from_config or cfg.max_model_len,
        max_num_seqs=args.max_num_seqs,
        block_size=args.block_size,
        kv_cache_dtype=args.kv_cache_dtype,
        tensor_parallel_size=args.tensor_parallel_size,
        decode_context_parallel_size=args.decode_context_parallel_size,
        cudagraph_capture_sizes=tuple(args.cudagraph_capture_sizes),
        speculative_method=spec.get("method"),
        num_speculative_tokens=_num_speculative_tokens(spec, cfg),
        parallel_drafting=bool(spec.get("parallel_drafting", False)),
        disable_padded_drafter_batch=bool(
            spec.get("disable_padded_drafter_batch", False)
        ),
    )
    for name in _INT_OVERRIDES:
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if args.compress_ratios:
        changes["compress_ratios"] = tuple(args.compress_ratios)
    return cfg.replace(**changes)


def cache_dirs() -> dict[str, str]:
    """The disk caches a warm-up fills, by compiler: what an image build
    should keep so that the server loads these kernels instead of compiling."""
    from triton import knobs

    dirs = {"Triton": str(knobs.cache.dir)}
    try:
        from tilelang.env import env as tilelang_env
    except ImportError:
        return dirs
    dirs["TileLang"] = str(tilelang_env.TILELANG_CACHE_DIR)
    return dirs


def _logs_to_stderr() -> None:
    # stdout carries the summary; vLLM logs to stdout by
    # default (VLLM_LOGGING_STREAM), configured before main() runs.
    import logging

    for handler in logging.getLogger("vllm").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_arg_parser()
    args = parser.parse_args(argv)
    _logs_to_stderr()
    try:
        validate_args(args)
        cfg = config_from_args(args)
    except FlagError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("warming needs a CUDA GPU", file=sys.stderr)
        return 2
    summary = warm(cfg, progress=sys.stderr.isatty())
    print(format_summary(summary))
    for compiler, path in cache_dirs().items():
        print(f"{compiler} cache filled: {path}")
    return 1 if summary.failed else 0


if __name__ == "__main__":
    sys.exit(main())
