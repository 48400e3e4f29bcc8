# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The startup warmup of the speculative-decoding helper kernels covers every
Triton specialization the call sites can produce: after it, a sweep of real
calls (every batch size, every sampled-token width, CUDA-graph padding,
discarded requests, nothing accepted) compiles nothing and computes the same
results as torch."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vllm.platforms import current_platform

if not current_platform.is_cuda():
    pytest.skip("CUDA required for the Triton warmup test", allow_module_level=True)

from vllm.model_executor.warmup.spec_decode_triton_warmup import (  # noqa: E402
    spec_decode_triton_warmup,
)
from vllm.models.deepseek_v4.common.ops.fused_mtp_input_rmsnorm import (  # noqa: E402
    _mtp_shared_head_rmsnorm_kernel,
    mtp_shared_head_rmsnorm,
)
from vllm.triton_utils import triton  # noqa: E402
from vllm.utils.math_utils import cdiv  # noqa: E402
from vllm.v1.attention.backend import CommonAttentionMetadata  # noqa: E402
from vllm.v1.spec_decode import utils as sd_utils  # noqa: E402
from vllm.v1.spec_decode.eagle import EagleProposer  # noqa: E402
from vllm.v1.spec_decode.metadata import SpecDecodeMetadata  # noqa: E402
from vllm.v1.utils import CpuGpuBuffer  # noqa: E402
from vllm.v1.worker.block_table import BlockTable  # noqa: E402

DEVICE = torch.device("cuda")
KERNELS = (
    sd_utils.eagle_step_slot_mapping_metadata_kernel,
    sd_utils.eagle_prepare_inputs_padded_kernel,
    sd_utils.eagle_prepare_next_token_padded_kernel,
    _mtp_shared_head_rmsnorm_kernel,
)


@pytest.fixture
def jit_compiles():
    """Empty in-memory caches for the four kernels, and every JIT compile of
    them recorded as (kernel name, is_manual_warmup)."""
    for kernel in KERNELS:
        kernel.device_caches.clear()
    names = {kernel.fn.__name__ for kernel in KERNELS}
    compiles: list[tuple[str, bool]] = []
    previous = triton.knobs.runtime.jit_post_compile_hook

    def hook(*, fn, is_manual_warmup, **kwargs):
        if fn.name in names:
            compiles.append((fn.name, is_manual_warmup))
        return (
            previous(fn=fn, is_manual_warmup=is_manual_warmup, **kwargs)
            if (previous)
            else None
        )

    triton.knobs.runtime.jit_post_compile_hook = hook
    try:
        yield compiles
    finally:
        triton.knobs.runtime.jit_post_compile_hook = previous


def _engine(max_num_seqs, k, vocab_size, block_size, max_model_len, hidden_size):
    """The engine configuration, and the V1 runner state the adapter reads:
    the EAGLE proposer and the block table of its KV cache group."""
    hf_config = SimpleNamespace(
        architectures=["DeepSeekV4MTPModel"],
        hidden_size=hidden_size,
        rms_norm_eps=1e-6,
    )
    vllm_config = SimpleNamespace(
        speculative_config=SimpleNamespace(
            method="mtp",
            num_speculative_tokens=k,
            disable_padded_drafter_batch=False,
            draft_model_config=SimpleNamespace(
                hf_config=hf_config, dtype=torch.bfloat16
            ),
        ),
        scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs),
        model_config=SimpleNamespace(
            max_model_len=max_model_len, get_vocab_size=lambda: vocab_size
        ),
    )
    table = BlockTable(
        block_size=block_size,
        max_num_reqs=max_num_seqs,
        max_num_blocks_per_req=cdiv(max_model_len, block_size),
        max_num_batched_tokens=max_num_seqs * (k + 1) * 4,
        pin_memory=False,
        device=DEVICE,
        kernel_block_size=block_size,
        cp_kv_cache_interleave_size=1,
    )
    table.block_table.gpu.copy_(
        torch.randint(0, 1 << 20, table.block_table.gpu.shape, dtype=torch.int32)
    )
    proposer = object.__new__(EagleProposer)
    proposer.max_model_len = max_model_len
    proposer.num_speculative_tokens = k
    proposer.block_size = block_size
    proposer.kv_cache_gid = 0
    proposer.parallel_drafting = False
    proposer.constant_draft_positions = False
    proposer.uses_mrope = False
    proposer.uses_xdrope_dim = 0
    proposer.draft_uses_xdrope_dim = 0
    proposer.positions = torch.zeros(4096, dtype=torch.int64, device=DEVICE)
    proposer._slot_mapping_buffer = torch.zeros(4096, dtype=torch.int64, device=DEVICE)
    proposer.backup_next_token_ids = CpuGpuBuffer(
        max_num_seqs, dtype=torch.int32, device=DEVICE, pin_memory=False
    )
    runner = SimpleNamespace(
        drafter=proposer, input_batch=SimpleNamespace(block_table=[table])
    )
    return vllm_config, runner


def _sampled(num_reqs, width, vocab_size, gen):
    """The sampler's output: (num_reqs, 1) from the plain sampler, a
    contiguous (num_reqs, width) from the rejection sampler, -1 = rejected."""
    tokens = torch.randint(0, vocab_size, (num_reqs, width), generator=gen)
    accepted = torch.randint(0, width, (num_reqs,), generator=gen)
    accepted[::3] = 0  # nothing accepted
    rejected = torch.arange(width)[None, :] > accepted[:, None]
    tokens[rejected] = -1
    if width == 1:
        return tokens[:, 0].to(DEVICE, torch.int32).unsqueeze(-1), accepted
    return tokens.to(DEVICE, torch.int32).contiguous(), accepted


def _ref_next_token(sampled, discard, backup, vocab_size):
    valid = (sampled != -1) & (sampled < vocab_size)
    count = valid.sum(1).to(torch.int32)
    last = torch.where(valid, torch.arange(sampled.shape[1], device=DEVICE), -1)
    last_tok = sampled.gather(1, last.max(1).values.clamp(min=0)[:, None])[:, 0]
    ids = torch.where(count > 0, last_tok, backup)
    return (
        torch.where(discard, backup, ids),
        torch.where(discard, torch.zeros_like(count), count),
    )


def _run_step(vllm_config, runner, num_reqs, width, padded_size, gen):
    cfg = vllm_config
    proposer = runner.drafter
    table = runner.input_batch.block_table[0]
    vocab_size = cfg.model_config.get_vocab_size()
    max_model_len = cfg.model_config.max_model_len
    k = cfg.speculative_config.num_speculative_tokens

    # prepare_next_token_ids_padded
    sampled, accepted = _sampled(num_reqs, width, vocab_size, gen)
    discard = CpuGpuBuffer(
        cfg.scheduler_config.max_num_seqs,
        dtype=torch.bool,
        device=DEVICE,
        pin_memory=False,
    )
    discard.np[:num_reqs] = np.arange(num_reqs) % 4 == 3
    discard.copy_to_gpu(num_reqs)
    req_ids = [f"r{i}" for i in range(num_reqs)]
    requests = {
        r: SimpleNamespace(get_token_id=lambda _pos, i=i: 100 + i)
        for i, r in enumerate(req_ids)
    }
    input_batch = SimpleNamespace(
        req_ids=req_ids,
        num_reqs=num_reqs,
        vocab_size=vocab_size,
        num_tokens_no_spec=np.full(num_reqs, 10, dtype=np.int32),
    )
    next_ids, valid = proposer.prepare_next_token_ids_padded(
        sampled, requests, input_batch, discard.gpu
    )
    ref_ids, ref_valid = _ref_next_token(
        sampled,
        discard.gpu[:num_reqs],
        proposer.backup_next_token_ids.gpu[:num_reqs],
        vocab_size,
    )
    torch.testing.assert_close(next_ids, ref_ids)
    torch.testing.assert_close(valid, ref_valid)

    # prepare_inputs_padded (steps that verified drafts)
    num_draft = [width - 1] * num_reqs
    query_start_loc = torch.arange(num_reqs + 1, dtype=torch.int32) * width
    seq_lens = torch.randint(
        width, max_model_len + 1, (num_reqs,), generator=gen, dtype=torch.int32
    )
    cm = CommonAttentionMetadata(
        query_start_loc=query_start_loc.to(DEVICE),
        query_start_loc_cpu=query_start_loc,
        seq_lens=seq_lens.to(DEVICE),
        num_reqs=num_reqs,
        num_actual_tokens=num_reqs * width,
        max_query_len=width,
        max_seq_len=int(seq_lens.max()),
        block_table_tensor=table.get_device_tensor(num_reqs),
        slot_mapping=table.slot_mapping.gpu[: num_reqs * width],
    )
    token_indices = cm.query_start_loc[1:] - 1
    num_rejected = None
    if width > 1:
        spec = SpecDecodeMetadata.make_dummy([[0] * d for d in num_draft], DEVICE)
        cm, token_indices, num_rejected = proposer.prepare_inputs_padded(
            cm, spec, valid
        )
        ref_rejected = torch.where(
            discard.gpu[:num_reqs], width, width - 1 - accepted.to(DEVICE)
        ).to(torch.int32)
        torch.testing.assert_close(num_rejected, ref_rejected)
        torch.testing.assert_close(
            token_indices, (cm.query_start_loc[1:] - 1 - ref_rejected).to(torch.int32)
        )

    # The draft loop: one metadata update per extra draft token.
    positions = (cm.seq_lens.long() - 1).clamp(min=0)
    if num_rejected is not None:
        cm.seq_lens -= num_rejected
    input_batch_size = padded_size or num_reqs
    for _ in range(k - 1):
        pos_before, lens_before = positions.clone(), cm.seq_lens.clone()
        positions = proposer._update_positions_dependent_metadata(
            positions, cm, num_reqs, input_batch_size, proposer.block_size
        )
        new = pos_before + 1
        exceeds = new >= max_model_len
        new = torch.where(exceeds, 0, new)
        blocks = (new // proposer.block_size).clamp(
            max=cm.block_table_tensor.shape[1] - 1
        )
        ids = cm.block_table_tensor.gather(1, blocks[:, None])[:, 0].long()
        slots = torch.where(
            exceeds, -1, ids * proposer.block_size + new % proposer.block_size
        )
        torch.testing.assert_close(positions, new)
        torch.testing.assert_close(cm.slot_mapping, slots)
        assert bool(
            (proposer._slot_mapping_buffer[num_reqs:input_batch_size] == -1).all()
        )
        torch.testing.assert_close(
            cm.seq_lens,
            torch.where(exceeds, 1, lens_before + 1).clamp(max=max_model_len).int(),
        )


def _capture_sizes(max_num_seqs):
    return [1, 2, 4] + list(range(8, max_num_seqs + 1, 8))


@pytest.mark.parametrize(
    "max_num_seqs, k, vocab_size, block_size, max_model_len, hidden_size",
    [
        (20, 1, 129280, 64, 4096, 4096),  # DeepSeek V4 Flash, one MTP token
        (33, 3, 32001, 16, 2000, 7168),  # several draft steps, odd sizes
        (4, 2, 1000, 256, 256, 4096),  # one block per request
    ],
)
def test_no_compile_after_warmup(
    jit_compiles, max_num_seqs, k, vocab_size, block_size, max_model_len, hidden_size
):
    vllm_config, runner = _engine(
        max_num_seqs, k, vocab_size, block_size, max_model_len, hidden_size
    )
    spec_decode_triton_warmup(vllm_config, DEVICE, runner)
    warmed = list(jit_compiles)
    assert warmed and all(is_warmup for _, is_warmup in warmed)
    expected = {kernel.fn.__name__ for kernel in KERNELS}
    if k == 1:
        expected.discard("eagle_step_slot_mapping_metadata_kernel")
    assert {name for name, _ in warmed} == expected

    gen = torch.Generator().manual_seed(0)
    sizes = _capture_sizes(max_num_seqs)
    for num_reqs in range(1, max_num_seqs + 1):
        padded = next((s for s in sizes if s >= num_reqs), None)
        for width in range(1, k + 2):
            _run_step(vllm_config, runner, num_reqs, width, padded, gen)
        _run_step(vllm_config, runner, num_reqs, 1, None, gen)

    # DeepSeek V4's MTP head norm on the hc_head output (bf16 rows).
    weight = torch.randn(hidden_size, generator=gen).to(DEVICE, torch.bfloat16)
    for num_tokens in (1, 2, 17, max_num_seqs * k):
        x = torch.randn(num_tokens, hidden_size, generator=gen).to(
            DEVICE, torch.bfloat16
        )
        out = mtp_shared_head_rmsnorm(x, weight, 1e-6)
        xf = x.float()
        ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()
        torch.testing.assert_close(out, ref.to(torch.bfloat16), rtol=2e-2, atol=2e-2)

    torch.accelerator.synchronize()
    assert jit_compiles == warmed, (
        f"compiled after warmup: {jit_compiles[len(warmed) :]}"
    )


def test_other_configs_compile_nothing(jit_compiles):
    vllm_config, runner = _engine(8, 3, 1000, 16, 1024, 4096)
    no_spec = SimpleNamespace(**{**vars(vllm_config), "speculative_config": None})
    spec_decode_triton_warmup(no_spec, DEVICE, runner)
    # ngram: no EAGLE proposer, no DeepSeek V4 MTP head.
    ngram = SimpleNamespace(**vars(vllm_config))
    ngram.speculative_config = SimpleNamespace(
        **{**vars(vllm_config.speculative_config), "method": "ngram"}
    )
    spec_decode_triton_warmup(ngram, DEVICE, SimpleNamespace(drafter=None))
    assert jit_compiles == []
