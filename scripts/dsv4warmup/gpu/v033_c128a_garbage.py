"""One garbage batch through vLLM 0.33.0's C128A top-k metadata kernel on a GPU,
for ``compute-sanitizer --tool memcheck`` (tests/gpu/test_v033_c128a_memcheck_gpu.py).

    python scripts/dsv4warmup/gpu/v033_c128a_garbage.py patched
    python scripts/dsv4warmup/gpu/v033_c128a_garbage.py pristine --pristine-tree DIR
    python scripts/dsv4warmup/gpu/v033_c128a_garbage.py out-of-bounds

* ``patched``: the imported ``vllm`` (a patched 0.33.0 tree on PYTHONPATH):
  request ids past the block table and negative, block ids negative and past
  the KV cache, positions past every row. Memcheck must report nothing, and
  every garbage id must come out as slot -1, and a row outside the table
  as length 0 (checked here).
* ``pristine``: the same batch through the unpatched kernel, loaded by file
  path from ``--pristine-tree`` (its imports resolve against the imported
  vllm, which has the same modules): memcheck reports invalid reads.
* ``out-of-bounds``: a two-line Triton kernel that reads past its tensor, the
  sanitizer's positive control.

Run with ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` so that every tensor is its own
allocation and a read past one is an invalid address.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

RATIO, KV_BLOCK = 128, 256
BLOCK = KV_BLOCK // RATIO
MAX_MODEL_LEN = 65536
NUM_KV_BLOCKS = 300
DEVICE = "cuda"  # tests/cpu run the patched checks on "cpu" under the Triton interpreter


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def garbage_batch() -> dict:
    import torch

    dev = DEVICE
    num_decodes = 4
    width = _cdiv(_cdiv(MAX_MODEL_LEN, RATIO), 128) * 128  # the builder's row
    table_width = _cdiv(MAX_MODEL_LEN, KV_BLOCK)
    # The builder passes block_table[:num_decodes]: a table of exactly those
    # rows is its own allocation here.
    table = torch.randint(0, NUM_KV_BLOCKS, (num_decodes, table_width), device=dev)
    table = table.int()
    table[1, :4] = torch.tensor([-1, NUM_KV_BLOCKS, 2**31 - 1, -(2**31)], device=dev).int()
    req_ids = torch.tensor([0, 1, num_decodes, -1, 1 << 24, 3, 2, 0], device=dev).int()
    positions = torch.tensor(
        [MAX_MODEL_LEN - 1, 4 * 128 - 1, 300, 300, 300, 2**40, 1000, 77], device=dev
    )
    slot_mapping = torch.ones(8, dtype=torch.int64, device=dev)
    return dict(
        positions=positions,
        compress_ratio=RATIO,
        num_decode_tokens=7,  # token 7 is a prefill token
        token_to_req_indices=req_ids,
        block_table=table,
        block_size=BLOCK,
        slot_mapping=slot_mapping,
        global_decode_buffer=torch.full((8, width), -1, dtype=torch.int32, device=dev),
        decode_lens_buffer=torch.zeros(8, dtype=torch.int32, device=dev),
        prefill_buffer=torch.full((8, width), -1, dtype=torch.int32, device=dev),
        max_compressed_tokens=width,
    )


def run_patched() -> None:
    import torch
    from vllm.models.deepseek_v4 import sparse_mla

    batch = garbage_batch()
    decode, lens, _ = sparse_mla.build_c128a_topk_metadata(num_kv_blocks=NUM_KV_BLOCKS, **batch)
    torch.cuda.synchronize()
    decode, lens = decode.cpu(), lens.cpu()
    # Rows 2-4: request ids outside the table's rows. Row 1: its first two
    # blocks are garbage, so its 4 readable columns are -1 slots.
    for row in (2, 3, 4):
        assert bool((decode[row] == -1).all()) and int(lens[row]) == 0, row
    assert bool((decode[1] == -1).all()) and int(lens[1]) == 4
    assert int(lens[0]) == MAX_MODEL_LEN // RATIO
    assert int(lens[5]) == decode.shape[1]  # position 2**40: every column, in range
    print("patched: garbage ids give slot -1, garbage rows length 0")


def run_pristine(tree: Path) -> None:
    import torch
    from dsv4warmup.gpu.c128a_guard_check import load_pristine

    module = load_pristine(tree)
    assert not hasattr(module, "_is_safe"), f"{tree} is patched"
    module.build_c128a_topk_metadata(**garbage_batch())
    torch.cuda.synchronize()


def run_out_of_bounds() -> None:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def read_past(src, dst, n):
        offs = tl.arange(0, 1024)
        tl.store(dst + offs, tl.load(src + offs + n), mask=offs < 1024)

    src = torch.zeros(16, dtype=torch.int32, device="cuda")
    dst = torch.empty(1024, dtype=torch.int32, device="cuda")
    read_past[(1,)](src, dst, 1 << 20)
    torch.cuda.synchronize()


def main() -> None:
    import os

    if os.environ.get("DSV4_VLLM_TREE"):  # the tree the tests import
        sys.path.insert(0, os.environ["DSV4_VLLM_TREE"])
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # scripts/: dsv4warmup
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("patched", "pristine", "out-of-bounds"))
    parser.add_argument("--pristine-tree", type=Path)
    args = parser.parse_args()
    if args.mode == "patched":
        run_patched()
    elif args.mode == "pristine":
        assert args.pristine_tree is not None, "--pristine-tree is required"
        run_pristine(args.pristine_tree)
    else:
        run_out_of_bounds()


if __name__ == "__main__":
    main()
