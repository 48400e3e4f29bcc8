"""Where the C128A guard's cost goes (GPU; by hand).

    python scripts/dsv4warmup/gpu/c128a_guard_variants.py --pristine-tree <pristine 0.33.0 tree>
        [--rounds 1]

With the patched tree on ``PYTHONPATH``. Each variant is the patched
``sparse_mla.py`` with one part of 0.33.0 patch 0001's guard taken out or
formulated another way, written to a temporary file at run time and imported
beside the pristine module; every variant and the patched kernel are timed
against pristine on the batches of ``c128a_guard_check.py`` at C128A width 512
(max_model_len 64K, where the guard costs most), each pair in ABBA order, and
their outputs on valid input compared with pristine's (``--only`` picks
variants). The variants are measurements, not proposals: ``no-*`` each drop a check
that keeps garbage from becoming an address (``no-other`` only the load's
fill value); ``two-clamps`` clamps ``num_compressed`` a second time and
``in-range-count`` counts only in-range block ids with a block-wide sum after
the load (both the same outputs on valid input; 0.33.0's 0001 of 2026-12-06 had
both).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from dsv4warmup.gpu import c128a_guard_check as check

_LOAD_OTHER = """                    mask=mask & is_valid,
                    other=-1,
"""
_BLOCK_GUARD = """                is_valid = is_valid & _is_safe(block_numbers, num_kv_blocks)
"""
_ROW_GUARD = """            num_readable = tl.where(
                _is_safe(req_idx, block_table_rows), num_readable, 0
            )
"""
_WIDTH_CLAMP = """\
            num_readable = tl.minimum((position + 1) // compress_ratio, readable_width)
"""
_NO_CLAMP = """            num_readable = num_compressed
"""
_COUNT = """                count += tl.sum(is_valid.to(tl.int32), axis=0)
"""
_SCALAR_COUNT = """\
            # The length is the readable columns (a block id outside the KV
            # cache is a -1 slot inside it): no block-wide sum that would
            # wait on the table load.
            count = tl.maximum(num_readable, 0).to(tl.int32)
"""
_STORE = """                tl.store(
                    global_decode_ptr + token_idx * global_decode_stride + offset,
                    slot_ids,
                    mask=mask,
                )
"""

# name -> (what it drops, [(text in the patched file, replacement)])
VARIANTS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "no-other": (
        "the masked load's other=-1",
        [(_LOAD_OTHER, "                    mask=mask & is_valid,\n")],
    ),
    "no-block-guard": ("the per-entry block-id check", [(_BLOCK_GUARD, "")]),
    "no-row-guard": ("the per-token request-row check", [(_ROW_GUARD, "")]),
    "no-width-clamp": ("the clamp to the table's width", [(_WIDTH_CLAMP, _NO_CLAMP)]),
    "two-clamps": (
        "the single clamp: num_compressed (already at most max_compressed_tokens) is"
        " clamped to the width again",
        [(_WIDTH_CLAMP, "            num_readable = tl.minimum(num_compressed, readable_width)\n")],
    ),
    "in-range-count": (
        "the length as the readable columns: it counts only in-range block ids, a"
        " block-wide sum after the load",
        [
            (_SCALAR_COUNT, "            count = tl.zeros((), dtype=tl.int32)\n"),
            (_STORE, _STORE + _COUNT),
        ],
    ),
    "no-guard": (
        "every check (the bounds still passed)",
        [(_BLOCK_GUARD, ""), (_ROW_GUARD, ""), (_WIDTH_CLAMP, _NO_CLAMP)],
    ),
}


def variant_source(source: str, name: str) -> str:
    """``source`` (the patched ``sparse_mla.py``) less variant ``name``'s part."""
    return check.edited_source(source, name, VARIANTS[name][1])


def load_variant(source: str, name: str, folder: Path) -> ModuleType:
    path = folder / f"sparse_mla_{name.replace('-', '_')}.py"
    return check.load_edited(path, source, name, VARIANTS[name][1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pristine-tree", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=1, help="ABBA rounds per pair")
    parser.add_argument(
        "--only",
        type=lambda v: v.split(","),
        default=list(VARIANTS),
        help="variants, comma-separated",
    )
    args = parser.parse_args()

    import torch
    import triton

    pristine = check.load_pristine(args.pristine_tree)
    patched = check.load_patched()
    source = Path(patched.__file__).read_text()
    with tempfile.TemporaryDirectory() as tmp:
        candidates = {"patched": patched} | {
            name: load_variant(source, name, Path(tmp)) for name in args.only
        }
        for name in args.only:
            print(f"{name}: without {VARIANTS[name][0]}")
        print(f"{'case':<40} {'kernel':<18} {'pristine us':>12} {'it us':>8} {'diff':>7}")
        for decode, prefill, kind in ((8192, 0, "decode"), (4096, 4096, "mixed")):
            b = check.make_batch(65536, decode, prefill)
            want = check.launch_outputs(pristine, b, False)
            for name, module in candidates.items():
                same = all(
                    torch.equal(x, y)
                    for x, y in zip(want, check.launch_outputs(module, b, True), strict=True)
                )
                print(f"8192 tok {kind}, width 512: {name} outputs equal pristine's: {same}")
            for timer_name in ("do_bench", "do_bench_cudagraph"):
                timer = getattr(triton.testing, timer_name)
                for name, module in candidates.items():
                    base, it = check.time_abba(
                        timer,
                        lambda b=b: check.launch(pristine, b, False),
                        lambda m=module, b=b: check.launch(m, b, True),
                        args.rounds,
                    )
                    case = f"8192 tok {kind}, width 512, {timer_name.replace('do_bench', 'bench')}"
                    print(
                        f"{case:<40} {name:<18} {base:>12.2f} {it:>8.2f} "
                        f"{100 * (it / base - 1):>6.1f}%"
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
