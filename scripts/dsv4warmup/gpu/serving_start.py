"""A pre-warm, then serving starts set up by vLLM's own start-up code, all on
one fresh ``HOME`` with no cache variable set: what each start's JIT registry
warmup builds and what it reads from the disk caches.

``python -m dsv4warmup.gpu.serving_start [--tilelang] [--json]`` in an
interpreter that imports a vLLM tree (``PYTHONPATH``), on a GPU. Each start is
its own process (cold in-memory caches) running the report's deployment
(``FLASH``, Model Runner V2): its registrations are made first, as the runner
makes them while it loads the model, then the start's torch.compile set-up,
then ``JitWarmupRegistry.warmup()``:

* ``prewarm``: no torch.compile (what a pre-warm step or an
  ``--enforce-eager`` start does);
* ``serve-inductor``: vLLM's ``InductorAdaptor.compile_factors`` and
  ``initialize_cache`` for the model's compile cache, as ``VllmBackend`` calls
  them without AOT compile (``initialize_inductor_cache`` points
  ``TRITON_CACHE_DIR`` into it);
* ``serve-aot``: AOT compile, the default with torch >= 2.10: vLLM's
  ``TORCHINDUCTOR_CACHE_DIR`` for the compile hash (as ``decorators.py`` sets
  it), then one Inductor-compiled function run on the GPU (Inductor then sets
  ``TRITON_CACHE_DIR`` itself).

Triton's registrations are those of the sparse-MLA and spec-decode groups
(``dsv4warmup.registry``); ``--tilelang`` adds the mHC group (with
``--deep-gemm-keys``, a DeepGEMM deployment's keys). Builds are
counted by ``compile_counters.builds`` (Triton's ``cache_hit``, TileLang's
``from_database``). Prints one line per start (``--json``: one JSON list). ``--home`` runs the
starts on an existing ``HOME``, e.g. caches baked on a CPU-only builder
(:mod:`dsv4warmup.registry.cpu_bake`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
STARTS = ("prewarm", "serve-inductor", "serve-aot")
RESULT = "result: "
# What an operator would otherwise have set; the starts run without them.
CACHE_VARIABLES = (
    "TRITON_CACHE_DIR",
    "TRITON_HOME",
    "TILELANG_CACHE_DIR",
    "VLLM_CACHE_ROOT",
    "TORCHINDUCTOR_CACHE_DIR",
    "XDG_CACHE_HOME",
)
# A stand-in for the model's compile hash: any folder of vLLM's layout.
COMPILE_HASH = "0123456789"


@contextmanager
def _registries(tilelang: bool, deep_gemm: bool) -> Iterator[tuple[list[Any], Any]]:
    """The deployment's registries, registrations made (the runner's
    load_model), and the sparse-MLA model they were made for."""
    import torch
    from dsv4warmup.registry import mhc, sparse_mla, spec_decode
    from dsv4warmup.serving import FLASH

    cfg = FLASH.replace(sm_count=torch.cuda.get_device_properties(0).multi_processor_count)
    model = sparse_mla.build_model(cfg, "v2", device="cuda", kv_cache_bytes=8 << 30)
    registries = [
        sparse_mla.warm_registry(model.vllm_config, "v2"),
        spec_decode.warm_registry(spec_decode.vllm_config(cfg, "v2"), "v2"),
    ]
    with ExitStack() as stack:
        if tilelang:
            _, _, registry = stack.enter_context(mhc.deployment_on_cuda(cfg, deep_gemm))
            registries.append(registry)
        yield registries, model


def _compile_set_up(start: str, vllm_config: Any) -> None:
    """What torch.compile does to the process before the JIT warmup runs."""
    import vllm.envs as envs

    root = os.path.join(envs.VLLM_CACHE_ROOT, "torch_compile_cache")
    if start == "serve-inductor":
        from vllm.compilation.compiler_interface import InductorAdaptor

        adaptor = InductorAdaptor(use_aot_compile=False)
        # VllmBackend hashes the compiler's factors for the cache folder's
        # name first; they include Triton's triton_key(), which hashes its
        # installed binary once per process (0.3-0.5 s).
        adaptor.compile_factors(vllm_config)
        cache_dir = os.path.join(root, COMPILE_HASH, "rank_0_0", "backbone")
        adaptor.initialize_cache(cache_dir, prefix="backbone")
    elif start == "serve-aot":
        import torch

        inductor_cache = os.path.join(root, "torch_aot_compile", COMPILE_HASH, "inductor_cache")
        os.makedirs(inductor_cache, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache
        compiled = torch.compile(lambda x: torch.sin(x) * 2 + 1)
        compiled(torch.randn(1024, device="cuda"))
        torch.cuda.synchronize()


def child(
    start: str,
    tilelang: bool,
    key_log: Path | None = None,
    sweep: bool = False,
    deep_gemm: bool = False,
) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "tests" / "gpu"))
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")
    import torch
    from compile_counters import builds, launcher_builds, totals
    from dsv4warmup.registry import cache_keys, sparse_mla

    out: dict[str, Any] = {"start": start}
    with _registries(tilelang, deep_gemm) as (registries, model):
        _compile_set_up(start, model.vllm_config)
        triton_dir = os.environ.get("TRITON_CACHE_DIR")
        began = time.perf_counter()
        with ExitStack() as stack:
            counts = stack.enter_context(builds())
            if key_log is not None:
                stack.enter_context(cache_keys.record(key_log / f"{start}.jsonl"))
            for registry in registries:
                registry.warmup()
        out["seconds"] = round(time.perf_counter() - began, 2)
        out.update(totals(counts))
        if sweep:
            # The first launches after the warmup, as the first requests make
            # them (the sparse-MLA metadata kernels): Triton builds each
            # kernel's C launcher then, into the cache folder current then.
            began = time.perf_counter()
            with builds() as late, launcher_builds() as host_builds:
                sparse_mla.run_batches(model, sparse_mla.sweep(model, quick=True))
                torch.cuda.synchronize()
            out["sweep_seconds"] = round(time.perf_counter() - began, 2)
            out["sweep_triton_built"] = totals(late)["triton_built"]
            out["sweep_host_modules_built"] = len(host_builds)
            out["sweep_host_build_seconds"] = round(sum(t for _, t in host_builds), 2)
    out["TRITON_CACHE_DIR"] = triton_dir
    out["after_warmup_TRITON_CACHE_DIR"] = os.environ.get("TRITON_CACHE_DIR")
    return out


def run_starts(
    home: Path,
    tilelang: bool,
    starts: tuple[str, ...] = STARTS,
    key_log: Path | None = None,
    sweep: bool = False,
    deep_gemm: bool = False,
) -> list[dict[str, Any]]:
    """Each of ``starts`` in its own process, in order, on ``home``; with
    ``key_log``, each logs its cache keys to ``key_log/<start>.jsonl``;
    ``deep_gemm``: the mHC keys of a deployment with DeepGEMM."""
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    env["HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "scripts"), env.get("PYTHONPATH", "")])
    results = []
    for start in starts:
        argv = [sys.executable, "-m", "dsv4warmup.gpu.serving_start", "--child", start]
        if tilelang:
            argv.append("--tilelang")
        if key_log is not None:
            argv += ["--key-log", str(key_log)]
        if sweep:
            argv.append("--sweep")
        if deep_gemm:
            argv.append("--deep-gemm-keys")
        res = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=env,
            timeout=1800,
        )
        lines = [x for x in res.stdout.splitlines() if x.startswith(RESULT)]
        if res.returncode != 0 or not lines:
            raise RuntimeError(f"{start} failed ({res.returncode}): {res.stderr[-4000:]}")
        results.append(json.loads(lines[-1][len(RESULT) :]))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tilelang", action="store_true", help="add the mHC group")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--home",
        type=Path,
        help="an existing HOME whose caches the starts use (e.g. baked on a CPU-only "
        "builder by dsv4warmup.registry.cpu_bake; default: a fresh one)",
    )
    parser.add_argument(
        "--starts", default=",".join(STARTS), help=f"comma-separated, of {', '.join(STARTS)}"
    )
    parser.add_argument(
        "--key-log",
        type=Path,
        help="a folder: each start logs the parts of its cache keys there "
        "(dsv4warmup.registry.cache_keys)",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="after the warmup, run the sparse-MLA sweep (quick) and count the "
        "host modules (kernel launchers) Triton builds with the C compiler",
    )
    parser.add_argument(
        "--deep-gemm-keys",
        action="store_true",
        help="with --tilelang: the mHC keys of a deployment with DeepGEMM (the report's)",
    )
    parser.add_argument("--child", choices=STARTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.deep_gemm_keys and not args.tilelang:
        parser.error("--deep-gemm-keys needs --tilelang")
    if args.child:
        result = child(args.child, args.tilelang, args.key_log, args.sweep, args.deep_gemm_keys)
        print(RESULT + json.dumps(result), flush=True)
        return 0
    starts = tuple(args.starts.split(","))
    if not set(starts) <= set(STARTS):
        parser.error(f"--starts: not among {STARTS}: {args.starts}")
    with tempfile.TemporaryDirectory(prefix="serving-start-") as tmp:
        home = args.home.resolve() if args.home else Path(tmp) / "home"
        key_log = args.key_log.resolve() if args.key_log else None
        results = run_starts(home, args.tilelang, starts, key_log, args.sweep, args.deep_gemm_keys)
        for r in results:
            for key in ("TRITON_CACHE_DIR", "after_warmup_TRITON_CACHE_DIR"):
                if r[key]:
                    r[key] = r[key].replace(tmp, "<tmp>")
    if args.json:
        print(json.dumps(results))
    else:
        for r in results:
            print(
                f"{r['start']:15} {r['seconds']:7.2f}s  Triton built {r['triton_built']:4} "
                f"read {r['triton_read']:4}  TileLang built {r['tilelang_built']:3} "
                f"read {r['tilelang_read']:3}  TRITON_CACHE_DIR during warmup: "
                f"{r['TRITON_CACHE_DIR']}"
            )
            if "sweep_seconds" in r:
                print(
                    f"{'':15} first launches: {r['sweep_seconds']:.2f}s, Triton built "
                    f"{r['sweep_triton_built']}, host modules (launchers) built "
                    f"{r['sweep_host_modules_built']} in {r['sweep_host_build_seconds']:.2f}s"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
