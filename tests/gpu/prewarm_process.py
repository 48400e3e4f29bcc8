"""``vllm warmup-kernels`` (0.33.0 series) in its own process, for the GPU tests
(:mod:`dsv4warmup.gpu.prewarm_runner`: the command, with stand-ins for what the
lab machine lacks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from dsv4warmup.gpu.prewarm_runner import timings_from

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 3600  # cold TileLang compiles of the mHC kernels take minutes


def tree() -> Path | None:
    """The patched tree (``DSV4_V033_PATCHED_TREE`` or ``DSV4_VLLM_TREE``), if it
    has ``vllm warmup-kernels``."""
    path = os.environ.get("DSV4_V033_PATCHED_TREE") or os.environ.get("DSV4_VLLM_TREE")
    if not path or not (Path(path) / "vllm/entrypoints/cli/warmup_kernels.py").is_file():
        return None
    return Path(path)


def serve_flags(model_root: Path, cfg: Any) -> list[str]:
    """``vllm serve`` flags of ``cfg`` with its ``config.json`` in ``model_root``."""
    sys.path.insert(0, str(REPO / "scripts"))
    from dsv4warmup.registry import engine, prewarm

    model_root.mkdir(parents=True, exist_ok=True)
    (model_root / "config.json").write_text(json.dumps(engine.hf_config_dict(cfg), default=str))
    return prewarm.serve_flags(cfg, str(model_root))


def entries(cache: Path) -> set[str]:
    return {str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()}


def run(
    tree: Path, caches: dict[str, Path], flags: list[str], env: dict[str, str] | None = None
) -> dict[str, Any]:
    """One ``vllm warmup-kernels --json`` process on ``caches`` (``triton`` and
    ``tilelang`` folders): its summary, with ``new_entries`` per cache and
    ``skipped`` (the lab's CuTeDSL lines)."""
    for path in caches.values():
        path.mkdir(parents=True, exist_ok=True)
    full_env = dict(
        os.environ,
        **(env or {}),
        PYTHONPATH=os.pathsep.join(
            [str(tree), str(REPO / "scripts"), os.environ.get("PYTHONPATH", "")]
        ),
        TRITON_CACHE_DIR=str(caches["triton"]),
        TILELANG_CACHE_DIR=str(caches["tilelang"]),
    )
    before = {name: entries(path) for name, path in caches.items()}
    res = subprocess.run(
        [sys.executable, "-m", "dsv4warmup.gpu.prewarm_runner", *flags, "--json"],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=TIMEOUT_S,
    )
    assert res.returncode == 0, res.stderr[-5000:]
    summary: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    summary["new_entries"] = {
        name: len(entries(path) - before[name]) for name, path in caches.items()
    }
    summary["warmup_line"] = next(
        (x for x in res.stderr.splitlines() if "INFO" in x and "JIT kernel warmup:" in x), None
    )
    # DSV4_PREWARM_TIMINGS=1: each kernel's compile seconds (the runner's stderr line).
    summary["timings"] = timings_from(res.stderr)
    summary["skipped"] = [
        line for line in res.stderr.splitlines() if line.startswith("lab: skipped")
    ]
    return summary


def record(name: str, summary: dict[str, Any]) -> None:
    """Keep a summary for docs/gpu-results.md: ``$DSV4_GPU_RESULTS/<name>.json``
    when set, and one line on stdout."""
    slim = {
        k: summary.get(k)
        for k in (
            "num_keys",
            "compiled",
            "loaded_from_cache",
            "seconds",
            "new_entries",
            "skipped",
            "warmup_line",
            "timings",
            "deployment",
        )
    }
    print(f"prewarm {name}: {json.dumps(slim)}")
    folder = os.environ.get("DSV4_GPU_RESULTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.json").write_text(json.dumps(summary, indent=1, default=str))
