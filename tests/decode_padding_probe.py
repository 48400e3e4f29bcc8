"""Probe (run inside a vLLM tree's interpreter by tests/cpu/test_decode_padding.py):
``serving.full_decode_graph_size`` against vLLM's own CUDA-graph dispatch, V1
``CudagraphDispatcher`` and (where the tree has it) V2 ``CudaGraphManager``, for
every uniform decode batch of each case. Prints one JSON line."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from unittest import mock

import torch
from dsv4warmup.serving import full_decode_graph_size
from vllm.config import CUDAGraphMode
from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher

FAP = CUDAGraphMode.FULL_AND_PIECEWISE


def configs(sizes, seqs, q):
    cc = SimpleNamespace(
        cudagraph_mode=FAP,
        cudagraph_capture_sizes=sorted(sizes),
        max_cudagraph_capture_size=max(sizes),
        compile_sizes=[],
        cudagraph_specialize_lora=False,
        is_attention_compiled_piecewise=lambda: True,
    )
    return SimpleNamespace(
        compilation_config=cc,
        num_speculative_tokens=q - 1,
        lora_config=None,
        scheduler_config=SimpleNamespace(max_num_seqs=seqs),
        parallel_config=SimpleNamespace(tensor_parallel_size=1, data_parallel_size=1),
        speculative_config=None,
        cache_config=SimpleNamespace(use_kda_recoverssm=False),
    )


def v1(sizes, seqs, q, b):
    d = CudagraphDispatcher(configs(sizes, seqs, q))
    d.initialize_cudagraph_keys(FAP, q)
    mode, desc = d.dispatch(b * q, uniform_decode=True)
    return desc.num_tokens if mode == CUDAGraphMode.FULL else None


def v2(sizes, seqs, q, b):
    from vllm.v1.worker.gpu import cudagraph_utils as cu

    pp = SimpleNamespace(is_first_rank=True, is_last_rank=True)
    with (
        mock.patch.object(cu, "get_pp_group", lambda: pp),
        mock.patch.object(cu.current_platform, "get_global_graph_pool", lambda: None, create=True),
    ):
        m = cu.CudaGraphManager(configs(sizes, seqs, q), torch.device("cpu"), FAP, q)
    m._graphs_captured = True
    desc = m.dispatch(b, b * q, q, 0)
    return desc.num_tokens if desc.cg_mode == CUDAGraphMode.FULL else None


cases = json.loads(sys.argv[1])
runners = {"v1": v1}
try:
    import vllm.v1.worker.gpu.cudagraph_utils  # noqa: F401

    runners["v2"] = v2
except ImportError:
    pass
out: dict = {"runners": sorted(runners), "compared": 0, "capped": 0, "mismatches": []}
for sizes, seqs, q in cases:
    for b in range(1, seqs + 1):
        ours = full_decode_graph_size(sizes, b, q, seqs)
        for name, fn in runners.items():
            theirs = fn(sizes, seqs, q, b)
            out["compared"] += 1
            # a capture size fits, yet vLLM replays no FULL graph (max_num_seqs)
            if theirs is None and any(s >= b * q and s % q == 0 for s in sizes):
                out["capped"] += 1
            if theirs != ours:
                out["mismatches"].append([name, sizes, seqs, q, b, ours, theirs])
print(json.dumps(out))
