"""The guarded C128A top-k metadata kernel, run by the Triton interpreter.

``_build_c128a_topk_metadata_kernel`` (vllm/models/deepseek_v4/sparse_mla.py)
must equal a torch reference on valid batches and, when request ids, block
numbers or positions are garbage, write slot -1 (lengths counting only real
slots) without touching memory outside its tensor arguments.

What the interpreter does with a bad pointer: nothing. ``tl.load``/``tl.store``
become raw host-memory reads/writes at the computed addresses (no bounds
check): slightly out of range they silently read or clobber neighbouring
memory, far out of range they kill the process with SIGSEGV. So here:

* every interpreted load/store is checked against the exact extent of the
  kernel's tensor arguments (their views, not whole storages) *before* it
  happens (``MemoryChecker``); an access outside them fails the test;
* outputs are views inside larger sentinel-filled buffers, and the margins
  must stay untouched;
* each test runs in its own fork, so a crash fails that test only.

TRITON_INTERPRET must be set before Triton is imported, so under a normal run
this module re-runs itself in a subprocess with the interpreter on.
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

    def test_builder_buffers_are_initialised() -> None:
        """CUDA-graph padding rows must never expose left-over memory."""
        from unittest import mock

        import torch
        from dsv4warmup.legacy.sparse_mla import make_flashmla_builder
        from dsv4warmup.serving import FLASH

        cfg = FLASH.replace(max_num_batched_tokens=64, max_model_len=4096)
        real_empty = torch.empty

        def garbage_empty(*args: object, **kwargs: object) -> torch.Tensor:
            # Fresh host pages are often zero: make left-over memory visible.
            return real_empty(*args, **kwargs).fill_(7)  # type: ignore[arg-type]

        with mock.patch.object(torch, "empty", garbage_empty):
            builder = make_flashmla_builder(cfg, 128, device="cpu")
        assert builder.c128a_max_compressed == 128
        assert builder.c128a_global_decode_buffer.shape == (64, 128)
        assert bool((builder.c128a_global_decode_buffer == -1).all())
        assert bool((builder.c128a_prefill_buffer == -1).all())
        assert bool((builder.c128a_decode_lens_buffer == 0).all())
        # 0: padding tokens map to request 0, a real block-table row.
        assert builder.req_id_per_token_buffer.dtype == torch.int32
        assert bool((builder.req_id_per_token_buffer == 0).all())

    def test_builder_bounds_block_ids_by_the_bound_kv_cache() -> None:
        """The C128A block-id bound the builder passes is the number of kernel
        blocks of the KV cache bound to its layers (read in build()), not
        cache_config.num_gpu_blocks: with two kernel blocks per allocation
        block, that would reject half the valid ids."""
        from typing import Any
        from unittest import mock

        import torch
        from dsv4warmup.legacy.sparse_mla import Batch, Runner, no_attention_kernels
        from dsv4warmup.serving import FLASH
        from dsv4warmup.triton_keys import record_launches
        from vllm.models.deepseek_v4 import sparse_mla

        cfg = FLASH.replace(max_num_batched_tokens=64, max_model_len=4096, max_num_seqs=8)
        runner = Runner(cfg, device="cpu")
        runner.vllm_config.cache_config.num_gpu_blocks = 1000  # allocation blocks
        builder = runner.builders[128]
        ctx = runner.vllm_config.compilation_config.static_forward_context
        seen: list[int] = []

        def recording(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
            seen.append(kwargs["num_kv_blocks"])
            n_decode, n_total = args[2], args[0].shape[0]
            return (
                builder.c128a_global_decode_buffer[:n_decode],
                builder.c128a_decode_lens_buffer[:n_decode],
                builder.c128a_prefill_buffer[: n_total - n_decode],
            )

        def build() -> int:
            batch = Batch(decodes=((1, 1000),) * 2, prefills=((8, 300),))
            with (
                no_attention_kernels("cpu"),
                record_launches(),  # the slot-mapping kernel: recorded, not run
                mock.patch.object(sparse_mla, "build_c128a_topk_metadata", recording),
            ):
                builder.build(0, runner.common_metadata(batch, 0))
            return seen[-1]

        def bind(*blocks: int) -> None:
            builder.layer_names = [f"c128a.{i}" for i in range(len(blocks))]
            for name, n in zip(builder.layer_names, blocks, strict=True):
                ctx[name] = mock.Mock(kv_cache=torch.empty((n, 2, 584), dtype=torch.uint8))

        bind(2000)  # 1000 allocation blocks of two kernel blocks
        assert build() == 2000
        bind(2000, 1500)  # the smallest cache bounds the shared ids
        assert build() == 1500
        for name in builder.layer_names:  # before bind_kv_cache: empty views
            ctx[name] = mock.Mock(kv_cache=torch.tensor([]))
        assert build() == 0

else:
    import numpy as np
    import torch
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from vllm.models.deepseek_v4 import sparse_mla
    from vllm.utils.math_utils import cdiv

    def _index_scalars_with_numpy_2_4() -> None:
        """Triton 3.6's interpreter turns a scalar argument used as an index
        (``range(0, n, BLOCK)``) into ``int(ndarray of shape (1,))``, which
        NumPy >= 2.4 refuses; take the element explicitly."""
        from triton.runtime import interpreter

        patch_tensor = interpreter._patch_lang_tensor
        if getattr(patch_tensor, "_numpy_2_4", False):
            return

        def patched(tensor, scope):  # type: ignore[no-untyped-def]
            patch_tensor(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

        patched._numpy_2_4 = True  # type: ignore[attr-defined]
        interpreter._patch_lang_tensor = patched

    _index_scalars_with_numpy_2_4()

    RATIO = 128
    KV_BLOCK = 256  # tokens per KV-cache block
    BLOCK = KV_BLOCK // RATIO  # compressed tokens per block
    INT32_MAX = 2**31 - 1

    from interpret_memcheck import (
        MemoryChecker,
        guarded,
        margins_untouched,
    )

    class C128ABatch:
        """Inputs of ``build_c128a_topk_metadata`` as the metadata builder
        passes them: decodes first, then prefills; ``num_padding`` CUDA-graph
        padding tokens after the decodes (slot -1, request 0, stale
        position)."""

        def __init__(
            self,
            rng: np.random.Generator,
            max_model_len: int,
            decodes: list[tuple[int, int]],
            prefills: list[tuple[int, int]],
            num_padding: int = 0,
            num_kv_blocks: int = 700,
            table_rows: int = 16,
        ) -> None:
            self.width = sparse_mla.c128a_max_compressed_tokens(max_model_len)
            self.num_kv_blocks = num_kv_blocks
            table_width = cdiv(max_model_len, KV_BLOCK)
            requests = decodes + prefills
            rows = max(table_rows, len(requests))
            self.full_block_table = torch.as_tensor(
                rng.integers(0, num_kv_blocks, (rows, table_width)), dtype=torch.int32
            )
            positions, req_ids, slots = [], [], []
            for req, (q, s) in enumerate(decodes):
                positions += range(s - q, s)
                req_ids += [req] * q
                slots += [1] * q
            positions += rng.integers(0, max_model_len, num_padding).tolist()
            req_ids += [0] * num_padding
            slots += [-1] * num_padding
            self.num_decodes = len(decodes)
            self.num_decode_tokens = len(positions)
            for req, (q, s) in enumerate(prefills, start=len(decodes)):
                positions += range(s - q, s)
                req_ids += [req] * q
                slots += [1] * q
            n = len(positions)
            self.positions = torch.tensor(positions, dtype=torch.int64)
            self.req_ids = torch.tensor(req_ids, dtype=torch.int32)
            self.slot_mapping = torch.tensor(slots, dtype=torch.int64)
            rows_out = n + 5
            self.global_decode = guarded((rows_out, self.width), torch.int32, -1)
            self.decode_lens = guarded((rows_out,), torch.int32, 0)
            self.prefill = guarded((rows_out, self.width), torch.int32, -1)

        @property
        def block_table(self) -> torch.Tensor:
            return self.full_block_table[: self.num_decodes]

        def run(self, num_kv_blocks: int | None = -1) -> None:
            bound = self.num_kv_blocks if num_kv_blocks == -1 else num_kv_blocks
            sparse_mla.build_c128a_topk_metadata(
                self.positions,
                RATIO,
                self.num_decode_tokens,
                self.req_ids,
                self.block_table,
                BLOCK,
                self.slot_mapping,
                self.global_decode,
                self.decode_lens,
                self.prefill,
                max_compressed_tokens=self.width,
                num_kv_blocks=bound,
            )

        def reference(
            self, num_kv_blocks: int | None = -1
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """Expected contents of the three (inner) output buffers."""
            bound = self.num_kv_blocks if num_kv_blocks == -1 else num_kv_blocks
            if bound is None:
                bound = INT32_MAX // BLOCK
            bound = min(bound, INT32_MAX // BLOCK)
            width, table = self.width, self.block_table
            rows, table_width = table.shape
            pos = self.positions
            n = torch.div(pos + 1, RATIO, rounding_mode="trunc").clamp(max=width)
            j = torch.arange(width)
            global_decode = torch.full_like(self.global_decode, -1)
            decode_lens = torch.zeros_like(self.decode_lens)
            prefill = torch.full_like(self.prefill, -1)
            d = self.num_decode_tokens
            if d:
                req = self.req_ids[:d].long()
                row_ok = (self.slot_mapping[:d] >= 0) & (req >= 0) & (req < rows)
                col = j // BLOCK
                valid = (j[None] < n[:d, None]) & row_ok[:, None]
                valid &= (col < table_width)[None]
                if rows:
                    gathered = table[req.clamp(0, rows - 1)][
                        :, col.clamp(max=table_width - 1)
                    ].long()
                else:
                    gathered = torch.full((d, width), -1, dtype=torch.long)
                valid &= (gathered >= 0) & (gathered < bound)
                slots = gathered * BLOCK + (j % BLOCK)[None]
                global_decode[:d] = torch.where(valid, slots, -1).to(torch.int32)
                decode_lens[:d] = valid.sum(1).to(torch.int32)
            p = pos.shape[0] - d
            if p:
                local = j[None].expand(p, width)
                prefill[:p] = torch.where(local < n[d:, None], local, -1).to(torch.int32)
            return global_decode, decode_lens, prefill

        def check(self, num_kv_blocks: int | None = -1) -> MemoryChecker:
            with MemoryChecker() as checker:
                self.run(num_kv_blocks)
            assert not checker.violations
            for out in (self.global_decode, self.decode_lens, self.prefill):
                assert margins_untouched(out), "write outside an output view"
            expected = self.reference(num_kv_blocks)
            for name, out, ref in zip(
                ("global_decode", "decode_lens", "prefill"),
                (self.global_decode, self.decode_lens, self.prefill),
                expected,
                strict=True,
            ):
                assert torch.equal(out, ref), f"{name} differs from the reference"
            # Lengths count exactly the real slots of each decode row.
            d = self.num_decode_tokens
            assert torch.equal(self.decode_lens[:d], (self.global_decode[:d] != -1).sum(1).int())
            return checker

    # max_model_len -> C128A width 128, 256, 1024, 8192.
    MAX_MODEL_LENS = (4096, 32768, 131072, 1048576)

    def _batch(rng: np.random.Generator, kind: str, max_model_len: int) -> C128ABatch:
        def seq() -> int:
            return int(rng.integers(1, max_model_len))

        decodes: list[tuple[int, int]] = []
        prefills: list[tuple[int, int]] = []
        padding = 0
        if kind in ("decode", "mixed"):
            decodes = [(1, max(1, seq())) for _ in range(5)]
            decodes += [(1, 128), (1, 127), (1, 129), (1, max_model_len)]
            padding = 3 if kind == "decode" else 0
        if kind == "mtp":
            decodes = [(2, max(2, seq())) for _ in range(4)] + [(1, 300), (2, 256)]
            padding = 2
        if kind in ("prefill", "mixed"):
            for q in (3, 17):
                s = max(q, seq())
                prefills.append((q, s))
            prefills.append((5, 5))
            prefills.append((4, min(max_model_len, 128 * 3 + 1)))
        return C128ABatch(rng, max_model_len, decodes, prefills, num_padding=padding)

    @pytest.mark.forked
    @pytest.mark.parametrize("max_model_len", MAX_MODEL_LENS)
    @pytest.mark.parametrize("kind", ["decode", "mtp", "prefill", "mixed"])
    def test_valid_batch_matches_reference(kind: str, max_model_len: int) -> None:
        batch = _batch(np.random.default_rng(max_model_len), kind, max_model_len)
        batch.check()
        # Valid inputs: the guard changes nothing for real tokens -- every
        # compressed position below the token's count maps to its block.
        d, table = batch.num_decode_tokens, batch.block_table
        for t in range(d):
            if batch.slot_mapping[t] < 0:
                assert int(batch.decode_lens[t]) == 0
                continue
            count = min((int(batch.positions[t]) + 1) // RATIO, batch.width)
            assert int(batch.decode_lens[t]) == count
            row = table[int(batch.req_ids[t])]
            for j in {0, count // 2, count - 1} if count else ():
                expected = int(row[j // BLOCK]) * BLOCK + j % BLOCK
                assert int(batch.global_decode[t, j]) == expected

    GARBAGE_REQUESTS = {
        "negative": -1,
        "past_end": None,  # == number of block-table rows
        "huge": 1 << 28,
        "int32_min": -(2**31),
        "int32_max": INT32_MAX,
    }
    GARBAGE_BLOCKS = {
        "negative": -1,
        "very_negative": -(2**31),
        "past_kv_cache": None,  # == num_kv_blocks
        "int32_max": INT32_MAX,
    }

    @pytest.mark.forked
    @pytest.mark.parametrize("garbage", sorted(GARBAGE_REQUESTS))
    def test_garbage_request_ids_give_no_slots(garbage: str) -> None:
        rng = np.random.default_rng(1)
        batch = _batch(rng, "mixed", 131072)
        value = GARBAGE_REQUESTS[garbage]
        if value is None:
            value = batch.num_decodes
        bad = [0, 3, batch.num_decode_tokens - 1]
        batch.req_ids[bad] = value
        batch.check()
        for t in bad:
            assert bool((batch.global_decode[t] == -1).all())
            assert int(batch.decode_lens[t]) == 0
        assert int(batch.decode_lens[1]) > 0  # the others are untouched

    @pytest.mark.forked
    @pytest.mark.parametrize("garbage", sorted(GARBAGE_BLOCKS))
    @pytest.mark.parametrize("bounded", [True, False], ids=["kv_blocks", "int32"])
    def test_garbage_block_numbers_give_minus_one(garbage: str, bounded: bool) -> None:
        rng = np.random.default_rng(2)
        batch = _batch(rng, "decode", 32768)
        value = GARBAGE_BLOCKS[garbage]
        if value is None:
            value = batch.num_kv_blocks if bounded else INT32_MAX // BLOCK + 1
        # Garbage in the first block of every decode request.
        batch.full_block_table[:, 0] = value
        num_kv_blocks = batch.num_kv_blocks if bounded else None
        batch.check(num_kv_blocks)
        # Entries 0 and 1 (block 0) are gone; lengths count what is left.
        d = batch.num_decode_tokens
        assert bool((batch.global_decode[:d, :BLOCK] == -1).all())
        count = (batch.positions[:d] + 1) // RATIO
        real = batch.slot_mapping[:d] >= 0
        expected_lens = torch.where(real, (count - BLOCK).clamp(min=0), 0)
        assert torch.equal(batch.decode_lens[:d].long(), expected_lens)

    @pytest.mark.forked
    def test_garbage_positions_stay_in_bounds() -> None:
        rng = np.random.default_rng(3)
        batch = _batch(rng, "mixed", 4096)
        batch.positions[[0, 2]] = 2**62  # capped at the buffer width
        batch.positions[[1, batch.num_decode_tokens + 1]] = -(2**40)
        batch.check()
        # Capped at the buffer width (128), then at the block-table row: its
        # 16 blocks hold 32 compressed tokens; the rest would be other rows.
        table_width = batch.block_table.shape[1]
        assert int(batch.decode_lens[0]) == min(batch.width, table_width * BLOCK) == 32
        assert int(batch.decode_lens[1]) == 0

    @pytest.mark.forked
    def test_no_decode_rows() -> None:
        # Prefill-only batch: an empty block-table view is never read.
        batch = _batch(np.random.default_rng(4), "prefill", 131072)
        assert batch.block_table.shape[0] == 0
        batch.check()

    @pytest.mark.forked
    def test_checker_catches_an_out_of_bounds_read() -> None:
        """The memory checker is live: lying about the block-table rows lets
        a request id past the end through, and the checker stops the read."""
        from triton.runtime.errors import InterpreterError

        batch = _batch(np.random.default_rng(5), "decode", 4096)
        batch.req_ids[0] = batch.num_decodes + 2  # still inside the storage
        args, kwargs = sparse_mla._c128a_topk_metadata_kernel_args(
            batch.global_decode,
            batch.global_decode.stride(0),
            batch.decode_lens,
            batch.prefill,
            batch.prefill.stride(0),
            batch.positions,
            RATIO,
            batch.width,
            batch.num_decode_tokens,
            batch.req_ids,
            batch.block_table,
            batch.block_table.stride(0),
            batch.num_decodes + 100,  # wrong bound
            batch.block_table.shape[1],
            BLOCK,
            batch.num_kv_blocks,
            batch.slot_mapping,
        )
        grid = (batch.positions.shape[0],)
        with MemoryChecker() as checker, pytest.raises(InterpreterError):
            sparse_mla._build_c128a_topk_metadata_kernel[grid](*args, **kwargs)
        assert checker.violations and checker.violations[0][0] == "load"

    @st.composite
    def garbage_batches(draw: st.DrawFn) -> tuple[C128ABatch, int | None]:
        seed = draw(st.integers(0, 2**32 - 1))
        rng = np.random.default_rng(seed)
        max_model_len = draw(st.sampled_from(MAX_MODEL_LENS[:3]))
        num_decodes = draw(st.integers(0, 6))
        mtp = draw(st.booleans())
        decodes = []
        for _ in range(num_decodes):
            q = int(rng.integers(1, 3)) if mtp else 1
            decodes.append((q, int(rng.integers(q, max_model_len + 1))))
        prefills = []
        for _ in range(draw(st.integers(0 if decodes else 1, 3))):
            q = int(rng.integers(2, 40))
            prefills.append((q, int(rng.integers(q, max_model_len + 1))))
        padding = draw(st.integers(0, 3)) if decodes else 0
        batch = C128ABatch(
            rng,
            max_model_len,
            decodes,
            prefills,
            num_padding=padding,
            num_kv_blocks=draw(st.integers(1, 900)),
        )
        specials = [-1, -(2**31), INT32_MAX, 1 << 20, batch.num_kv_blocks]
        # Garbage block numbers anywhere in the table.
        table = batch.full_block_table
        for _ in range(draw(st.integers(0, 6))):
            r = int(rng.integers(0, table.shape[0]))
            c = int(rng.integers(0, table.shape[1]))
            table[r, c] = int(rng.choice(specials))
        # Garbage request ids and positions on some tokens.
        n = batch.positions.shape[0]
        for _ in range(draw(st.integers(0, 3))):
            t = int(rng.integers(0, n))
            batch.req_ids[t] = int(rng.choice([-1, batch.num_decodes, 1 << 24]))
        if draw(st.booleans()):
            batch.positions[int(rng.integers(0, n))] = int(
                rng.choice([-(2**40), 2**40, max_model_len * 4])
            )
        bound = draw(st.sampled_from([-1, None]))  # batch's KV size / int32
        return batch, bound

    @pytest.mark.forked
    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(garbage_batches())
    def test_property_any_garbage_is_contained(
        case: tuple[C128ABatch, int | None],
    ) -> None:
        batch, bound = case
        batch.check(bound)
        # No slot ever leaves the KV cache.
        limit = batch.num_kv_blocks if bound == -1 else INT32_MAX // BLOCK
        slots = batch.global_decode[: batch.num_decode_tokens]
        real = slots[slots != -1]
        assert bool(((real >= 0) & (real < limit * BLOCK)).all())
