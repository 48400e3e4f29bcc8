"""vLLM 0.33.0's guarded ``BuildC128ATopkMetadataKernel``, run by the Triton
interpreter (patched 0.33.0 tree, Triton 3.8.0).

The kernel (vllm/models/deepseek_v4/sparse_mla.py) must equal a torch
reference of the unguarded computation on valid batches and, when request
ids, block ids or positions are garbage, write slot -1 (a request id out of
range: length 0; a block id out of range: a -1 slot inside the length, which
is the readable columns) without touching memory outside its tensor
arguments.

The interpreter turns ``tl.load``/``tl.store`` into raw host-memory accesses
(no bounds check), so every interpreted access is checked against the exact
extent of the kernel's tensor arguments before it happens
(``MemoryChecker``), outputs are views inside sentinel-filled buffers whose
margins must stay untouched, and each test runs in its own fork.

The pytest process imports a 0.26.0 tree (tests/conftest.py), so under a
normal run this module re-runs itself in a subprocess that imports the
patched 0.33.0 tree with ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import run_interpreted, v033_interpreted_env

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1" and os.environ.get("DSV4_V033_INTERPRET")
REPO = Path(__file__).resolve().parents[2]


def patched_v033_tree() -> Path:
    """The patched 0.33.0 tree: ``DSV4_V033_PATCHED_TREE`` (e.g. a dev tree
    with the commits), else the one generated from patches/v0.33.0/."""
    override = os.environ.get("DSV4_V033_PATCHED_TREE")
    if override:
        return Path(override).resolve()
    from dsv4warmup import trees
    from dsv4warmup.paths import PATCHES

    if not (PATCHES / "v0.33.0" / "series").exists():
        pytest.skip("patches/v0.33.0 has no series yet")
    return trees.patched_tree("0.33.0")


if not INTERPRETED:

    def test_under_triton_interpreter() -> None:
        run_interpreted(__file__, v033_interpreted_env(patched_v033_tree()))

else:
    from dsv4warmup.registry import platform

    platform.install(platform.H200)  # before vLLM is imported

    import numpy as np
    import torch
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from vllm.models.deepseek_v4 import sparse_mla

    RATIO = 128
    KV_BLOCK = 256  # tokens per kernel block
    BLOCK = KV_BLOCK // RATIO  # compressed tokens per block
    INT32_MAX = 2**31 - 1

    def cdiv(a: int, b: int) -> int:
        return -(-a // b)

    def c128a_width(max_model_len: int) -> int:
        """Row width of the builder's C128A buffers."""
        return cdiv(cdiv(max_model_len, RATIO), 128) * 128

    from c128a_reference import c128a_reference
    from interpret_memcheck import (
        MemoryChecker,
        OutOfBoundsAccess,
        guarded,
        margins_untouched,
    )

    class C128ABatch:
        """Inputs of ``build_c128a_topk_metadata`` as the metadata builder
        passes them: decodes first, then prefills; ``num_padding`` CUDA-graph
        padding tokens after the decodes (slot -1, request 0, stale position)."""

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
            self.width = c128a_width(max_model_len)
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

        def run(self) -> None:
            sparse_mla.build_c128a_topk_metadata(
                self.positions,
                RATIO,
                self.num_decode_tokens,
                self.req_ids,
                self.block_table,
                BLOCK,
                self.num_kv_blocks,
                self.slot_mapping,
                self.global_decode,
                self.decode_lens,
                self.prefill,
                max_compressed_tokens=self.width,
            )

        def reference(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """Expected contents of the three (inner) output buffers
            (``c128a_reference``), the rows past the batch untouched."""
            d = self.num_decode_tokens
            decode, lens, local = c128a_reference(
                self.positions,
                d,
                self.req_ids,
                self.block_table,
                BLOCK,
                self.num_kv_blocks,
                self.slot_mapping,
                self.width,
                RATIO,
            )
            global_decode = torch.full_like(self.global_decode, -1)
            decode_lens = torch.zeros_like(self.decode_lens)
            prefill = torch.full_like(self.prefill, -1)
            global_decode[:d], decode_lens[:d] = decode, lens
            prefill[: local.shape[0]] = local
            return global_decode, decode_lens, prefill

        def check(self) -> MemoryChecker:
            with MemoryChecker() as checker:
                self.run()
            assert not checker.violations
            for out in (self.global_decode, self.decode_lens, self.prefill):
                assert margins_untouched(out), "write outside an output view"
            expected = self.reference()
            for name, out, ref in zip(
                ("global_decode", "decode_lens", "prefill"),
                (self.global_decode, self.decode_lens, self.prefill),
                expected,
                strict=True,
            ):
                assert torch.equal(out, ref), f"{name} differs from the reference"
            # A real token's slots all lie inside its length.
            d = self.num_decode_tokens
            real = self.slot_mapping[:d] >= 0
            past = torch.arange(self.width)[None] >= self.decode_lens[:d, None]
            assert bool((self.global_decode[:d][past & real[:, None]] == -1).all())
            return checker

    # max_model_len -> C128A width 128, 256, 1024.
    MAX_MODEL_LENS = (4096, 32768, 131072)

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
        d, table = batch.num_decode_tokens, batch.block_table
        for t in range(d):
            count = min((int(batch.positions[t]) + 1) // RATIO, batch.width)
            assert int(batch.decode_lens[t]) == (count if batch.slot_mapping[t] >= 0 else 0)
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
        batch = _batch(np.random.default_rng(1), "mixed", 131072)
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
    def test_garbage_block_ids_give_minus_one(garbage: str) -> None:
        batch = _batch(np.random.default_rng(2), "decode", 32768)
        value = GARBAGE_BLOCKS[garbage]
        if value is None:
            value = batch.num_kv_blocks
        batch.full_block_table[:, 0] = value  # the first block of every request
        batch.check()
        d = batch.num_decode_tokens
        assert bool((batch.global_decode[:d, :BLOCK] == -1).all())
        # The bad block's columns are -1 slots inside the length: a real
        # token's slots stay where the attention kernel reads them.
        count = ((batch.positions[:d] + 1) // RATIO).clamp(0, batch.width)
        real = batch.slot_mapping[:d] >= 0
        expected_lens = torch.where(real, count, 0)
        assert torch.equal(batch.decode_lens[:d].long(), expected_lens)

    @pytest.mark.forked
    def test_garbage_positions_stay_in_bounds() -> None:
        batch = _batch(np.random.default_rng(3), "mixed", 4096)
        batch.positions[[0, 2]] = 2**62  # capped at the buffer width
        batch.positions[[1, batch.num_decode_tokens + 1]] = -(2**40)
        batch.check()
        # Capped at the buffer width (128), then at the block-table row: its
        # 16 blocks hold 32 compressed tokens; the rest would be other rows.
        table_width = batch.block_table.shape[1]
        assert int(batch.decode_lens[0]) == min(batch.width, table_width * BLOCK) == 32
        assert int(batch.decode_lens[1]) == 0

    @pytest.mark.forked
    def test_gpu_garbage_script_checks_hold(monkeypatch: pytest.MonkeyPatch) -> None:
        """The checks of ``v033_c128a_garbage.py patched`` (the GPU memcheck
        test's batch) hold here, with no access outside the kernel's tensors."""
        from dsv4warmup.gpu.c128a_guard_check import load_module

        path = REPO / "scripts" / "dsv4warmup" / "gpu" / "v033_c128a_garbage.py"
        script = load_module(path, "v033_c128a_garbage")
        monkeypatch.setattr(script, "DEVICE", "cpu")
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
        with MemoryChecker() as checker:
            script.run_patched()
        assert not checker.violations

    @pytest.mark.forked
    def test_no_decode_rows() -> None:
        # Prefill-only batch: an empty block-table view is never read.
        batch = _batch(np.random.default_rng(4), "prefill", 131072)
        assert batch.block_table.shape[0] == 0
        batch.check()

    @pytest.mark.forked
    def test_checker_catches_an_out_of_bounds_read() -> None:
        """The memory checker is live: lying about the block-table rows lets a
        request id past the end through, and the checker stops the read."""
        from triton.runtime.errors import InterpreterError

        batch = _batch(np.random.default_rng(5), "decode", 4096)
        batch.req_ids[0] = batch.num_decodes + 2  # still inside the storage
        kernel = sparse_mla.BuildC128ATopkMetadataKernel.kernel
        grid = (batch.positions.shape[0],)
        with MemoryChecker() as checker, pytest.raises((InterpreterError, OutOfBoundsAccess)):
            kernel[grid](
                global_decode_ptr=batch.global_decode,
                global_decode_stride=batch.global_decode.stride(0),
                decode_lens_ptr=batch.decode_lens,
                prefill_local_ptr=batch.prefill,
                prefill_local_stride=batch.prefill.stride(0),
                positions_ptr=batch.positions,
                compress_ratio=RATIO,
                max_compressed_tokens=batch.width,
                num_decode_tokens=batch.num_decode_tokens,
                token_to_req_indices_ptr=batch.req_ids,
                block_table_ptr=batch.block_table,
                block_table_stride=batch.block_table.stride(0),
                block_table_rows=batch.num_decodes + 100,  # wrong bound
                readable_width=min(batch.block_table.shape[1] * BLOCK, batch.width),
                block_size=BLOCK,
                num_kv_blocks=batch.num_kv_blocks,
                slot_mapping_ptr=batch.slot_mapping,
                BLOCK_SIZE=1024,
            )
        assert checker.violations and checker.violations[0][0] == "load"

    @st.composite
    def garbage_batches(draw: st.DrawFn) -> C128ABatch:
        seed = draw(st.integers(0, 2**32 - 1))
        rng = np.random.default_rng(seed)
        max_model_len = draw(st.sampled_from(MAX_MODEL_LENS))
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
        table = batch.full_block_table
        for _ in range(draw(st.integers(0, 6))):
            r = int(rng.integers(0, table.shape[0]))
            c = int(rng.integers(0, table.shape[1]))
            table[r, c] = int(rng.choice(specials))
        n = batch.positions.shape[0]
        for _ in range(draw(st.integers(0, 3))):
            t = int(rng.integers(0, n))
            batch.req_ids[t] = int(rng.choice([-1, batch.num_decodes, 1 << 24]))
        if draw(st.booleans()):
            batch.positions[int(rng.integers(0, n))] = int(
                rng.choice([-(2**40), 2**40, max_model_len * 4])
            )
        return batch

    @pytest.mark.forked
    @settings(
        max_examples=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(garbage_batches())
    def test_property_any_garbage_is_contained(batch: C128ABatch) -> None:
        batch.check()
        # No slot ever leaves the KV cache.
        slots = batch.global_decode[: batch.num_decode_tokens]
        real = slots[slots != -1]
        assert bool(((real >= 0) & (real < batch.num_kv_blocks * BLOCK)).all())
