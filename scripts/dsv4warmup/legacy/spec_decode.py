"""Speculative-decoding helper kernels: their real call sites and their warmup.

Four Triton kernels (issue 3):

* ``eagle_prepare_next_token_padded_kernel`` -- launched by
  ``SpecDecodeBaseProposer.prepare_next_token_ids_padded`` every step;
* ``eagle_prepare_inputs_padded_kernel`` -- ``prepare_inputs_padded``, on steps
  that verified drafts;
* ``eagle_step_slot_mapping_metadata_kernel`` -- through
  ``eagle_step_update_slot_mapping_and_metadata`` from
  ``_update_positions_dependent_metadata``, once per extra draft step
  (num_speculative_tokens > 1);
* ``_mtp_shared_head_rmsnorm_kernel`` -- through ``mtp_shared_head_rmsnorm`` from
  DeepSeek V4's ``DeepSeekV4MultiTokenPredictor.compute_logits`` (NVIDIA), for
  every draft token.

``run_call_sites`` drives that vLLM code -- the proposer's own methods on a
proposer object that carries only the attributes they read, vLLM's
``BlockTable`` / ``CpuGpuBuffer`` / ``CommonAttentionMetadata`` /
``SpecDecodeMetadata`` laid out as ``GPUModelRunner`` lays them out, sampled
tokens shaped as ``Sampler`` / ``rejection_sample`` return them -- over a sweep
of steps: every request count from 1 to ``max_num_seqs``, every sampled-token
width from 1 to ``num_speculative_tokens + 1``, discarded requests, requests
with nothing accepted, prefill chunks, with and without CUDA-graph padding of
the draft batch, padded and unpadded drafter batch. ``runtime_keys`` records
the exact Triton key of every launch (``triton_keys.record_launches``) on CPU
tensors; on a GPU the same driver runs the kernels and checks their outputs
against the torch references below.

``warmup_keys`` records what vLLM's startup warmup
(``vllm.model_executor.warmup.spec_decode_triton_warmup``) compiles for the
same configuration. Neither side uses the other's key derivation.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from unittest import mock

from dsv4warmup.legacy import max_num_blocks_per_req
from dsv4warmup.serving import ServingConfig

NEXT_TOKEN_KERNEL = "eagle_prepare_next_token_padded_kernel"
PREPARE_INPUTS_KERNEL = "eagle_prepare_inputs_padded_kernel"
STEP_KERNEL = "eagle_step_slot_mapping_metadata_kernel"
MTP_NORM_KERNEL = "_mtp_shared_head_rmsnorm_kernel"
KERNELS = (NEXT_TOKEN_KERNEL, PREPARE_INPUTS_KERNEL, STEP_KERNEL, MTP_NORM_KERNEL)

Key = tuple[Any, ...]
KeysByKernel = dict[str, set[Key]]

_HEAD_SIZE = 128  # stand-in head size of a full-attention drafter group


# --- configuration -----------------------------------------------------------


def is_deepseek_v4_mtp(cfg: ServingConfig) -> bool:
    """A ServingConfig describes DeepSeek V4; its "mtp" method is V4's own MTP
    head (``DeepSeekV4MTPModel``)."""
    return cfg.uses_mtp


def uses_eagle_proposer(cfg: ServingConfig) -> bool:
    """Methods the V1 runner serves with ``EagleProposer`` (use_eagle())."""
    return cfg.uses_mtp or (
        cfg.speculative_method in ("eagle", "eagle3") and cfg.num_speculative_tokens > 0
    )


def model_dtype() -> Any:
    import torch

    return torch.bfloat16


def drafter_block_table(cfg: ServingConfig, device: Any = "cpu") -> Any:
    """The drafter's KV-group ``BlockTable`` as ``GPUModelRunner`` builds it
    (``may_reinitialize_input_batch`` -> ``MultiGroupBlockTable``).

    DeepSeek V4's MTP layer is SWA-only (compress ratio 1), so its only KV
    cache is ``DeepseekV4SWACache``; other drafters get a full-attention group
    of the serving block size.
    """
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.worker.block_table import MultiGroupBlockTable

    if is_deepseek_v4_mtp(cfg):
        spec = _deepseek_v4_swa_spec(cfg)
    else:
        spec = FullAttentionSpec(
            block_size=cfg.block_size,
            num_kv_heads=1,
            head_size=_HEAD_SIZE,
            dtype=model_dtype(),
        )
    vllm_config = SimpleNamespace(parallel_config=SimpleNamespace(decode_context_parallel_size=1))
    max_blocks = max_num_blocks_per_req(spec, vllm_config, cfg.max_model_len)
    kwargs: dict[str, Any] = {}
    if "max_model_len" in inspect.signature(MultiGroupBlockTable).parameters:
        kwargs["max_model_len"] = cfg.max_model_len  # 0.25.1
    tables = MultiGroupBlockTable(
        max_num_reqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        pin_memory=False,
        device=torch.device(device),
        block_sizes=[spec.block_size],
        kernel_block_sizes=[spec.block_size],
        max_num_blocks=[max_blocks],
        **kwargs,
    )
    return tables[0]


def _deepseek_v4_swa_spec(cfg: ServingConfig) -> Any:
    import torch
    from vllm.v1.attention.backends.mla import sparse_swa

    context = SimpleNamespace(compilation_config=SimpleNamespace(static_forward_context={}))
    cache_config = SimpleNamespace(cache_dtype=cfg.kv_cache_dtype, block_size=cfg.block_size)
    with mock.patch.object(sparse_swa, "get_current_vllm_config", return_value=context):
        layer = sparse_swa.DeepseekV4SWACache(
            head_dim=512,
            window_size=cfg.sliding_window,
            dtype=torch.uint8,
            prefix="mtp.swa_cache",
            cache_config=cache_config,  # type: ignore[arg-type]
        )
    return layer.get_kv_cache_spec(SimpleNamespace(cache_config=cache_config))  # type: ignore[arg-type]


# --- warmup side ---------------------------------------------------------------


def warmup_params(cfg: ServingConfig, *, padded_drafter_batch: bool = True) -> Any:
    """The plain parameters vLLM's adapter derives from the engine for ``cfg``
    (``spec_decode_triton_warmup_params``): the configuration, and the
    drafter's block table as the runner built it."""
    from vllm.model_executor.warmup.spec_decode_triton_warmup import (
        DrafterBlockTable,
        SpecDecodeTritonWarmupParams,
    )

    eagle = uses_eagle_proposer(cfg)
    table = None
    if eagle and cfg.num_speculative_tokens > 1:
        block_table = drafter_block_table(cfg)
        tensor = block_table.get_device_tensor(1)
        table = DrafterBlockTable(
            # SpecDecodeBaseProposer.block_size: the KV spec's block size of
            # the drafter's group (initialize_attn_backend).
            block_size=kv_cache_block_size(block_table),
            n_blocks_per_req=tensor.shape[1],
            stride=tensor.stride(0),
        )
    mtp = is_deepseek_v4_mtp(cfg)
    return SpecDecodeTritonWarmupParams(
        max_num_seqs=cfg.max_num_seqs,
        num_speculative_tokens=cfg.num_speculative_tokens,
        vocab_size=cfg.vocab_size,
        max_model_len=cfg.max_model_len,
        eagle_proposer=eagle,
        padded_drafter_batch=padded_drafter_batch,
        drafter_block_table=table,
        mtp_norm_hidden_size=cfg.hidden_size if mtp else None,
        mtp_norm_weight_dtype=model_dtype(),
        mtp_norm_eps=cfg.rms_norm_eps,
    )


def warmup_launches(cfg: ServingConfig, *, padded_drafter_batch: bool = True) -> list[Any]:
    from vllm.model_executor.warmup.spec_decode_triton_warmup import (
        spec_decode_triton_warmup_launches,
    )

    return spec_decode_triton_warmup_launches(
        warmup_params(cfg, padded_drafter_batch=padded_drafter_batch)
    )


def keys_of_launches(launches: list[Any]) -> KeysByKernel:
    """Record what ``compile_triton_warmup`` compiles for ``launches``."""
    from vllm.model_executor.warmup.triton_specialization import compile_triton_warmup

    from dsv4warmup.triton_keys import keys_by_kernel, record_launches

    with record_launches() as recorded:
        compile_triton_warmup("spec decode (recorded)", launches)
    assert all(r.warmup for r in recorded)
    return keys_by_kernel(recorded)


PATCHED_WARMUP_MODULE = "vllm.model_executor.warmup.spec_decode_triton_warmup"


def has_patched_warmup() -> bool:
    """Whether the importable tree carries the series' spec-decode warmup."""
    import importlib.util

    return importlib.util.find_spec(PATCHED_WARMUP_MODULE) is not None


def warmup_keys(cfg: ServingConfig, *, padded_drafter_batch: bool = True) -> KeysByKernel:
    """Exact keys vLLM's spec-decode warmup compiles for ``cfg``."""
    if not has_patched_warmup():
        return _pristine_warmup_keys(cfg)
    return _patched_warmup_keys(cfg, padded_drafter_batch=padded_drafter_batch)


def _patched_warmup_keys(cfg: ServingConfig, *, padded_drafter_batch: bool) -> KeysByKernel:
    return keys_of_launches(warmup_launches(cfg, padded_drafter_batch=padded_drafter_batch))


def _pristine_warmup_keys(cfg: ServingConfig) -> KeysByKernel:
    """Upstream 0.26.0 has no warmup for these kernels: nothing is compiled
    before the first request."""
    return {kernel: set() for kernel in KERNELS}


# --- runtime side --------------------------------------------------------------


@dataclass
class Step:
    """One engine step as the drafter sees it."""

    num_reqs: int
    # Width of the sampled-token tensor: 1 when no request carried drafts,
    # else 1 + the longest draft of the step.
    num_sampled: int
    # Draft-batch size after CUDA-graph padding (None: eager, no padding).
    cudagraph_size: int | None


def cudagraph_size(cfg: ServingConfig, num_tokens: int) -> int | None:
    """The drafter's CUDA-graph dispatch: the smallest capture size holding
    ``num_tokens``, or None past the largest (eager)."""
    for size in cfg.capture_sizes:
        if size >= num_tokens:
            return size
    return None


def steps(cfg: ServingConfig, batch_sizes: list[int] | None = None) -> Iterator[Step]:
    """Every request count, every sampled-token width, padded or eager."""
    k = cfg.num_speculative_tokens
    for num_reqs in batch_sizes or range(1, cfg.max_num_seqs + 1):
        for num_sampled in range(1, k + 2):
            # the scheduler's token budget: the widest request plus one token
            # for every other (``step_data`` trims drafts to fit)
            if num_reqs + num_sampled - 1 > cfg.max_num_batched_tokens:
                continue
            yield Step(num_reqs, num_sampled, cudagraph_size(cfg, num_reqs))
            if num_sampled == 1:
                yield Step(num_reqs, num_sampled, None)


class _Engine:
    """The runner's persistent buffers and the proposer, on ``device``."""

    def __init__(
        self, cfg: ServingConfig, device: Any, padded_drafter_batch: bool, mrope: bool
    ) -> None:
        import numpy as np
        import torch
        from vllm.v1.utils import CpuGpuBuffer

        self.cfg = cfg
        self.device = torch.device(device)
        self.padded = padded_drafter_batch
        n = cfg.max_num_seqs
        self.block_table = drafter_block_table(cfg, self.device)
        self.query_start_loc = CpuGpuBuffer(
            n + 1, dtype=torch.int32, device=self.device, pin_memory=False
        )
        self.seq_lens = torch.zeros(n, dtype=torch.int32, device=self.device)
        self.optimistic_seq_lens_cpu = torch.zeros(n, dtype=torch.int32)
        self.discard_request_mask = CpuGpuBuffer(
            n, dtype=torch.bool, device=self.device, pin_memory=False
        )
        self.proposer = _make_proposer(cfg, self.device, mrope)
        self.proposer.block_size = kv_cache_block_size(self.block_table)
        # Distinct block ids per request; only the kernels' outputs read them.
        table = self.block_table.block_table
        rows, width = table.np.shape
        table.np[:] = 1 + np.arange(rows * width, dtype=np.int32).reshape(rows, width)
        self.block_table.commit_block_table(rows)

    @property
    def k(self) -> int:
        return self.cfg.num_speculative_tokens


def _make_proposer(cfg: ServingConfig, device: Any, mrope: bool) -> Any:
    """An ``EagleProposer`` carrying the attributes the helper methods read,
    allocated as ``SpecDecodeBaseProposer.__init__`` allocates them."""
    import numpy as np
    import torch
    from vllm.v1.spec_decode.eagle import EagleProposer
    from vllm.v1.utils import CpuGpuBuffer

    p = object.__new__(EagleProposer)
    p.device = device
    p.max_model_len = cfg.max_model_len
    p.num_speculative_tokens = cfg.num_speculative_tokens
    p.max_batch_size = cfg.max_num_seqs
    p.max_num_tokens = cfg.max_num_batched_tokens
    p.max_positions = cfg.max_num_batched_tokens
    p.token_arange_np = np.arange(p.max_num_tokens, dtype=np.int32)
    p.uses_mrope = mrope
    p.uses_xdrope_dim = 0
    p.draft_uses_xdrope_dim = 0
    if mrope:
        p.mrope_positions = torch.zeros((3, p.max_positions + 1), dtype=torch.int64, device=device)
    else:
        p.positions = torch.zeros(p.max_positions, dtype=torch.int64, device=device)
    p._slot_mapping_buffer = torch.zeros(p.max_positions, dtype=torch.int64, device=device)
    p.backup_next_token_ids = CpuGpuBuffer(
        p.max_batch_size, dtype=torch.int32, pin_memory=False, device=device, with_numpy=True
    )
    return p


@dataclass
class StepData:
    """Host-side description of one step's requests."""

    num_draft: list[int]  # drafts verified this step, per request
    num_accepted: list[int]  # accepted drafts, per request
    discarded: list[bool]
    query_lens: list[int]
    seq_lens: list[int]
    tokens: Any  # (num_reqs, num_sampled) int32 on CPU, -1 = rejected


def step_data(cfg: ServingConfig, step: Step, seed: int) -> StepData:
    """Deterministic step contents with the edge cases the sweep needs, only
    what vLLM's scheduler can build for ``cfg``: query and sequence lengths
    within max_model_len, at most max_num_batched_tokens new tokens
    (``steps`` keeps the request count within max_num_seqs)."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    r, w = step.num_reqs, step.num_sampled
    i = np.arange(r)
    # Drafts per request; the longest one (request 0) sets the width.
    draft = rng.integers(0, w, r) if w > 1 else np.zeros(r, dtype=np.int64)
    draft[0] = w - 1
    # The scheduler builds no request longer than max_model_len: it trims
    # drafts and prefill chunks to fit (a no-op unless max_model_len < 1 + k).
    cap = cfg.max_model_len
    draft = np.minimum(draft, cap - 1)
    # Nothing accepted, all accepted, or anything between.
    accepted = np.select(
        [i % 3 == 0, i % 3 == 1], [np.zeros(r, np.int64), draft], rng.integers(0, draft + 1)
    )
    discarded = i % 4 == 3  # chunked-prefill requests: sampled token discarded
    # Requests without drafts are decodes or prefill chunks.
    prefill = (draft == 0) & (i % 5 == 0)
    query = np.minimum(np.where(prefill, 1 + rng.integers(1, 9, r), draft + 1), cap)
    # ... and no step over max_num_batched_tokens: trim the other requests
    budget = cfg.max_num_batched_tokens
    for j in range(r - 1, -1, -1):
        excess = int(query.sum()) - budget
        if excess <= 0:
            break
        if j == 0 and not prefill[0]:
            break  # request 0 keeps the width (``steps`` leaves room for it)
        query[j] -= min(excess, int(query[j]) - 1)
        if not prefill[j]:
            draft[j] = query[j] - 1
    accepted = np.minimum(accepted, draft)
    seq = rng.integers(query, cfg.max_model_len + 1)
    seq[i % 7 == 6] = cfg.max_model_len  # at the length limit: positions clamp
    tokens = np.full((r, w), -1, dtype=np.int32)
    ids = rng.integers(0, cfg.vocab_size, (r, w), dtype=np.int32)
    keep = np.arange(w)[None, :] <= accepted[:, None]
    tokens[keep] = ids[keep]
    tokens[i % 11 == 10, 0] = cfg.vocab_size  # out-of-vocab ids count as rejected
    return StepData(
        draft.tolist(),
        accepted.tolist(),
        discarded.tolist(),
        query.tolist(),
        seq.tolist(),
        torch.from_numpy(tokens),
    )


def sampled_token_ids(data: StepData, device: Any) -> Any:
    """Laid out as the sampler returns them: ``Sampler`` gives
    ``sampled.to(int32).unsqueeze(-1)`` (width 1), ``rejection_sample`` a
    contiguous ``torch.full((num_reqs, max_spec_len + 1), -1, int32)``."""
    import torch

    if data.tokens.shape[1] == 1:
        return data.tokens[:, 0].to(device).to(torch.int32).unsqueeze(-1)
    out = torch.full(tuple(data.tokens.shape), -1, dtype=torch.int32, device=device)
    out.copy_(data.tokens)
    return out


Check = Callable[[str, dict[str, Any]], None]


def _requests(cfg: ServingConfig, data: StepData) -> tuple[Any, Any]:
    import numpy as np

    r = len(data.num_draft)
    req_ids = [f"req-{i}" for i in range(r)]
    backup = [(7919 * i + 13) % cfg.vocab_size for i in range(r)]
    requests = {
        rid: SimpleNamespace(get_token_id=lambda _pos, t=backup[i]: t)
        for i, rid in enumerate(req_ids)
    }
    input_batch = SimpleNamespace(
        req_ids=req_ids,
        num_reqs=r,
        vocab_size=cfg.vocab_size,
        num_tokens_no_spec=np.array(data.seq_lens, dtype=np.int32),
    )
    return requests, input_batch


def _common_attn_metadata(eng: _Engine, data: StepData, step: Step) -> Any:
    """``GPUModelRunner._build_attention_metadata`` for the drafter's group,
    padded to the target's graph size and then ``unpadded`` as it is."""
    import numpy as np
    import torch
    from vllm.v1.attention.backend import CommonAttentionMetadata

    r = step.num_reqs
    uniform = all(q == step.num_sampled for q in data.query_lens)
    r_pad = r
    if uniform and eng.padded:
        size = cudagraph_size(eng.cfg, r * step.num_sampled)
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
    table = bt.get_device_tensor(r_pad)
    seq_lens_cpu = eng.optimistic_seq_lens_cpu[:r_pad]
    cm = CommonAttentionMetadata(
        query_start_loc=qsl.gpu[: r_pad + 1],
        query_start_loc_cpu=qsl.cpu[: r_pad + 1],
        seq_lens=eng.seq_lens[:r_pad],
        _seq_lens_cpu=seq_lens_cpu,
        seq_lens_cpu_upper_bound=seq_lens_cpu,
        num_reqs=r_pad,
        num_actual_tokens=num_tokens,
        max_query_len=max(data.query_lens),
        max_seq_len=max(data.seq_lens),
        block_table_tensor=table,
        slot_mapping=bt.slot_mapping.gpu[:num_tokens],
        causal=True,
    )
    return cm.unpadded(num_tokens, r) if r_pad != r else cm


def _run_step(eng: _Engine, step: Step, seed: int, check: Check | None) -> None:

    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    cfg, p = eng.cfg, eng.proposer
    data = step_data(cfg, step, seed)
    requests, input_batch = _requests(cfg, data)
    r = step.num_reqs
    eng.discard_request_mask.np[:r] = data.discarded
    eng.discard_request_mask.copy_to_gpu(r)
    cm = _common_attn_metadata(eng, data, step)
    spec_md = None
    if step.num_sampled > 1:
        spec_md = SpecDecodeMetadata.make_dummy(
            [[1] * d for d in data.num_draft], device=eng.device
        )

    num_rejected = None
    if eng.padded:
        sampled = sampled_token_ids(data, eng.device)
        next_ids, valid = SpecDecodeBaseProposer.prepare_next_token_ids_padded(
            p, sampled, requests, input_batch, eng.discard_request_mask.gpu
        )
        if check is not None:
            check(
                NEXT_TOKEN_KERNEL,
                dict(
                    sampled=sampled,
                    discard=eng.discard_request_mask.gpu[:r],
                    backup=p.backup_next_token_ids.gpu[:r],
                    vocab_size=cfg.vocab_size,
                    next_token_ids=next_ids,
                    valid_count=valid,
                ),
            )
        if spec_md is not None:
            qsl_before = cm.query_start_loc.clone()
            cm, token_indices, num_rejected = SpecDecodeBaseProposer.prepare_inputs_padded(
                p, cm, spec_md, valid
            )
            if check is not None:
                check(
                    PREPARE_INPUTS_KERNEL,
                    dict(
                        cu_num_draft_tokens=spec_md.cu_num_draft_tokens,
                        valid_count=valid,
                        query_start_loc=qsl_before,
                        token_indices=token_indices,
                        num_rejected=num_rejected,
                    ),
                )
        else:
            token_indices = cm.query_start_loc[1:] - 1
    else:
        valid_lists = [
            [] if data.discarded[i] else [1] * (data.num_accepted[i] + 1) for i in range(r)
        ]
        if spec_md is not None:
            cm, _ = SpecDecodeBaseProposer.prepare_inputs(p, cm, valid_lists, data.num_draft)
            if eng.device.type == "cpu":
                # async_tensor_h2d returns its host tensor on CPU; the device
                # copy it stands for must not alias the host shadows.
                cm.seq_lens = cm.seq_lens.clone()
        # set_inputs_first_pass: the last token of each request.
        token_indices = cm.query_start_loc[1:] - 1

    if cfg.num_speculative_tokens > 1:
        _draft_steps(eng, cm, token_indices, num_rejected, step, check)


def _draft_steps(
    eng: _Engine, cm: Any, token_indices: Any, num_rejected: Any, step: Step, check: Check | None
) -> None:
    """The draft loop of ``SpecDecodeBaseProposer.propose`` after the first
    forward: positions gathered at the sampled indices, seq_lens corrected
    for rejected tokens, then one metadata update per extra draft token."""
    import torch
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    p = eng.proposer
    r = step.num_reqs
    # Positions of the sampled tokens, inside [0, max_model_len).
    base = torch.tensor(
        [max(s - 1, 0) for s in [int(x) for x in cm.seq_lens.cpu()]],
        dtype=torch.int64,
        device=eng.device,
    )
    if p.uses_mrope:
        p.mrope_positions[:, : cm.num_actual_tokens] = 0
        p.mrope_positions[:, token_indices.long()] = base.unsqueeze(0).expand(3, -1)
        positions = p.mrope_positions[:, token_indices]
    else:
        p.positions[: cm.num_actual_tokens] = 0
        p.positions[token_indices.long()] = base
        positions = p.positions[token_indices]
    if eng.k > 1 and num_rejected is not None:
        cm.seq_lens -= num_rejected
        cm._seq_lens_cpu = None
        cm._num_computed_tokens_cpu = None
    input_batch_size = step.cudagraph_size or r
    for _ in range(eng.k - 1):
        before = dict(
            positions=(positions[0] if p.uses_mrope else positions).clone(),
            block_table=cm.block_table_tensor,  # read only
            seq_lens=cm.seq_lens.clone(),
        )
        positions = SpecDecodeBaseProposer._update_positions_dependent_metadata(
            p, positions, cm, r, input_batch_size, p.block_size
        )
        if check is not None:
            check(
                STEP_KERNEL,
                dict(
                    **before,
                    block_size=p.block_size,
                    max_model_len=p.max_model_len,
                    input_batch_size=input_batch_size,
                    out_positions=(p.mrope_positions[0, :r] if p.uses_mrope else p.positions[:r]),
                    out_slot_mapping=p._slot_mapping_buffer[:input_batch_size],
                    out_seq_lens=cm.seq_lens,
                ),
            )


@contextlib.contextmanager
def _mtp_predictor(eng: _Engine) -> Iterator[tuple[Any, Any]]:
    """``DeepSeekV4MultiTokenPredictor`` reduced to what ``compute_logits``
    reads; hc_head (TileLang) replaced by a bf16 reduction of the same shape,
    the LM head by the identity, so the norm's output comes back."""
    import torch
    from vllm.models.deepseek_v4.nvidia import mtp as mtp_mod

    cfg = eng.cfg
    gen = torch.Generator().manual_seed(cfg.hidden_size)
    # RMSNorm's parameter: (hidden,) in the model dtype.
    weight = (1 + 0.1 * torch.randn(cfg.hidden_size, generator=gen)).to(model_dtype())
    norm = SimpleNamespace(
        weight=torch.nn.Parameter(weight.to(eng.device), requires_grad=False),
        variance_epsilon=cfg.rms_norm_eps,
    )
    layer = SimpleNamespace(
        hc_mult=cfg.hc_mult,
        config=SimpleNamespace(hidden_size=cfg.hidden_size),
        hc_head_fn=None,
        hc_head_scale=None,
        hc_head_base=None,
        rms_norm_eps=cfg.rms_norm_eps,
        hc_eps=1e-6,
        shared_head=SimpleNamespace(norm=norm, head=None),
    )
    start = 61
    predictor = SimpleNamespace(
        mtp_start_layer_idx=start,
        num_mtp_layers=1,
        layers={str(start): layer},
        logits_processor=lambda _head, hidden_states: hidden_states,
    )

    def hc_head(hs: Any, *_: Any) -> Any:
        return hs.float().mean(dim=1).to(torch.bfloat16)

    with mock.patch.object(mtp_mod, "hc_head_fused_kernel_tilelang", hc_head):
        yield mtp_mod.DeepSeekV4MultiTokenPredictor.compute_logits, predictor


def _mtp_compute_logits(eng: _Engine, num_tokens: int, check: Check | None) -> None:
    import torch

    cfg = eng.cfg
    gen = torch.Generator().manual_seed(num_tokens)
    flat = torch.randn(num_tokens, cfg.hc_mult * cfg.hidden_size, generator=gen)
    flat = flat.to(model_dtype()).to(eng.device)
    with _mtp_predictor(eng) as (compute_logits, predictor):
        out = compute_logits(predictor, flat)
        if check is not None:
            layer = next(iter(predictor.layers.values()))
            x = flat.view(num_tokens, cfg.hc_mult, cfg.hidden_size).float().mean(1)
            check(
                MTP_NORM_KERNEL,
                dict(
                    x=x.to(torch.bfloat16),
                    weight=layer.shared_head.norm.weight,
                    eps=cfg.rms_norm_eps,
                    out=out,
                ),
            )


def run_call_sites(
    cfg: ServingConfig,
    *,
    device: Any = "cpu",
    padded_drafter_batch: bool = True,
    mrope: bool = False,
    batch_sizes: list[int] | None = None,
    check: Check | None = None,
) -> int:
    """Drive the call sites over the step sweep; returns the step count."""
    if not uses_eagle_proposer(cfg):
        return 0

    from vllm.v1.spec_decode import llm_base_proposer

    eng = _Engine(cfg, device, padded_drafter_batch, mrope)
    count = 0
    with contextlib.ExitStack() as stack:
        if eng.device.type == "cpu":
            # No pinned host memory without an accelerator.
            stack.enter_context(mock.patch.object(llm_base_proposer, "PIN_MEMORY", False))
            stack.enter_context(mock.patch("vllm.utils.torch_utils.PIN_MEMORY", False))
        for seed, step in enumerate(steps(cfg, batch_sizes)):
            _run_step(eng, step, seed, check)
            count += 1
    if is_deepseek_v4_mtp(cfg):
        # compute_logits sees one row per request and draft token; the row
        # count only sets the grid, so a spread of sizes is enough here.
        k, n = cfg.num_speculative_tokens, cfg.max_num_seqs
        for num_tokens in sorted({1, 2, 3, 16, 17, 33, n, n * k}):
            _mtp_compute_logits(eng, num_tokens, check)
    return count


def runtime_keys(
    cfg: ServingConfig,
    *,
    padded_drafter_batch: bool = True,
    mrope: bool = False,
    batch_sizes: list[int] | None = None,
) -> KeysByKernel:
    """Exact keys the real call sites launch over the sweep (CPU tensors)."""
    import torch

    from dsv4warmup.triton_keys import keys_by_kernel, record_launches

    threads = torch.get_num_threads()
    # Tiny CPU tensors: intra-op threads only add overhead.
    torch.set_num_threads(1)
    with contextlib.ExitStack() as stack:
        stack.callback(torch.set_num_threads, threads)
        recorded = stack.enter_context(record_launches())
        run_call_sites(
            cfg,
            padded_drafter_batch=padded_drafter_batch,
            mrope=mrope,
            batch_sizes=batch_sizes,
            check=emulate_outputs,
        )
    assert not any(r.warmup for r in recorded)
    return keys_by_kernel(recorded)


# --- torch references (interpreter and GPU tests) -------------------------------


def ref_next_token(sampled: Any, discard: Any, backup: Any, vocab_size: int) -> tuple[Any, Any]:
    import torch

    valid = (sampled != -1) & (sampled < vocab_size)
    count = valid.sum(dim=1).to(torch.int32)
    idx = torch.arange(sampled.shape[1], device=sampled.device)
    last = torch.where(valid, idx, -1).max(dim=1).values.clamp(min=0)
    last_tok = sampled.gather(1, last.unsqueeze(1)).squeeze(1)
    next_ids = torch.where(count > 0, last_tok, backup)
    next_ids = torch.where(discard, backup, next_ids)
    count = torch.where(discard, torch.zeros_like(count), count)
    return next_ids.to(torch.int32), count


def ref_prepare_inputs(
    cu_num_draft: Any, valid_count: Any, query_start_loc: Any
) -> tuple[Any, Any]:
    import torch

    num_draft = torch.diff(cu_num_draft, prepend=cu_num_draft.new_zeros(1))
    rejected = torch.where(num_draft > 0, num_draft + 1 - valid_count, torch.zeros_like(num_draft))
    index = query_start_loc[1:] - 1 - rejected
    return index.to(torch.int32), rejected.to(torch.int32)


def ref_step(
    positions: Any,
    block_table: Any,
    seq_lens: Any,
    block_size: int,
    max_model_len: int,
    input_batch_size: int,
) -> tuple[Any, Any, Any]:
    import torch

    b = positions.shape[0]
    new = positions + 1
    exceeds = new >= max_model_len
    clamped = torch.where(exceeds, torch.zeros_like(new), new)
    blk = (clamped // block_size).clamp(max=block_table.shape[1] - 1)
    ids = block_table[torch.arange(b, device=positions.device), blk].long()
    slot = ids * block_size + clamped % block_size
    slot = torch.where(exceeds, torch.full_like(slot, -1), slot)
    pad = torch.full((input_batch_size - b,), -1, dtype=torch.int64, device=positions.device)
    new_seq = torch.where(exceeds, torch.ones_like(seq_lens), seq_lens + 1).clamp(max=max_model_len)
    return clamped, torch.cat([slot, pad]), new_seq


def ref_rmsnorm(x: Any, weight: Any, eps: float) -> Any:
    import torch

    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return y.to(x.dtype)


def reference_outputs(kernel: str, io: dict[str, Any]) -> dict[str, Any]:
    """Torch references of one launch's outputs, by the ``io`` names the
    kernel writes."""
    if kernel == NEXT_TOKEN_KERNEL:
        ids, count = ref_next_token(io["sampled"], io["discard"], io["backup"], io["vocab_size"])
        return {"next_token_ids": ids, "valid_count": count}
    if kernel == PREPARE_INPUTS_KERNEL:
        idx, rej = ref_prepare_inputs(
            io["cu_num_draft_tokens"], io["valid_count"], io["query_start_loc"]
        )
        return {"token_indices": idx, "num_rejected": rej}
    if kernel == STEP_KERNEL:
        pos, slot, seq = ref_step(
            io["positions"],
            io["block_table"],
            io["seq_lens"],
            io["block_size"],
            io["max_model_len"],
            io["input_batch_size"],
        )
        return {"out_positions": pos, "out_slot_mapping": slot, "out_seq_lens": seq}
    if kernel == MTP_NORM_KERNEL:
        return {"out": ref_rmsnorm(io["x"], io["weight"], io["eps"])}
    raise AssertionError(kernel)


def emulate_outputs(kernel: str, io: dict[str, Any]) -> None:
    """Write the reference outputs where a recorded (not run) launch would
    have written them, so the following call sites see sane values (the MTP
    norm's output feeds nothing the sweep reads)."""
    if kernel == MTP_NORM_KERNEL:
        return
    for name, value in reference_outputs(kernel, io).items():
        io[name].copy_(value)


def check_outputs(kernel: str, io: dict[str, Any]) -> None:
    """Compare one launch's outputs with the torch references (exact, except
    the bf16 norm)."""
    import torch

    tol = 2e-2 if kernel == MTP_NORM_KERNEL else 0
    for name, value in reference_outputs(kernel, io).items():
        torch.testing.assert_close(io[name], value, rtol=tol, atol=tol)


def kv_cache_block_size(block_table: Any) -> int:
    # 0.26.0 names the KV-cache (not kernel) block size apart; 0.25.1 has one.
    return int(getattr(block_table, "kv_cache_block_size", block_table.block_size))
