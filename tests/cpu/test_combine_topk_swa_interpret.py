"""``combine_topk_swa_indices`` run by the Triton interpreter, as DeepSeek V4
prefill calls it: one launch per workspace chunk, with ``query_start_loc`` /
``seq_lens`` / ``gather_lens`` slices that start mid-tensor (the kernel rebases
``query_start_loc`` on its first element), every layer type (SWA-only
``TOP_K=0``, C4A, C128A), ``M``/``N`` on and off multiples of 16 and ``N == 1``.
Outputs must equal a torch reference and every access must stay inside the
kernel's tensor views (see ``test_c128a_guard_interpret.py`` for the checker
and for why this module re-runs itself with ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from helpers import run_interpreted

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def _guard_module():  # type: ignore[no-untyped-def]
    path = Path(__file__).with_name("test_c128a_guard_interpret.py")
    spec = importlib.util.spec_from_file_location("_c128a_guard_helpers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if not INTERPRETED:

    def test_under_triton_interpreter() -> None:
        run_interpreted(__file__)

else:
    import numpy as np
    import torch
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from vllm.models.deepseek_v4.common.ops.cache_utils import (
        combine_topk_swa_indices,
    )
    from vllm.models.deepseek_v4.sparse_mla import c128a_max_compressed_tokens
    from vllm.v1.attention.backends.mla.sparse_swa import compute_prefill_chunk_plan

    MemoryChecker = _guard_module().MemoryChecker
    WINDOW = 128
    CHUNK = 4  # DeepseekV4Attention.PREFILL_CHUNK_SIZE

    def reference(
        topk: torch.Tensor,
        qsl: torch.Tensor,
        seq_lens: torch.Tensor,
        gather_lens: torch.Tensor,
        ratio: int,
        top_k: int,
        m: int,
        n: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        width = (top_k + WINDOW + 127) // 128 * 128
        out = torch.full((topk.shape[0], width), -1, dtype=torch.int32)
        lens = torch.zeros(topk.shape[0], dtype=torch.int32)
        base = int(qsl[0])
        for b in range(seq_lens.shape[0]):
            start, end = int(qsl[b]) - base, int(qsl[b + 1]) - base
            seq, gather = int(seq_lens[b]), int(gather_lens[b])
            for t in range(start, end):
                pos = seq - (end - start) + (t - start)
                k = min((pos + 1) // ratio, top_k)
                w = min(pos + 1, WINDOW)
                out[t, :k] = topk[t, :k] + m * b
                out[t, k : k + w] = m * b + n + torch.arange(w) + pos - w + 1 - (seq - gather)
                lens[t] = k + w
        return out, lens

    class Prefill:
        """Inputs of one DeepSeek V4 prefill step for one layer type, laid
        out as the metadata builders leave them."""

        def __init__(
            self,
            rng: np.random.Generator,
            ratio: int,
            width: int,
            num_decodes: int,
            prefills: list[tuple[int, int]],
            max_model_len: int,
            max_num_batched_tokens: int,
        ) -> None:
            self.ratio, self.width = ratio, width
            self.top_k = 0 if ratio <= 1 else width
            qlens = [1] * num_decodes + [q for q, _ in prefills]
            slens = [int(rng.integers(1, 500)) for _ in range(num_decodes)]
            slens += [s for _, s in prefills]
            self.num_decodes = num_decodes
            self.qsl = torch.tensor([0, *np.cumsum(qlens)], dtype=torch.int32)
            self.seq_lens = torch.tensor(slens, dtype=torch.int32)
            # _compute_prefill_metadata_kernel: query + min(prefix, window - 1).
            self.gather_lens = torch.tensor(
                [q + min(s - q, WINDOW - 1) for q, s in prefills], dtype=torch.int32
            )
            num_prefill_tokens = sum(q for q, _ in prefills)
            # C4A / SWA-only: the indexer's buffer; C128A: local indices.
            self.topk = torch.as_tensor(
                rng.integers(-1, 4 * width, (num_prefill_tokens, width)),
                dtype=torch.int32,
            )
            self.plan = compute_prefill_chunk_plan(
                [s for _, s in prefills],
                [q for q, _ in prefills],
                compress_ratio=ratio,
                prefill_chunk_size=CHUNK,
                window_size=WINDOW,
                max_model_len=max_model_len,
                max_num_batched_tokens=max_num_batched_tokens,
            )

        def run_chunks(self) -> list[tuple[int, int]]:
            """Every chunk as ``DeepseekV4FlashMLAAttention._forward_prefill``
            launches it; returns the chunks' (M, N)."""
            d = self.num_decodes
            base = int(self.qsl[d])
            seen = []
            for start, end, n, m in self.plan:
                qs, qe = int(self.qsl[d + start]) - base, int(self.qsl[d + end]) - base
                args = (
                    self.topk[qs:qe],
                    self.qsl[d + start : d + end + 1],
                    self.seq_lens[d:][start:end],
                    self.gather_lens[start:end],
                )
                with MemoryChecker() as checker:
                    out, lens = combine_topk_swa_indices(
                        *args, WINDOW, self.ratio, self.top_k, m, n
                    )
                assert not checker.violations
                ref_out, ref_lens = reference(*args, self.ratio, self.top_k, m, n)
                assert torch.equal(out, ref_out)
                assert torch.equal(lens, ref_lens)
                seen.append((m, n))
            return seen

    def _width(ratio: int, index_topk: int, max_model_len: int) -> int:
        return index_topk if ratio <= 4 else c128a_max_compressed_tokens(max_model_len)

    @pytest.mark.forked
    @pytest.mark.parametrize("ratio", [1, 4, 128])
    @pytest.mark.parametrize(
        "index_topk,max_model_len",
        [(512, 4096), (1024, 65536), (512, 1048576)],
        ids=["flash-4k", "pro-64k", "flash-1m"],
    )
    def test_chunks_match_reference(ratio: int, index_topk: int, max_model_len: int) -> None:
        rng = np.random.default_rng(ratio + max_model_len)
        width = _width(ratio, index_topk, max_model_len)
        # A small token budget keeps the workspace small, so these few short
        # prompts and chunked prefills after long prefixes already split into
        # several chunks that start mid-batch (after 3 decodes).
        mnbt = 64
        prefills = [(9, min(max_model_len, 5000)), (3, 3), (17, 17)]
        prefills += [(3, 130), (16, 143), (5, 7), (6, max_model_len)]
        prefills += [(3, 3)] * 4 + [(4, min(max_model_len, 2 * 128 + 20))]
        prefill = Prefill(rng, ratio, width, 3, prefills, max_model_len, mnbt)
        assert len(prefill.plan) >= 2, prefill.plan
        prefill.run_chunks()

    @pytest.mark.forked
    def test_n_equals_one_and_unaligned_slices() -> None:
        # C128A with every compressed prefix 1 (seq 128..255): N == 1; a chunk
        # break after 5 requests makes the gather_lens slice start at 5.
        rng = np.random.default_rng(7)
        # Workspace 4 * (512 + 128 + 256) = 3584; the first request's width
        # 512 + 3 + 127 = 642 lets 5 requests in, not 6.
        wide = (3, 65536)
        prefills = [wide] + [(3, 3)] * 4 + [(16, 143), (3, 200)]
        prefill = Prefill(rng, 128, 512, 1, prefills, 65536, 256)
        starts = [start for start, *_ in prefill.plan]
        assert 5 in starts, prefill.plan
        seen = prefill.run_chunks()
        assert (1 + 143, 1) in seen

    @st.composite
    def steps(draw: st.DrawFn) -> Prefill:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        ratio = draw(st.sampled_from([1, 4, 128]))
        max_model_len = draw(st.sampled_from([512, 4096, 65536]))
        mnbt = draw(st.sampled_from([32, 64, 256]))
        prefills = []
        budget = mnbt
        for _ in range(draw(st.integers(1, 8))):
            if budget < 3:
                break
            q = draw(st.integers(3, min(budget, 24, max_model_len)))
            s = draw(st.integers(q, max_model_len))
            prefills.append((q, s))
            budget -= q
        width = _width(ratio, draw(st.sampled_from([512, 1024])), max_model_len)
        return Prefill(rng, ratio, width, draw(st.integers(0, 5)), prefills, max_model_len, mnbt)

    @pytest.mark.forked
    @settings(
        max_examples=15,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(steps())
    def test_property_random_steps(prefill: Prefill) -> None:
        prefill.run_chunks()
