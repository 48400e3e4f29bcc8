"""GPU check of the C128A guard's block-id bound under an extensible KV cache (by hand).

    python scripts/dsv4warmup/gpu/c128a_extensible_check.py \\
        --pristine-tree /path/to/pristine/vllm-0.34.0 [--mode all]

vLLM 0.34.0's extensible KV cache reserves address space for its capacity and
backs a prefix of it; the KV cache views span the whole reservation. Here an
``ExtensibleTensor`` reserves a C128A cache of ``CAPACITY`` blocks and commits
``COMMITTED``; a decode batch's block table holds ids below ``COMMITTED`` and
ids in the unbacked gap above it. Each slot id >= 0 the kernel returns is then
read from the cache, as the sparse attention kernels read it.

The patched kernel is the ``vllm`` Python imports (a patched tree on
``PYTHONPATH``); the unpatched one is loaded by file path from
``--pristine-tree``.

Modes:

* ``unpatched``: the slots of the gap ids are read: invalid global reads under
  ``compute-sanitizer --tool memcheck`` (an illegal address without it).
* ``patched``: the bound is ``num_backed_rows`` of the view: gap ids give -1
  and nothing unbacked is read. Then the cache commits every block and the
  same batch, bound read again, gives the unpatched kernel's slots.
* ``all`` (default): both under compute-sanitizer. Exits 1 unless the
  unpatched run reports errors and the patched run none and passes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dsv4warmup.gpu.c128a_guard_check import (  # noqa: E402
    load_patched,
    load_pristine,
    memcheck,
    sanitizer,
)

RATIO = 128
ROWS_PER_BLOCK = 2  # compressed rows of a 256-token block
ROW_BYTES = 584  # fp8 C128A row: 448 NoPE + 128 RoPE + 8 scale bytes
CAPACITY = 20000
COMMITTED = 64
MAX_MODEL_LEN = 65536
WIDTH = 512  # max_model_len / 128, padded to 128
GAP_IDS = (CAPACITY // 2, CAPACITY - 1)


def make_cache() -> tuple[Any, Any]:
    """An ExtensibleTensor of CAPACITY C128A blocks with COMMITTED backed,
    and the [CAPACITY, 2, 584] view over its reservation."""
    from vllm.utils.extensible_tensor import ExtensibleTensor

    block_bytes = ROWS_PER_BLOCK * ROW_BYTES
    buffer = ExtensibleTensor(CAPACITY * block_bytes, device="cuda")
    buffer.resize_per_segment_(COMMITTED * block_bytes, zero_new=True)
    view = buffer.full_view().view(CAPACITY, ROWS_PER_BLOCK, ROW_BYTES)
    return buffer, view


def make_batch(num_decode_tokens: int = 64) -> dict[str, Any]:
    """Decode tokens of MTP requests (two each) near max_model_len, their
    block-table ids below COMMITTED except a few in the gap."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    num_reqs = num_decode_tokens // 2
    table_width = MAX_MODEL_LEN // (ROWS_PER_BLOCK * RATIO)
    table = torch.randint(0, COMMITTED, (num_reqs, table_width), device="cuda", generator=g).int()
    table[1, 3] = GAP_IDS[0]
    table[5, :2] = torch.tensor(GAP_IDS, device="cuda")
    seq = torch.full((num_reqs,), MAX_MODEL_LEN - 2, device="cuda")
    return dict(
        positions=torch.stack([seq - 1, seq], 1).reshape(-1).long(),
        token_to_req=torch.arange(num_reqs, device="cuda").repeat_interleave(2).int(),
        block_table=table,
        slot_mapping=torch.ones(num_decode_tokens, dtype=torch.int64, device="cuda"),
        num_decode_tokens=num_decode_tokens,
    )


def slots(module: ModuleType, b: dict[str, Any], num_kv_blocks: int | None) -> Any:
    """The kernel's decode slot ids (and lengths) for batch ``b``."""
    import torch

    n = b["num_decode_tokens"]
    kwargs = {} if num_kv_blocks is None else {"num_kv_blocks": num_kv_blocks}
    global_decode = torch.full((n, WIDTH), -7, dtype=torch.int32, device="cuda")
    decode_lens = torch.full((n,), -7, dtype=torch.int32, device="cuda")
    module.build_c128a_topk_metadata(
        positions=b["positions"],
        compress_ratio=RATIO,
        num_decode_tokens=n,
        token_to_req_indices=b["token_to_req"],
        block_table=b["block_table"],
        block_size=ROWS_PER_BLOCK,
        slot_mapping=b["slot_mapping"],
        global_decode_buffer=global_decode,
        decode_lens_buffer=decode_lens,
        prefill_buffer=torch.full_like(global_decode, -7),
        max_compressed_tokens=WIDTH,
        **kwargs,
    )
    return global_decode, decode_lens


def read_slots(view: Any, slot_ids: Any) -> Any:
    """What a sparse attention kernel reads: the KV row of every slot >= 0."""
    import torch

    rows = view.reshape(-1, ROW_BYTES)
    found = rows[slot_ids[slot_ids >= 0].long()].sum(dtype=torch.int64)
    torch.cuda.synchronize()
    return found


def run_unpatched(pristine_tree: Path) -> int:
    pristine = load_pristine(pristine_tree)
    buffer, view = make_cache()
    try:
        slot_ids, _ = slots(pristine, make_batch(), None)
        in_gap = int((slot_ids >= COMMITTED * ROWS_PER_BLOCK).sum())
        print(f"unpatched: {in_gap} slot ids in the unbacked gap; reading them")
        read_slots(view, slot_ids)
        print("unpatched: reads returned (errors, if any, are in the sanitizer report)")
    except Exception as exc:  # an illegal address without the sanitizer
        print(f"unpatched: the reads failed: {exc!r}")
    finally:
        buffer.free()
    return 0


def run_patched(pristine_tree: Path) -> int:
    import torch
    from vllm.utils.extensible_tensor import num_backed_rows

    sparse_mla, pristine = load_patched(), load_pristine(pristine_tree)
    buffer, view = make_cache()
    try:
        b = make_batch()
        bound = num_backed_rows(view)
        slot_ids, lens = slots(sparse_mla, b, bound)
        read_slots(view, slot_ids)
        gap_free = bool((slot_ids < COMMITTED * ROWS_PER_BLOCK).all())
        print(f"patched: bound {bound} (committed {COMMITTED}); no slot in the gap: {gap_free}")

        buffer.resize_per_segment_(CAPACITY * ROWS_PER_BLOCK * ROW_BYTES, zero_new=True)
        grown = num_backed_rows(view)
        slot_ids, lens = slots(sparse_mla, b, grown)
        read_slots(view, slot_ids)
        ref_ids, ref_lens = slots(pristine, b, None)
        same = torch.equal(slot_ids, ref_ids) and torch.equal(lens, ref_lens)
        print(f"patched: after growth bound {grown}; slots and lengths equal unpatched: {same}")
        return 0 if gap_free and bound == COMMITTED and grown == CAPACITY and same else 1
    finally:
        buffer.free()


def sanitized(tool: str, mode: str, pristine_tree: Path) -> tuple[int, int]:
    """(memcheck error count, exit code) of one mode under compute-sanitizer."""
    return memcheck(tool, __file__, ["--pristine-tree", str(pristine_tree), "--mode", mode])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pristine-tree", type=Path, required=True)
    parser.add_argument("--mode", choices=("all", "unpatched", "patched"), default="all")
    args = parser.parse_args()
    if args.mode == "unpatched":
        return run_unpatched(args.pristine_tree)
    if args.mode == "patched":
        return run_patched(args.pristine_tree)
    tool = sanitizer()
    if tool is None:
        print("compute-sanitizer not found")
        return 1
    unpatched_errors, _ = sanitized(tool, "unpatched", args.pristine_tree)
    patched_errors, patched_rc = sanitized(tool, "patched", args.pristine_tree)
    print(f"memcheck errors: unpatched {unpatched_errors}, patched {patched_errors}")
    ok = unpatched_errors > 0 and patched_errors == 0 and patched_rc == 0
    if not ok:
        print(
            "UNEXPECTED: want errors from the unpatched kernel, none from the patched, which passes"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
