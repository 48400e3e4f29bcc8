"""The four spec-decode helper kernels run by the Triton interpreter on CPU
tensors and compared with torch references.

Two layers: the real call sites (``dsv4warmup.legacy.spec_decode``: the
proposer's methods and DeepSeek V4's ``compute_logits``) over a small sweep with
every launch's outputs checked, and the kernels' wrappers / launch statements
on generated inputs (hypothesis) for the edge cases: batch of one, one sampled
token, every token rejected or discarded, out-of-vocabulary ids, positions at
``max_model_len``, CUDA-graph padding slots, a one-block table, hidden sizes
that are not powers of two, zero tokens.

``TRITON_INTERPRET`` must be set before Triton is imported, so the module
re-runs itself in a subprocess with it set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import run_interpreted

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
REPO = Path(__file__).resolve().parents[2]


if not INTERPRETED:

    def test_under_triton_interpreter() -> None:
        run_interpreted(__file__)

else:
    import torch
    from dsv4warmup.legacy import spec_decode as cs
    from dsv4warmup.serving import FLASH, PRO
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from vllm.models.deepseek_v4.common.ops.fused_mtp_input_rmsnorm import (
        mtp_shared_head_rmsnorm,
    )
    from vllm.v1.spec_decode.utils import (
        PADDING_SLOT_ID,
        eagle_prepare_inputs_padded_kernel,
        eagle_prepare_next_token_block_size,
        eagle_prepare_next_token_padded_kernel,
        eagle_step_update_slot_mapping_and_metadata,
    )

    SETTINGS = settings(
        max_examples=40,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )

    def test_interpreter_is_active() -> None:
        from vllm.v1.spec_decode import utils

        assert type(utils.eagle_step_slot_mapping_metadata_kernel).__name__ == (
            "InterpretedFunction"
        )

    # --- the real call sites, every launch checked ----------------------------

    SMALL = FLASH.replace(max_model_len=2048, max_num_batched_tokens=512, hidden_size=256)

    @pytest.mark.parametrize(
        "cfg, kw",
        [
            pytest.param(SMALL.replace(max_num_seqs=5), {}, id="mtp-k1"),
            pytest.param(SMALL.replace(max_num_seqs=4, num_speculative_tokens=3), {}, id="mtp-k3"),
            pytest.param(
                SMALL.replace(
                    speculative_method="eagle",
                    num_speculative_tokens=2,
                    max_num_seqs=4,
                    block_size=16,
                    max_model_len=300,
                ),
                {"mrope": True},
                id="eagle-k2-mrope",
            ),
            pytest.param(
                SMALL.replace(max_num_seqs=3, num_speculative_tokens=2),
                {"padded_drafter_batch": False},
                id="mtp-k2-unpadded",
            ),
        ],
    )
    def test_call_sites_match_reference(cfg, kw) -> None:  # type: ignore[no-untyped-def]
        seen: set[str] = set()

        def check(kernel: str, io: dict) -> None:  # type: ignore[type-arg]
            seen.add(kernel)
            cs.check_outputs(kernel, io)

        assert cs.run_call_sites(cfg, check=check, **kw) > 0
        expected = (
            set(cs.KERNELS)
            if kw.get("padded_drafter_batch", True)
            else {
                cs.STEP_KERNEL,
                cs.MTP_NORM_KERNEL,
            }
        )
        if cfg.num_speculative_tokens == 1:
            expected.discard(cs.STEP_KERNEL)
        if cfg.speculative_method != "mtp":
            expected.discard(cs.MTP_NORM_KERNEL)
        assert seen == expected

    # --- eagle_step_slot_mapping_metadata_kernel ------------------------------

    @st.composite
    def step_inputs(draw):  # type: ignore[no-untyped-def]
        block_size = draw(st.sampled_from([1, 16, 64, 256]))
        max_model_len = draw(st.integers(1, 3000))
        width = draw(st.integers(1, -(-max_model_len // block_size) + 3))
        batch = draw(st.integers(1, 12))
        padding = draw(st.sampled_from([0, 0, 1, 5]))
        # Positions up to and past the limit (exceeding rows are clamped).
        positions = draw(
            st.lists(st.integers(0, max_model_len + 1), min_size=batch, max_size=batch)
        )
        seq_lens = draw(st.lists(st.integers(1, max_model_len), min_size=batch, max_size=batch))
        return block_size, max_model_len, width, batch, padding, positions, seq_lens

    @SETTINGS
    @given(step_inputs())
    def test_step_kernel(case) -> None:  # type: ignore[no-untyped-def]
        block_size, max_model_len, width, batch, padding, positions, seq_lens = case
        pos = torch.tensor(positions, dtype=torch.int64)
        table = torch.arange(batch * width, dtype=torch.int32).reshape(batch, width) + 3
        lens = torch.tensor(seq_lens, dtype=torch.int32)
        out_pos = torch.full((batch,), -7, dtype=torch.int64)
        out_slot = torch.full((batch + padding,), -7, dtype=torch.int64)
        ref_pos, ref_slot, ref_lens = cs.ref_step(
            pos, table, lens, block_size, max_model_len, batch + padding
        )
        eagle_step_update_slot_mapping_and_metadata(
            positions_1d=pos,
            block_table_tensor=table,
            seq_lens=lens,
            block_size=block_size,
            max_model_len=max_model_len,
            out_clamped_positions=out_pos,
            out_slot_mapping=out_slot,
            input_batch_size=batch + padding if padding else None,
        )
        assert torch.equal(out_pos, ref_pos)
        assert torch.equal(out_slot, ref_slot)
        assert torch.equal(lens, ref_lens)
        assert bool((out_slot[batch:] == PADDING_SLOT_ID).all())

    # --- eagle_prepare_next_token_padded_kernel --------------------------------

    @st.composite
    def next_token_inputs(draw):  # type: ignore[no-untyped-def]
        batch = draw(st.integers(1, 9))
        width = draw(st.integers(1, 16))
        vocab = draw(st.sampled_from([2, 100, 129280]))
        token = st.one_of(st.just(-1), st.integers(0, vocab - 1), st.integers(vocab, vocab + 3))
        rows = draw(
            st.lists(
                st.lists(token, min_size=width, max_size=width),
                min_size=batch,
                max_size=batch,
            )
        )
        discard = draw(st.lists(st.booleans(), min_size=batch, max_size=batch))
        return vocab, rows, discard

    @SETTINGS
    @given(next_token_inputs())
    def test_next_token_kernel(case) -> None:  # type: ignore[no-untyped-def]
        vocab, rows, discard = case
        sampled = torch.tensor(rows, dtype=torch.int32)
        batch, width = sampled.shape
        mask = torch.tensor(discard, dtype=torch.bool)
        backup = torch.arange(batch, dtype=torch.int32) + 1000
        next_ids = torch.full((batch,), -5, dtype=torch.int32)
        count = torch.full((batch,), -5, dtype=torch.int32)
        # The launch statement of prepare_next_token_ids_padded.
        eagle_prepare_next_token_padded_kernel[(batch,)](
            sampled,
            mask,
            backup,
            next_ids,
            count,
            vocab,
            width,
            batch,
            sampled.stride(0),
            BLOCK_SIZE_TOKENS=eagle_prepare_next_token_block_size(width),
        )
        ref_ids, ref_count = cs.ref_next_token(sampled, mask, backup, vocab)
        assert torch.equal(next_ids, ref_ids)
        assert torch.equal(count, ref_count)

    # --- eagle_prepare_inputs_padded_kernel ------------------------------------

    @st.composite
    def prepare_inputs_cases(draw):  # type: ignore[no-untyped-def]
        batch = draw(st.integers(1, 10))
        drafts = draw(st.lists(st.integers(0, 6), min_size=batch, max_size=batch))
        accepted = [draw(st.integers(0, d)) for d in drafts]
        prefill = [draw(st.integers(1, 9)) for _ in drafts]
        return drafts, accepted, prefill

    @SETTINGS
    @given(prepare_inputs_cases())
    def test_prepare_inputs_kernel(case) -> None:  # type: ignore[no-untyped-def]
        drafts, accepted, prefill = case
        batch = len(drafts)
        # Requests without drafts may be prefill chunks of any length.
        query = [d + 1 if d else p for d, p in zip(drafts, prefill, strict=True)]
        cu_draft = torch.tensor(drafts, dtype=torch.int32).cumsum(0).to(torch.int32)
        valid = torch.tensor([a + 1 for a in accepted], dtype=torch.int32)
        qsl = torch.zeros(batch + 1, dtype=torch.int32)
        qsl[1:] = torch.tensor(query, dtype=torch.int32).cumsum(0)
        idx = torch.full((batch,), -5, dtype=torch.int32)
        rejected = torch.full((batch,), -5, dtype=torch.int32)
        eagle_prepare_inputs_padded_kernel[(batch,)](cu_draft, valid, qsl, idx, rejected, batch)
        ref_idx, ref_rejected = cs.ref_prepare_inputs(cu_draft, valid, qsl)
        assert torch.equal(idx, ref_idx)
        assert torch.equal(rejected, ref_rejected)
        expected = [
            q - 1 - (d - a if d else 0)
            for q, d, a in zip(qsl[1:].tolist(), drafts, accepted, strict=True)
        ]
        assert idx.tolist() == expected

    # --- _mtp_shared_head_rmsnorm_kernel --------------------------------------

    @pytest.mark.parametrize("hidden", [FLASH.hidden_size, PRO.hidden_size, 96])
    @pytest.mark.parametrize("weight_dtype", [torch.bfloat16, torch.float32])
    @pytest.mark.parametrize("num_tokens", [0, 1, 5])
    def test_mtp_norm_kernel(hidden: int, weight_dtype, num_tokens: int) -> None:  # type: ignore[no-untyped-def]
        gen = torch.Generator().manual_seed(hidden + num_tokens)
        x = (3 * torch.randn(num_tokens, hidden, generator=gen)).to(torch.bfloat16)
        if num_tokens:
            x[0] = 0  # an all-zero row stays zero
        weight = (1 + 0.1 * torch.randn(hidden, generator=gen)).to(weight_dtype)
        out = mtp_shared_head_rmsnorm(x, weight, 1e-6)
        assert out.shape == x.shape and out.dtype == torch.bfloat16
        torch.testing.assert_close(out, cs.ref_rmsnorm(x, weight, 1e-6), rtol=2e-2, atol=2e-2)
        if num_tokens:
            assert bool((out[0] == 0).all())
