"""Coverage audit for the flags of vLLM's offline pre-warm entry point
(``python -m vllm.model_executor.warmup.deepseek_v4_warmup``, patch 0009).

``python -m dsv4warmup.prewarm_audit [vllm serve flags] [--num-sms N]
[--no-deep-gemm] [--json]`` (with the patched tree and this repository's
``scripts/`` on ``PYTHONPATH``) parses the flags with the entry point's own
parser, prints one row per kernel and exits 1 if a key is missing. The audit
lives here, not in vLLM: it drives the call sites through this repository's
drivers.

The warmed side is what that entry point compiles for its configuration,
recorded (exact Triton keys, TileLang static keys) while its own launch code
runs on CPU; the runtime side comes from the call-site drivers of
:mod:`dsv4warmup.legacy` over a serving sweep of the same configuration,
never from the warmup's key functions.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

from . import legacy  # noqa: F401  (first: lets vLLM keep Triton on a CPU-only machine)
from .rows import Row, format_table
from .serving import ServingConfig
from .tree_audit import GROUPS

__all__ = ["audit_rows", "format_rows", "main", "serving_config", "warmed_keys"]


def serving_config(cfg: Any) -> ServingConfig:
    """The drivers' view of a ``DeepseekV4WarmupConfig``. The drivers model
    the report's deployments: no parallel drafting, no decode context
    parallelism, padded drafter batches; ``audit_rows`` refuses the rest."""
    method = cfg.speculative_method if cfg.num_speculative_tokens > 0 else None
    return ServingConfig(
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_model_len=cfg.max_model_len,
        block_size=cfg.block_size,
        kv_cache_dtype=cfg.kv_cache_dtype,
        num_speculative_tokens=cfg.num_speculative_tokens if method else 0,
        speculative_method=method,
        tensor_parallel_size=cfg.tensor_parallel_size,
        cudagraph_capture_sizes=tuple(cfg.cudagraph_capture_sizes) or None,
        hidden_size=cfg.hidden_size,
        vocab_size=cfg.vocab_size,
        hc_mult=cfg.hc_mult,
        index_topk=cfg.index_topk,
        sliding_window=cfg.sliding_window,
        compress_ratios=tuple(cfg.compress_ratios),
        num_nextn_predict_layers=cfg.num_nextn_predict_layers,
        rms_norm_eps=cfg.rms_norm_eps,
        hc_eps=cfg.hc_eps,
        hc_sinkhorn_iters=cfg.hc_sinkhorn_iters,
        sm_count=cfg.num_sms or ServingConfig.sm_count,
    )


def _device_facts(cfg: Any) -> Any:
    from .legacy import mhc

    serving = serving_config(cfg)
    return cfg.replace(
        num_sms=cfg.num_sms or serving.sm_count,
        use_deep_gemm=mhc.deep_gemm_of(serving) if cfg.use_deep_gemm is None else cfg.use_deep_gemm,
    )


def warmed_keys(cfg: Any) -> dict[str, set[Any]]:
    """Every key the entry point's ``warm()`` compiles, recorded on CPU
    through the same launch derivation and compile loops."""
    from vllm.model_executor.warmup import deepseek_v4_warmup as prewarm
    from vllm.model_executor.warmup.deepseek_v4_mhc_warmup import nvidia_mhc_warmup
    from vllm.model_executor.warmup.triton_specialization import compile_triton_warmup

    from .legacy import mhc
    from .triton_keys import keys_by_kernel, record_launches

    cfg = _device_facts(cfg)
    with record_launches() as recorded:
        compile_triton_warmup("pre-warm (recorded)", prewarm.triton_launches(cfg))
    keys: dict[str, set[Any]] = {k: set(v) for k, v in keys_by_kernel(recorded).items()}
    with mhc.recording(cfg.num_sms, cfg.use_deep_gemm) as recorder:
        sites = prewarm.mhc_call_sites(cfg, "meta")
        warmed, total = nvidia_mhc_warmup(
            sites,
            prewarm.mhc_token_counts(cfg),
            use_deep_gemm=cfg.use_deep_gemm,
            num_sms=cfg.num_sms,
        )
    if warmed != total:
        raise RuntimeError(f"mHC pre-warm launched {warmed} of {total} keys")
    for kernel, static_keys in recorder.keys.items():
        keys.setdefault(kernel, set()).update(static_keys)
    return keys


def runtime_keys(cfg: Any) -> dict[str, dict[str, set[Any]]]:
    """Keys the real call sites produce over the serving sweep, by group."""
    cfg = _device_facts(cfg)
    serving = serving_config(cfg)
    by_group: dict[str, dict[str, set[Any]]] = {}
    for group in GROUPS:
        module: Any = importlib.import_module(f"dsv4warmup.legacy.{group}")
        if group == "mhc":
            keys = module.runtime_keys(serving, deep_gemm=cfg.use_deep_gemm)
        else:
            keys = module.runtime_keys(serving)
        for kernel in getattr(module, "KERNELS", ()):
            keys.setdefault(kernel, set())
        by_group[group] = keys
    return by_group


def audit_rows(cfg: Any) -> list[Row]:
    unsupported = [
        name
        for name, value in (
            ("parallel_drafting", cfg.parallel_drafting),
            ("disable_padded_drafter_batch", cfg.disable_padded_drafter_batch),
            ("decode_context_parallel_size", cfg.decode_context_parallel_size != 1),
        )
        if value
    ]
    if unsupported:
        raise ValueError(f"the call-site drivers do not model {', '.join(unsupported)}")
    warm = warmed_keys(cfg)
    rows = []
    for group, runtime in runtime_keys(cfg).items():
        for kernel in sorted(runtime):
            rt, wk = set(runtime[kernel]), set(warm.get(kernel, ()))
            rows.append(Row(kernel, len(rt), len(wk), len(rt - wk), len(wk - rt), group))
    audited = {row.kernel for row in rows}
    for kernel in sorted(set(warm) - audited):  # warmed, never reached
        rows.append(Row(kernel, 0, len(warm[kernel]), 0, len(warm[kernel])))
    return rows


def format_rows(rows: list[Row]) -> str:
    return format_table("DeepSeek V4 kernel keys: runtime call sites vs pre-warm", rows)


def make_arg_parser() -> argparse.ArgumentParser:
    """The entry point's parser plus the audit's own flags."""
    from vllm.model_executor.warmup import deepseek_v4_warmup as prewarm

    p = prewarm.make_arg_parser()
    p.prog = "python -m dsv4warmup.prewarm_audit"
    p.description = (
        "On CPU: compare the keys the pre-warm entry point compiles for these "
        "vllm serve flags with the keys vLLM's call sites produce."
    )
    p.add_argument("--num-sms", type=int, help="SM count (default: H100/H200's)")
    p.add_argument(
        "--deep-gemm",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="whether DeepGEMM runs the mHC GEMM (default: as the drivers model it)",
    )
    p.add_argument("--json", action="store_true", help="rows as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from vllm.model_executor.warmup import deepseek_v4_warmup as prewarm

    args = make_arg_parser().parse_args(argv)
    prewarm._logs_to_stderr()  # stdout carries the rows
    cfg = prewarm.config_from_args(args).replace(num_sms=args.num_sms, use_deep_gemm=args.deep_gemm)
    rows = audit_rows(cfg)
    if args.json:
        print(json.dumps([row.as_dict() for row in rows], indent=1))
    else:
        print(format_rows(rows))
    return 1 if any(row.missing for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
