"""Pre-warm, then serve: ``vllm warmup-kernels`` (0.33.0 series) fills fresh
Triton and TileLang disk caches for a configuration at a boundary of the
configuration space (docs/config-space.md); a fresh process on those caches
then runs the runner's start-up warmup and the real call sites of this
series' kernels, and builds none of them: every binary is read from disk.

Per kernel group, one forked test (the groups' drivers each set up their own
model pieces): sparse-MLA (metadata builders and ``forward_mqa`` over the
group's serving sweep), spec-decode (the V1 drafter's helpers, the MTP norm),
mHC (target and MTP forward passes at every token count the scheduler can
build). One pre-warm per (configuration, runner), reused by its groups'
tests through a copy of its caches. Builds are counted by
``compile_counters.builds`` (Triton's ``cache_hit``, TileLang's
``from_database``); positive control: a key no warmup has builds.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import prewarm_process
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.forked]


def _boundaries() -> dict[str, Any]:
    from dsv4warmup.serving import FLASH, PRO

    return {
        # max_model_len below 1 + k (only decode-classified steps of <= 3 tokens),
        # a token budget below a prefill chunk, and the fused mHC post + pre
        # split change at 5 tokens: boundaries 3 and 8.
        "flash-len3-k4-budget5": FLASH.replace(
            max_model_len=3, num_speculative_tokens=4, max_num_seqs=2, max_num_batched_tokens=5
        ),
        # Contexts shorter than the sliding window and a compress ratio, a
        # budget many prefill chunks wide, TP 1, bf16 KV cache: boundary 12.
        "pro-len12-k3-tp1": PRO.replace(
            max_model_len=12,
            max_num_batched_tokens=1328,
            tensor_parallel_size=1,
            kv_cache_dtype="auto",
            num_speculative_tokens=3,
        ),
    }


CASES = [
    ("flash-len3-k4-budget5", "v2"),
    ("flash-len3-k4-budget5", "v1"),
    ("pro-len12-k3-tp1", "v2"),
]
GROUPS = ("sparse_mla", "spec_decode", "mhc")
RUNNER_ENV = {"v2": "1", "v1": "0"}
# The series' kernels per group: the builds that must not happen.
SERIES_TRITON = {
    "sparse_mla": {"BuildC128ATopkMetadataKernel.kernel", "CombineTopkSwaIndicesKernel.kernel"},
    "spec_decode": {
        "MTPSharedHeadRMSNormKernel.kernel",
        "eagle_prepare_inputs_padded_kernel",
        "eagle_prepare_next_token_padded_kernel",
        "eagle_step_slot_mapping_metadata_kernel",
    },
    "mhc": set(),
}
# Made at collection, in pytest's own process: every forked test sees the same
# folder (a forked test's tmp_path_factory would make a new base per test).
PREWARM_ROOT = Path(tempfile.mkdtemp(prefix="dsv4-prewarm-"))


def _cfg(name: str) -> Any:
    import torch

    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    return _boundaries()[name].replace(sm_count=sm_count)


def _prewarmed(name: str, runner: str) -> Path:
    """The caches of one pre-warm of (``name``, ``runner``), made once per test run."""
    tree = prewarm_process.tree()
    if tree is None:
        pytest.skip("needs a vLLM tree with `vllm warmup-kernels` (DSV4_V033_PATCHED_TREE)")
    folder = PREWARM_ROOT / f"{name}-{runner}"
    done = folder / "summary.json"
    if not done.is_file():
        shutil.rmtree(folder, ignore_errors=True)
        caches = {"triton": folder / "triton", "tilelang": folder / "tilelang"}
        flags = prewarm_process.serve_flags(folder / "model", _cfg(name))
        env = {"VLLM_USE_V2_MODEL_RUNNER": RUNNER_ENV[runner]}
        summary = prewarm_process.run(tree, caches, flags, env)
        prewarm_process.record(f"{name}-{runner}", summary)
        assert summary["compiled"].get("triton", 0) > 0, summary
        done.write_text(json.dumps(summary, default=str))
    return folder


def _use_caches(prewarmed: Path, tmp_path: Path) -> None:
    """This process's disk caches: a copy of the pre-warmed ones (Triton and
    TileLang read these variables at each use)."""
    for backend in ("triton", "tilelang"):
        shutil.copytree(prewarmed / backend, tmp_path / backend)
    os.environ["TRITON_CACHE_DIR"] = str(tmp_path / "triton")
    os.environ["TILELANG_CACHE_DIR"] = str(tmp_path / "tilelang")


def _serve_sparse_mla(cfg: Any, runner: str) -> None:
    import torch
    from dsv4warmup.registry import sparse_mla as driver

    model = driver.build_model(cfg, runner, device="cuda", kv_cache_bytes=8 << 30)
    driver.warm_registry(model.vllm_config, runner).warmup()
    driver.run_batches(model, driver.sweep(model))
    torch.cuda.synchronize()


def _serve_spec_decode(cfg: Any, runner: str) -> None:
    import torch
    from dsv4warmup.legacy import spec_decode as cs
    from dsv4warmup.registry import lifecycle
    from dsv4warmup.registry import spec_decode as sd

    config = sd.vllm_config(cfg, runner)
    sd.warm_registry(config, runner).warmup()
    with lifecycle.selected(runner):
        steps = sd.run_call_sites(cfg, device="cuda", check=cs.check_outputs, eagle=runner == "v1")
    torch.cuda.synchronize()
    assert steps > 0


def _serve_mhc(cfg: Any, runner: str) -> None:
    import torch

    # The deployment the pre-warm saw: DeepGEMM decides the mHC split keys,
    # and a pre-warm process without it (the lab) warms the TileLang-GEMM ones.
    from dsv4warmup.gpu.prewarm_runner import missing
    from dsv4warmup.registry import lifecycle, mhc

    deep_gemm = not missing("deep_gemm")
    with (
        lifecycle.selected(runner),
        mhc.deployment_on_cuda(cfg, deep_gemm) as (vllm_config, models, registry),
    ):
        registry.warmup()
        with mhc._model_stubs(call_time=True), torch.inference_mode():
            for num_tokens in mhc.token_counts(vllm_config):
                mhc.forward_all(models, num_tokens)
        torch.cuda.synchronize()


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("name,runner", CASES, ids=[f"{n}-{r}" for n, r in CASES])
def test_prewarm_then_serving_builds_nothing(
    tmp_path: Path,
    name: str,
    runner: str,
    group: str,
) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    prewarmed = _prewarmed(name, runner)
    _use_caches(prewarmed, tmp_path)
    from compile_counters import builds, built, launch_fresh_triton_key

    cfg = _cfg(name)
    serve = {"sparse_mla": _serve_sparse_mla, "spec_decode": _serve_spec_decode, "mhc": _serve_mhc}
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = RUNNER_ENV[runner]
    with builds() as counts:
        serve[group](cfg, runner)
    compiled = built(counts)
    loaded = {k: n for k, n in counts.items() if k[2]}
    print(f"{name} {runner} {group}: built {compiled}, {sum(loaded.values())} disk loads")
    if group == "mhc":
        assert any(k[0] == "tilelang" for k in loaded), "no TileLang kernel read from disk"
        assert not [k for k in compiled if k.startswith("tilelang:")], compiled
    else:
        assert {k[1] for k in loaded} & SERIES_TRITON[group], "no series kernel read from disk"
        assert not {k.split(":", 1)[1] for k in compiled} & SERIES_TRITON[group], compiled

    # Positive control: the counter sees a build.
    with builds() as fresh:
        launch_fresh_triton_key()
        torch.cuda.synchronize()
    assert built(fresh) == {"triton:MTPSharedHeadRMSNormKernel.kernel": 1}, dict(fresh)
