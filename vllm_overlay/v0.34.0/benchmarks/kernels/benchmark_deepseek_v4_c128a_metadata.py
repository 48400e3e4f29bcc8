# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Time DeepSeek V4's C128A top-k metadata kernel across builds.

Prints one JSON line per case: the median launch time under a CUDA graph and
a digest of the outputs, so that two builds can be compared for both.
"""

import hashlib
import inspect
import json
import statistics

import torch

from vllm.models.deepseek_v4.sparse_mla import build_c128a_topk_metadata
from vllm.platforms import current_platform
from vllm.triton_utils import triton
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.utils.math_utils import cdiv, round_up

COMPRESS_RATIO = 128
KV_BLOCK_SIZE = 256
NUM_KV_BLOCKS = 20000


def make_inputs(max_model_len: int, num_decode_tokens: int, num_prefill_tokens: int):
    """MTP decode tokens, two per request, then one prefill request."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    width = round_up(cdiv(max_model_len, COMPRESS_RATIO), 128)
    num_decodes = cdiv(num_decode_tokens, 2)
    seq_lens = torch.randint(
        2, max_model_len, (num_decodes,), device="cuda", generator=gen
    )
    decode_positions = torch.stack([seq_lens - 2, seq_lens - 1], 1).flatten()
    prefill_positions = torch.arange(num_prefill_tokens, device="cuda")
    num_tokens = num_decode_tokens + num_prefill_tokens
    req_ids = torch.arange(num_decodes, device="cuda").repeat_interleave(2)
    # The block-id bound of builds whose kernel checks block ids.
    bound = {}
    if "num_kv_blocks" in inspect.signature(build_c128a_topk_metadata).parameters:
        bound["num_kv_blocks"] = NUM_KV_BLOCKS
    return dict(
        **bound,
        positions=torch.cat(
            [decode_positions[:num_decode_tokens], prefill_positions]
        ).long(),
        compress_ratio=COMPRESS_RATIO,
        num_decode_tokens=num_decode_tokens,
        token_to_req_indices=torch.cat(
            [
                req_ids[:num_decode_tokens],
                torch.full((num_prefill_tokens,), num_decodes, device="cuda"),
            ]
        ).int(),
        block_table=torch.randint(
            0,
            NUM_KV_BLOCKS,
            (num_decodes, cdiv(max_model_len, KV_BLOCK_SIZE)),
            device="cuda",
            generator=gen,
        ).int(),
        block_size=KV_BLOCK_SIZE // COMPRESS_RATIO,
        slot_mapping=torch.ones(num_tokens, dtype=torch.int64, device="cuda"),
        global_decode_buffer=torch.full(
            (num_tokens, width), -1, dtype=torch.int32, device="cuda"
        ),
        decode_lens_buffer=torch.zeros(num_tokens, dtype=torch.int32, device="cuda"),
        prefill_buffer=torch.full(
            (num_tokens, width), -1, dtype=torch.int32, device="cuda"
        ),
        max_compressed_tokens=width,
    )


def benchmark(args, max_model_len: int, num_prefill_tokens: int) -> dict:
    num_decode_tokens = args.num_tokens - num_prefill_tokens
    inputs = make_inputs(max_model_len, num_decode_tokens, num_prefill_tokens)

    def run():
        build_c128a_topk_metadata(**inputs)

    run()
    digest = hashlib.sha256()
    for name in ("global_decode_buffer", "decode_lens_buffer", "prefill_buffer"):
        digest.update(inputs[name].cpu().numpy().tobytes())
    samples = [
        triton.testing.do_bench_cudagraph(run, rep=args.rep_ms)
        for _ in range(args.repeats)
    ]
    return {
        "max_model_len": max_model_len,
        "decode_tokens": num_decode_tokens,
        "prefill_tokens": num_prefill_tokens,
        "median_us": statistics.median(samples) * 1000,
        "latency_us": [ms * 1000 for ms in samples],
        "outputs_sha256": digest.hexdigest()[:16],
    }


def main():
    parser = FlexibleArgumentParser(description=__doc__)
    parser.add_argument(
        "--max-model-len", type=int, nargs="+", default=[65536, 1048576]
    )
    parser.add_argument("--num-tokens", type=int, default=8192)
    parser.add_argument("--rep-ms", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not current_platform.is_cuda_alike():
        parser.error("requires a GPU")
    for max_model_len in args.max_model_len:
        for num_prefill_tokens in (0, args.num_tokens // 2):
            print(json.dumps(benchmark(args, max_model_len, num_prefill_tokens)))


if __name__ == "__main__":
    main()
