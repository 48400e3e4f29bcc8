"""Speculative-decoding kernels of registry-era vLLM (0.33.0, 0.34.0) for DeepSeek V4 + MTP:
call sites and registration.

Four Triton kernels:

* ``eagle_prepare_next_token_padded_kernel``, ``eagle_prepare_inputs_padded_kernel``
  and ``eagle_step_slot_mapping_metadata_kernel`` (``vllm/v1/spec_decode/utils.py``,
  0.33.0 only: 0.34.0 removed the V1 runner and that module with it, so a tree
  without them has no such rows, :func:`present_kernels`),
  launched by the V1 runner's ``EagleProposer`` (``SpecDecodeBaseProposer``):
  ``prepare_next_token_ids_padded`` / ``prepare_inputs_padded`` every step of
  the padded drafter batch (the default), the step kernel once per extra draft
  token (k > 1) through ``_update_positions_dependent_metadata``. Model Runner
  V2 (the default for DeepSeek V4 + MTP) drafts with its own speculators
  (``vllm/v1/worker/gpu/spec_decode``), which never call them:
  :func:`v2_calls_eagle_helpers` checks that on the tree's source.
* ``MTPSharedHeadRMSNormKernel.kernel``
  (``vllm/models/deepseek_v4/common/ops/fused_mtp_input_rmsnorm.py``), from
  ``DeepSeekV4MultiTokenPredictor.compute_logits`` (NVIDIA) for every draft
  token, in both runners.

:func:`runtime_keys` drives that code -- a real ``EagleProposer`` and the
real MTP draft model, built on the meta device for the tree's own
``VllmConfig``; the drafter's block table as the V1 runner builds it for the
KV-cache group the engine core assigns the MTP layer -- over every batch the
scheduler can form for a configuration, and records the exact Triton key of
every launch. :func:`register` builds the objects whose construction
registers these kernels' warmup, each in the runner step that builds it.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

from dsv4warmup import triton_keys
from dsv4warmup.serving import ServingConfig

from . import engine, lifecycle, meta_models

STEP_KERNEL = "eagle_step_slot_mapping_metadata_kernel"
PREPARE_INPUTS_KERNEL = "eagle_prepare_inputs_padded_kernel"
NEXT_TOKEN_KERNEL = "eagle_prepare_next_token_padded_kernel"
MTP_NORM_KERNEL = "MTPSharedHeadRMSNormKernel.kernel"
KERNELS: tuple[str, ...] = (STEP_KERNEL, PREPARE_INPUTS_KERNEL, NEXT_TOKEN_KERNEL, MTP_NORM_KERNEL)
EAGLE_HELPERS = (STEP_KERNEL, PREPARE_INPUTS_KERNEL, NEXT_TOKEN_KERNEL)
# Where the EAGLE helpers live (with the V1 proposer that launches them).
EAGLE_HELPERS_MODULE = "vllm.v1.spec_decode.utils"

Key = tuple[Any, ...]


def present_kernels() -> tuple[str, ...]:
    """:data:`KERNELS` the importable tree defines: the EAGLE helpers only
    where the tree has their module."""
    import importlib.util

    if importlib.util.find_spec(EAGLE_HELPERS_MODULE) is None:
        return tuple(k for k in KERNELS if k not in EAGLE_HELPERS)
    return KERNELS


# --- configuration -------------------------------------------------------------


def _check_runner(config: Any, runner: str) -> None:
    assert lifecycle.configured_runner(config) == runner, runner


def vllm_config(cfg: ServingConfig, runner: str) -> Any:
    """The tree's ``VllmConfig`` for ``cfg`` served by ``runner``."""
    with lifecycle.selected(runner):
        config = engine.vllm_config(cfg)
        _check_runner(config, runner)
    return config


def v2_draft_vllm_config(config: Any) -> Any:
    """What V2's ``load_eagle_model`` builds the draft model with."""
    return config.speculative_config.apply_draft_overrides(config)


# --- Model Runner V2 never calls the EAGLE helpers ------------------------------


def v2_calls_eagle_helpers(tree: Path | None = None) -> list[str]:
    """Modules of Model Runner V2 (``vllm/v1/worker/gpu``) that import or
    name one of the EAGLE helpers of ``vllm/v1/spec_decode/utils.py`` or the
    V1 proposer that launches them. Empty on 0.33.0: V2's speculators have
    their own input-preparation kernels."""
    import vllm

    root = Path(vllm.__file__).parent if tree is None else tree / "vllm"
    names = {
        "_eagle_step_slot_mapping_metadata",
        "_eagle_prepare_inputs_padded",
        "_eagle_prepare_next_token_padded",
        "eagle_step_update_slot_mapping_and_metadata",
        "eagle_step_slot_mapping_metadata_kernel",
        "eagle_prepare_inputs_padded_kernel",
        "eagle_prepare_next_token_padded_kernel",
        "llm_base_proposer",
        "SpecDecodeBaseProposer",
        "EagleProposer",
    }
    hits = []
    for path in sorted((root / "v1" / "worker" / "gpu").rglob("*.py")):
        tree_ = ast.parse(path.read_text())
        used = {n.id for n in ast.walk(tree_) if isinstance(n, ast.Name)}
        used |= {n.attr for n in ast.walk(tree_) if isinstance(n, ast.Attribute)}
        for node in ast.walk(tree_):
            if isinstance(node, ast.ImportFrom):
                used |= {a.name for a in node.names} | set((node.module or "").split("."))
            elif isinstance(node, ast.Import):
                used |= {p for a in node.names for p in a.name.split(".")}
        if used & names:
            hits.append(str(path.relative_to(root.parent)))
    return hits


# --- models and the drafter's KV-cache group -----------------------------------


@dataclass
class _Built:
    config: Any
    draft_model: Any
    draft_layer_names: set[str]
    groups: list[Any] | None = None


def _build_models(config: Any, runner: str, with_target: bool) -> _Built:
    """The MTP draft model as ``runner`` builds it (after the target, whose
    layers the KV-cache grouping needs, when ``with_target``). Its layers
    stay in ``config``'s forward context, as in the runner."""
    target_names: set[str] = set()
    if with_target:
        meta_models.create_model(config)
        target_names = meta_models.attention_layer_names(config)
    spec = config.speculative_config
    if runner == "v2":
        draft_config = v2_draft_vllm_config(config)
    else:
        from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

        draft_config = SpecDecodeBaseProposer._create_draft_vllm_config(  # type: ignore[arg-type]
            SimpleNamespace(speculative_config=spec, vllm_config=config)
        )
    model = meta_models.create_model(draft_config, spec.draft_model_config)
    # As the drafters' load_model do, once the target's layers are known.
    draft_names = meta_models.mark_draft_layers(config, target_names) if with_target else set()
    return _Built(config, model, draft_names)


# --- the MTP shared-head norm ------------------------------------------------------


def _mtp_compute_logits(built: _Built, num_tokens: int) -> None:
    """``DeepSeekV4MTP.compute_logits`` as the speculators call it on the
    sampled rows (``(num_tokens, hc_mult * hidden)``, the pre-hc_head
    residual): hc_head runs as the tree's own fake implementation (same
    output: a fresh bf16 ``(num_tokens, hidden)``), the LM head after the
    norm is skipped."""
    import torch
    from vllm.model_executor.kernels.mhc import tilelang as mhc_tilelang
    from vllm.models.deepseek_v4.nvidia import mtp as mtp_mod

    model = built.draft_model
    predictor = model.model
    layer = next(iter(predictor.layers.values()))
    dtype = built.config.speculative_config.draft_model_config.dtype
    hidden = torch.empty(num_tokens, layer.hc_dim, dtype=dtype, device="meta")
    with (
        mock.patch.object(
            mtp_mod,
            "hc_head_fused_kernel_tilelang",
            mhc_tilelang._hc_head_fused_kernel_tilelang_fake,
        ),
        mock.patch.object(predictor.logits_processor, "forward", lambda _head, hs, *_: hs),
    ):
        model.compute_logits(hidden)


def _mtp_norm_sweep(
    built: _Built, cfg: ServingConfig, runner: str, w: triton_keys.Witnesses[str]
) -> None:
    """Rows per call: one per request (every draft step of both runners
    samples one token per request; V2's prefill step gathers the last token
    of each request). The row count only sets the grid."""
    k = cfg.num_speculative_tokens
    for num_reqs in _request_counts(cfg.max_num_seqs):
        with w.batch(f"{runner}: draft step, {num_reqs} reqs sampled, k={k}"):
            _mtp_compute_logits(built, num_reqs)


def _request_counts(max_num_seqs: int) -> list[int]:
    return list(range(1, max_num_seqs + 1))


# --- the EAGLE helpers (V1 runner) ---------------------------------------------------


def make_proposer(config: Any) -> Any:
    """``EagleProposer`` as ``GPUModelRunner.__init__`` builds it (MTP is an
    EAGLE-style method: ``use_eagle()``), on the meta device."""
    import torch
    from vllm.v1.spec_decode.eagle import EagleProposer

    assert config.speculative_config.use_eagle()
    with meta_models.cpu_stand_ins(config):
        return EagleProposer(config, torch.device("meta"), runner=None)


@dataclass
class _DrafterGeometry:
    kv_cache_gid: int
    block_table: Any  # the runner's BlockTable of the drafter's group


def _drafter_geometry(built: _Built, proposer: Any) -> _DrafterGeometry:
    """The engine core's KV-cache groups; the proposer's attention backend
    initialised on them (``initialize_attn_backend``: its group and block
    size); the V1 runner's block tables (``may_reinitialize_input_batch``)."""
    import torch
    from vllm.v1.worker import gpu_model_runner as runner_mod
    from vllm.v1.worker.block_table import MultiGroupBlockTable

    config = built.config
    groups = meta_models.kv_cache_groups(config)
    built.groups = groups
    kv_cache_config = SimpleNamespace(kv_cache_groups=groups)
    layers = meta_models.attention_layer_names(config)
    proposer._draft_attn_layer_names = {
        name
        for name in built.draft_layer_names
        if name in layers and any(name in g.layer_names for g in groups)
    }
    with meta_models.cpu_stand_ins(config):
        proposer.initialize_attn_backend(kv_cache_config)  # type: ignore[arg-type]

    captured: dict[str, Any] = {}

    def input_batch(**kwargs: Any) -> Any:
        # GPUInputBatch builds its block tables from these arguments.
        captured["tables"] = MultiGroupBlockTable(
            max_num_reqs=kwargs["max_num_reqs"],
            max_num_batched_tokens=kwargs["max_num_batched_tokens"],
            pin_memory=False,
            device=kwargs["device"],
            block_sizes=kwargs["block_sizes"],
            max_num_blocks=kwargs["max_num_blocks_per_req"],
            cp_kv_cache_interleave_size=kwargs["cp_kv_cache_interleave_size"],
            slot_mapping_modes=kwargs["slot_mapping_modes"],
        )
        return SimpleNamespace(block_table=captured["tables"])

    from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry

    sc = config.scheduler_config
    runner = SimpleNamespace(
        vllm_config=config,
        model_config=config.model_config,
        cache_config=config.cache_config,
        parallel_config=config.parallel_config,
        max_model_len=config.model_config.max_model_len,
        max_encoder_len=0,  # decoder-only (GPUModelRunner.__init__)
        max_num_reqs=sc.max_num_seqs,
        max_num_tokens=sc.max_num_batched_tokens,
        device=torch.device("meta"),
        num_spec_tokens=config.speculative_config.num_speculative_tokens,
        is_pooling_model=False,
        input_batch=SimpleNamespace(logitsprocs=None, logitsprocs_need_output_token_ids=False),
        cp_kv_cache_interleave_size=config.parallel_config.cp_kv_cache_interleave_size,
        _init_block_sizes=[],
        _init_max_num_blocks=[],
        _init_slot_mapping_modes=[],
        # Registrations made here belong to the "input_batch" step of other
        # kernels; this registry only absorbs them.
        jit_warmup_registry=JitWarmupRegistry(config),
    )
    with mock.patch.object(runner_mod, "InputBatch", input_batch):
        runner_mod.GPUModelRunner.may_reinitialize_input_batch(runner, kv_cache_config)  # type: ignore[arg-type]
    return _DrafterGeometry(proposer.kv_cache_gid, captured["tables"][proposer.kv_cache_gid])


class _V1Drafter:
    """The V1 runner's per-step inputs of the drafter, on the meta device:
    persistent buffers as ``GPUModelRunner`` keeps them, the drafter group's
    common attention metadata as ``_build_attention_metadata`` gives it
    (``unpadded`` to the real requests)."""

    def __init__(self, cfg: ServingConfig, built: _Built, proposer: Any, geo: _DrafterGeometry):
        import torch
        from vllm.v1.utils import CpuGpuBuffer

        self.cfg = cfg
        self.config = built.config
        self.p = proposer
        self.geo = geo
        n = self.config.scheduler_config.max_num_seqs
        self.n = n
        meta = torch.device("meta")
        self.query_start_loc = CpuGpuBuffer(n + 1, dtype=torch.int32, device=meta, pin_memory=False)
        self.seq_lens = torch.zeros(n, dtype=torch.int32, device=meta)
        self.discard_request_mask = CpuGpuBuffer(n, dtype=torch.bool, device=meta, pin_memory=False)
        self.vocab_size = self.config.model_config.get_vocab_size()
        proposer.initialize_cudagraph_keys(self.config.compilation_config.cudagraph_mode)

    def requests(self, r: int) -> tuple[Any, Any]:
        import numpy as np

        req_ids = [f"req-{i}" for i in range(r)]
        requests = {rid: SimpleNamespace(get_token_id=lambda _pos: 7) for rid in req_ids}
        batch = SimpleNamespace(
            req_ids=req_ids,
            num_reqs=r,
            vocab_size=self.vocab_size,
            num_tokens_no_spec=np.full(r, 2, dtype=np.int32),
        )
        return requests, batch

    def sampled_token_ids(self, r: int, width: int) -> Any:
        """``Sampler``: ``sampled.to(int32).unsqueeze(-1)`` (width 1);
        ``rejection_sample``: ``torch.full((r, max_spec_len + 1), -1)``."""
        import torch

        if width == 1:
            return torch.empty(r, dtype=torch.int64, device="meta").to(torch.int32).unsqueeze(-1)
        return torch.full((r, width), -1, dtype=torch.int32, device="meta")

    def common_attn_metadata(self, query_lens: list[int], seq_lens: list[int]) -> Any:
        import numpy as np
        import torch
        from vllm.v1.attention.backend import CommonAttentionMetadata

        r = len(query_lens)
        qsl = self.query_start_loc
        qsl.np[0] = 0
        np.cumsum(query_lens, out=qsl.np[1 : r + 1])
        num_tokens = int(qsl.np[r])
        seq_cpu = torch.tensor(seq_lens, dtype=torch.int32)
        table = self.geo.block_table.get_device_tensor(r)
        return CommonAttentionMetadata(
            query_start_loc=qsl.gpu[: r + 1],
            query_start_loc_cpu=qsl.cpu[: r + 1].clone(),
            seq_lens=self.seq_lens[:r],
            seq_lens_cpu_upper_bound=seq_cpu,
            num_reqs=r,
            num_actual_tokens=num_tokens,
            max_query_len=max(query_lens),
            max_seq_len=max(seq_lens),
            block_table_tensor=table,
            slot_mapping=self.geo.block_table.slot_mapping.gpu[:num_tokens],
            causal=True,
        )


@dataclass(frozen=True)
class Batch:
    """One engine step as the drafter sees it."""

    num_reqs: int
    # Sampled-token width: 1 if no request carried drafts, else 1 + the
    # longest draft of the step.
    width: int
    # False: --speculative-config disable_padded_drafter_batch=true.
    padded: bool

    def describe(self, k: int) -> str:
        kind = "padded" if self.padded else "unpadded"
        drafts = "no drafts" if self.width == 1 else f"drafts up to {self.width - 1}"
        return f"v1 {kind} drafter batch: {self.num_reqs} reqs, {drafts}, k={k}"


def batches(cfg: ServingConfig) -> Iterator[Batch]:
    """Every request count, every sampled-token width, both drafter-batch
    modes."""
    k = cfg.num_speculative_tokens
    for padded in (True, False):
        for r in _request_counts(cfg.max_num_seqs):
            for width in range(1, k + 2):
                yield Batch(r, width, padded)


def _drive_v1_batch(d: _V1Drafter, b: Batch, k: int) -> None:
    """``GPUModelRunner.propose_draft_token_ids`` (EAGLE branch) and
    ``SpecDecodeBaseProposer.propose`` up to the draft loop's metadata
    updates; the model forwards are left out (they launch none of these)."""
    import torch
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    p, r = d.p, b.num_reqs
    # Request 0 carries the longest draft; the others vary.
    num_draft = [b.width - 1 if i == 0 else (i % b.width) for i in range(r)]
    query_lens = [n + 1 for n in num_draft]
    seq_lens = [d.config.model_config.max_model_len] * r
    cm = d.common_attn_metadata(query_lens, seq_lens)
    spec_md = None
    if b.width > 1:
        spec_md = SpecDecodeMetadata.make_dummy(
            [[1] * n for n in num_draft], device=torch.device("meta")
        )
    num_rejected = None
    if b.padded:
        requests, batch = d.requests(r)
        _, valid = p.prepare_next_token_ids_padded(
            d.sampled_token_ids(r, b.width), requests, batch, d.discard_request_mask.gpu
        )
        if spec_md is not None:
            cm, token_indices, num_rejected = p.prepare_inputs_padded(cm, spec_md, valid)
        else:
            token_indices = cm.query_start_loc[1:] - 1
    else:
        if spec_md is not None:
            sampled = [[1] * (1 + (n > 0)) for n in num_draft]
            cm, _ = p.prepare_inputs(cm, sampled, num_draft)
        token_indices = cm.query_start_loc[1:] - 1
    if k < 2:
        return
    positions = (
        p.positions[token_indices] if not p.uses_mrope else p.mrope_positions[:, token_indices]
    )
    _, input_batch_size, _ = p._determine_batch_execution_and_padding(r)
    cm.num_actual_tokens = r
    cm.max_query_len = 1
    cm.query_start_loc = p.arange[: r + 1]
    if num_rejected is not None:
        cm.seq_lens -= num_rejected
    for _ in range(k - 1):
        positions = p._update_positions_dependent_metadata(
            positions, cm, r, input_batch_size, p.block_size
        )


def _eagle_sweep(cfg: ServingConfig, built: _Built, w: triton_keys.Witnesses[str]) -> None:
    config = built.config
    proposer = make_proposer(config)
    geo = _drafter_geometry(built, proposer)
    d = _V1Drafter(cfg, built, proposer, geo)
    k = config.speculative_config.num_speculative_tokens
    table = geo.block_table.get_device_tensor(1)
    where = f", drafter block size {proposer.block_size}, block table {tuple(table.shape)[1]} cols"
    with meta_models.cpu_stand_ins(config):
        for b in batches(cfg):
            with w.batch(b.describe(k) + where):
                _drive_v1_batch(d, b, k)


# --- the contract ----------------------------------------------------------------------


def runtime_keys(cfg: ServingConfig, runner: str) -> dict[str, dict[Key, str]]:
    """Every key the real call sites of ``runner`` launch for ``cfg``'s
    batches, each with the first batch that produced it."""
    w = triton_keys.Witnesses[str](KERNELS)
    if not cfg.uses_mtp:
        return w.keys
    with meta_models.one_torch_thread(), lifecycle.selected(runner):
        config = engine.vllm_config(cfg)
        _check_runner(config, runner)
        built = _build_models(config, runner, with_target=runner == "v1")
        with w.recording():
            _mtp_norm_sweep(built, cfg, runner, w)
            if runner == "v1":
                _eagle_sweep(cfg, built, w)
        if runner == "v2":
            hits = v2_calls_eagle_helpers()
            assert not hits, f"Model Runner V2 calls the EAGLE helpers: {hits}"
    return w.keys


def _lifecycle_step(name: str) -> Any:
    return lifecycle.step(name)


@contextlib.contextmanager
def _forward_context_restored(vllm_config: Any) -> Iterator[None]:
    """Drop the layers built inside from ``vllm_config``'s forward context:
    ``register`` may build the draft model once per runner on one config."""
    context = vllm_config.compilation_config.static_forward_context
    before = set(context)
    try:
        yield
    finally:
        for name in set(context) - before:
            del context[name]


def register(vllm_config: Any, runner: str) -> None:
    """Build, with the real classes, what registers these kernels' warmup,
    in the step of ``runner``'s start-up that builds it:

    * V1: ``EagleProposer`` in ``GPUModelRunner.__init__`` ("runner_init");
    * both: the MTP draft model in the drafter's / speculator's
      ``load_model`` ("drafter_model").
    """
    with lifecycle.selected(runner):
        _check_runner(vllm_config, runner)
        if vllm_config.speculative_config is None:
            return
        if runner == "v1" and vllm_config.speculative_config.use_eagle():
            with _lifecycle_step("runner_init"):
                make_proposer(vllm_config)
        with _lifecycle_step("drafter_model"), _forward_context_restored(vllm_config):
            _build_models(vllm_config, runner, with_target=False)


__all__ = ["KERNELS", "register", "runtime_keys"]


# --- the call sites on a device, with data (GPU tests, interpreter) -------------


def drafter_geometry(cfg: ServingConfig) -> tuple[int, int]:
    """(block size, block-table columns) of the V1 drafter's KV-cache group
    for ``cfg``, as :func:`runtime_keys` finds them (meta-device models)."""
    with lifecycle.selected("v1"):
        config = engine.vllm_config(cfg)
        built = _build_models(config, "v1", with_target=True)
        proposer = make_proposer(config)
        geo = _drafter_geometry(built, proposer)
        return proposer.block_size, int(geo.block_table.get_device_tensor(1).shape[1])


class _DeviceEngine:
    """The V1 runner's buffers for the drafter on ``device`` (the layout of
    ``dsv4warmup.legacy.spec_decode._Engine``, 0.33.0's block table)."""

    def __init__(self, cfg: ServingConfig, device: Any, padded: bool) -> None:
        import numpy as np
        import torch
        from vllm.v1.utils import CpuGpuBuffer
        from vllm.v1.worker.block_table import BlockTable

        from dsv4warmup.legacy import spec_decode as cs

        self.cfg = cfg
        self.device = torch.device(device)
        self.padded = padded
        block_size, width = drafter_geometry(cfg)
        n = cfg.max_num_seqs
        self.block_table = BlockTable(
            block_size, n, width, cfg.max_num_batched_tokens, False, self.device, 1
        )
        # Distinct block ids per request; only the kernels' outputs read them.
        table = self.block_table.block_table
        table.np[:] = 1 + np.arange(n * width, dtype=np.int32).reshape(n, width)
        table.copy_to_gpu(n)
        self.query_start_loc = CpuGpuBuffer(
            n + 1, dtype=torch.int32, device=self.device, pin_memory=False
        )
        self.seq_lens = torch.zeros(n, dtype=torch.int32, device=self.device)
        self.optimistic_seq_lens_cpu = torch.zeros(n, dtype=torch.int32)
        self.discard_request_mask = CpuGpuBuffer(
            n, dtype=torch.bool, device=self.device, pin_memory=False
        )
        self.proposer = cs._make_proposer(cfg, self.device, mrope=False)
        self.proposer.block_size = block_size

    @property
    def k(self) -> int:
        return self.cfg.num_speculative_tokens


def _common_attn_metadata(eng: _DeviceEngine, data: Any, step: Any) -> Any:
    """``GPUModelRunner._build_attention_metadata`` for the drafter's group,
    padded to the target's graph size, then ``unpadded``."""
    import numpy as np
    import torch
    from vllm.v1.attention.backend import CommonAttentionMetadata

    from dsv4warmup.legacy import spec_decode as cs

    r = step.num_reqs
    uniform = all(q == step.num_sampled for q in data.query_lens)
    r_pad = r
    if uniform and eng.padded:
        size = cs.cudagraph_size(eng.cfg, r * step.num_sampled)
        if size is not None:
            r_pad = min(size // step.num_sampled, eng.cfg.max_num_seqs)
    qsl = eng.query_start_loc
    qsl.np[0] = 0
    np.cumsum(data.query_lens, out=qsl.np[1 : r + 1])
    qsl.np[r + 1 : r_pad + 1] = qsl.np[r]
    qsl.copy_to_gpu(r_pad + 1)
    num_tokens = int(qsl.np[r])
    eng.optimistic_seq_lens_cpu[:r] = torch.tensor(data.seq_lens, dtype=torch.int32)
    eng.optimistic_seq_lens_cpu[r:r_pad] = 0
    eng.seq_lens[:r_pad].copy_(eng.optimistic_seq_lens_cpu[:r_pad])
    bt = eng.block_table
    seq_lens_cpu = eng.optimistic_seq_lens_cpu[:r_pad].clone()
    cm = CommonAttentionMetadata(
        query_start_loc=qsl.gpu[: r_pad + 1],
        query_start_loc_cpu=qsl.cpu[: r_pad + 1].clone(),
        seq_lens=eng.seq_lens[:r_pad],
        seq_lens_cpu_upper_bound=seq_lens_cpu,
        num_reqs=r_pad,
        num_actual_tokens=num_tokens,
        max_query_len=max(data.query_lens),
        max_seq_len=max(data.seq_lens),
        block_table_tensor=bt.get_device_tensor(r_pad),
        slot_mapping=bt.slot_mapping.gpu[:num_tokens],
        causal=True,
    )
    return cm.unpadded(num_tokens, r) if r_pad != r else cm


def run_call_sites(
    cfg: ServingConfig,
    *,
    device: Any,
    check: Any,
    padded: bool = True,
    batch_sizes: list[int] | None = None,
    eagle: bool = True,
) -> int:
    """The V1 drafter's helper call sites and the MTP ``compute_logits`` on
    ``device`` with data, every launch's outputs passed to ``check(kernel,
    io)`` (names and torch references of ``dsv4warmup.legacy.spec_decode``):
    every request count and sampled-token width, discarded requests, nothing
    or everything accepted, prefill chunks, positions at ``max_model_len``,
    CUDA-graph padding. ``eagle=False``: Model Runner V2, which launches only
    the MTP norm of these (and needs no V1 module: 0.34.0 has none). Returns
    the number of steps."""
    import torch

    from dsv4warmup.legacy import spec_decode as cs

    count = 0
    with contextlib.ExitStack() as stack:
        if str(device) == "cpu":
            # No page-locked host memory without an accelerator.
            modules = ["vllm.v1.utils", "vllm.utils.torch_utils"]
            if eagle:
                modules.append("vllm.v1.spec_decode.llm_base_proposer")
            for module in modules:
                stack.enter_context(mock.patch(f"{module}.PIN_MEMORY", False))
        eng: Any = SimpleNamespace(cfg=cfg, device=torch.device(device))  # what the MTP norm reads
        if eagle:
            stack.enter_context(
                mock.patch.object(cs, "_common_attn_metadata", _common_attn_metadata)
            )
            eng = _DeviceEngine(cfg, device, padded)
            for seed, step in enumerate(cs.steps(cfg, batch_sizes)):
                cs._run_step(eng, step, seed, check)
                count += 1
        k, n = cfg.num_speculative_tokens, cfg.max_num_seqs
        for num_tokens in sorted({1, 2, 3, 16, 17, 33, n, n * k}):
            cs._mtp_compute_logits(eng, num_tokens, check)
            count += 1
    return count


def warm_registry(vllm_config: Any, runner: str) -> Any:
    """A real ``JitWarmupRegistry`` of what ``runner``'s start-up registers of
    these kernels (:func:`register` in the lifecycle's steps); call its
    ``warmup()``."""
    return lifecycle.warm_registry(vllm_config, runner, _register_own_kernels)


# --- test entry points (run in the interpreter that imports a tree) -------------


def report(sweep: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration (``ServingConfig`` changes; ``"model": "pro"`` picks
    PRO) and runner: the runtime keys with their witnesses, the keys the
    start-up lifecycle warms (:func:`lifecycle.warmed_keys`), the active
    steps. Keys as ``repr`` strings."""
    from dsv4warmup.serving import FLASH, PRO

    out = []
    for item in sweep:
        changes = dict(item)
        cfg = (PRO if changes.pop("model", "flash") == "pro" else FLASH).replace(**changes)
        config = engine.vllm_config(cfg)
        runners = {}
        kernels = present_kernels()
        for runner in lifecycle.available_runners():
            runtime = runtime_keys(cfg, runner)
            run = lifecycle.warmed_keys(config, runner, [_register_own_kernels])
            runners[runner] = {
                "runtime": {k: {repr(key): w for key, w in runtime[k].items()} for k in kernels},
                "warmed": {k: sorted(repr(key) for key in run.keys.get(k, ())) for k in kernels},
                "active": sorted(run.active),
            }
        out.append({"cfg": item, "runners": runners})
    return out


def owns(kernel: Any) -> bool:
    """Whether a registered warmup owner launches one of :data:`KERNELS`."""
    from dsv4warmup.triton_keys import kernel_name

    triton_kernel = getattr(kernel, "kernel", None)
    return triton_kernel is not None and kernel_name(triton_kernel) in KERNELS


def _register_own_kernels(vllm_config: Any, runner: str) -> None:
    """:func:`register`, passing on only this group's registrations (the
    draft model also registers other groups' kernels, which need their own
    CPU stand-ins to warm)."""
    from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry

    record = JitWarmupRegistry.__dict__["register"].__func__

    def register_own(cls: Any, kernel: Any, *args: Any, **kwargs: Any) -> None:
        if owns(kernel):
            record(cls, kernel, *args, **kwargs)

    with mock.patch.object(JitWarmupRegistry, "register", classmethod(register_own)):
        register(vllm_config, runner)


@dataclass(frozen=True)
class StepCase:
    """One launch of ``eagle_step_update_slot_mapping_and_metadata``."""

    block_size: int
    max_model_len: int
    n_blocks_per_req: int  # block-table width (columns)
    positions: tuple[int, ...]
    seq_lens: tuple[int, ...]
    input_batch_size: int


def ref_step(case: StepCase, block_table: Any) -> dict[str, list[int]]:
    """Torch reference of the step kernel's outputs."""
    import torch

    positions = torch.tensor(case.positions, dtype=torch.int64)
    seq_lens = torch.tensor(case.seq_lens, dtype=torch.int32)
    new = positions + 1
    exceeds = new >= case.max_model_len
    clamped = torch.where(exceeds, torch.zeros_like(new), new)
    blk = (clamped // case.block_size).clamp(max=case.n_blocks_per_req - 1)
    ids = block_table[torch.arange(len(case.positions)), blk].long()
    slot = ids * case.block_size + clamped % case.block_size
    slot = torch.where(exceeds, torch.full_like(slot, -1), slot)
    pad = [-1] * (case.input_batch_size - len(case.positions))
    new_seq = torch.where(exceeds, torch.ones_like(seq_lens), seq_lens + 1)
    new_seq = new_seq.clamp(max=case.max_model_len)
    return {
        "positions": clamped.tolist(),
        "slot_mapping": slot.tolist() + pad,
        "seq_lens": new_seq.tolist(),
    }


def _block_table(case: StepCase) -> Any:
    import torch

    rows = len(case.positions)
    ids = 1 + torch.arange(rows * case.n_blocks_per_req, dtype=torch.int32)
    return (ids * 7 % 100003).view(rows, case.n_blocks_per_req)


def interpret_step(cases: list[StepCase]) -> list[dict[str, Any]]:
    """Run the tree's step kernel through its real wrapper on CPU tensors
    (``TRITON_INTERPRET=1`` must be set before Triton is imported); the
    outputs, and the reference's, per case."""
    import os

    import torch

    assert os.environ.get("TRITON_INTERPRET") == "1"
    from vllm.v1.spec_decode.utils import eagle_step_update_slot_mapping_and_metadata

    out = []
    for case in cases:
        table = _block_table(case)
        b = len(case.positions)
        positions = torch.tensor(case.positions, dtype=torch.int64)
        seq_lens = torch.tensor(case.seq_lens, dtype=torch.int32)
        out_positions = torch.full((b,), -7, dtype=torch.int64)
        out_slots = torch.full((case.input_batch_size,), -7, dtype=torch.int64)
        eagle_step_update_slot_mapping_and_metadata(
            positions_1d=positions,
            block_table_tensor=table,
            seq_lens=seq_lens,
            block_size=case.block_size,
            max_model_len=case.max_model_len,
            out_clamped_positions=out_positions,
            out_slot_mapping=out_slots,
            input_batch_size=case.input_batch_size,
        )
        got = {
            "positions": out_positions.tolist(),
            "slot_mapping": out_slots.tolist(),
            "seq_lens": seq_lens.tolist(),
        }
        out.append({"got": got, "ref": ref_step(case, table)})
    return out


def _main() -> None:  # pragma: no cover - subprocess entry and manual exploration
    import json
    import sys
    import time

    from dsv4warmup.serving import FLASH

    command = sys.argv[1]
    if command == "report":
        result: Any = report(json.loads(sys.argv[2]))
    elif command == "interpret":
        result = interpret_step([StepCase(**c) for c in json.loads(sys.argv[2])])
    else:  # runtime RUNNER [CHANGES]
        runner = sys.argv[2]
        changes = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
        t = time.time()
        keys = runtime_keys(FLASH.replace(**changes), runner)
        for kernel, found in keys.items():
            print(kernel, len(found))
            for key, witness in found.items():
                print("   ", witness, "|", key[0])
        print(f"{time.time() - t:.1f}s")
        return
    sys.stdout.write("\n" + json.dumps(result) + "\n")


if __name__ == "__main__":  # pragma: no cover
    _main()
