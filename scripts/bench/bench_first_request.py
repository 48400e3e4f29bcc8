#!/usr/bin/env python3
"""First-request replay of DeepSeek V4's model-specific kernels, pristine vs patched (GPU).

    python scripts/bench/bench_first_request.py --tree pristine=/path/to/pristine \\
        --tree patched=/path/to/patched [--max-tokens 8192] [--json out.json]

Each tree runs in child processes on its own, initially empty, Triton and
TileLang cache directories:

1. ``cold``: the tree's start-up warmup of these kernels, timed (patched: the
   pre-warm entry point's ``warm()``, the code ``kernel_warmup`` shares;
   pristine: what 0.26.0's ``kernel_warmup`` runs of them, its sparse-MLA
   Triton warmup -- its mHC warmup reaches no NVIDIA wrapper), then the replay.
2. ``warm``: the same in a second process on the caches the first filled.
3. patched only, ``prewarm+serve``: ``python -m
   vllm.model_executor.warmup.deepseek_v4_warmup`` with the same flags in one
   process on fresh caches, then a second process that runs only the replay.

The replay is a synthesized serving trace at kernel level, through the real
call sites (``dsv4warmup.legacy``): a first request (one 1187-token
prefill), then the sparse-MLA metadata builders over mixed prefill/decode
batches, MTP k=1 proposer steps over changing batch sizes, the MTP head's
logits, and target + MTP forward passes at every CUDA-graph capture size and
a sample of eager token counts. Attention and MoE are stubbed; the 12 kernels
run for real.

Printed per kernel: compiles after warmup (``jit``: Triton in-memory misses
(a disk-cache hit still counts), ``built``: real compiles, disk-cache misses
included), first-call latency, steady-state median and worst later call,
and per run the warmup wall time. DeepGEMM: if it is not installed, a torch
stand-in runs its ``tf32_hc_prenorm_gemm`` so the mHC kernels take the
DeepGEMM deployment's keys.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCRIPTS))
from dsv4warmup.legacy import sparse_mla as _sparse_mla  # noqa: E402
from dsv4warmup.legacy import spec_decode as _spec_decode  # noqa: E402

# The six Triton kernels (the mHC TileLang kernels are timed per forward pass).
TRITON_KERNELS = (*_spec_decode.KERNELS, *_sparse_mla.KERNELS)
FIRST_PROMPT = 1187
MHC = "mHC forward (TileLang)"


# --- child -------------------------------------------------------------------------


class _Probe:
    """Compiles and per-call latencies of the kernels, in this process."""

    def __init__(self) -> None:
        self.jit: dict[str, int] = defaultdict(int)
        self.built: dict[str, int] = defaultdict(int)
        self.calls: dict[str, list[float]] = defaultdict(list)
        self.recording = False

    def install(self) -> None:
        import logging

        import torch
        from triton import knobs
        from triton.runtime.jit import JITFunction

        probe = self
        do_compile, run = JITFunction._do_compile, JITFunction.run

        def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            if probe.recording and self.fn.__name__ in TRITON_KERNELS:
                probe.jit[self.fn.__name__] += 1
            return do_compile(self, *args, **kwargs)

        def timed(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            name = self.fn.__name__
            if not probe.recording or name not in TRITON_KERNELS or kwargs.get("warmup"):
                return run(self, *args, **kwargs)
            torch.cuda.synchronize()
            start = time.perf_counter()
            out = run(self, *args, **kwargs)
            torch.cuda.synchronize()
            probe.calls[name].append(time.perf_counter() - start)
            return out

        def listener(*, src, cache_hit, **_):  # type: ignore[no-untyped-def]
            name = getattr(src, "name", "")
            if probe.recording and not cache_hit and name in TRITON_KERNELS:
                probe.built[name] += 1

        JITFunction._do_compile = counting  # type: ignore[method-assign]
        JITFunction.run = timed  # type: ignore[method-assign]
        knobs.compilation.listener = listener

        class TileLangCompiles(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                message = record.getMessage()
                if probe.recording and "begins to compile kernel" in message:
                    probe.built[message.split("`")[1]] += 1

        # That logger only: its parent would see each line twice.
        kernel_logger = logging.getLogger("tilelang.jit.kernel")
        kernel_logger.setLevel(logging.INFO)
        kernel_logger.addHandler(TileLangCompiles(logging.INFO))


def _serving(max_tokens: int) -> Any:
    import torch
    from dsv4warmup.serving import FLASH

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return FLASH.replace(max_num_batched_tokens=max_tokens, sm_count=sms)


def _prewarm_argv(max_tokens: int, deep_gemm: bool) -> list[str]:
    return ["--max-num-batched-tokens", str(max_tokens)] + (["--deep-gemm"] if deep_gemm else [])


def _tree_warmup(cfg: Any, max_tokens: int, deep_gemm: bool) -> None:
    import importlib.util

    import torch

    if importlib.util.find_spec("vllm.model_executor.warmup.deepseek_v4_warmup"):
        from vllm.model_executor.warmup import deepseek_v4_warmup as prewarm

        args = prewarm.make_arg_parser().parse_args(_prewarm_argv(max_tokens, deep_gemm))
        summary = prewarm.warm(prewarm.config_from_args(args))
        print(prewarm.format_summary(summary), file=sys.stderr)
    else:  # 0.26.0: of these kernels its kernel_warmup compiles only the combine kernel
        from dsv4warmup.legacy import sparse_mla
        from vllm.model_executor.warmup.sparse_mla_triton_warmup import (
            sparse_mla_triton_warmup_if_needed,
        )

        worker = sparse_mla._pristine_worker(cfg, torch.device("cuda"))
        sparse_mla_triton_warmup_if_needed(worker)
    torch.cuda.synchronize()


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _replay(cfg: Any, probe: _Probe, deep_gemm: bool) -> None:
    import torch
    from dsv4warmup.legacy import mhc, sparse_mla, spec_decode

    def forward(models: Any, num_tokens: int) -> None:
        torch.cuda.synchronize()
        start = time.perf_counter()
        mhc._forward_all(models, num_tokens, deep_gemm)
        torch.cuda.synchronize()
        probe.calls[MHC].append(time.perf_counter() - start)

    torch.manual_seed(0)
    models = mhc.build_models(cfg, device="cuda")
    runner = sparse_mla.Runner(cfg, device="cuda")
    batches = sparse_mla.sweep(cfg)
    probe.recording = True
    _log("replay: first request")
    with mhc._model_stubs(), torch.inference_mode():
        forward(models, FIRST_PROMPT)  # the first request's prefill
    _log(f"replay: sparse-MLA metadata, {len(batches)} batches")
    with sparse_mla.no_attention_kernels("cuda"):
        for batch in batches:
            runner.step(batch)
    _log("replay: MTP proposer steps")
    spec_decode.run_call_sites(cfg, device="cuda")
    counts = sorted(
        set(cfg.capture_sizes) | set(mhc.sample_token_counts(cfg.max_num_batched_tokens))
    )
    _log(f"replay: forward passes at {len(counts)} token counts")
    with mhc._model_stubs(), torch.inference_mode():
        for num_tokens in counts:
            forward(models, num_tokens)
    torch.cuda.synchronize()
    probe.recording = False
    _log("replay: done")


def child(mode: str, max_tokens: int, deep_gemm: bool) -> None:
    from dsv4warmup.legacy import mhc

    probe = _Probe()
    probe.install()
    # The DeepGEMM deployment's mHC keys (or not), also where DeepGEMM is not
    # installed.
    with mhc.deep_gemm_mode(deep_gemm):
        result = _measure(mode, max_tokens, deep_gemm, probe)
    print("\n" + json.dumps(result))


def _measure(mode: str, max_tokens: int, deep_gemm: bool, probe: _Probe) -> dict[str, Any]:
    import torch

    torch.zeros(1, device="cuda")  # CUDA context outside the timings
    cfg = _serving(max_tokens)
    result: dict[str, Any] = {"mode": mode, "deep_gemm": deep_gemm}
    _log(f"{mode}: start")
    if mode == "prewarm":
        from vllm.model_executor.warmup import deepseek_v4_warmup as prewarm

        # Recording here too: what the pre-warm builds is the probe's positive
        # control (a later replay that builds nothing is then meaningful).
        probe.recording = True
        start = time.perf_counter()
        code = prewarm.main(_prewarm_argv(max_tokens, deep_gemm))
        probe.recording = False
        result.update(warmup_s=time.perf_counter() - start, exit=code)
    else:
        if mode == "warmup+replay":
            start = time.perf_counter()
            _tree_warmup(cfg, max_tokens, deep_gemm)
            result["warmup_s"] = time.perf_counter() - start
            _log(f"warmup done in {result['warmup_s']:.1f} s")
        start = time.perf_counter()
        _replay(cfg, probe, deep_gemm)
        result["replay_s"] = time.perf_counter() - start
    result.update(jit=dict(probe.jit), built=dict(probe.built), calls=dict(probe.calls))
    return result


# --- parent ------------------------------------------------------------------------


def _run(
    tree: Path | None, caches: Path, mode: str, max_tokens: int, deep_gemm: bool = True
) -> dict[str, Any]:
    """One child process on ``caches``; ``tree`` None: the installed vLLM.
    Its stderr (progress, logs) goes straight to ours."""
    paths = [str(SCRIPTS), os.environ.get("PYTHONPATH", "")]
    env = dict(
        os.environ,
        TRITON_CACHE_DIR=str(caches / "triton"),
        TILELANG_CACHE_DIR=str(caches / "tilelang"),
        # The TileLang compile count reads this log line.
        TILELANG_PRINT_ON_COMPILATION="1",
    )
    if tree is not None:
        paths.insert(0, str(tree))
        env["DSV4_VLLM_TREE"] = str(tree)
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    cmd = [sys.executable, __file__, "--child", mode, "--max-tokens", str(max_tokens)]
    cmd.append("--deep-gemm" if deep_gemm else "--no-deep-gemm")
    started = time.perf_counter()
    res = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{mode} on {tree} failed (exit {res.returncode}); see its stderr above")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["process_s"] = time.perf_counter() - started
    if out.get("exit", 0) != 0:
        raise RuntimeError(f"{mode} on {tree} exited {out['exit']}; see its stderr above")
    return out


def _kernel_rows(run: dict[str, Any]) -> list[str]:
    names = sorted(set(run["calls"]) | set(run["jit"]) | set(run["built"]))
    lines = []
    triton = [n for n in names if n in TRITON_KERNELS or n == MHC]
    tilelang = [n for n in names if n not in triton]
    for name in triton:
        calls = run["calls"].get(name, [])
        first = f"{calls[0] * 1e3:9.2f}" if calls else f"{'-':>9}"
        rest = calls[1:]
        median = f"{statistics.median(rest) * 1e3:8.3f}" if rest else f"{'-':>8}"
        worst = f"{max(rest) * 1e3:9.2f}" if rest else f"{'-':>9}"
        jit = run["jit"].get(name, "") if name != MHC else ""
        built = run["built"].get(name, "") if name != MHC else ""
        lines.append(
            f"    {name:<40} {jit!s:>4} {built!s:>6} {len(calls):>6} {first} {median} {worst}"
        )
    for name in tilelang:
        lines.append(f"    {name:<40} {'':>4} {run['built'][name]:>6}   (TileLang, in {MHC})")
    return lines


def report(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    out = []
    for tree, runs in results.items():
        for label, run in runs.items():
            warm = run.get("warmup_s")
            head = f"{tree} / {label}: process {run['process_s']:.1f} s"
            if warm is not None:
                head += f", warmup {warm:.1f} s"
            if "replay_s" in run:
                head += f", replay {run['replay_s']:.1f} s"
            out.append(head)
            if run.get("calls") or run.get("built"):
                out.append(
                    f"    {'kernel':<40} {'jit':>4} {'built':>6} {'calls':>6} "
                    f"{'first ms':>9} {'med ms':>8} {'worst ms':>9}"
                )
                out += _kernel_rows(run)
                jit = sum(run["jit"].values())
                built = sum(run["built"].values())
                out.append(f"    compiles after warmup: jit {jit}, built {built}")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="LABEL=PATH")
    parser.add_argument("--max-tokens", type=int, default=8192)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--runs",
        default="cold,warm,prewarm",
        help="which runs per tree (comma-separated: cold, warm, prewarm); warm needs cold",
    )
    parser.add_argument(
        "--deep-gemm",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the mHC kernels' DeepGEMM deployment keys (default) or the keys without it",
    )
    parser.add_argument("--child", choices=("warmup+replay", "replay", "prewarm"))
    args = parser.parse_args()
    if args.child:
        child(args.child, args.max_tokens, args.deep_gemm)
        return
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for spec in args.tree:
        label, _, path = spec.partition("=")
        tree = Path(path).resolve()
        caches = Path(tempfile.mkdtemp(prefix=f"first-request-{label}-"))
        runs = results.setdefault(label, {})
        wanted = set(args.runs.split(","))
        has_prewarm = (tree / "vllm/model_executor/warmup/deepseek_v4_warmup.py").exists()
        plan = [
            ("cold", "cold", "a", "warmup+replay"),
            ("warm", "warm disk cache", "a", "warmup+replay"),  # the caches cold filled
            *(
                [
                    ("prewarm", "pre-warm CLI", "b", "prewarm"),
                    ("prewarm", "serve after pre-warm", "b", "replay"),
                ]
                if has_prewarm
                else []
            ),
        ]
        for wanted_as, run_label, cache, mode in plan:
            if wanted_as in wanted:
                runs[run_label] = _run(tree, caches / cache, mode, args.max_tokens, args.deep_gemm)
                # Each run as it ends: a capped run still shows what finished.
                print(report({label: {run_label: runs[run_label]}}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
