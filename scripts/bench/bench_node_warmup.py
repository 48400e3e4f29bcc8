"""Start-up warmup of one node's tensor-parallel ranks, cold, with and without
sharing their compiles (0.33.0 patch 0010; GPU, by hand).

    python scripts/bench/bench_node_warmup.py --tree <patched 0.33.0 tree> [--ranks 4]
        [--triton-cache per-rank|shared] [--variant flash|pro]
        [--max-num-batched-tokens N] [--num-speculative-tokens K] [--json FILE]

Every rank of a TP deployment runs the same registry warmup at start-up, at the
same time, on the node's CPUs. Here each rank is a ``vllm warmup-kernels``
process (:mod:`dsv4warmup.gpu.prewarm_runner`; one GPU is enough), all started
together on empty caches:

* ``alone``: no process group, so every rank compiles every key (how ranks
  warmed before patch 0010);
* ``shared``: the ranks form a gloo TP group (``DSV4_TP_RANK``, ``DSV4_TP_STORE``) at the
  registry's warmup, so each compiles its share and loads the rest;
* ``warm``: ``shared`` again on the caches it filled (a restart).

``--triton-cache per-rank`` (default) gives each rank its own Triton cache, as
``vllm serve`` has without ``TRITON_CACHE_DIR`` (torch.compile's per-rank
folder); ``shared``: one for all, as with ``TRITON_CACHE_DIR`` set. TileLang's
cache is one per node either way. Printed per run: the node's wall time (its
slowest process), the slowest rank's ``vllm warmup-kernels`` seconds, each
rank's registry warmup (what a serving rank pays), TileLang pool, Triton pool
and wait at the barrier, and the binaries compiled and loaded summed over the
ranks.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import bench_warmup


def run_node(
    tree: Path, flags: list[str], caches: Path, ranks: int, shared: bool, triton_per_rank: bool
) -> dict[str, Any]:
    started = []
    for rank in range(ranks):
        env = bench_warmup.runner_env(tree, caches, "v2")
        if triton_per_rank:
            env["TRITON_CACHE_DIR"] = str(caches / f"triton-rank{rank}")
        if shared:
            env["DSV4_TP_RANK"] = f"{rank}/{ranks}"
            env["DSV4_TP_STORE"] = str(caches / "tp-store")
        started.append(bench_warmup.start_runner(flags, env))
    results = [bench_warmup.runner_result(*s) for s in started]
    (caches / "tp-store").unlink(missing_ok=True)

    def total(key: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in results:
            for backend, n in r[key].items():
                out[backend] = out.get(backend, 0) + n
        return out

    return {
        "node_wall_s": max(r["wall_s"] for r in results),
        "slowest_warmup_s": max(r["warmup_s"] for r in results),
        "num_keys": results[0]["num_keys"],
        "compiled": total("compiled"),
        "loaded_from_cache": total("loaded_from_cache"),
        "ranks": results,
    }


def table(runs: dict[str, dict[str, Any]], ranks: int) -> str:
    phases = ("registry warmup", "TileLang pool", "Triton pool", "wait")
    lines = [
        f"| run ({ranks} ranks) | node wall s | slowest rank's warmup s | "
        + " | ".join(f"{p} s per rank" for p in phases)
        + " | compiled | loaded |",
        "|---|---|---|" + "---|" * len(phases) + "---|---|",
    ]
    for name, r in runs.items():
        per_rank = [
            "/".join(f"{rank['families'][p]['seconds']:.1f}" for rank in r["ranks"]) for p in phases
        ]
        lines.append(
            f"| {name} | {r['node_wall_s']:.1f} | {r['slowest_warmup_s']:.1f} | "
            + " | ".join(per_rank)
            + f" | {r['compiled'] or 0} | {r['loaded_from_cache'] or 0} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, required=True, help="a tree with `vllm warmup-kernels`")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--triton-cache", choices=("per-rank", "shared"), default="per-rank")
    ap.add_argument("--runs", default="alone,shared,warm")
    ap.add_argument("--variant", choices=("flash", "pro"), default="flash")
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--num-speculative-tokens", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not (args.tree / "vllm/model_executor/warmup/jit_warmup_sharing.py").is_file():
        sys.exit(f"error: --tree {args.tree}: no shared cold compiles (apply the 0.33.0 series)")
    plan = args.runs.split(",")
    if unknown := set(plan) - {"alone", "shared", "warm"}:
        sys.exit(f"error: --runs: unknown {sorted(unknown)} (alone, shared, warm)")
    if "warm" in plan and ("shared" not in plan or plan.index("warm") < plan.index("shared")):
        sys.exit("error: --runs: warm needs the shared run before it")

    from dsv4warmup.registry import engine, prewarm
    from dsv4warmup.serving import FLASH, PRO

    cfg = (FLASH if args.variant == "flash" else PRO).replace(
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_speculative_tokens=args.num_speculative_tokens,
    )
    per_rank = args.triton_cache == "per-rank"
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="dsv4-node-bench-") as tmp:
        model = Path(tmp) / "model"
        model.mkdir()
        (model / "config.json").write_text(json.dumps(engine.hf_config_dict(cfg), default=str))
        flags = prewarm.serve_flags(cfg, str(model))
        for name in plan:
            caches = Path(tmp) / ("caches-shared" if name == "warm" else f"caches-{name}")
            shared = name != "alone"
            runs[name] = run_node(args.tree, flags, caches, args.ranks, shared, per_rank)
            # each run's row as it ends: a run cut by a time limit keeps the earlier ones
            print(table({name: runs[name]}, args.ranks).splitlines()[-1], file=sys.stderr)
    host = bench_warmup.host_cpus()
    print(
        f"{args.variant}, TP {args.ranks} ranks on one node, max_num_batched_tokens "
        f"{cfg.max_num_batched_tokens}, MTP k={cfg.num_speculative_tokens}, Triton cache "
        f"{args.triton_cache}; host CPUs: " + ", ".join(f"{k} {v}" for k, v in host.items())
    )
    print(table(runs, args.ranks))
    if args.json:
        args.json.write_text(
            json.dumps({"config": vars(args), "host": host, "runs": runs}, default=str, indent=1)
        )


if __name__ == "__main__":
    main()
