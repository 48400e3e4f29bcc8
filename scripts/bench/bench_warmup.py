"""Start-up cost of the JIT warmup, per kernel family, cold and warm (GPU; by hand).

    python scripts/bench/bench_warmup.py --tree <patched 0.33.0 tree> [--runs cold,warm,copied]
        [--tilelang-threads 1,4,16] [--variant flash|pro] [--max-num-batched-tokens N]
        [--num-speculative-tokens K] [--runner v2|v1] [--deep-gemm-keys] [--json FILE]

Each run is a fresh ``vllm warmup-kernels`` process (:mod:`dsv4warmup.gpu.prewarm_runner`)
for the deployment (DeepSeek V4 Flash or Pro from a generated ``config.json``,
TP 4, fp8 KV cache, block 256, MTP), the registry's own warmup of every
registered kernel: ``cold`` on empty Triton and TileLang cache folders, ``warm``
on the folders the cold run filled (a second start, or a start after the
pre-warm), ``copied`` on a copy of them at another path (a second machine
started from an image that baked them). Printed: per family (this series' sparse-MLA, spec-decode and mHC
kernels, then everything else the registry holds), keys and the seconds their
compiles took in each run; then the warmup's own total, the process wall time
and what was compiled vs. read from the disk caches.

``model-cold[:N]``: DeepSeek V4's 12 model-specific kernels alone (sparse MLA,
speculative decoding, mHC; ``DSV4_WARM_MODEL_KERNELS_ONLY=1`` for the runner)
on empty caches, N TileLang threads (default the last count): the issue's
"whole warmup (every key of all 12 kernels)", without the registry's other
kernels (which pristine warms too) competing for the cores.
``--tilelang-threads``: one cold run per ``VLLM_TILELANG_JIT_WARMUP_NUM_THREADS``
value (each on empty caches; 1 = serial, as without patch 0009), then the warm
run on the last one's caches. ``tilelang-cold[:N]``: TileLang cold with N
threads (default the last count) while Triton loads from the last cold run's
cache: the TileLang compiles alone on the host; with ``:1`` each key's compile
alone, whose slowest is the floor of any pool. ``--triton-threads`` sets
``VLLM_TRITON_JIT_WARMUP_NUM_THREADS`` for every run. Each run with TileLang
compiles prints its keys' compile seconds (slowest, median, sum).
``--deep-gemm-keys`` (a host without DeepGEMM, like the GPU lab): the keys of
a deployment with DeepGEMM, the report's (the mHC epilogues at each DeepGEMM
split count; ``DSV4_DEEP_GEMM_KEYS=1`` for the runner).

A family's seconds add up its kernels' ``compile_many`` calls: Triton kernels
compile in parallel threads, so their seconds overlap and can exceed the wall
time. With patch 0009 the TileLang kernels' ``compile_many`` dispatches and
elaborates; their compiles are in the ``TileLang pool`` row (its wall time,
which contains the mHC row's seconds and, since the registry runs its Triton
pool beside the TileLang compiles, the Triton kernels' too). ``registry warmup``
is the registry's whole warmup: what a serving process pays at start-up (the
command adds its configuration and model building). Pristine 0.33.0 has no
offline entry point, and its start-up warmup runs only inside a serving
worker (weights, KV cache), which the lab cannot start; its key counts per
kernel are in ``make audit BASE=0.33.0``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from dsv4warmup.gpu.prewarm_runner import (  # noqa: E402
    DEEP_GEMM_KEYS_ENV,
    KEYS_ROW,
    MODEL_KERNELS_ONLY_ENV,
    POOL_ROW,
    REGISTRY_ROW,
    TIMINGS_PREFIX,
    TRITON_POOL_ROW,
    WAIT_ROW,
    model_kernel_family,
    timings_from,
)

FAMILIES = (
    "sparse-MLA",
    "spec-decode",
    "mHC",
    "other",
    "TileLang pool",
    "Triton pool",
    "wait",
    "registry warmup",
)


def family(name: str, module: str) -> str:
    """The kernel family of a registered kernel (its name and module)."""
    if name == POOL_ROW:
        return "TileLang pool"
    if name == TRITON_POOL_ROW:
        return "Triton pool"
    if name == WAIT_ROW:
        return "wait"
    if name == REGISTRY_ROW:
        return "registry warmup"
    return model_kernel_family(name, module) or "other"


def by_family(timings: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Keys and seconds per family from a run's ``timings`` line."""
    out = {f: {"keys": 0, "seconds": 0.0} for f in FAMILIES}
    for name, row in timings.items():
        if row.get("per_key"):
            continue
        f = out[family(name, row["module"])]
        f["keys"] += row["keys"]
        f["seconds"] += row["seconds"]
    return out


def runner_env(
    tree: Path,
    caches: Path,
    runner: str,
    tilelang_threads: int | None = None,
    model_kernels_only: bool = False,
) -> dict[str, str]:
    """The environment of one ``vllm warmup-kernels`` runner on ``caches``."""
    env = dict(
        os.environ,
        # the tree first, then whatever made its dependencies importable (the
        # lab's package bundle, a virtual environment's path)
        PYTHONPATH=os.pathsep.join(
            [str(tree), str(REPO / "scripts"), os.environ.get("PYTHONPATH", "")]
        ),
        TRITON_CACHE_DIR=str(caches / "triton"),
        TILELANG_CACHE_DIR=str(caches / "tilelang"),
        DSV4_PREWARM_TIMINGS="1",
        VLLM_USE_V2_MODEL_RUNNER="1" if runner == "v2" else "0",
    )
    if tilelang_threads is not None:
        env["VLLM_TILELANG_JIT_WARMUP_NUM_THREADS"] = str(tilelang_threads)
    if model_kernels_only:
        env[MODEL_KERNELS_ONLY_ENV] = "1"
    return env


def start_runner(flags: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], float]:
    cmd = [sys.executable, "-m", "dsv4warmup.gpu.prewarm_runner", *flags, "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return proc, time.perf_counter()


def runner_result(proc: subprocess.Popen[str], started: float) -> dict[str, Any]:
    """Wait for a runner; its summary, timings by family and wall time."""
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"error: vllm warmup-kernels exited {proc.returncode}:\n{stderr[-4000:]}")
    summary = json.loads(stdout.strip().splitlines()[-1])
    timings = timings_from(stderr)
    if timings is None:
        sys.exit(f"error: no {TIMINGS_PREFIX!r} line from the runner:\n{stderr[-4000:]}")
    return {
        "wall_s": wall,
        "warmup_s": summary["seconds"],
        "num_keys": summary["num_keys"],
        "compiled": summary["compiled"],
        "loaded_from_cache": summary["loaded_from_cache"],
        "families": by_family(timings),
        "tilelang_keys": timings.get(KEYS_ROW, {}).get("each", []),
        "skipped": [x for x in stderr.splitlines() if x.startswith("lab: skipped")],
    }


def run_once(
    tree: Path,
    flags: list[str],
    caches: Path,
    runner: str,
    tilelang_threads: int | None = None,
    model_kernels_only: bool = False,
) -> dict[str, Any]:
    env = runner_env(tree, caches, runner, tilelang_threads, model_kernels_only)
    return runner_result(*start_runner(flags, env))


def table(runs: dict[str, dict[str, Any]]) -> str:
    names = list(runs)
    lines = [
        "| family | keys | " + " | ".join(f"{n} s" for n in names) + " |",
        "|---|---|" + "---|" * len(names),
    ]

    def keys(values: list[int]) -> str:
        # one count, or each run's where they differ (a model-cold run has
        # no other kernels)
        return str(values[0]) if len(set(values)) == 1 else " / ".join(map(str, values))

    for f in FAMILIES:
        cells = " | ".join(f"{runs[n]['families'][f]['seconds']:.2f}" for n in names)
        lines.append(f"| {f} | {keys([runs[n]['families'][f]['keys'] for n in names])} | {cells} |")
    for label, key in (("`vllm warmup-kernels` (command)", "warmup_s"), ("process wall", "wall_s")):
        cells = " | ".join(f"{runs[n][key]:.2f}" for n in names)
        lines.append(f"| {label} | {keys([runs[n]['num_keys'] for n in names])} | {cells} |")
    for n in names:
        lines.append(
            f"\n{n}: compiled {runs[n]['compiled'] or 0}, "
            f"loaded from the disk caches {runs[n]['loaded_from_cache'] or 0}"
        )
        if runs[n]["compiled"].get("tilelang") and runs[n].get("tilelang_keys"):
            lines.append(f"{n}: {per_key_summary(runs[n]['tilelang_keys'])}")
    return "\n".join(lines)


def per_key_summary(each: list[list[Any]]) -> str:
    """The TileLang keys' compile seconds: slowest (the floor of any pool),
    median, sum (one thread's time), per kernel the slowest."""
    seconds = sorted(s for _, s in each)
    slowest = max(each, key=lambda e: e[1])
    by_kernel: dict[str, float] = {}
    for name, s in each:
        by_kernel[name] = max(by_kernel.get(name, 0.0), s)
    kernels = ", ".join(f"{k} {v:.1f}" for k, v in sorted(by_kernel.items(), key=lambda kv: -kv[1]))
    return (
        f"TileLang per key ({len(each)}): slowest {slowest[1]:.1f} s ({slowest[0]}), "
        f"median {seconds[len(seconds) // 2]:.1f} s, sum {sum(seconds):.1f} s; "
        f"slowest per kernel: {kernels}"
    )


def _plan(runs: str, tilelang_threads: str | None, tmp: Path) -> list[tuple[str, int | None, Path]]:
    """(run name, TileLang threads, cache folder) per run, in order: a cold
    run per thread count on its own empty folders, warm on the last ones,
    copied on a copy of them made just before it (``copied-caches``),
    ``model cold`` on empty folders of its own."""
    counts: list[int | None] = [None]
    if tilelang_threads:
        try:
            counts = [int(t) for t in tilelang_threads.split(",")]
        except ValueError:
            sys.exit(f"error: --tilelang-threads: not a list of ints: {tilelang_threads!r}")
        if any(t < 1 for t in counts):
            sys.exit("error: --tilelang-threads: thread counts are >= 1")
    plan: list[tuple[str, int | None, Path]] = []
    caches: Path | None = None
    for name in runs.split(","):
        if name == "cold":
            if any(run == "warm" for run, _, _ in plan):
                sys.exit("error: --runs: cold after warm would not be cold")
            for t in counts:
                caches = tmp / f"caches-{t}"
                plan.append((name if t is None else f"cold t={t}", t, caches))
        elif name.partition(":")[0] == "tilelang-cold":
            # TileLang cold on an otherwise idle host: the last cold run's Triton
            # cache (copied), an empty TileLang one; ":N" threads (default the last).
            if caches is None:
                sys.exit(f"error: --runs: {name} needs a cold run before it")
            threads = name.partition(":")[2]
            if threads and not (threads.isdigit() and int(threads) >= 1):
                sys.exit(f"error: --runs: {name}: tilelang-cold:N with N >= 1")
            t = int(threads) if threads else counts[-1]
            plan.append((f"TileLang cold t={t}", t, tmp / f"tilelang-cold-{t}"))
        elif name.partition(":")[0] == "model-cold":
            # DeepSeek V4's 12 model-specific kernels alone, cold; ":N" TileLang threads
            threads = name.partition(":")[2]
            if threads and not (threads.isdigit() and int(threads) >= 1):
                sys.exit(f"error: --runs: {name}: model-cold:N with N >= 1")
            t = int(threads) if threads else counts[-1]
            plan.append((f"model cold t={t}", t, tmp / f"model-cold-{t}"))
        elif name in ("warm", "copied"):
            if caches is None:
                sys.exit(f"error: --runs: {name} needs a cold run before it")
            plan.append((name, counts[-1], caches if name == "warm" else tmp / "copied-caches"))
        else:
            sys.exit(
                f"error: --runs: unknown run {name!r} "
                "(cold, warm, copied, tilelang-cold[:N], model-cold[:N])"
            )
    return plan


def prepare_caches(name: str, caches: Path, last: Path | None, cold: Path | None) -> None:
    """Fill a run's cache folder before it starts: ``copied``, a copy of the
    last run's (what an image build bakes, at another path); ``TileLang cold``,
    the last cold run's Triton cache only. Other runs start on what they have."""
    if name == "copied" and last is not None:
        shutil.copytree(last, caches)
    elif name.startswith("TileLang cold") and cold is not None:
        shutil.copytree(cold / "triton", caches / "triton")


def host_cpus() -> dict[str, Any]:
    """The CPUs compiles can use: the thread pools scale only as far as
    these go (a cgroup quota below the core count caps them unseen)."""
    out: dict[str, Any] = {"cpu_count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0))}
    quota = Path("/sys/fs/cgroup/cpu.max")
    if quota.is_file():
        limit, period = quota.read_text().split()
        out["cgroup_cpus"] = None if limit == "max" else round(int(limit) / int(period), 2)
    out["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, required=True, help="a tree with `vllm warmup-kernels`")
    ap.add_argument("--runs", default="cold,warm")
    ap.add_argument(
        "--tilelang-threads",
        help="comma-separated VLLM_TILELANG_JIT_WARMUP_NUM_THREADS values: a cold run each",
    )
    ap.add_argument("--triton-threads", type=int, help="VLLM_TRITON_JIT_WARMUP_NUM_THREADS")
    ap.add_argument("--variant", choices=("flash", "pro"), default="flash")
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--num-speculative-tokens", type=int, default=1)
    ap.add_argument("--runner", choices=("v2", "v1"), default="v2")
    ap.add_argument(
        "--deep-gemm-keys",
        action="store_true",
        help="without DeepGEMM installed, warm a DeepGEMM deployment's keys (the report's)",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.triton_threads is not None:
        os.environ["VLLM_TRITON_JIT_WARMUP_NUM_THREADS"] = str(args.triton_threads)
    if args.deep_gemm_keys:
        os.environ[DEEP_GEMM_KEYS_ENV] = "1"
    if not (args.tree / "vllm/entrypoints/cli/warmup_kernels.py").is_file():
        sys.exit(f"error: --tree {args.tree}: no `vllm warmup-kernels` (apply the 0.33.0 series)")

    from dsv4warmup.registry import engine, prewarm
    from dsv4warmup.serving import FLASH, PRO

    cfg = (FLASH if args.variant == "flash" else PRO).replace(
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_speculative_tokens=args.num_speculative_tokens,
    )
    with tempfile.TemporaryDirectory(prefix="dsv4-bench-") as tmp:
        model = Path(tmp) / "model"
        model.mkdir()
        (model / "config.json").write_text(json.dumps(engine.hf_config_dict(cfg), default=str))
        flags = prewarm.serve_flags(cfg, str(model))
        runs: dict[str, dict[str, Any]] = {}
        last: Path | None = None
        cold: Path | None = None
        for name, threads, caches in _plan(args.runs, args.tilelang_threads, Path(tmp)):
            prepare_caches(name, caches, last, cold)
            model_kernels_only = name.startswith("model cold")
            runs[name] = run_once(
                args.tree, flags, caches, args.runner, threads, model_kernels_only
            )
            last = caches
            if name.startswith("cold"):
                cold = caches
            print(f"{name}: {runs[name]['wall_s']:.1f} s wall", file=sys.stderr)
    host = host_cpus()
    print(
        f"{args.variant}, max_num_batched_tokens {cfg.max_num_batched_tokens}, "
        f"MTP k={cfg.num_speculative_tokens}, runner {args.runner}, DeepGEMM keys "
        f"{os.environ.get(DEEP_GEMM_KEYS_ENV) == '1' or 'as installed'}, Triton threads "
        f"{os.environ.get('VLLM_TRITON_JIT_WARMUP_NUM_THREADS', 'default')}; host CPUs: "
        + ", ".join(f"{k} {v}" for k, v in host.items())
    )
    print(table(runs))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"config": vars(args) | {"tree": str(args.tree)}, "host": host, "runs": runs},
                default=str,
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
