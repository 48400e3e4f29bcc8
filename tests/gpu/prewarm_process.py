"""``vllm warmup-kernels`` (0.33.0 series) in its own process, for the GPU tests.

The lab machine lacks packages a production install has: CuTeDSL
(``nvidia-cutlass-dsl``), which DeepSeek V4's layers import at construction,
FlashInfer, which V1's sampler asks whether it can sample, and DeepGEMM, without which its sparse indexer refuses to build. When they are
missing, the runner stands in for them as the GPU tests' drivers do
(:mod:`dsv4warmup.v033.meta_models` modules whose attributes are mocks, stubs
for compiled ops its ``vllm._C`` lacks, the indexer's DeepGEMM check answered
yes; mHC still sees no DeepGEMM) and skips the
CuTeDSL kernels' compiles (none is this series'), naming them on stderr
(``lab: skipped``). On a full install it runs the command unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 3600  # cold TileLang compiles of the mHC kernels take minutes

# Runs the subcommand the way `vllm` does, without importing the API server.
RUNNER = """
import importlib.util
import sys
from unittest import mock

sys.path.insert(0, SCRIPTS)
from dsv4warmup.v033 import meta_models

def _missing(name):
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


# DeepGEMM and TileLang stay as installed: they decide the mHC keys.
roots = ("cutlass", "cuda", "quack", "flashinfer", "vllm.vllm_flash_attn.cute")
missing = tuple(m for m in roots if _missing(m))
if missing:
    sys.meta_path.insert(0, meta_models._MockModuleFinder(missing))
    print(f"lab: stand-ins for {missing}", file=sys.stderr)
# Compiled ops the lab's vllm._C lacks: stubs that raise if called (nothing
# calls them while the model is only built); a real build keeps its own.
meta_models._stub_compiled_ops().__enter__()
try:
    import deep_gemm  # noqa: F401
except ImportError:
    mock.patch(
        "vllm.model_executor.layers.sparse_attn_indexer.has_deep_gemm", lambda: True
    ).start()

from vllm.entrypoints.cli.warmup_kernels import WarmupKernelsSubcommand
from vllm.logger import configure_logging_from_args
from vllm.model_executor.warmup.jit_warmup_cutedsl_helper import VllmCuTeDSLJitKernel
from vllm.utils.argparse_utils import FlexibleArgumentParser

if "cutlass" in missing:
    def skip(self, keys):
        keys = list(keys)
        print(f"lab: skipped {type(self).__name__} ({len(keys)} keys)", file=sys.stderr)

    VllmCuTeDSLJitKernel.compile_many = skip

parser = FlexibleArgumentParser(prog="vllm")
subparsers = parser.add_subparsers(dest="subparser")
WarmupKernelsSubcommand().subparser_init(subparsers)
args = parser.parse_args(["warmup-kernels", *sys.argv[1:]])
configure_logging_from_args(args)
WarmupKernelsSubcommand.cmd(args)
""".replace("SCRIPTS", repr(str(REPO / "scripts")))


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
    from dsv4warmup.v033 import engine, prewarm

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
        PYTHONPATH=os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]),
        TRITON_CACHE_DIR=str(caches["triton"]),
        TILELANG_CACHE_DIR=str(caches["tilelang"]),
    )
    before = {name: entries(path) for name, path in caches.items()}
    res = subprocess.run(
        [sys.executable, "-c", RUNNER, *flags, "--json"],
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
            "deployment",
        )
    }
    print(f"prewarm {name}: {json.dumps(slim)}")
    folder = os.environ.get("DSV4_GPU_RESULTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.json").write_text(json.dumps(summary, indent=1, default=str))
