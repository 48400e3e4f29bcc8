#!/usr/bin/env python3
"""What 0.33.0 patch 0004 costs: the EAGLE step kernel without its scalar specializations (GPU).

    PYTHONPATH=<patched 0.33.0 tree>:scripts python scripts/bench/bench_eagle_step_specialization.py \\
        --pristine-tree <pristine 0.33.0 tree> [--rounds 3]

Patch 0004 turns ``eagle_step_slot_mapping_metadata_kernel``'s
``max_model_len`` and ``n_blocks_per_req`` from constexprs into runtime scalars
and stops specializing on ``block_table_stride`` and ``batch_size``, so one
variant per block size serves every KV layout. This measures what that costs
against the specialized variants, and (``--variants``) what the edits that
would also make ``block_size`` a runtime scalar cost.

Both kernels run through the tree's own launcher,
``eagle_step_update_slot_mapping_and_metadata`` (the call the proposer makes
once per draft step): the patched one is the ``vllm`` Python imports, the
pristine one is ``vllm/v1/spec_decode/utils.py`` of ``--pristine-tree`` loaded
by file path. Block tables have the width the runner gives them
(``get_block_table_width``); positions are random, a few at the last position
so the clamp path runs. Each case is timed with ``do_bench_cudagraph`` (the
proposer's steps are captured in CUDA graphs; launch overhead would hide a
~2 us kernel), pristine and patched in ABBA order ``--rounds`` times, and
outputs are compared on the same inputs.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

SCRIPTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(SCRIPTS))
from dsv4warmup.gpu.c128a_guard_check import abba_samples, load_edited, load_module  # noqa: E402

# KV block sizes: the MTP drafter's group in DeepSeek V4 (64), the target's
# (256) and a common EAGLE one (16).
BLOCK_SIZES = (16, 64, 256)
MAX_MODEL_LENS = (65536, 1048576)
# (requests, launched programs): the graph pads the batch to a capture size.
BATCHES = ((1, 1), (13, 16), (100, 128), (256, 256), (1000, 1024))
NUM_KV_BLOCKS = 100_000

# Where the cost goes: the patched kernel with one change each (edits of the
# patched utils.py; --variants picks them).
_RUNTIME_BLOCK_SIZE = [
    ('        "block_table_stride",\n', '        "block_table_stride",\n        "block_size",\n'),
    (
        "    block_size: tl.constexpr,\n    max_model_len,\n",
        "    block_size,\n    max_model_len,\n",
    ),
]
VARIANTS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "block-size-runtime": (
        "block_size a runtime scalar too (do_not_specialize): one variant for every layout",
        _RUNTIME_BLOCK_SIZE,
    ),
    "int32-division": (
        "block_size a runtime scalar, the division and modulo in int32 (positions < 2**31)",
        [
            *_RUNTIME_BLOCK_SIZE,
            (
                "    block_number = clamped_position // block_size\n",
                "    position_i32 = clamped_position.to(tl.int32)\n"
                "    block_number = position_i32 // block_size\n",
            ),
            (
                "    slot_id = block_id * block_size + (clamped_position % block_size)\n",
                "    slot_id = block_id * block_size + (position_i32 % block_size).to(tl.int64)\n",
            ),
        ],
    ),
}


def load_pristine(tree: Path) -> ModuleType:
    return load_module(tree / "vllm" / "v1" / "spec_decode" / "utils.py", "pristine_spec_utils")


def load_patched() -> ModuleType:
    from vllm.v1.spec_decode import utils

    assert not is_constexpr(utils.eagle_step_slot_mapping_metadata_kernel, "max_model_len"), (
        f"{utils.__file__} is not patched"
    )
    return utils


def is_constexpr(kernel: Any, name: str) -> bool:
    """Whether ``kernel``'s argument ``name`` is annotated ``tl.constexpr``
    (a JITFunction, or the interpreter's wrapper of one)."""
    import inspect

    fn = getattr(kernel, "fn", kernel)
    while hasattr(fn, "fn"):
        fn = fn.fn
    annotation = inspect.signature(fn).parameters[name].annotation
    return "constexpr" in str(annotation)


def load_variant(patched: ModuleType, name: str, folder: Path) -> ModuleType:
    """The patched ``utils.py`` with variant ``name``'s edits, imported."""
    path = folder / f"spec_utils_{name.replace('-', '_')}.py"
    return load_edited(path, Path(patched.__file__).read_text(), name, VARIANTS[name][1])


def make_inputs(
    block_size: int, max_model_len: int, requests: int, seed: int, device: str = "cuda"
) -> dict[str, Any]:
    import torch
    from vllm.utils.math_utils import cdiv
    from vllm.v1.worker.block_table import get_block_table_width

    g = torch.Generator(device=device).manual_seed(seed)
    width = get_block_table_width(cdiv(max_model_len, block_size), block_size)
    positions = torch.randint(0, max_model_len, (requests,), device=device, generator=g)
    positions[3::7] = max_model_len - 1  # the clamp path (a batch of one takes the other)
    return dict(
        positions=positions.long(),
        block_table=torch.randint(
            0, NUM_KV_BLOCKS, (requests, width), device=device, generator=g
        ).int(),
        seq_lens=(positions + 1).int(),
        block_size=block_size,
        max_model_len=max_model_len,
    )


def launcher(module: ModuleType, inputs: dict[str, Any], input_batch_size: int) -> Any:
    """The proposer's call on fresh output buffers (seq_lens is updated in
    place, so each launcher has its own copy)."""
    import torch

    requests, device = inputs["positions"].shape[0], inputs["positions"].device
    seq_lens = inputs["seq_lens"].clone()
    out_positions = torch.empty(requests, dtype=torch.int64, device=device)
    out_slots = torch.empty(input_batch_size, dtype=torch.int64, device=device)

    def launch() -> None:
        module.eagle_step_update_slot_mapping_and_metadata(
            positions_1d=inputs["positions"],
            block_table_tensor=inputs["block_table"],
            seq_lens=seq_lens,
            block_size=inputs["block_size"],
            max_model_len=inputs["max_model_len"],
            out_clamped_positions=out_positions,
            out_slot_mapping=out_slots,
            input_batch_size=input_batch_size,
        )

    launch.outputs = (seq_lens, out_positions, out_slots)  # type: ignore[attr-defined]
    return launch


def same_outputs(
    pristine: ModuleType, patched: ModuleType, inputs: dict[str, Any], padded: int
) -> bool:
    import torch

    runs = []
    for module in (pristine, patched):
        launch = launcher(module, inputs, padded)
        launch()
        runs.append(launch.outputs)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return all(torch.equal(a, b) for a, b in zip(*runs, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pristine-tree", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--variants",
        type=lambda v: [n for n in v.split(",") if n],
        default=[],
        help=f"also time these edits of the patched kernel: {', '.join(VARIANTS)}",
    )
    parser.add_argument(
        "--block-sizes", type=lambda v: [int(n) for n in v.split(",")], default=BLOCK_SIZES
    )
    parser.add_argument(
        "--max-model-lens", type=lambda v: [int(n) for n in v.split(",")], default=MAX_MODEL_LENS
    )
    args = parser.parse_args()
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")

    import torch
    import triton

    pristine, patched = load_pristine(args.pristine_tree), load_patched()
    folder = Path(tempfile.mkdtemp(prefix="eagle-step-variants-"))
    kernels = [("patched", patched)]
    for name in args.variants:
        print(f"{name}: {VARIANTS[name][0]}")
        kernels.append((name, load_variant(patched, name, folder)))
    print(torch.cuda.get_device_name(), f"rounds {args.rounds}, CUDA graph, µs per launch (median)")
    print(
        f"{'kernel':<21} {'block':>5} {'max_model_len':>13} {'reqs/padded':>11} "
        f"{'pristine':>9} {'it':>7} {'diff':>7} {'noise':>6} {'same':>5}"
    )
    summaries, all_same = [], True
    for kernel_name, module in kernels:
        ratios, noises = [], []
        for block_size in args.block_sizes:
            for max_model_len in args.max_model_lens:
                for requests, padded in BATCHES:
                    inputs = make_inputs(block_size, max_model_len, requests, seed=requests)
                    a, b = abba_samples(
                        triton.testing.do_bench_cudagraph,
                        launcher(pristine, inputs, padded),
                        launcher(module, inputs, padded),
                        args.rounds,
                    )
                    ta, tb = statistics.median(a), statistics.median(b)
                    # noise: the larger relative spread of one kernel's own samples
                    noise = max((max(s) - min(s)) / statistics.median(s) for s in (a, b))
                    same = same_outputs(pristine, module, inputs, padded)
                    all_same &= same
                    ratios.append(tb / ta)
                    noises.append(noise)
                    print(
                        f"{kernel_name:<21} {block_size:>5} {max_model_len:>13} "
                        f"{f'{requests}/{padded}':>11} {ta:>9.3f} {tb:>7.3f} "
                        f"{100 * (tb / ta - 1):>6.1f}% {100 * noise:>5.1f}% {str(same):>5}"
                    )
        geo = math.exp(statistics.mean(math.log(r) for r in ratios))
        worst = max(ratios, key=lambda r: abs(r - 1))
        summaries.append(
            f"{kernel_name} / pristine: geometric mean {geo:.4f}, worst case "
            f"{100 * (worst - 1):+.1f} %, median noise {100 * statistics.median(noises):.1f} %"
        )
    print("\n".join(summaries))
    print(f"outputs identical in every case: {all_same}")
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
