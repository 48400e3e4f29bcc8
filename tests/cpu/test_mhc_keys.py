"""mHC TileLang compile keys: the NVIDIA warmup covers exactly what the CUDA
DeepSeek V4 model selects, for every token count (no miss, no waste).

Runtime side: the real model code (target + MTP draft) at sampled token
counts, recorded at the ``@tilelang.jit`` factories, and the dispatch helpers
the wrappers called, swept over every token count. Warmup side: vLLM's warmup
run on the same model objects, recorded at the factories. See
``dsv4warmup.legacy.mhc``. Runs with the real ``tilelang`` package when it
imports (its own cache key is then checked for every recorded key), else with
a stand-in package.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from dsv4warmup.legacy import mhc as cs
from dsv4warmup.serving import FLASH, PRO

MODELS = {"flash": FLASH, "pro": PRO}
SM_COUNTS = (132, 148)  # H100/H200, B200
MAX_BATCHED = (2048, 8192, 16384)
DEEP_GEMM = {"deepgemm": True, "no-deepgemm": False}


@pytest.fixture(scope="module", autouse=True)
def _forget_cuda_imports():
    yield
    cs.forget_cuda_imports()


def _cfg(model: str, sm_count: int, max_batched: int) -> cs.ServingConfig:
    return MODELS[model].replace(sm_count=sm_count, max_num_batched_tokens=max_batched)


def _describe(keys: cs.KeysByKernel) -> str:
    return "\n".join(f"  {k}: {sorted(v)}" for k, v in sorted(keys.items()))


@pytest.mark.parametrize("deep_gemm", DEEP_GEMM.values(), ids=DEEP_GEMM.keys())
@pytest.mark.parametrize("max_batched", MAX_BATCHED)
@pytest.mark.parametrize("sm_count", SM_COUNTS)
@pytest.mark.parametrize("model", MODELS)
def test_warmup_keys_equal_runtime_keys(
    model: str, sm_count: int, max_batched: int, deep_gemm: bool
) -> None:
    cfg = _cfg(model, sm_count, max_batched)
    runtime = cs.runtime_keys(cfg, deep_gemm=deep_gemm)
    warmup = cs.run_warmup(cfg, deep_gemm=deep_gemm)
    missed, wasted = cs.diff(runtime, warmup.launched)
    assert not missed, f"runtime keys the warmup misses:\n{_describe(missed)}"
    assert not wasted, f"warmup keys no forward pass uses:\n{_describe(wasted)}"
    # What the warmup derived is what its wrapper calls launched.
    assert warmup.enumerated == warmup.launched
    # Every key is new in exactly one wrapper call (compiled once).
    assert sum(warmup.keys_per_launch) == cs.count(warmup.launched)
    assert all(n > 0 for n in warmup.keys_per_launch)
    # Every kernel the model can reach is covered: the fused post/pre path
    # (both branches), hc_head, post, and the broadcast first layer only
    # where DeepGEMM exists (its GEMM is DeepGEMM's).
    kernels = set(runtime)
    assert {
        "mhc_fused_tilelang",
        "mhc_post_tilelang",
        "mhc_pre_big_fuse_with_norm_tilelang",
        "hc_head_fuse_tilelang",
    } <= kernels
    broadcast = deep_gemm and cs.has_broadcast_pre()
    assert ("mhc_pre_big_fuse_broadcast_with_norm_tilelang" in kernels) == broadcast
    assert ("hc_prenorm_gemm_tilelang" in kernels) == (not deep_gemm)


@pytest.mark.parametrize("deep_gemm", DEEP_GEMM.values(), ids=DEEP_GEMM.keys())
@pytest.mark.parametrize("sm_count", SM_COUNTS)
@pytest.mark.parametrize("model", MODELS)
def test_model_code_launches_what_the_dispatch_helpers_select(
    model: str, sm_count: int, deep_gemm: bool
) -> None:
    """At every split-K boundary, the small-FMA / pre-norm GEMM thresholds
    and a random sample, the keys the forward passes launch are exactly the
    keys of the dispatch-helper calls the wrappers made (which the full
    sweep above evaluates for every token count)."""
    cfg = _cfg(model, sm_count, 16384)
    counts = cs.sample_token_counts(cfg.max_num_batched_tokens)
    sites = cs.capture_call_sites(cfg, counts, deep_gemm=deep_gemm)
    bad = [t for t in counts if sites.launched[t] != sites.selected[t]]
    assert not bad, f"launched != selected at {bad[:10]}"
    helpers = {call.helper for call in sites.helper_calls}
    broadcast = {"mhc_pre_broadcast_plan"} if cs.has_broadcast_pre() else set()
    assert helpers == {
        "mhc_pre_plan",  # MTP block (and the target's first layer before 0.26)
        "mhc_fused_post_pre_plan",
        "mhc_post_key",
        "hc_head_key",
    } | (broadcast if deep_gemm else set())
    # Only the broadcast pre fails, and only without DeepGEMM.
    assert {call.helper for call in sites.failed} == (set() if deep_gemm else broadcast)
    # The calls a full sweep reuses are the ones seen here.
    assert cs.helper_calls(cfg, deep_gemm=deep_gemm) == sites.helper_calls


def test_recorded_keys_are_tilelangs_own() -> None:
    """With the real tilelang package, every recorded key was compared with
    ``JITFunc._parse_phase1_key`` (the recorder raises on a difference)."""
    if not cs.real_tilelang_available():
        pytest.skip("tilelang not installed: keys follow the re-stated rule")
    cfg = _cfg("flash", 132, 2048)
    models = cs.build_models(cfg)
    with cs.recording(cfg.sm_count, True) as recorder, cs._model_stubs():
        for num_tokens in (1, 8, 17, 128, 1024, 2048):
            cs._forward_all(models, num_tokens, True)
    assert recorder.checked_against_tilelang == cs.count(recorder.keys) > 0


def test_static_arguments_alone_elaborate_the_runtime_kernel() -> None:
    """The warmup's parallel precompile elaborates each kernel from its
    static arguments alone; that must be the very kernel (same TIR, so the
    same TileLang cache entry) the wrapper call elaborates with tensors."""
    if not cs.real_tilelang_available():
        pytest.skip("needs the tilelang package")
    cfg = _cfg("flash", 132, 2048)
    models = cs.build_models(cfg)
    with cs.recording(cfg.sm_count, True) as recorder, cs._model_stubs():
        for num_tokens in (1, 8, 17, 2048):
            cs._forward_all(models, num_tokens, True)
    assert len(recorder.first_calls) >= 6
    for (kernel, static), (factory, args, kwargs) in recorder.first_calls.items():
        with_tensors = factory.get_tir(*args, **kwargs).script()
        assert factory.get_tir(**dict(static)).script() == with_tensors, kernel


@pytest.mark.parametrize(
    "mutation", ["no_small_token_counts", "token_counts_capped", "other_sm_count"]
)
def test_mutated_warmup_is_caught(mutation: str) -> None:
    """The comparison fails when the warmup misses keys."""
    from vllm.model_executor.warmup import deepseek_v4_mhc_warmup as warmup

    cfg = _cfg("flash", 132, 8192)
    runtime = cs.runtime_keys(cfg, deep_gemm=True)
    real_counts = warmup.mhc_warmup_token_counts
    real_launches = warmup.mhc_warmup_launches
    patches = {
        # the small-FMA branch of the fused post/pre path
        "no_small_token_counts": (
            "mhc_warmup_token_counts",
            lambda *a: [t for t in real_counts(*a) if t > 16],
        ),
        # split-K 1 of the fused pre starts past 66 * 64 tokens on 132 SMs
        "token_counts_capped": (
            "mhc_warmup_token_counts",
            lambda *a: [t for t in real_counts(*a) if t <= 4096],
        ),
        "other_sm_count": (
            "mhc_warmup_launches",
            lambda sites, counts, **kw: real_launches(
                sites, counts, **{**kw, "num_sms": kw["num_sms"] - 1}
            ),
        ),
    }
    name, value = patches[mutation]
    with mock.patch.object(warmup, name, value):
        warm = cs.warmup_keys(cfg, deep_gemm=True)
    missed, _ = cs.diff(runtime, warm)
    assert missed, mutation


def _dropping(real: Any, index: int | None, dropped: list[Any]) -> Any:
    """``mhc_warmup_launches`` without its launch ``index``, kept in
    ``dropped`` (``None``: nothing dropped, all launches kept there)."""

    def without_one(*args: Any, **kwargs: Any) -> Any:
        launches = real(*args, **kwargs)
        if index is None:
            dropped[:] = launches
            return launches
        dropped[:] = [launches[index]]
        return launches[:index] + launches[index + 1 :]

    return without_one


def _flat(keys: cs.KeysByKernel) -> set[tuple[str, cs.StaticKey]]:
    return {(kernel, key) for kernel, static in keys.items() for key in static}


def test_dropping_a_warmup_launch_of_any_kernel_is_caught() -> None:
    """Mutation check: the warmup without one of its wrapper calls runs for
    real, recorded. For every kernel (but post, see below), leaving out one
    of the calls that compile its keys (the first whose keys no other call
    also launches) makes the comparison name its keys, and only keys of the
    dropped call."""
    from vllm.model_executor.warmup import deepseek_v4_mhc_warmup as warmup

    real = warmup.mhc_warmup_launches
    for deep_gemm in (True, False):
        cfg = _cfg("flash", 132, 2048)
        runtime = cs.runtime_keys(cfg, deep_gemm=deep_gemm)
        launches: list[Any] = []
        with mock.patch.object(warmup, "mhc_warmup_launches", _dropping(real, None, launches)):
            assert not cs.diff(runtime, cs.warmup_keys(cfg, deep_gemm=deep_gemm))[0]
        # The post key is also launched by every fused post/pre call past the
        # small-FMA range: dropping one call cannot lose it.
        for kernel in sorted(set(runtime) - {"mhc_post_tilelang"}):
            candidates = [
                i
                for i, launch in enumerate(launches)
                if any(k.kernel == kernel for k in launch.keys)
            ]
            for index in candidates:
                dropped: list[Any] = []
                with mock.patch.object(
                    warmup, "mhc_warmup_launches", _dropping(real, index, dropped)
                ):
                    missed = _flat(cs.diff(runtime, cs.warmup_keys(cfg, deep_gemm=deep_gemm))[0])
                lost = {(key.kernel, key.static_args) for key in dropped[0].keys}
                assert missed <= lost, (kernel, missed - lost)
                if any(k == kernel for k, _ in missed):
                    break
            else:
                raise AssertionError(f"dropping no warmup call of {kernel} is noticed")


def test_token_counts_cover_capture_sizes() -> None:
    from vllm.model_executor.kernels.mhc.tilelang_dispatch import (
        mhc_warmup_token_counts,
    )

    counts = mhc_warmup_token_counts(100, [1, 2, 4, 8, 512])
    assert counts == [*range(1, 101), 512]
    assert cs.token_counts(FLASH) == mhc_warmup_token_counts(
        FLASH.max_num_batched_tokens, FLASH.capture_sizes
    )


def test_warmup_gating_and_errors() -> None:
    """CUDA takes the NVIDIA path, other platforms the CustomOp path as
    before, other models neither; a failing launch is logged, not raised."""
    import torch
    from vllm.model_executor.warmup import deepseek_v4_mhc_warmup as warmup
    from vllm.platforms import current_platform

    class Model(torch.nn.Module):
        config = type("Config", (), {"model_type": "deepseek_v4"})()

    model = Model()
    for is_cuda in (True, False):
        with (
            mock.patch.object(current_platform, "is_cuda", lambda v=is_cuda: v),
            mock.patch.object(warmup, "_deepseek_v4_mhc_warmup_cuda") as cuda_path,
            mock.patch.object(warmup, "_find_first_mhc_layer", return_value=None) as old,
        ):
            warmup.deepseek_v4_mhc_warmup(model, max_tokens=16, draft_model=None)
        assert cuda_path.called == is_cuda
        assert old.called == (not is_cuda)

    other = Model()
    other.config = type("Config", (), {"model_type": "llama"})()
    with (
        mock.patch.object(current_platform, "is_cuda", lambda: True),
        mock.patch.object(warmup, "_deepseek_v4_mhc_warmup_cuda") as cuda_path,
    ):
        warmup.deepseek_v4_mhc_warmup(other, max_tokens=16)
    assert not cuda_path.called

    # A launch that raises is logged with its keys; the others still run.
    cfg = _cfg("flash", 132, 64)
    models = cs.build_models(cfg)
    sites = warmup.collect_mhc_call_sites([models.target, models.draft])
    launches = warmup.mhc_warmup_launches(
        sites, list(range(1, 65)), use_deep_gemm=True, num_sms=132
    )
    broken = next(iter(sites))
    failing = dict(sites)
    failing[broken] = warmup.BoundMhcCallSite(broken, torch.device("meta"))  # no tensors
    with (
        cs.recording(132, True),
        mock.patch.object(warmup.logger, "warning") as warning,
    ):
        warmed = warmup.run_mhc_warmup_launches(failing, launches)
    failed = [launch for launch in launches if launch.site == broken]
    assert warmed == sum(len(launch.keys) for launch in launches if launch.site != broken)
    assert warning.call_count == len(failed)
    assert warning.call_args.args[3] == failed[-1].keys


def test_cuda_adapter_logs_one_line() -> None:
    import torch
    from vllm.model_executor.warmup import deepseek_v4_mhc_warmup as warmup

    site = mock.Mock(device=torch.device("cuda"))
    with (
        mock.patch.object(warmup, "collect_mhc_call_sites", return_value={"s": site}),
        mock.patch.object(warmup, "nvidia_mhc_warmup", return_value=(30, 31)) as run,
        mock.patch("vllm.model_executor.kernels.mhc.tilelang.device_num_sms", lambda: 132),
        mock.patch("vllm.utils.deep_gemm.is_deep_gemm_supported", lambda: True),
        mock.patch.object(torch.accelerator, "synchronize", lambda: None),
        mock.patch.dict("os.environ", {"VLLM_TRITON_JIT_WARMUP_NUM_THREADS": "4"}),
        mock.patch.object(warmup.logger, "info") as info,
    ):
        warmup._deepseek_v4_mhc_warmup_cuda([None], 8192, [1, 2])
    assert run.call_args.kwargs == {
        "use_deep_gemm": True,
        "num_sms": 132,
        "num_threads": 4,
    }
    assert run.call_args.args[1] == list(range(1, 8193))
    assert info.call_count == 1
    assert info.call_args.args[1:4] == (30, 31, 8192)
