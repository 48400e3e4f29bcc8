"""Spec-decode helper kernels: the startup warmup compiles exactly the Triton
keys the real call sites launch -- no miss, no unreachable key.

Runtime side: vLLM's proposer methods (``prepare_next_token_ids_padded``,
``prepare_inputs_padded``, ``prepare_inputs``, ``_update_positions_dependent_metadata``)
and DeepSeek V4's ``DeepSeekV4MultiTokenPredictor.compute_logits`` driven over
every request count, every sampled-token width, discarded requests, zero
accepted drafts, CUDA-graph padded and eager draft batches
(``dsv4warmup.legacy.spec_decode``). Warmup side: what vLLM's
``spec_decode_triton_warmup`` compiles, recorded at ``JITFunction.warmup``.
"""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

import pytest
from dsv4warmup.legacy import spec_decode as cs
from dsv4warmup.serving import FLASH, PRO, ServingConfig

# FLASH with a short context so block tables stay small.
BASE = FLASH.replace(max_model_len=8192)


def _describe(keys: cs.KeysByKernel) -> str:
    return "\n".join(f"  {k}: {sorted(v)}" for k, v in sorted(keys.items()) if v)


def _diff(runtime: cs.KeysByKernel, warmup: cs.KeysByKernel) -> tuple[dict, dict]:
    kernels = set(runtime) | set(warmup)
    missed = {k: runtime.get(k, set()) - warmup.get(k, set()) for k in kernels}
    wasted = {k: warmup.get(k, set()) - runtime.get(k, set()) for k in kernels}
    return {k: v for k, v in missed.items() if v}, {k: v for k, v in wasted.items() if v}


def _assert_exact(cfg: ServingConfig, **kw: bool) -> cs.KeysByKernel:
    runtime = cs.runtime_keys(cfg, **kw)
    padded = kw.get("padded_drafter_batch", True)
    warmup = cs.warmup_keys(cfg, padded_drafter_batch=padded)
    missed, wasted = _diff(runtime, warmup)
    assert not missed, f"runtime keys the warmup misses:\n{_describe(missed)}"
    assert not wasted, f"warmup keys no call site launches:\n{_describe(wasted)}"
    return runtime


SWEEP = [
    pytest.param(
        BASE.replace(
            num_speculative_tokens=k,
            max_num_seqs=seqs,
            block_size=block,
            speculative_method=method,
        ),
        id=f"{method}-k{k}-seqs{seqs}-block{block}",
    )
    for method in ("mtp", "eagle")
    for k in (1, 2, 3, 4)
    for seqs in (1, 7, 256)
    for block in (16, 256)
]


@pytest.mark.parametrize("cfg", SWEEP)
def test_warmup_keys_equal_runtime_keys(cfg: ServingConfig) -> None:
    runtime = _assert_exact(cfg)
    kernels = set(runtime)
    # Which kernels each configuration reaches.
    assert {cs.NEXT_TOKEN_KERNEL, cs.PREPARE_INPUTS_KERNEL} <= kernels
    assert (cs.STEP_KERNEL in kernels) == (cfg.num_speculative_tokens > 1)
    assert (cs.MTP_NORM_KERNEL in kernels) == (cfg.speculative_method == "mtp")
    # Batch of one and one sampled token per request are their own binaries.
    widths = {key[0][6] for key in runtime[cs.NEXT_TOKEN_KERNEL]}
    assert ("constexpr", 1) in widths
    assert len(runtime[cs.NEXT_TOKEN_KERNEL]) > 1


EDGES = [
    # One block per request: the block-table stride specializes to 1.
    pytest.param(
        BASE.replace(
            speculative_method="eagle",
            num_speculative_tokens=3,
            max_num_seqs=20,
            block_size=256,
            max_model_len=256,
        ),
        id="eagle-one-block",
    ),
    # Block table width off a multiple of 16, odd vocabulary.
    pytest.param(
        BASE.replace(
            speculative_method="eagle",
            num_speculative_tokens=2,
            max_num_seqs=33,
            block_size=256,
            max_model_len=5000,
            vocab_size=32001,
        ),
        id="eagle-odd-width-vocab",
    ),
    # Long draft: widths 1..16, BLOCK_SIZE_TOKENS up to 16.
    pytest.param(
        BASE.replace(speculative_method="eagle3", num_speculative_tokens=15, max_num_seqs=18),
        id="eagle3-k15",
    ),
    pytest.param(PRO.replace(max_model_len=8192, max_num_seqs=40), id="pro-k1"),
    pytest.param(
        PRO.replace(max_model_len=1 << 20, max_num_seqs=17, num_speculative_tokens=2),
        id="pro-k2-1M-context",
    ),
]


@pytest.mark.parametrize("cfg", EDGES)
def test_edge_configurations(cfg: ServingConfig) -> None:
    _assert_exact(cfg)


@pytest.mark.parametrize("seqs", (7, 64))
def test_unpadded_drafter_batch(seqs: int) -> None:
    """disable_padded_drafter_batch: the CPU-side preparation replaces the
    two padded kernels; the draft-step kernel still runs."""
    cfg = BASE.replace(num_speculative_tokens=3, max_num_seqs=seqs)
    runtime = _assert_exact(cfg, padded_drafter_batch=False)
    assert set(runtime) == {cs.STEP_KERNEL, cs.MTP_NORM_KERNEL}


def test_mrope_drafter() -> None:
    """M-RoPE drafters pass row 0 of the 3-row position buffer."""
    cfg = BASE.replace(speculative_method="eagle", num_speculative_tokens=3, max_num_seqs=24)
    assert cs.runtime_keys(cfg, mrope=True) == cs.runtime_keys(cfg)
    _assert_exact(cfg, mrope=True)


def test_other_methods_compile_nothing() -> None:
    for method in (None, "ngram", "medusa", "suffix"):
        cfg = BASE.replace(speculative_method=method)
        assert cs.warmup_launches(cfg) == []
        assert cs.runtime_keys(cfg) == {}


@pytest.mark.parametrize(
    "cfg",
    [
        pytest.param(BASE.replace(max_num_seqs=7), id="flash-k1"),
        pytest.param(
            BASE.replace(
                speculative_method="eagle",
                num_speculative_tokens=3,
                max_num_seqs=40,
                block_size=16,
            ),
            id="eagle-k3",
        ),
    ],
)
def test_dropping_any_warmup_launch_is_caught(cfg: ServingConfig) -> None:
    """Every launch of the warmup is needed: without it the comparison above
    fails (so it can fail, and the warmup compiles nothing superfluous)."""
    runtime = cs.runtime_keys(cfg)
    launches = cs.warmup_launches(cfg)
    assert len(launches) >= 4
    full = cs.keys_of_launches(launches)
    assert not _diff(runtime, full)[0]
    for i in range(len(launches)):
        fewer = cs.keys_of_launches(launches[:i] + launches[i + 1 :])
        missed, _ = _diff(runtime, fewer)
        assert missed, f"dropping launch {i} ({launches[i].key()}) went unnoticed"


def test_wrong_constexpr_is_caught() -> None:
    """A warmup for another block size or context length misses keys."""
    cfg = BASE.replace(
        speculative_method="eagle", num_speculative_tokens=2, max_num_seqs=9, block_size=16
    )
    runtime = cs.runtime_keys(cfg)
    for other in (cfg.replace(block_size=32), cfg.replace(max_model_len=4096)):
        missed, _ = _diff(runtime, cs.warmup_keys(other))
        assert cs.STEP_KERNEL in missed


# --- the adapter: engine configuration -> plain parameters ---------------------


def _vllm_config(cfg: ServingConfig, *, arch: str = "DeepSeekV4MTPModel") -> SimpleNamespace:
    import torch

    hf_config = SimpleNamespace(
        architectures=[arch], hidden_size=cfg.hidden_size, rms_norm_eps=cfg.rms_norm_eps
    )
    speculative_config = None
    if cfg.speculative_method is not None:
        speculative_config = SimpleNamespace(
            method=cfg.speculative_method,
            num_speculative_tokens=cfg.num_speculative_tokens,
            disable_padded_drafter_batch=False,
            draft_model_config=SimpleNamespace(hf_config=hf_config, dtype=torch.bfloat16),
        )
    return SimpleNamespace(
        speculative_config=speculative_config,
        scheduler_config=SimpleNamespace(max_num_seqs=cfg.max_num_seqs),
        model_config=SimpleNamespace(
            max_model_len=cfg.max_model_len, get_vocab_size=lambda: cfg.vocab_size
        ),
    )


def _runner(cfg: ServingConfig) -> SimpleNamespace:
    """The V1 runner attributes the adapter reads: its drafter and the block
    table of the drafter's KV cache group."""
    from vllm.v1.spec_decode.eagle import EagleProposer

    drafter = object.__new__(EagleProposer)
    table = cs.drafter_block_table(cfg)
    drafter.parallel_drafting = False
    drafter.constant_draft_positions = False
    drafter.block_size = cs.kv_cache_block_size(table)
    drafter.kv_cache_gid = 1
    return SimpleNamespace(drafter=drafter, input_batch=SimpleNamespace(block_table=[None, table]))


@pytest.fixture
def on_nvidia():
    from vllm.model_executor.warmup import spec_decode_triton_warmup as adapter

    platform = SimpleNamespace(is_cuda=lambda: True, is_cuda_alike=lambda: True)
    with mock.patch.object(adapter, "current_platform", platform):
        yield adapter


@pytest.mark.parametrize(
    "cfg",
    [
        pytest.param(BASE, id="flash-k1"),
        pytest.param(BASE.replace(num_speculative_tokens=3, max_num_seqs=64), id="flash-k3"),
        pytest.param(
            BASE.replace(speculative_method="eagle", num_speculative_tokens=2, block_size=16),
            id="eagle-k2",
        ),
    ],
)
def test_adapter_maps_the_engine_like_the_audit(on_nvidia, cfg: ServingConfig) -> None:
    arch = "DeepSeekV4MTPModel" if cfg.speculative_method == "mtp" else "EagleLlamaForCausalLM"
    params = on_nvidia.spec_decode_triton_warmup_params(_vllm_config(cfg, arch=arch), _runner(cfg))
    assert params == cs.warmup_params(cfg)


def test_adapter_gating(on_nvidia) -> None:
    adapter = on_nvidia
    # No speculative decoding: nothing is even looked at.
    with mock.patch.object(adapter, "compile_triton_warmup") as compile_:
        adapter.spec_decode_triton_warmup(_vllm_config(BASE.replace(speculative_method=None)))
        compile_.assert_not_called()
    # A drafter that is not the EAGLE proposer (ngram, medusa, V2 runner):
    # only DeepSeek V4's MTP norm remains.
    cfg = BASE.replace(num_speculative_tokens=2)
    params = adapter.spec_decode_triton_warmup_params(_vllm_config(cfg), SimpleNamespace())
    assert params is not None and not params.eagle_proposer
    assert params.mtp_norm_hidden_size == cfg.hidden_size
    assert params.drafter_block_table is None
    ngram = _vllm_config(BASE.replace(speculative_method="ngram"), arch="none")
    assert adapter.spec_decode_triton_warmup_params(ngram, SimpleNamespace()) is None
    # Another MTP model: no DeepSeek V4 norm.
    other = _vllm_config(cfg, arch="DeepSeekMTPModel")
    params = adapter.spec_decode_triton_warmup_params(other, _runner(cfg))
    assert params is not None and params.mtp_norm_hidden_size is None
    # Parallel drafting / fixed draft positions: no draft-step kernel.
    for attr in ("parallel_drafting", "constant_draft_positions"):
        runner = _runner(cfg)
        setattr(runner.drafter, attr, True)
        params = adapter.spec_decode_triton_warmup_params(_vllm_config(cfg), runner)
        assert params is not None and params.drafter_block_table is None


def test_adapter_is_never_fatal(on_nvidia) -> None:
    adapter = on_nvidia
    cfg = BASE.replace(num_speculative_tokens=3)
    broken = _runner(cfg)
    broken.input_batch = None  # the block table cannot be read
    with mock.patch.object(adapter.logger, "warning") as warning:
        adapter.spec_decode_triton_warmup(_vllm_config(cfg), None, broken)
    warning.assert_called_once()
    # One compile call (one log line) covering all four kernels; failed
    # compiles are logged per kernel and key by compile_triton_warmup.
    with mock.patch.object(adapter, "compile_triton_warmup") as compile_:
        adapter.spec_decode_triton_warmup(_vllm_config(cfg), None, _runner(cfg))
    compile_.assert_called_once()
    (_, launches), _ = compile_.call_args
    assert {launch.kernel_name for launch in launches} == set(cs.KERNELS)


def test_kernel_warmup_calls_the_adapter() -> None:
    """The hook sits in kernel_warmup, which runs before CUDA-graph capture."""
    import inspect

    from vllm.model_executor.warmup import kernel_warmup

    source = inspect.getsource(kernel_warmup.kernel_warmup)
    assert "spec_decode_triton_warmup(" in source


@pytest.mark.parametrize(
    "seqs, k, batched",
    [
        (256, 1, 8192),
        (256, 0, 8192),
        (7, 3, 8192),
        (1, 1, 8192),
        (64, 2, 100),
        (4, 0, 3),
        (300, 4, 2048),
    ],
)
def test_default_capture_sizes_match_vllm(seqs: int, k: int, batched: int) -> None:
    """``serving.default_cudagraph_capture_sizes`` re-states vLLM 0.26.0's
    default; check it against vLLM's own code (stand-in configs)."""
    from dsv4warmup.serving import default_cudagraph_capture_sizes
    from vllm.config import CUDAGraphMode
    from vllm.config.compilation import CompilationConfig
    from vllm.config.vllm import VllmConfig

    compilation = SimpleNamespace(
        cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE,
        max_cudagraph_capture_size=None,
        cudagraph_capture_sizes=None,
        pass_config=SimpleNamespace(enable_sp=False),
        post_init_cudagraph_sizes=lambda: None,
    )
    engine = SimpleNamespace(
        model_config=SimpleNamespace(enforce_eager=False),
        compilation_config=compilation,
        num_speculative_tokens=k,
        scheduler_config=SimpleNamespace(max_num_seqs=seqs, max_num_batched_tokens=batched),
        performance_mode="balanced",
        parallel_config=SimpleNamespace(tensor_parallel_size=1),
    )
    VllmConfig._set_cudagraph_sizes(engine)  # type: ignore[arg-type]
    # The V1 runner's rounding for FULL decode graphs with spec decode.
    CompilationConfig.adjust_cudagraph_sizes_for_spec_decode(compilation, 1 + k, 1)  # type: ignore[arg-type]
    assert default_cudagraph_capture_sizes(seqs, k, batched) == compilation.cudagraph_capture_sizes
    if batched >= 512:
        cfg = ServingConfig(
            max_num_seqs=seqs, num_speculative_tokens=k, max_num_batched_tokens=batched
        )
        assert list(cfg.capture_sizes) == compilation.cudagraph_capture_sizes
