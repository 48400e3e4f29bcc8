"""Sampling and verification kernels of Model Runner V2 (vLLM 0.34.0) for DeepSeek V4 + MTP, on a CPU.

Every step of a V2 server ends in ``GPUModelRunner.sample``
(``vllm/v1/worker/gpu/model_runner.py``): a step without draft tokens goes to
the ``Sampler`` (``vllm/v1/worker/gpu/sample/sampler.py``), a step with drafts
to the ``RejectionSampler`` (``vllm/v1/worker/gpu/spec_decode/rejection_sampler.py``);
then the MTP drafter (``MTPSpeculator``, a ``TargetDependentARSpeculator``)
samples each draft token with ``sample_draft`` (``greedy_argmax`` by default,
``draft_sample_method="greedy"``). All of them launch plain ``@triton.jit``
kernels (temperature, Gumbel sampling, min-p, penalties, logit bias,
logprobs, rejection, resampling) and the top-k/top-p registry kernels.

This module drives that code, built by the tree's own constructors on the
``meta`` device:

* the real ``GPUModelRunner`` (``__init__``, then ``load_model`` with the
  model given: the runner itself builds its ``RequestState``,
  ``InputBuffers``, ``MTPSpeculator``, ``Sampler``, ``RejectionSampler``,
  ``PromptLogprobsWorker``, ``StructuredOutputsWorker`` and registers the
  top-k/top-p warmups in its own ``JitWarmupRegistry``);
* each step through the runner's own methods -- ``finish_requests``,
  ``add_requests`` (``Sampler.add_request`` with the request's real
  ``SamplingParams``), ``update_requests``, ``gather_batch_req_state``,
  ``prepare_inputs`` -- then ``GPUModelRunner.sample``, the
  ``PromptLogprobsWorker`` and the drafter's ``sample_draft`` as
  ``sample_tokens`` / ``propose`` call them (prefill step, then one decode
  step per further draft token);
* start-up by the tree's own functions: ``_dummy_sampler_run`` of
  ``profile_run``, the registry's ``warmup()`` (``kernel_warmup``),
  ``warmup_kernels`` and ``run_kv_cache_sizing_warmup``
  (``vllm/v1/worker/gpu/warmup.py``), and the final ``_dummy_sampler_run``
  (``vllm/v1/worker/gpu_worker.py``), in the worker's order, on one runner
  (the ``Sampler`` keeps each slot's parameters between requests).

Every Triton launch made inside sampling is recorded with its exact key
(``triton_keys.record_launches``): no kernel runs. What a CPU lacks is stood
in for, never vLLM logic (:func:`cpu_hosted_h200`):

* the target's and the MTP draft's forward up to the logits
  (:class:`LogitsHead`, given to ``load_model`` and set by the speculator's
  ``load_model``): fresh logits in the head dtype, laid out as the LM head's
  all-gather leaves them; the runner's registry then holds the sampler's
  registrations only (the models' own launch no sampling kernel);
* FlashInfer (not installed here; ``requirements/cuda.txt`` pins it): present
  to ``has_flashinfer``, its ``sampling`` functions return the token ids;
* the device: meta tensors report themselves as CUDA tensors (``is_cuda``,
  ``device``) while sampling runs, so the code takes its CUDA branches
  (``greedy_argmax``, the split top-p pipeline); UVA views of host buffers,
  the device's SM count and memory queries, ``torch.accelerator``'s device
  index and CUDA streams answer as on an H200;
* the KV cache layout (``initialize_kv_cache``): one full-attention group of
  the configured block size with ample blocks; only block ids depend on it.
  The CUDA-graph dispatch is not run: no request padding (PIECEWISE or
  eager); no sampling kernel argument depends on it.

``python -m dsv4warmup.registry.sampling flash|pro [--k 1,2] [--max-num-seqs N]
[--quick|--full] [--kv-blocks N] [--json]`` prints, per kernel, the runtime
and start-up key counts and each missing key with one witness step.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

from dsv4warmup import triton_keys
from dsv4warmup.serving import FLASH, PRO, ServingConfig

from . import engine, lifecycle, meta_models, platform

Key = tuple[Any, ...]
RuntimeKeys = dict[str, dict[Key, str]]
StartupKeys = dict[str, set[Key]]

RUNNERS = ("v2",)  # the runner this driver drives (0.34.0 has no other)
# KV blocks the stand-in cache offers warmup: ample, no cap on its requests
# (``warmup.py`` caps them by the committable blocks, a runtime value).
KV_BLOCKS = 1 << 20


# --- what a CPU lacks ---------------------------------------------------------------


class LogitsHead:
    """Stands in for a model's forward up to ``compute_logits``: fresh logits
    ``[rows, vocab]`` in the head dtype, as ``LogitsProcessor`` returns them
    (the LM head's vocab padded as ``ParallelLMHead`` pads it, all-gathered
    along the vocab, then cut to the vocab: a view of row stride
    ``padded``)."""

    def __init__(self, vllm_config: Any) -> None:
        from vllm.model_executor.layers.vocab_parallel_embedding import (
            DEFAULT_VOCAB_PADDING_SIZE,
            pad_vocab_size,
        )

        mc = vllm_config.model_config
        self.vocab_size = mc.get_vocab_size()
        self.padded_vocab_size = pad_vocab_size(self.vocab_size, DEFAULT_VOCAB_PADDING_SIZE)
        self.dtype = mc.head_dtype
        self.hidden_size = mc.get_hidden_size()

    def compute_logits(self, hidden_states: Any, spec_step_idx: int = 0) -> Any:
        import torch

        rows = hidden_states.shape[0]
        full = torch.empty(rows, self.padded_vocab_size, dtype=self.dtype, device="meta")
        return full[..., : self.vocab_size]

    # ``init_model_state`` and ``load_model`` inspect the model as a module.
    def modules(self) -> Iterator[Any]:
        return iter(())

    def named_modules(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        return iter(())


def _flashinfer_sampling() -> types.ModuleType:
    """``flashinfer.sampling``'s sampling entry points as vLLM calls them:
    one token id per row (int32, as FlashInfer returns them)."""
    import torch

    def sample(logits_or_probs: Any, *args: Any, **kwargs: Any) -> Any:
        return torch.empty(logits_or_probs.shape[0], dtype=torch.int32, device="meta")

    module = types.ModuleType("flashinfer.sampling")
    for name in (
        "top_k_top_p_sampling_from_logits",
        "top_k_sampling_from_probs",
        "top_p_sampling_from_probs",
    ):
        setattr(module, name, sample)
    return module


class _FlashInferFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self) -> None:
        self.created: list[str] = []

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == "flashinfer" or name.startswith("flashinfer."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        if spec.name == "flashinfer.sampling":
            module = _flashinfer_sampling()
        else:
            module = meta_models.MockModule(spec.name)  # never called into
        module.__path__ = []  # type: ignore[attr-defined]
        self.created.append(spec.name)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__name__ == "flashinfer":
            module.sampling = importlib.import_module("flashinfer.sampling")  # type: ignore[attr-defined]


@contextlib.contextmanager
def _flashinfer_present() -> Iterator[None]:
    """FlashInfer as on an H100/H200 image (``requirements/cuda.txt``):
    ``has_flashinfer()`` is true and ``flashinfer.sampling`` samples."""
    import importlib.util

    if importlib.util.find_spec("flashinfer") is not None:  # a GPU image: the real one
        yield
        return
    finder = _FlashInferFinder()
    sys.meta_path.insert(0, finder)
    try:
        with mock.patch("vllm.v1.sample.ops.topk_topp_sampler.has_flashinfer", lambda: True):
            yield
    finally:
        sys.meta_path.remove(finder)
        for name in finder.created:
            sys.modules.pop(name, None)


class _Stream:
    """A CUDA stream: nothing to order on the meta device."""

    def wait_stream(self, other: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass


_UVA_LIB: Any = None


def _uva_views() -> None:
    """``torch.ops._C.get_cuda_view_from_cpu_tensor`` (vLLM's compiled op):
    the device view of a page-locked host buffer, on ``meta``."""
    global _UVA_LIB
    if _UVA_LIB is not None:
        return
    import torch

    lib = torch.library.Library("_C", "FRAGMENT")
    lib.define("get_cuda_view_from_cpu_tensor(Tensor cpu_tensor) -> Tensor")

    def view(cpu_tensor: Any) -> Any:
        return torch.empty(cpu_tensor.shape, dtype=cpu_tensor.dtype, device="meta")

    lib.impl("get_cuda_view_from_cpu_tensor", view, "CompositeExplicitAutograd")
    _UVA_LIB = lib


def _asked_by_vllm() -> bool:
    """Whether the attribute being read is read by a vLLM module (torch's
    own meta implementations must keep seeing ``meta``)."""
    name = sys._getframe(2).f_globals.get("__name__", "")
    return name == "vllm" or name.startswith("vllm.")


@contextlib.contextmanager
def meta_tensors_on_cuda() -> Iterator[None]:
    """Meta tensors answer vLLM's ``is_cuda`` / ``device`` as the GPU tensors
    they stand for (``cuda:0``), so vLLM takes its CUDA branches; tensors
    vLLM creates on that device go back to ``meta``
    (``meta_models.cpu_stand_ins``)."""
    import torch

    base = torch._C.TensorBase
    device_of = base.device.__get__  # type: ignore[attr-defined]
    is_cuda_of = base.is_cuda.__get__  # type: ignore[attr-defined]
    cuda = torch.device("cuda", 0)

    def device(self: Any) -> Any:
        found = device_of(self)
        return cuda if found.type == "meta" and _asked_by_vllm() else found

    def is_cuda(self: Any) -> bool:
        if device_of(self).type == "meta" and _asked_by_vllm():
            return True
        return bool(is_cuda_of(self))

    with (
        mock.patch.object(torch.Tensor, "device", property(device), create=True),
        mock.patch.object(torch.Tensor, "is_cuda", property(is_cuda), create=True),
    ):
        yield


@contextlib.contextmanager
def cpu_hosted_h200(vllm_config: Any) -> Iterator[None]:
    """What building and running the runner's sampling needs of an H200
    machine (see the module doc)."""
    from vllm.config import set_current_vllm_config
    from vllm.platforms.cuda import CudaPlatformBase

    gpu = platform.installed_gpu() or platform.H200
    platform.install_device_properties(gpu)
    _uva_views()
    with contextlib.ExitStack() as stack:
        stack.enter_context(meta_models.cpu_stand_ins(vllm_config))
        stack.enter_context(set_current_vllm_config(vllm_config))
        stack.enter_context(_flashinfer_present())
        # Every CPU-hosted platform object (``engine.vllm_config`` installs
        # one per configuration; modules keep the one they imported).
        stack.enter_context(
            mock.patch.object(
                CudaPlatformBase,
                "get_current_memory_usage",
                classmethod(lambda cls, device=None: 0),
            )
        )
        # The accelerator runtime: device 0, nothing to wait for.
        stack.enter_context(mock.patch("torch.accelerator.current_device_index", lambda: 0))
        stack.enter_context(mock.patch("torch.accelerator.synchronize", lambda device=None: None))
        stack.enter_context(mock.patch("torch.cuda.current_stream", lambda device=None: _Stream()))
        stack.enter_context(
            mock.patch("torch.cuda.stream", lambda s=None: contextlib.nullcontext())
        )
        yield


# --- the runner -----------------------------------------------------------------------


def vllm_config(cfg: ServingConfig) -> Any:
    """The tree's ``VllmConfig`` for ``cfg`` served by Model Runner V2, on
    the CPU-hosted H200 (installed first: vLLM modules bind the platform when
    they are imported)."""
    with lifecycle.selected("v2"):
        config = engine.vllm_config(cfg)
    assert lifecycle.configured_runner(config) == "v2"
    # The runner's modules, imported with the platform in place and before
    # any CPU stand-in (their import registers fake ops of vLLM's own).
    importlib.import_module("vllm.v1.worker.gpu.model_runner")
    importlib.import_module("vllm.v1.worker.gpu.warmup")
    return config


def _check_defaults(config: Any) -> None:
    """The sampling configuration this drive reproduces (the serving
    defaults); anything else would take other branches."""
    spec = config.speculative_config
    assert spec is not None and spec.method == "mtp", spec
    assert spec.draft_sample_method == "greedy", spec.draft_sample_method
    assert spec.rejection_sample_method == "standard", spec.rejection_sample_method
    assert not spec.enable_adaptive_verification
    assert not spec.use_local_argmax_reduction
    assert not config.parallel_config.enable_batch_sharded_sampling
    assert config.watermark_config is None
    assert config.parallel_config.pipeline_parallel_size == 1


def build_runner(config: Any, kv_blocks: int = KV_BLOCKS) -> Any:
    """``GPUModelRunner(vllm_config, device)`` and its ``load_model`` with the
    model given (the runner builds its samplers there,
    ``model_runner.py`` ``load_model``); the drafter's model too
    (``MTPSpeculator.load_model`` builds the draft model, here
    :class:`LogitsHead`). Then the KV-cache layout ``initialize_kv_cache``
    sets (a stand-in: :func:`_kv_cache_layout`)."""
    import torch
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    _check_defaults(config)
    runner = GPUModelRunner(config, torch.device("meta"))
    speculator = runner.speculator
    assert type(speculator).__name__ == "MTPSpeculator", type(speculator)

    def load_draft(target_model: Any) -> None:
        speculator.model = LogitsHead(config)

    with mock.patch.object(speculator, "load_model", load_draft):
        runner.load_model(model=LogitsHead(config))
    _kv_cache_layout(runner, kv_blocks)
    return runner


def _kv_cache_layout(runner: Any, kv_blocks: int) -> None:
    import torch
    from vllm.utils.math_utils import cdiv
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.worker.gpu.block_table import BlockTables

    block_size = runner.cache_config.block_size
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.uint8)
    runner.kv_cache_config = KVCacheConfig(
        num_blocks=kv_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.attn"], spec)],
    )
    runner.extensible_kv_cache = None
    runner.block_tables = BlockTables(
        block_sizes=[block_size],
        max_num_reqs=runner.max_num_reqs,
        max_num_batched_tokens=runner.max_num_tokens,
        max_num_blocks_per_group=[cdiv(runner.max_model_len, block_size)],
        device=runner.device,
    )


# --- recording ------------------------------------------------------------------------


class Witnesses(triton_keys.Witnesses[str]):
    """Keys of every kernel launched in sampling, recorded with Triton's CPU
    driver standing in and meta tensors answering as CUDA ones."""

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        with super().recording(), lifecycle.cpu_triton_driver():
            yield

    @contextlib.contextmanager
    def batch(self, witness: str, *, warmup: bool = False) -> Iterator[None]:
        with super().batch(witness, warmup=warmup), meta_tensors_on_cuda():
            yield

    def startup(self) -> StartupKeys:
        return {k: set(found) for k, found in self.keys.items()}


# --- steps through the runner ------------------------------------------------------------


class Steps:
    """``execute_model`` / ``sample_tokens`` of a worker whose forward is
    stood in for: the runner's own request bookkeeping and input preparation,
    then its ``sample`` and the drafter's ``sample_draft`` under
    :meth:`Witnesses.batch`."""

    def __init__(self, runner: Any, witnesses: Witnesses, where: str) -> None:
        self.runner = runner
        self.w = witnesses
        self.where = where
        self.describe: str | None = None  # the next step's witness text
        self._pending: tuple[Any, Any] | None = None

    def execute_model(self, scheduler_output: Any) -> None:
        """``GPUModelRunner.execute_model`` up to its inputs
        (``model_runner.py`` ``execute_model``, not a dummy run)."""
        from vllm.config import CUDAGraphMode
        from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor

        r = self.runner
        r.draft_tokens_handler.begin_step(scheduler_output)
        r.finish_requests(scheduler_output)
        r.free_states(scheduler_output)
        r.add_requests(scheduler_output)
        r.update_requests(scheduler_output)
        r.block_tables.apply_staged_writes()
        self._pending = None
        if scheduler_output.total_num_scheduled_tokens == 0:
            return
        batch_req_state, _ = r.gather_batch_req_state(scheduler_output, False)
        batch_desc = BatchExecutionDescriptor(
            cg_mode=CUDAGraphMode.NONE, num_tokens=batch_req_state.num_tokens, num_reqs=None
        )
        input_batch = r.prepare_inputs(scheduler_output, batch_req_state, batch_desc, 0)
        self._pending = (input_batch, scheduler_output)

    def sample_tokens(self, grammar_output: Any) -> None:
        """``GPUModelRunner.sample_tokens``' sampling: ``sample``, the prompt
        logprobs (``PromptLogprobsWorker``), then the drafter's ``propose``
        samples its drafts (``num_spec_tokens_to_schedule`` of them: the
        prefill step's, then one per decode step)."""
        import torch

        if self._pending is None:
            return
        input_batch, scheduler_output = self._pending
        self._pending = None
        r = self.runner
        what = self.describe or _describe(input_batch, scheduler_output)
        hidden = torch.empty(
            input_batch.num_tokens_after_padding,
            r.model.hidden_size,
            dtype=r.dtype,
            device="meta",
        )
        with self.w.batch(f"{self.where}: {what}"):
            r.sample(hidden, input_batch, grammar_output)
            workers = r.prompt_logprobs_worker
            workers.compute_prompt_logprobs(
                r.model.compute_logits,
                hidden,
                input_batch,
                r.req_states.all_token_ids.gpu,
                r.req_states.num_computed_tokens.gpu,
                r.req_states.prompt_len.np,
            )
            workers.compute_prompt_token_id_logprobs(
                r.model.compute_logits, hidden, input_batch, r.req_states.prompt_len.np
            )
        num_drafts = scheduler_output.num_spec_tokens_to_schedule
        if r.speculator is not None and num_drafts > 0:
            with self.w.batch(f"{self.where}: drafts of {what}"):
                self.sample_drafts(input_batch.num_reqs, num_drafts)

    def sample_drafts(self, num_reqs: int, num_drafts: int) -> None:
        """``TargetDependentARSpeculator._prefill`` / ``_decode``'s
        ``sample_draft`` calls: one row per request and draft step."""
        import torch

        s = self.runner.speculator
        for _ in range(num_drafts):
            hidden = torch.empty(num_reqs, 1, dtype=self.runner.dtype, device="meta")
            s.sample_draft(
                hidden,
                s.sample_src_positions[:num_reqs],
                s.idx_mapping[:num_reqs],
                s.temperature,
                s.seeds,
                s.current_draft_step,
                s.draft_logits,
            )


def _describe(input_batch: Any, scheduler_output: Any) -> str:
    new = len(scheduler_output.scheduled_new_reqs)
    drafts = input_batch.num_draft_tokens
    return f"{input_batch.num_reqs} reqs ({new} new), {drafts} drafts"


# --- start-up ---------------------------------------------------------------------------


def _dummy_sampler_run(runner: Any, w: Witnesses, num_rows: int, what: str) -> None:
    """``GPUModelRunner._dummy_sampler_run`` on hidden states of the dummy
    run's ``num_rows`` sampled rows."""
    import torch

    hidden = torch.empty(num_rows, runner.model.hidden_size, dtype=runner.dtype, device="meta")
    with w.batch(what):
        runner._dummy_sampler_run(hidden)


def _dummy_run_num_reqs(runner: Any, num_tokens: int) -> int:
    """Requests of ``GPUModelRunner._dummy_run(num_tokens)`` (not uniform
    decode, speculator present: ``model_runner.py`` ``_dummy_run``), each
    sampled once by ``_dummy_sampler_run``."""
    num_reqs = min(num_tokens, runner.max_num_reqs)
    return int(min(num_reqs, runner.max_num_tokens // runner.speculator.num_query_per_req))


def startup_keys(
    cfg: ServingConfig, runner_name: str = "v2", *, kv_blocks: int = KV_BLOCKS
) -> StartupKeys:
    """Keys V2's start-up launches in sampling and verification, in the
    worker's order (``gpu_worker.py``): ``profile_run``'s
    ``_dummy_sampler_run``; ``kernel_warmup``'s ``JitWarmupRegistry.warmup()``
    of the runner's registrations (top-k/top-p, ``load_model``);
    ``warmup_kernels`` (both passes, ``warmup.py``); with the extensible KV
    cache, ``run_kv_cache_sizing_warmup``; the final ``_dummy_run`` +
    ``_dummy_sampler_run`` before the JIT monitor starts. CUDA-graph capture
    samples nothing on the target; its drafter captures sample as the
    warmup steps' drafts do. ``kv_blocks``: the KV blocks warmup may commit
    (fewer than its requests need lowers their number)."""
    assert runner_name == "v2", "0.34.0 has Model Runner V2 only"
    config = vllm_config(cfg)
    from vllm.v1.worker.gpu.warmup import run_kv_cache_sizing_warmup, warmup_kernels

    w = Witnesses()
    with lifecycle.selected("v2"), cpu_hosted_h200(config), meta_models.one_torch_thread():
        runner = build_runner(config, kv_blocks)
        steps = Steps(runner, w, "start-up")
        sc = config.scheduler_config
        with w.recording():
            n = _dummy_run_num_reqs(runner, runner.max_num_tokens)
            _dummy_sampler_run(runner, w, n, f"profile_run: _dummy_sampler_run, {n} rows")
            with w.batch("kernel_warmup: JitWarmupRegistry.warmup()", warmup=True):
                runner.jit_warmup_registry.warmup()
            steps.where = "warmup_kernels"
            warmup_kernels(runner, steps.execute_model, steps.sample_tokens)
            if config.cache_config.enable_extensible_kv_cache:
                steps.where = "run_kv_cache_sizing_warmup"
                run_kv_cache_sizing_warmup(runner, steps.execute_model, steps.sample_tokens)
            n = _dummy_run_num_reqs(runner, min(sc.max_num_seqs, sc.max_num_batched_tokens))
            _dummy_sampler_run(runner, w, n, f"final _dummy_sampler_run, {n} rows")
    return w.startup()


# --- what serving sends ------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """A request class: its name and ``SamplingParams`` keyword arguments."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()

    def sampling_params(self) -> Any:
        from vllm import SamplingParams

        return SamplingParams(max_tokens=1 << 12, **dict(self.params))


def _req(name: str, **params: Any) -> Request:
    return Request(name, tuple(sorted(params.items())))


REQUEST_CLASSES: tuple[Request, ...] = (
    _req("greedy", temperature=0.0),
    _req("t0.7", temperature=0.7),
    _req("t1.0", temperature=1.0),
    _req("t0.7+top_k", temperature=0.7, top_k=50),
    _req("t1.0+top_p", temperature=1.0, top_p=0.95),
    _req("t0.7+top_k+top_p", temperature=0.7, top_k=40, top_p=0.9),
    _req("t0.7+min_p", temperature=0.7, min_p=0.05),
    _req("t0.7+seed", temperature=0.7, seed=1234),
    _req("t0.7+top_p+seed", temperature=0.7, top_p=0.9, seed=7),
    _req("t0.7+penalties", temperature=0.7, frequency_penalty=0.5, presence_penalty=0.3),
    _req("t0.7+logprobs", temperature=0.7, logprobs=5),
    _req("greedy+logprobs", temperature=0.0, logprobs=5),
)

# Run alone: what clients vary per request, the number of logprobs (OpenAI
# ``top_logprobs`` 0..20, ``max_logprobs`` 20 by default) and of prompt
# logprobs.
SINGLE_CLASSES: tuple[Request, ...] = tuple(
    _req(f"t0.7+logprobs={n}", temperature=0.7, logprobs=n) for n in range(21)
) + tuple(
    _req(f"greedy+prompt_logprobs={n}", temperature=0.0, prompt_logprobs=n) for n in (0, 1, 5, 20)
)


def _named(*names: str) -> tuple[Request, ...]:
    by_name = {r.name: r for r in REQUEST_CLASSES + SINGLE_CLASSES}
    return tuple(by_name[n] for n in names)


# Steps of many requests mix what a server runs: greedy beside sampled ones,
# and every logits processor.
HIGH_LOAD_MIXES: tuple[tuple[Request, ...], ...] = (
    _named("greedy", "t0.7"),
    _named("t0.7+top_k+top_p", "t0.7+min_p", "t0.7+penalties", "t1.0+top_p"),
    _named("greedy", "t0.7+seed", "t0.7+logprobs"),
)


def mixes(classes: Sequence[Request] = REQUEST_CLASSES) -> list[tuple[Request, ...]]:
    """Every class alone and every pair of classes in one step."""
    out: list[tuple[Request, ...]] = [(c,) for c in classes]
    out += [(a, b) for i, a in enumerate(classes) for b in classes[i + 1 :]]
    return out


@dataclass
class _Live:
    req_id: str
    computed: int
    blocks: int


class Server:
    """Scheduler outputs as vLLM's scheduler builds them for a sequence of
    steps, run through a fresh runner's :class:`Steps`."""

    PROMPT_LEN = 20

    def __init__(self, runner: Any, steps: Steps) -> None:
        self.runner = runner
        self.steps = steps
        self.k = runner.num_speculative_steps
        self.budget = runner.max_num_tokens
        self.block_size = runner.cache_config.block_size
        self._next_block = 1
        self._serial = 0

    def _blocks(self, tokens: int, held: int) -> tuple[list[int], int]:
        need = -(-(tokens + self.k) // self.block_size)
        new = list(range(self._next_block, self._next_block + max(0, need - held)))
        self._next_block += len(new)
        return new, max(need, held)

    def step(
        self,
        new: Sequence[Request],
        decode: Sequence[tuple[_Live, int]],
        witness: str,
        finished: Iterable[str] = (),
    ) -> list[_Live]:
        """One step: prefills of ``new`` requests, decodes of live requests
        with their number of drafts, requests ``finished`` before it. The
        prompts share what the decodes leave of the token budget (at most
        :data:`PROMPT_LEN` tokens each), as the scheduler would fit them."""
        from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput

        so = SchedulerOutput.make_empty()
        so.num_spec_tokens_to_schedule = self.k
        so.finished_req_ids = set(finished)
        started = []
        decode_tokens = sum(1 + drafts for _, drafts in decode)
        prompt_len = self.PROMPT_LEN
        if new:
            prompt_len = min(prompt_len, (self.budget - decode_tokens) // len(new))
        assert prompt_len >= 1 and len(new) + len(decode) <= self.runner.max_num_reqs, witness
        for req in new:
            self._serial += 1
            req_id = f"{req.name}-{self._serial}"
            prompt = list(range(prompt_len))
            blocks, held = self._blocks(prompt_len, 0)
            so.scheduled_new_reqs.append(
                NewRequestData(
                    req_id=req_id,
                    prompt_token_ids=prompt,
                    mm_features=[],
                    sampling_params=req.sampling_params(),
                    pooling_params=None,
                    block_ids=(blocks,),
                    num_computed_tokens=0,
                    lora_request=None,
                    prefill_token_ids=prompt,
                )
            )
            so.num_scheduled_tokens[req_id] = prompt_len
            started.append(_Live(req_id, prompt_len, held))
        cached = CachedRequestData.make_empty()
        for live, drafts in decode:
            num_tokens = 1 + drafts
            blocks, live.blocks = self._blocks(live.computed + num_tokens, live.blocks)
            cached.req_ids.append(live.req_id)
            cached.num_computed_tokens.append(live.computed)
            cached.num_output_tokens.append(1)
            cached.new_block_ids.append((blocks,) if blocks else None)
            so.num_scheduled_tokens[live.req_id] = num_tokens
            if drafts:
                so.scheduled_spec_decode_tokens[live.req_id] = [0] * drafts
            live.computed += num_tokens
        so.scheduled_cached_reqs = cached
        so.total_num_scheduled_tokens = sum(so.num_scheduled_tokens.values())
        self.steps.describe = witness
        self.steps.execute_model(so)
        self.steps.sample_tokens(None)
        self.steps.describe = None
        return started

    def finish(self, live: Iterable[_Live]) -> None:
        from vllm.v1.core.sched.output import SchedulerOutput

        so = SchedulerOutput.make_empty()
        so.finished_req_ids = {x.req_id for x in live}
        self.steps.execute_model(so)


def batch_sizes(max_num_seqs: int, *, full: bool) -> list[int]:
    """Request counts per step: every one with ``full``, else the ones whose
    Triton classes differ (1, 16-multiples and not) and the extremes."""
    if full:
        return list(range(1, max_num_seqs + 1))
    sizes = {1, 2, 3, 15, 16, 17, 31, 32, 33, max_num_seqs - 1, max_num_seqs}
    return sorted(s for s in sizes if 1 <= s <= max_num_seqs)


def _spread(mix: tuple[Request, ...], n: int) -> list[Request]:
    return [mix[i % len(mix)] for i in range(n)]


def _sweep_mix(server: Server, mix: tuple[Request, ...], n: int) -> None:
    """``n`` requests of ``mix`` (round robin): their prefill step (no
    drafts: Sampler), a verification step of all of them (k drafts each), one
    where the first has no drafts (the scheduler drops drafts it cannot fit);
    then a step of ``n`` where half verify beside new prefills."""
    k = server.k
    names = "+".join(r.name for r in mix)
    live = server.step(_spread(mix, n), [], f"prefill-only step, {n} reqs [{names}]")
    server.step([], [(x, k) for x in live], f"verify step, {n} reqs x {k} drafts [{names}]")
    if n >= 2:
        server.step(
            [],
            [(x, 0 if i == 0 else k) for i, x in enumerate(live)],
            f"verify step, {n} reqs, the first without drafts [{names}]",
        )
    server.finish(live)
    if n >= 2:
        half = server.step(_spread(mix, n // 2), [], f"prefill-only step, {n // 2} reqs [{names}]")
        more = server.step(
            _spread(mix, n - len(half)),
            [(x, k) for x in half],
            f"mixed step, {len(half)} verifying + {n - len(half)} prefilling [{names}]",
        )
        server.finish(half + more)


def _chunked(server: Server, mix: tuple[Request, ...], max_num_seqs: int) -> None:
    """High load: steps of ``max_num_seqs`` running requests whose logits
    rows exceed one verification chunk (``get_max_chunk_logits(vocab)``;
    ``_iter_request_chunks`` splits between requests). The runner orders a
    step's requests full drafts first, then fewer drafts, then those without
    (``sort_batch_req_ids``): ``q`` requests verifying ``k`` drafts, ``j``
    verifying ``k - 1`` (the scheduler trims drafts near ``max_tokens`` or
    the budget), new requests prefilling (one logits row each) in the free
    slots. ``q`` runs over windows where a chunk boundary falls among the
    prefills (the fewest full-draft requests that overflow a chunk) and
    where it falls among the verifying requests (each multiple of a chunk),
    ``j`` over 0..3: the chunks start at every row and request alignment."""
    from vllm.v1.worker.gpu.spec_decode.rejection_sampler import get_max_chunk_logits

    k = server.k
    names = "+".join(r.name for r in mix)
    rows_per_chunk = get_max_chunk_logits(server.runner.vocab_size)
    if max_num_seqs * (k + 1) <= rows_per_chunk:
        return  # one chunk holds every step
    spread_j = 4 if k >= 2 else 1
    fewer = max(1, k - 1)
    centers = [(rows_per_chunk - max_num_seqs) // k + 1]
    centers += [
        b * rows_per_chunk // (k + 1)
        for b in range(1, max_num_seqs * (k + 1) // rows_per_chunk + 1)
    ]
    for center in sorted(set(centers)):
        qs = [q for q in range(center - 4, center + 4) if 1 <= q and q + spread_j <= max_num_seqs]
        if not qs:
            continue
        num_live = max(qs) + spread_j - 1
        m = max_num_seqs - num_live
        live = server.step(_spread(mix, num_live), [], f"prefill-only step [{names}]")
        for q in qs:
            for j in range(spread_j):
                rows = q * (k + 1) + j * (fewer + 1) + m
                if rows <= rows_per_chunk or m == 0:
                    continue
                decode = [(x, k) for x in live[:q]] + [(x, fewer) for x in live[q : q + j]]
                started = server.step(
                    _spread(mix, m),
                    decode,
                    f"high-load step, {q} reqs x {k} drafts + {j} x {fewer} + {m} prefilling "
                    f"({rows} logits rows; {num_live - q - j} running not scheduled) [{names}]",
                )
                server.finish(started)
        server.finish(live)


@dataclass(frozen=True)
class Sweep:
    """Which serving steps :func:`runtime_keys` drives."""

    classes: tuple[Request, ...] = REQUEST_CLASSES  # alone and mixed in pairs
    singles: tuple[Request, ...] = SINGLE_CLASSES  # alone, a few batch sizes
    every_size: tuple[tuple[Request, ...], ...] = ()  # mixes run at every batch size
    high_load: tuple[tuple[Request, ...], ...] = HIGH_LOAD_MIXES[:1]


QUICK = Sweep(
    classes=_named("greedy", "t0.7", "t0.7+top_k+top_p"),
    singles=_named("t0.7+logprobs=0", "t0.7+logprobs=15"),
    high_load=(),
)
DEFAULT = Sweep()
FULL = Sweep(every_size=HIGH_LOAD_MIXES[:2], high_load=HIGH_LOAD_MIXES)


def runtime_keys(
    cfg: ServingConfig, runner_name: str = "v2", sweep: Sweep = DEFAULT
) -> RuntimeKeys:
    """Exact keys the V2 runner's sampling and verification launch for
    ``cfg``'s serving steps, each with the first step that produced it:
    the request classes alone and mixed in pairs, in prefill-only,
    verification and mixed steps over :func:`batch_sizes` (every size for
    ``sweep.every_size``), and high-load verification steps (chunked where
    their logits rows exceed one chunk)."""
    assert runner_name == "v2", "0.34.0 has Model Runner V2 only"
    config = vllm_config(cfg)
    w = Witnesses()
    with lifecycle.selected("v2"), cpu_hosted_h200(config), meta_models.one_torch_thread():
        runner = build_runner(config)
        server = Server(runner, Steps(runner, w, f"k={runner.num_speculative_steps}"))
        with w.recording():
            for mix in mixes(sweep.classes):
                for n in batch_sizes(cfg.max_num_seqs, full=False):
                    _sweep_mix(server, mix, n)
            for req in sweep.singles:
                for n in (1, 17):
                    _sweep_mix(server, (req,), min(n, cfg.max_num_seqs))
            for mix in sweep.every_size:
                for n in batch_sizes(cfg.max_num_seqs, full=True):
                    _sweep_mix(server, mix, n)
            for mix in sweep.high_load:
                _chunked(server, mix, cfg.max_num_seqs)
    return w.keys


# --- report -------------------------------------------------------------------------------


def missing(runtime: RuntimeKeys, startup: StartupKeys) -> dict[str, dict[Key, str]]:
    """Runtime keys start-up does not compile, with their witnesses."""
    out: dict[str, dict[Key, str]] = {}
    for kernel, found in runtime.items():
        warmed = startup.get(kernel, set())
        gap = {key: w for key, w in found.items() if key not in warmed}
        if gap:
            out[kernel] = gap
    return out


def explain(kernel: str, key: Key, against: Iterable[Key]) -> str:
    """How ``key`` differs from the closest of ``against`` (the start-up
    keys), parameter by parameter (``name: runtime vs start-up``)."""
    from dsv4warmup.triton_keys import param_names

    names = param_names(kernel)
    spec, options = key
    best: list[str] | None = None
    for other in against:
        other_spec, other_options = other
        diff = [
            f"{name}: {_spec_text(a)} (start-up {_spec_text(b)})"
            for name, a, b in zip(names, spec, other_spec, strict=True)
            if a != b
        ]
        diff += [
            f"{a[0]}={a[1]} (start-up {b[1]})"
            for a, b in zip(options, other_options, strict=True)
            if a != b
        ]
        if best is None or len(diff) < len(best):
            best = diff
    if best is None:
        return "no start-up key"
    return "; ".join(best)


def _spec_text(entry: Any) -> str:
    return " ".join(str(x) for x in entry if x not in ("", None)) or repr(entry)


def report(
    cfg: ServingConfig, sweep: Sweep = DEFAULT, kv_blocks: int = KV_BLOCKS
) -> dict[str, Any]:
    """Per kernel: runtime keys, start-up keys, missing ones (each with one
    witness and how it differs from the closest start-up key); keys as
    ``repr`` strings (JSON)."""
    runtime = runtime_keys(cfg, sweep=sweep)
    startup = startup_keys(cfg, kv_blocks=kv_blocks)
    gap = missing(runtime, startup)
    from dsv4warmup.triton_keys import param_names

    rows = {}
    for kernel in sorted(set(runtime) | set(startup)):
        warmed = startup.get(kernel, set())
        rows[kernel] = {
            "params": list(param_names(kernel)),
            "runtime": {repr(k): w for k, w in runtime.get(kernel, {}).items()},
            "startup": sorted(repr(k) for k in warmed),
            "missing": {
                repr(k): {"witness": w, "differs": explain(kernel, k, warmed)}
                for k, w in gap.get(kernel, {}).items()
            },
        }
    return {"cfg": dataclasses.asdict(cfg), "kernels": rows}


def print_report(result: dict[str, Any]) -> None:
    cfg = result["cfg"]
    print(
        f"k={cfg['num_speculative_tokens']} max_num_seqs={cfg['max_num_seqs']} "
        f"max_num_batched_tokens={cfg['max_num_batched_tokens']} "
        f"hidden={cfg['hidden_size']} vocab={cfg['vocab_size']}"
    )
    print(f"{'kernel':42} {'runtime':>7} {'start-up':>8} {'missing':>7}")
    for kernel, row in result["kernels"].items():
        print(
            f"{kernel:42} {len(row['runtime']):>7} {len(row['startup']):>8} "
            f"{len(row['missing']):>7}"
        )
    for kernel, row in result["kernels"].items():
        for miss in row["missing"].values():
            print(f"  missing {kernel}: {miss['witness']}\n      {miss['differs']}")


def _main(argv: Sequence[str] | None = None) -> None:  # pragma: no cover - CLI
    import json
    import time

    parser = argparse.ArgumentParser(prog="python -m dsv4warmup.registry.sampling")
    parser.add_argument("model", choices=("flash", "pro"))
    parser.add_argument("--k", default="1", help="speculative tokens, comma-separated")
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument(
        "--kv-blocks", type=int, default=KV_BLOCKS, help="KV blocks start-up warmup may commit"
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="3 request classes, no high load")
    size.add_argument("--full", action="store_true", help="also every batch size, more mixes")
    parser.add_argument("--json", action="store_true", help="one JSON line per k, last")
    args = parser.parse_args(argv)
    base = FLASH if args.model == "flash" else PRO
    if args.max_num_seqs is not None:
        base = base.replace(max_num_seqs=args.max_num_seqs)
    results = []
    for k in (int(x) for x in args.k.split(",")):
        t = time.time()
        sweep = QUICK if args.quick else FULL if args.full else DEFAULT
        result = report(base.replace(num_speculative_tokens=k), sweep, args.kv_blocks)
        result["seconds"] = round(time.time() - t, 1)
        results.append(result)
        if not args.json:
            print_report(result)
            print(f"({result['seconds']} s)\n")
    if args.json:
        sys.stdout.write("\n" + json.dumps(results) + "\n")


if __name__ == "__main__":  # pragma: no cover
    _main()
