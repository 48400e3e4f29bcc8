"""Measure the DeepSeek V4 mHC TileLang warmup on a GPU.

Three fresh processes, each timing only the warmup (imports excluded):

1. ``derived``, cold TileLang cache: vLLM's startup entry point
   (``deepseek_v4_mhc_warmup``) on a DeepSeek V4 target + MTP draft (real
   model code, attention and MoE stubbed), keys derived for every token count.
2. ``derived``, warm disk cache: the same, a second process on the same
   ``TILELANG_CACHE_DIR``; it must compile nothing.
3. ``grid``, cold cache: upstream's 15 token sizes (+ capture sizes) through
   the same call sites -- what 0.26.0's warmup would compile if it reached
   the NVIDIA wrappers (on NVIDIA it reaches none).

Each then runs the forward passes at every split-K boundary, the capture
sizes and a random sample of token counts and reports what still compiles.
Key sets also come from the pure derivation: which runtime keys the grid
misses. Run on the GPU lab with the patched tree on ``PYTHONPATH``:

    python scripts/dsv4warmup/gpu/mhc_warmup_bench.py [--max-tokens 8192]
        [--hidden 4096] [--deep-gemm auto|off] [--threads 8] [--json out.json]

``--deep-gemm auto`` uses DeepGEMM if installed, else a torch stand-in for
its ``tf32_hc_prenorm_gemm`` (the TileLang keys are those of a DeepGEMM
deployment); ``off`` takes the wrappers' non-DeepGEMM branch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2]
CAPTURE_SIZES = (1, 2, 4, *range(8, 513, 8))


def _child(args: argparse.Namespace) -> dict:
    sys.path.insert(0, str(SCRIPTS))
    started = time.perf_counter()
    import logging

    import torch
    from dsv4warmup.legacy import mhc as cs
    from dsv4warmup.serving import FLASH, PRO
    from vllm.model_executor.kernels.mhc.tilelang import device_num_sms
    from vllm.model_executor.kernels.mhc.tilelang_dispatch import mhc_site_keys
    from vllm.model_executor.warmup import deepseek_v4_mhc_warmup as warmup

    imported = time.perf_counter() - started

    class CompileLog(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.INFO)
            self.kernels: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if "compile kernel" in message:
                elapsed = time.perf_counter() - started
                print(f"  {elapsed:7.1f} s {message[:90]}", file=sys.stderr, flush=True)
            if "begins to compile kernel" in message:
                self.kernels.append(message.split("`")[1])

    compile_log = CompileLog()
    kernel_logger = logging.getLogger("tilelang.jit.kernel")
    kernel_logger.setLevel(logging.INFO)
    kernel_logger.addHandler(compile_log)

    use_deep_gemm = args.deep_gemm == "auto"
    with cs.deep_gemm_mode(use_deep_gemm):
        num_sms = device_num_sms()
        base = PRO if args.hidden == PRO.hidden_size else FLASH.replace(hidden_size=args.hidden)
        cfg = base.replace(
            max_num_batched_tokens=args.max_tokens,
            cudagraph_capture_sizes=CAPTURE_SIZES,
            sm_count=num_sms,
        )
        torch.manual_seed(0)
        models = cs.build_models(cfg, device="cuda")
        sites = warmup.collect_mhc_call_sites([models.target, models.draft])
        counts = warmup.mhc_warmup_token_counts(args.max_tokens, CAPTURE_SIZES)

        def keys_at(sizes) -> set:
            return {
                key
                for site in sites
                for t in sizes
                for key in mhc_site_keys(site, t, use_deep_gemm=use_deep_gemm, num_sms=num_sms)
            }

        runtime_keys = keys_at(counts)
        os.environ["VLLM_TRITON_JIT_WARMUP_NUM_THREADS"] = str(args.threads)
        torch.cuda.synchronize()
        begin = time.perf_counter()
        if args.child == "derived":
            warmup.deepseek_v4_mhc_warmup(
                models.target,
                max_tokens=args.max_tokens,
                cudagraph_capture_sizes=list(CAPTURE_SIZES),
                draft_model=models.draft,
            )
            warmed_keys = runtime_keys
            sizes = "derived"
        else:
            grid = warmup._select_mhc_warmup_token_sizes(
                max_tokens=args.max_tokens, cudagraph_capture_sizes=list(CAPTURE_SIZES)
            )
            with torch.inference_mode():
                for size in grid:
                    for bound in sites.values():
                        try:
                            warmup._call_site(bound, size)
                        except RuntimeError:
                            pass  # the broadcast pre without DeepGEMM
            warmed_keys = keys_at(grid)
            sizes = grid
        torch.cuda.synchronize()
        seconds = time.perf_counter() - begin
        print(f"warmup done in {seconds:.1f} s", file=sys.stderr, flush=True)
        warmup_compiles = list(compile_log.kernels)
        compile_log.kernels.clear()

        sample = sorted(set(cs.sample_token_counts(args.max_tokens)) | set(CAPTURE_SIZES))
        sweep_begin = time.perf_counter()
        with cs._model_stubs(), torch.inference_mode():
            for num_tokens in sample:
                cs._forward_all(models, num_tokens, use_deep_gemm)
        torch.cuda.synchronize()
        missed = sorted((key.kernel, key.static_args) for key in runtime_keys - warmed_keys)
        return {
            "mode": args.child,
            "cache": os.environ.get("TILELANG_CACHE_DIR"),
            "deep_gemm": use_deep_gemm,
            "num_sms": num_sms,
            "hidden": args.hidden,
            "max_tokens": args.max_tokens,
            "threads": args.threads,
            "import_s": round(imported, 2),
            "warmup_s": round(seconds, 2),
            "token_sizes": sizes,
            "keys_warmed": len(warmed_keys & runtime_keys),
            "keys_runtime": len(runtime_keys),
            "compiled_in_warmup": len(warmup_compiles),
            "compiled_kernels": sorted(set(warmup_compiles)),
            "runtime_keys_missed": len(missed),
            "missed": [f"{k} {dict(a)}" for k, a in missed],
            "sweep_token_counts": len(sample),
            "sweep_s": round(time.perf_counter() - sweep_begin, 2),
            "compiled_in_sweep": len(compile_log.kernels),
            "compiled_in_sweep_kernels": compile_log.kernels,
        }


def _run_child(mode: str, cache: Path, args: argparse.Namespace) -> dict:
    env = dict(os.environ, TILELANG_CACHE_DIR=str(cache))
    cmd = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--max-tokens",
        str(args.max_tokens),
        "--hidden",
        str(args.hidden),
        "--deep-gemm",
        args.deep_gemm,
        "--threads",
        str(args.threads),
    ]
    started = time.perf_counter()
    print(f"--- {mode} (TILELANG_CACHE_DIR={cache})", flush=True)
    # The child's log goes straight through: a run cut short still shows
    # how far it got.
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-3000:])
        raise SystemExit(f"{mode} run failed ({proc.returncode})")
    result = json.loads(lines[-1])
    result["process_s"] = round(time.perf_counter() - started, 2)
    _report(result)
    return result


def _report(r: dict) -> None:
    print(
        f"{r['mode']:>26}: warmup {r['warmup_s']:7.2f} s "
        f"({r['compiled_in_warmup']} compiles, {r['keys_warmed']}/"
        f"{r['keys_runtime']} runtime keys, threads {r['threads']}), "
        f"process {r['process_s']:.1f} s (imports {r['import_s']:.1f} s); "
        f"afterwards {r['compiled_in_sweep']} compiles over "
        f"{r['sweep_token_counts']} token counts ({r['sweep_s']:.1f} s)",
        flush=True,
    )
    if r["missed"]:
        print(f"{'':>28}misses {r['runtime_keys_missed']} keys: {r['missed']}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=("derived", "grid"))
    parser.add_argument("--max-tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--deep-gemm", choices=("auto", "off"), default="auto")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--runs", default="derived,warm,grid")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--cache-root", type=Path, help="keep the TileLang caches here (must not exist)"
    )
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args)))
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="mhc-bench-") as tmp:
        if args.cache_root is not None:
            args.cache_root.mkdir(parents=True)
            tmp = str(args.cache_root)
        derived_cache = Path(tmp, "derived")
        for run in args.runs.split(","):
            if args.json and results:
                args.json.write_text(json.dumps(results, indent=1))
            if run == "derived":
                results.append(_run_child("derived", derived_cache, args))
            elif run == "warm":
                result = _run_child("derived", derived_cache, args)
                result["mode"] = "derived, warm disk cache"
                results.append(result)
            elif run == "grid":
                results.append(_run_child("grid", Path(tmp, "grid"), args))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
