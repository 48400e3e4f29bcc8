"""``vllm warmup-kernels`` (0.33.0 series) on a GPU: one process pre-warms the
report's deployment (``FLASH``) into fresh Triton and TileLang disk caches; a
second process with the same flags then finds every key of its registry
warmup there: nothing compiles.

Compiles are counted twice, independently: by the command's own summary
(Triton's ``knobs.compilation.listener`` ``cache_hit``, TileLang's
``JITKernel(from_database=...)``) and by the entries the caches gain on disk
(a disk-cache hit adds none). Positive control: a third process with a
smaller ``--max-num-batched-tokens`` has keys the caches lack, and both counts
see them compile.

The tree is ``DSV4_V033_PATCHED_TREE`` or ``DSV4_VLLM_TREE`` (it must have
``vllm warmup-kernels``); run with ``pytest -m gpu``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.forked]

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 3600  # cold TileLang compiles of the mHC kernels take minutes

# Runs the subcommand the way `vllm` does, without importing the API server.
RUNNER = """
import sys
from vllm.entrypoints.cli.warmup_kernels import WarmupKernelsSubcommand
from vllm.logger import configure_logging_from_args
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser(prog="vllm")
subparsers = parser.add_subparsers(dest="subparser")
WarmupKernelsSubcommand().subparser_init(subparsers)
args = parser.parse_args(["warmup-kernels", *sys.argv[1:]])
configure_logging_from_args(args)
WarmupKernelsSubcommand.cmd(args)
"""


def _tree() -> Path:
    tree = os.environ.get("DSV4_V033_PATCHED_TREE") or os.environ.get("DSV4_VLLM_TREE")
    if not tree or not (Path(tree) / "vllm/entrypoints/cli/warmup_kernels.py").is_file():
        pytest.skip("needs a vLLM tree with `vllm warmup-kernels` (DSV4_V033_PATCHED_TREE)")
    return Path(tree)


def _flags(tmp_path: Path, **changes: Any) -> list[str]:
    sys.path.insert(0, str(REPO / "scripts"))
    from dsv4warmup.serving import FLASH
    from dsv4warmup.v033 import engine, prewarm

    cfg = FLASH.replace(**changes)
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(engine.hf_config_dict(cfg), default=str))
    return prewarm.serve_flags(cfg, str(model))


def _entries(cache: Path) -> set[str]:
    return {str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()}


def _prewarm(tree: Path, caches: dict[str, Path], flags: list[str]) -> dict[str, Any]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]),
        TRITON_CACHE_DIR=str(caches["triton"]),
        TILELANG_CACHE_DIR=str(caches["tilelang"]),
    )
    before = {name: _entries(path) for name, path in caches.items()}
    res = subprocess.run(
        [sys.executable, "-c", RUNNER, *flags, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S,
    )
    assert res.returncode == 0, res.stderr[-5000:]
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    summary["new_entries"] = {
        name: len(_entries(path) - before[name]) for name, path in caches.items()
    }
    return summary


def test_second_process_finds_every_key_in_the_disk_caches(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    tree = _tree()
    caches = {"triton": tmp_path / "triton", "tilelang": tmp_path / "tilelang"}
    for path in caches.values():
        path.mkdir()
    flags = _flags(tmp_path)

    first = _prewarm(tree, caches, flags)
    assert first["dry_run"] is False and first["num_keys"] > 0
    assert first["cache_dirs"] == {name: str(path) for name, path in caches.items()}
    names = {k["name"] for k in first["kernels"]}
    for kernel in (
        "BuildC128ATopkMetadataKernel",
        "CombineTopkSwaIndicesKernel",
        "MTPSharedHeadRMSNormKernel",
        "MhcPreBigFuseTileLangKernel",
    ):
        assert kernel in names, kernel
    assert first["compiled"].get("triton", 0) > 0, first
    assert first["compiled"].get("tilelang", 0) > 0, first
    assert first["new_entries"]["triton"] > 0 and first["new_entries"]["tilelang"] > 0

    second = _prewarm(tree, caches, flags)
    assert second["num_keys"] == first["num_keys"]
    assert second["compiled"] == {}, f"compiled again: {second['compiled']}"
    assert second["new_entries"] == {"triton": 0, "tilelang": 0}
    for backend in ("triton", "tilelang"):
        # Every binary the first process built, the second read from disk.
        built = first["compiled"].get(backend, 0) + first["loaded_from_cache"].get(backend, 0)
        assert second["loaded_from_cache"].get(backend, 0) == built, backend

    # Positive control: a deployment with a smaller token budget has new keys.
    control = _prewarm(tree, caches, _flags(tmp_path, max_num_batched_tokens=2048))
    assert control["compiled"].get("triton", 0) > 0, control
    assert control["new_entries"]["triton"] > 0, control
