"""``scripts/dsv4warmup/gpu/c128a_guard_check.py`` (a GPU script) launches the
C128A metadata kernel of every supported base, pristine and patched: its
arguments bind to each tree's ``build_c128a_topk_metadata`` signature, each by
the parameter it means (the patched 0.33.0 signature takes ``num_kv_blocks``
after ``block_size``, where passing by position put ``slot_mapping``)."""

from __future__ import annotations

import ast
import inspect
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from dsv4warmup import trees
from dsv4warmup.gpu import c128a_guard_check as check
from dsv4warmup.gpu import c128a_guard_variants as variants

MODULE = Path("vllm/models/deepseek_v4/sparse_mla.py")


def _signature(tree: Path) -> inspect.Signature:
    """``build_c128a_topk_metadata``'s signature, read from the source (the
    module imports torch and Triton)."""
    source = (tree / MODULE).read_text()
    func = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and node.name == "build_c128a_topk_metadata"
    )
    namespace: dict[str, Any] = {}
    stub = ast.Module(
        body=[ast.FunctionDef(**{**func.__dict__, "body": [ast.Pass()], "returns": None})],
        type_ignores=[],
    )
    for arg in func.args.args:
        arg.annotation = None
    exec(compile(ast.fix_missing_locations(stub), str(tree / MODULE), "exec"), namespace)
    return inspect.signature(namespace["build_c128a_topk_metadata"])


def _launched(patched: bool) -> dict[str, Any]:
    """What ``launch`` passes, by name, for a batch of marker values."""
    batch = {
        "positions": "positions",
        "num_decode_tokens": 3,
        "token_to_req": "token_to_req",
        "block_table": ["row0", "row1", "row2"],
        "num_decodes": 2,
        "slot_mapping": "slot_mapping",
        "global_decode": "global_decode",
        "decode_lens": "decode_lens",
        "prefill": "prefill",
        "width": 512,
    }
    seen: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    module = SimpleNamespace(build_c128a_topk_metadata=lambda *a, **k: seen.append((a, k)))
    check.launch(module, batch, patched)  # type: ignore[arg-type]
    ((args, kwargs),) = seen
    assert not args
    return kwargs


@pytest.mark.parametrize("base", ["0.25.1", "0.26.0", "0.33.0"])
@pytest.mark.parametrize("patched", [False, True], ids=["pristine", "patched"])
def test_launch_binds_each_argument_to_its_parameter(base: str, patched: bool) -> None:
    tree = trees.patched_tree(base) if patched else trees.pristine_tree(base)
    bound = _signature(tree).bind(**_launched(patched)).arguments
    assert bound["slot_mapping"] == "slot_mapping"
    assert bound["global_decode_buffer"] == "global_decode"
    assert bound["decode_lens_buffer"] == "decode_lens"
    assert bound["prefill_buffer"] == "prefill"
    assert bound["block_table"] == ["row0", "row1"]
    assert bound["block_size"] == check.BLOCK
    assert bound["max_compressed_tokens"] == 512
    assert bound.get("num_kv_blocks") == (check.NUM_KV_BLOCKS if patched else None)


@pytest.mark.parametrize("name", sorted(variants.VARIANTS))
def test_each_guard_variant_takes_out_its_part_of_the_patched_kernel(name: str) -> None:
    """``c128a_guard_variants.py`` (GPU) rewrites the patched 0.33.0 kernel's
    text: each rewrite must find its lines once and leave Python that parses,
    with the kernel still calling the guard everywhere else (the candidates
    keep every check)."""
    source = (trees.patched_tree("0.33.0") / MODULE).read_text()
    out = variants.variant_source(source, name)
    ast.parse(out)
    assert out != source
    dropped = {"no-block-guard": 1, "no-row-guard": 1, "no-guard": 2}.get(name, 0)
    assert out.count("_is_safe(") == source.count("_is_safe(") - dropped
    with pytest.raises(SystemExit, match=name):
        variants.variant_source(out, name)  # its lines are gone


def test_time_abba_times_each_launch_in_abba_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither launch gains from running second: per round A, B, B, A, each
    launched once before it is timed, and the means are per launch."""
    import torch

    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    calls: list[str] = []
    timed: list[str] = []
    given = {"a": iter([0.001, 0.003, 0.005, 0.007]), "b": iter([0.010, 0.030, 0.050, 0.070])}

    def timer(fn: Any) -> float:
        fn()
        timed.append(calls[-1])
        return next(given[calls[-1]])

    a, b = (lambda: calls.append("a")), (lambda: calls.append("b"))
    means = check.time_abba(timer, a, b, rounds=2)
    assert timed == ["a", "b", "b", "a"] * 2
    assert calls == ["a", "a", "b", "b", "b", "b", "a", "a"] * 2  # warm launch, then timed
    assert means == pytest.approx((4.0, 40.0))


def test_launch_outputs_are_copies_taken_after_the_launch() -> None:
    """What the bench and the variants compare: the three buffers as the launch
    left them, unchanged by the next launch on the same batch."""
    import torch

    batch: dict[str, Any] = dict.fromkeys(("positions", "token_to_req", "slot_mapping"))
    batch |= {"block_table": [[0]], "num_decodes": 1, "num_decode_tokens": 1, "width": 4}
    batch |= {k: torch.zeros(4) for k in ("global_decode", "decode_lens", "prefill")}

    def build(**kwargs: Any) -> None:
        for name in ("global_decode_buffer", "decode_lens_buffer", "prefill_buffer"):
            kwargs[name].add_(1)

    module = SimpleNamespace(build_c128a_topk_metadata=build)
    first = check.launch_outputs(module, batch, True)  # type: ignore[arg-type]
    second = check.launch_outputs(module, batch, True)  # type: ignore[arg-type]
    assert [t.tolist() for t in first] == [[1.0] * 4] * 3
    assert [t.tolist() for t in second] == [[2.0] * 4] * 3


def test_lengths_consistent_follows_each_series_contract() -> None:
    """0.33.0: the length is the readable columns, a -1 slot may lie inside it
    but no slot past it; 0.25.1 / 0.26.0: the length counts exactly the slots.
    Padding tokens (slot mapping < 0) are not checked."""
    import torch

    v033, v026 = SimpleNamespace(BuildC128ATopkMetadataKernel=object), SimpleNamespace()
    rows = torch.tensor([[-1, -1, 8, 9], [4, 5, -1, -1], [6, 7, -1, -1]], dtype=torch.int32)

    def batch(lens: list[int], slot_mapping: list[int]) -> dict[str, Any]:
        return {
            "num_decode_tokens": 3,
            "global_decode": rows,
            "decode_lens": torch.tensor(lens, dtype=torch.int32),
            "slot_mapping": torch.tensor(slot_mapping),
        }

    assert check.lengths_consistent(v033, batch([4, 2, 2], [1, 1, 1]))
    assert not check.lengths_consistent(v033, batch([2, 2, 2], [1, 1, 1]))  # 8, 9 past it
    assert not check.lengths_consistent(v033, batch([4, 1, 2], [1, 1, 1]))
    assert check.lengths_consistent(v033, batch([4, 2, 0], [1, 1, -1]))  # padding: length 0
    assert check.lengths_consistent(v026, batch([2, 2, 2], [1, 1, 1]))
    assert not check.lengths_consistent(v026, batch([4, 2, 2], [1, 1, 1]))
    assert check.lengths_consistent(v026, batch([2, 2, 0], [1, 1, -1]))


def test_patched_v033_kernel_has_no_block_wide_sum(tmp_path: Path) -> None:
    """0.33.0's 0001 computes the length without ``tl.sum``: its sm90 SASS has
    none of the barriers, shared-memory accesses and shuffles of a block-wide
    reduction, which pristine's has, and so does the patched kernel with the
    sum put back (``in-range-count``: the control that the count sees one)."""
    import subprocess
    import sys

    from helpers import v033_python_path

    patched = trees.patched_tree("0.33.0")
    with_sum = tmp_path / "in-range-count"
    (with_sum / MODULE).parent.mkdir(parents=True)
    (with_sum / MODULE).write_text(
        variants.variant_source((patched / MODULE).read_text(), "in-range-count")
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dsv4warmup.registry.c128a_sass",
            *("--tree", f"pristine={trees.pristine_tree('0.33.0')}"),
            *("--tree", f"patched={patched}"),
            *("--tree", f"in-range-count={with_sum}"),
        ],
        env={
            **os.environ,
            "PYTHONPATH": v033_python_path(patched),
            "TRITON_CACHE_DIR": str(tmp_path / "triton-cache"),
        },
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    rows = {
        line.split(" ", 1)[0]: ast.literal_eval(line.split(" ", 1)[1])
        for line in proc.stdout.splitlines()
        if line.split(" ", 1)[0] in ("pristine", "patched", "in-range-count")
    }
    reduction = ("BAR", "STS", "LDS", "SHFL")
    assert all(rows["pristine"][k] > 0 for k in reduction), rows
    assert all(rows["in-range-count"][k] > 0 for k in reduction), rows
    assert all(rows["patched"][k] == 0 for k in reduction), rows
    assert rows["patched"]["LDG"] == rows["pristine"]["LDG"] > 0
    assert rows["patched"]["STG"] == rows["pristine"]["STG"] > 0
