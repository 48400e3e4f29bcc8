"""GPU check of the C128A top-k metadata kernel's bounds guard (run by hand).

    python scripts/dsv4warmup/gpu/c128a_guard_check.py \\
        --pristine-tree /path/to/pristine/vllm-<0.25.1, 0.26.0 or 0.33.0> [--mode all]

The patched kernel is the ``vllm`` that Python imports (a patched tree on
PYTHONPATH or a patched wheel); the unpatched one is loaded by file path from
``--pristine-tree`` (``vllm/models/deepseek_v4/sparse_mla.py``), nothing of it
is embedded here.

Modes:

* ``unpatched`` / ``patched``: one garbage batch (request ids far past the
  block table and negative, garbage block numbers) through that kernel. Run
  under ``compute-sanitizer --tool memcheck`` the unpatched kernel reports
  invalid global reads; the patched one reports none and writes slot -1.
* ``bench``: guard overhead on realistic batches (8192 tokens; C128A widths
  512 and 8192, i.e. max_model_len 64K and 1M), patched vs unpatched in one
  process, with ``triton.testing.do_bench`` (and CUDA graphs, where launch
  overhead would hide a ~10 us kernel), each kernel timed twice in ABBA order.
* ``all`` (default): the two sanitizer runs as subprocesses (if
  ``compute-sanitizer`` is found; caching allocator off so every tensor is its
  own allocation), then ``bench``. Exits 1 if unpatched shows no error or
  patched shows any.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

RATIO = 128
KV_BLOCK = 256
BLOCK = KV_BLOCK // RATIO
NUM_KV_BLOCKS = 20000


def load_module(path: Path, name: str) -> ModuleType:
    """Import ``path`` as module ``name``, beside the imported ``vllm`` (its
    imports resolve against that tree)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def edited_source(source: str, label: str, edits: Sequence[tuple[str, str]]) -> str:
    """``source`` with each ``(old, new)`` of ``edits`` applied; every ``old``
    must occur exactly once (a variant whose lines moved stops the run)."""
    for old, new in edits:
        if source.count(old) != 1:
            raise SystemExit(f"error: variant {label}: {old.strip()!r} is not in the kernel once")
        source = source.replace(old, new)
    return source


def load_edited(
    path: Path, source: str, label: str, edits: Sequence[tuple[str, str]]
) -> ModuleType:
    """``source`` edited (:func:`edited_source`), written to ``path`` and
    imported as the module named after it."""
    path.write_text(edited_source(source, label, edits))
    return load_module(path, path.stem)


def load_from_tree(tree: Path, name: str) -> ModuleType:
    """``tree``'s ``sparse_mla.py`` (the C128A kernel), imported as ``name``."""
    return load_module(tree / "vllm" / "models" / "deepseek_v4" / "sparse_mla.py", name)


def load_pristine(tree: Path) -> ModuleType:
    return load_from_tree(tree, "pristine_sparse_mla")


def load_patched() -> ModuleType:
    from vllm.models.deepseek_v4 import sparse_mla

    assert hasattr(sparse_mla, "_is_safe"), f"{sparse_mla.__file__} is not patched"
    return sparse_mla


def make_batch(
    max_model_len: int,
    num_decode_tokens: int,
    num_prefill_tokens: int,
    seed: int = 0,
    device: str = "cuda",
) -> dict[str, Any]:
    """Decode tokens two per request (MTP), then prefill tokens of one
    request; buffers sized like the metadata builder's."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    compressed = -(-max_model_len // RATIO)  # ceil
    width = -(-compressed // 128) * 128  # C128A buffer row, padded to 128
    table_width = -(-max_model_len // KV_BLOCK)
    num_decodes = -(-num_decode_tokens // 2)
    seq = torch.randint(2, max_model_len, (num_decodes,), device=device, generator=g)
    decode_pos = torch.stack([seq - 2, seq - 1], 1).reshape(-1)[:num_decode_tokens]
    prefill_pos = torch.arange(num_prefill_tokens, device=device) + max(
        0, max_model_len - num_prefill_tokens
    )
    rows = num_decode_tokens + num_prefill_tokens
    return dict(
        positions=torch.cat([decode_pos, prefill_pos]).long(),
        token_to_req=torch.cat(
            [
                torch.arange(num_decodes, device=device).repeat_interleave(2)[:num_decode_tokens],
                torch.full((num_prefill_tokens,), num_decodes, device=device),
            ]
        ).int(),
        block_table=torch.randint(
            0, NUM_KV_BLOCKS, (num_decodes + 1, table_width), device=device, generator=g
        ).int(),
        num_decodes=num_decodes,
        num_decode_tokens=num_decode_tokens,
        slot_mapping=torch.ones(rows, dtype=torch.int64, device=device),
        global_decode=torch.full((rows, width), -1, dtype=torch.int32, device=device),
        decode_lens=torch.zeros(rows, dtype=torch.int32, device=device),
        prefill=torch.full((rows, width), -1, dtype=torch.int32, device=device),
        width=width,
    )


def launch(module: ModuleType, b: dict[str, Any], patched: bool) -> None:
    # By name: the patched 0.33.0 signature takes num_kv_blocks after
    # block_size, the patched 0.26.0 / 0.25.1 one last.
    kwargs = {"num_kv_blocks": NUM_KV_BLOCKS} if patched else {}
    module.build_c128a_topk_metadata(
        positions=b["positions"],
        compress_ratio=RATIO,
        num_decode_tokens=b["num_decode_tokens"],
        token_to_req_indices=b["token_to_req"],
        block_table=b["block_table"][: b["num_decodes"]],
        block_size=BLOCK,
        slot_mapping=b["slot_mapping"],
        global_decode_buffer=b["global_decode"],
        decode_lens_buffer=b["decode_lens"],
        prefill_buffer=b["prefill"],
        max_compressed_tokens=b["width"],
        **kwargs,
    )


def launch_outputs(module: ModuleType, b: dict[str, Any], patched: bool) -> list[Any]:
    """Copies of the three output buffers after one launch on ``b``."""
    launch(module, b, patched)
    return [b[k].clone() for k in ("global_decode", "decode_lens", "prefill")]


def garbage_batch() -> dict[str, Any]:
    b = make_batch(65536, 64, 16, seed=1)
    # Request ids far past the block table and before it; garbage blocks.
    b["token_to_req"][[0, 5]] = 1 << 24
    b["token_to_req"][[2, 7]] = -(1 << 20)
    b["block_table"][1, :4] = -1
    b["block_table"][3, :4] = 1 << 30
    return b


def lengths_consistent(module: ModuleType, b: dict[str, Any]) -> bool:
    """The patched kernel's lengths against its slots, for each real decode
    token (a padding token's length is 0 whatever its slots)."""
    import torch

    nd = b["num_decode_tokens"]
    rows, lens = b["global_decode"][:nd], b["decode_lens"][:nd]
    real = b["slot_mapping"][:nd] >= 0
    if hasattr(module, "BuildC128ATopkMetadataKernel"):
        # 0.33.0: the length is the readable columns; every slot lies inside it
        past = torch.arange(rows.shape[1], device=rows.device)[None] >= lens[:, None]
        return bool((rows[past & real[:, None]] == -1).all())
    # 0.25.1 / 0.26.0: the length counts exactly the slots
    return torch.equal(lens[real], (rows[real] != -1).sum(1).int())


def run_garbage(module: ModuleType, patched: bool) -> int:
    import torch

    b = garbage_batch()
    try:
        launch(module, b, patched)
        torch.cuda.synchronize()
    except Exception as exc:  # unpatched: illegal address without the sanitizer
        print(f"{'patched' if patched else 'unpatched'}: launch failed: {exc!r}")
        return 1
    if patched:
        bad = [0, 2, 5, 7]
        ok = bool((b["global_decode"][bad] == -1).all()) and bool(
            (b["decode_lens"][bad] == 0).all()
        )
        lens_ok = lengths_consistent(module, b)
        print(f"patched: garbage rows all -1 / length 0: {ok}; lengths consistent: {lens_ok}")
        return 0 if ok and lens_ok else 1
    print("unpatched: launch returned (errors, if any, are in the sanitizer report)")
    return 0


def abba_samples(
    timer: Callable[[Callable[[], None]], float],
    first: Callable[[], None],
    second: Callable[[], None],
    rounds: int = 1,
) -> tuple[list[float], list[float]]:
    """µs per launch of each, timed in ABBA order ``rounds`` times: neither
    gains from running second. Each is launched once before its timing
    (compiles stay outside it)."""
    import torch

    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for which in (0, 1, 1, 0):
            fn = (first, second)[which]
            fn()
            torch.cuda.synchronize()
            samples[which].append(1000 * timer(fn))
    return samples


def time_abba(
    timer: Callable[[Callable[[], None]], float],
    unpatched: Callable[[], None],
    patched: Callable[[], None],
    rounds: int = 1,
) -> tuple[float, float]:
    """Mean µs of each launch (:func:`abba_samples`)."""
    a, b = abba_samples(timer, unpatched, patched, rounds)
    return statistics.mean(a), statistics.mean(b)


def bench(
    pristine: ModuleType,
    patched: ModuleType,
    sum_free: ModuleType | None = None,
    rounds: int = 1,
) -> None:
    """Patched against pristine, ABBA; with ``sum_free`` (a kernel with
    0.34.0's length change and no guard) also sum-free against pristine and
    patched against sum-free, so each change's cost is its own."""
    import torch
    import triton

    pairs: list[tuple[str, ModuleType, bool, ModuleType, bool]] = [
        ("patched vs unpatched", pristine, False, patched, True)
    ]
    if sum_free is not None:
        pairs = [
            ("sum-free vs unpatched", pristine, False, sum_free, False),
            ("guard vs sum-free", sum_free, False, patched, True),
            *pairs,
        ]
    print(f"{'case':<34} {'pair':<22} {'first us':>9} {'second us':>10} {'change':>8}")
    for max_model_len, label in ((65536, "width 512"), (1048576, "width 8192")):
        for decode, prefill, kind in ((8192, 0, "decode"), (4096, 4096, "mixed")):
            b = make_batch(max_model_len, decode, prefill)
            for timer_name in ("do_bench", "do_bench_cudagraph"):
                timer = getattr(triton.testing, timer_name, None)
                if timer is None:
                    continue
                case = f"8192 tok {kind}, {label}, {timer_name.replace('do_bench', 'bench')}"
                for pair, first, first_patched, second, second_patched in pairs:
                    times = time_abba(
                        timer,
                        lambda b=b, m=first, p=first_patched: launch(m, b, p),
                        lambda b=b, m=second, p=second_patched: launch(m, b, p),
                        rounds,
                    )
                    print(
                        f"{case:<34} {pair:<22} {times[0]:>9.2f} {times[1]:>10.2f} "
                        f"{100 * (times[1] / times[0] - 1):>7.1f}%"
                    )
            # Same results on valid inputs.
            outs = [launch_outputs(pristine, b, False), launch_outputs(patched, b, True)]
            if sum_free is not None:
                outs.append(launch_outputs(sum_free, b, False))
            same = all(
                torch.equal(x, y) for out in outs[1:] for x, y in zip(outs[0], out, strict=True)
            )
            print(f"  valid inputs, identical outputs: {same}")


def sanitizer() -> str | None:
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for candidate in ("/usr/local/cuda/bin/compute-sanitizer",):
        if os.path.exists(candidate):
            return candidate
    return None


def memcheck(
    tool: str, script: str, script_args: list[str], env: dict[str, str] | None = None
) -> tuple[int, int]:
    """(memcheck error count, exit code) of ``script`` run under compute-sanitizer.

    The count is -1 when the sanitizer printed no summary (it crashed or timed out).
    """
    cmd = [tool, "--tool", "memcheck", "--print-limit", "5", sys.executable, script]
    proc = subprocess.run(
        cmd + script_args,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    out = proc.stdout + proc.stderr
    shown = " ".join([Path(script).name, *script_args])
    print(f"--- compute-sanitizer: {shown} (exit {proc.returncode}) ---")
    print("\n".join(out.splitlines()[-25:]))
    match = re.search(r"ERROR SUMMARY: (\d+) error", out)
    return (int(match.group(1)) if match else -1), proc.returncode


def sanitized_errors(tool: str, mode: str, args: argparse.Namespace) -> int:
    # Without the caching allocator every garbage read past a tensor is out of bounds.
    errors, _ = memcheck(
        tool,
        __file__,
        ["--pristine-tree", str(args.pristine_tree), "--mode", mode],
        env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
    )
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pristine-tree", type=Path, required=True)
    parser.add_argument("--mode", choices=("all", "unpatched", "patched", "bench"), default="all")
    parser.add_argument(
        "--sum-free-tree",
        type=Path,
        help="a tree with the length change and no guard (0.34.0's series less 0005): "
        "bench times each change against the one before",
    )
    parser.add_argument("--rounds", type=int, default=1, help="ABBA rounds per timing")
    args = parser.parse_args()

    if args.mode == "unpatched":
        return run_garbage(load_pristine(args.pristine_tree), patched=False)
    if args.mode == "patched":
        return run_garbage(load_patched(), patched=True)
    pristine, patched = load_pristine(args.pristine_tree), load_patched()
    sum_free = None
    if args.sum_free_tree is not None:
        sum_free = load_from_tree(args.sum_free_tree, "sum_free_sparse_mla")
    if args.mode == "bench":
        bench(pristine, patched, sum_free, args.rounds)
        return 0

    status = 0
    tool = sanitizer()
    if tool is None:
        print("compute-sanitizer not found: skipping the memcheck runs")
    else:
        unpatched_errors = sanitized_errors(tool, "unpatched", args)
        patched_errors = sanitized_errors(tool, "patched", args)
        print(f"memcheck errors: unpatched {unpatched_errors}, patched {patched_errors}")
        if unpatched_errors <= 0 or patched_errors != 0:
            print("UNEXPECTED: want errors from the unpatched kernel and none from the patched")
            status = 1
    bench(pristine, patched, sum_free, args.rounds)
    return status


if __name__ == "__main__":
    sys.exit(main())
