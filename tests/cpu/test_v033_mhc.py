"""mHC TileLang keys on vLLM 0.33.0: what the start-up warmup compiles against
what the DeepSeek V4 forward passes launch, pristine and patched.

Runtime side (``dsv4warmup.registry.mhc.runtime_keys``): the real target
``DeepseekV4Model`` and MTP draft run at every token count 1..max_num_batched_tokens,
keys recorded at the ``@tilelang.jit`` factories. Warmed side: the real models
built in the runner's set-up steps, the registrations of the steps the runner
activates fed into a real ``JitWarmupRegistry.warmup()`` (``dsv4warmup.registry.lifecycle``),
compiles recorded at the same factories. Each tree runs in its own interpreter.

The patched tree is ``trees.patched_tree("0.33.0")`` once ``patches/v0.33.0``
exists; ``DSV4_V033_PATCHED_TREE`` names another (e.g. a dev tree) instead.
0.34.0 (the same drivers, Model Runner V2 only) is audited for the first case:
pristine has the same keys as 0.33.0's V2, launched and warmed; its series
warms exactly the runtime keys and launches what pristine launches.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from dsv4warmup import trees
from dsv4warmup.paths import PATCHES
from dsv4warmup.serving import FLASH, PRO, ServingConfig
from helpers import v033_tree_pytest

RUNNERS = ("v2", "v1")
WITH_NORM = "mhc_pre_big_fuse_with_norm_tilelang"
BROADCAST = "mhc_pre_big_fuse_broadcast_with_norm_tilelang"

# (name, config, DeepGEMM used): the MTP default budget on H200 with and
# without DeepGEMM, and Pro on B200 (148 SMs, the SM100 fused band).
CASES: tuple[tuple[str, ServingConfig, bool], ...] = (
    ("flash-2048-h200", FLASH.replace(max_num_batched_tokens=2048), True),
    ("flash-2048-h200-no-deepgemm", FLASH.replace(max_num_batched_tokens=2048), False),
    ("pro-1024-b200", PRO.replace(max_num_batched_tokens=1024, sm_count=148), True),
)


def _case_json(cases: tuple[tuple[str, ServingConfig, bool], ...] = CASES) -> str:
    return json.dumps(
        [{"name": name, "cfg": dataclasses.asdict(cfg), "deep_gemm": dg} for name, cfg, dg in cases]
    )


def _patched_tree(base: str = "0.33.0") -> Path | None:
    override = os.environ.get("DSV4_V033_PATCHED_TREE")
    if override and base == "0.33.0":
        return Path(override)
    if (PATCHES / f"v{base}" / "series").is_file():
        return trees.patched_tree(base)
    return None


@pytest.fixture(scope="module")
def reports() -> dict[str, Any]:
    """``{"pristine": report, "patched": report or None}`` and, of the first
    case only, ``"pristine_0.34.0"`` / ``"patched_0.34.0"``; two trees at a time."""
    pristine = trees.pristine_tree("0.33.0")
    patched = _patched_tree()
    todo = {"pristine": (pristine, CASES)} | ({"patched": (patched, CASES)} if patched else {})
    todo["pristine_0.34.0"] = (trees.pristine_tree("0.34.0"), CASES[:1])
    patched_034 = _patched_tree("0.34.0")
    if patched_034 is not None:
        todo["patched_0.34.0"] = (patched_034, CASES[:1])
    with ThreadPoolExecutor(2) as pool:
        futures = {
            name: pool.submit(
                trees.json_from_tree, tree, "-m", "dsv4warmup.registry.mhc", _case_json(cases)
            )
            for name, (tree, cases) in todo.items()
        }
        out = {name: f.result() for name, f in futures.items()}
    out.setdefault("patched", None)
    out.setdefault("patched_0.34.0", None)
    return out


def _patched(reports: dict[str, Any], name: str = "patched") -> dict[str, Any]:
    if reports[name] is None:
        pytest.skip(f"no {name} tree (its series is not generated yet)")
    return reports[name]


def _counts(row: dict[str, Any]) -> tuple[int, int, int, int]:
    runtime, warmed = set(row["runtime"]), set(row["warmed"])
    return len(runtime), len(warmed), len(runtime - warmed), len(warmed - runtime)


# (runtime, warmed, missing, wasted) per kernel, as the pristine audit reports them.
PRISTINE = {
    "flash-2048-h200": {
        WITH_NORM: (18, 19, 0, 1),
        BROADCAST: (12, 12, 0, 0),
        "mhc_fused_tilelang": (2, 2, 0, 0),
        "mhc_post_tilelang": (1, 1, 0, 0),
        "hc_head_fuse_tilelang": (1, 1, 0, 0),
    },
    "flash-2048-h200-no-deepgemm": {
        WITH_NORM: (2, 2, 0, 0),
        BROADCAST: (12, 12, 0, 0),
        "mhc_fused_tilelang": (2, 2, 0, 0),
        "mhc_post_tilelang": (1, 1, 0, 0),
        "hc_prenorm_gemm_tilelang": (2, 2, 0, 0),
        "hc_prenorm_gemm_block_m_tilelang": (1, 1, 0, 0),
        "hc_head_fuse_tilelang": (1, 1, 0, 0),
    },
    "pro-1024-b200": {
        WITH_NORM: (16, 17, 0, 1),
        BROADCAST: (11, 11, 0, 0),
        "mhc_fused_tilelang": (2, 2, 0, 0),
        "mhc_post_tilelang": (1, 1, 0, 0),
        "hc_head_fuse_tilelang": (1, 1, 0, 0),
    },
}


def _n_splits(key: str) -> int:
    return dict(ast.literal_eval(key))["n_splits"]  # repr() of ((name, value), ...)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_pristine_audit_reports_the_wasted_single_split_key(
    reports: dict[str, Any], case: str, runner: str
) -> None:
    rows = reports["pristine"][case][runner]
    counts = {k: _counts(v) for k, v in rows.items() if v["runtime"] or v["warmed"]}
    assert counts == PRISTINE[case]
    if PRISTINE[case][WITH_NORM][3]:
        row = rows[WITH_NORM]
        (wasted,) = set(row["warmed"]) - set(row["runtime"])
        assert _n_splits(wasted) == 1
    # Witnesses name the first batch of each key: with DeepGEMM on 132 SMs,
    # 33 split-k slices of the hc_mult * hidden GEMM first appear at 4 token
    # blocks (132 // 4), i.e. 193 tokens.
    if case == "flash-2048-h200":
        witness = {_n_splits(k): w for k, w in rows[WITH_NORM]["runtime"].items()}
        assert witness[33].startswith(f"{runner}: target forward + MTP draft step 0, 193 tokens")
        assert "deep_gemm=on" in witness[33]


def test_pristine_0_34_0_is_0_33_0_on_model_runner_v2(reports: dict[str, Any]) -> None:
    """0.34.0 removed Model Runner V1; mHC's kernels, wrappers and warmup are
    0.33.0's (the new in-place residual variant of the fused post + pre calls
    the same factories), so V2 launches and warms the same keys."""
    case = CASES[0][0]
    new, old = reports["pristine_0.34.0"][case], reports["pristine"][case]["v2"]
    assert set(new) == {"v2"}
    for kernel, row in old.items():
        for side in ("runtime", "warmed"):
            assert set(new["v2"][kernel][side]) == set(row[side]), (kernel, side)


def test_patched_0_34_0_warms_exactly_what_pristine_launches(reports: dict[str, Any]) -> None:
    case = CASES[0][0]
    rows = _patched(reports, "patched_0.34.0")[case]["v2"]
    for kernel, row in rows.items():
        runtime, warmed = set(row["runtime"]), set(row["warmed"])
        assert runtime == warmed, f"{kernel}: missing {runtime - warmed}, wasted {warmed - runtime}"
        assert runtime == set(reports["pristine_0.34.0"][case]["v2"][kernel]["runtime"]), kernel


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_patched_warmup_compiles_exactly_the_runtime_keys(
    reports: dict[str, Any], case: str, runner: str
) -> None:
    rows = _patched(reports)[case][runner]
    for kernel, row in rows.items():
        runtime, warmed = set(row["runtime"]), set(row["warmed"])
        assert runtime <= warmed, f"{kernel}: missing {sorted(runtime - warmed)[:3]}"
        assert warmed <= runtime, f"{kernel}: wasted {sorted(warmed - runtime)[:3]}"


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_patches_do_not_change_what_is_launched(reports: dict[str, Any], case: str) -> None:
    patched = _patched(reports)[case]
    for runner in RUNNERS:
        for kernel, row in reports["pristine"][case][runner].items():
            assert set(patched[runner][kernel]["runtime"]) == set(row["runtime"]), kernel


def test_tree_mhc_warmup_tests_pass_patched_and_fail_pristine() -> None:
    """The patched tree's tests/kernels/mhc/test_mhc_jit_warmup.py (dispatch,
    warmup inputs, and the new every-token-count key test) passes on CPU
    against its own sources, and its new test fails against pristine ones."""
    tree = _patched_tree()
    if tree is None:
        pytest.skip("no patched 0.33.0 tree (patches/v0.33.0 not generated yet)")
    test_file = tree / "tests" / "kernels" / "mhc" / "test_mhc_jit_warmup.py"
    ok = v033_tree_pytest(tree, test_file)
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
    bad = v033_tree_pytest(trees.pristine_tree("0.33.0"), test_file)
    assert bad.returncode == 1, bad.stdout[-3000:]
    failed = {line.split("[")[0] for line in bad.stdout.splitlines() if line.startswith("FAILED")}
    assert failed == {
        f"FAILED {test_file.name}::test_mhc_pre_big_fuse_warmup_keys_are_the_runtime_keys"
    }, bad.stdout[-3000:]


def test_static_key_is_tilelang_0_1_12_phase1_key() -> None:
    """Every non-tensor parameter by name, defaults applied (0.1.12's binder
    fills defaults, unlike 0.1.9's), tensors and warmup tensors left out."""
    import torch
    from dsv4warmup.legacy.mhc import _StubJIT
    from dsv4warmup.registry import mhc

    def factory(x, y, hidden: int, n_thr: int = 128, h_blk: int = 1024):  # noqa: ANN001
        pass

    stub = _StubJIT(factory)
    warm = type("W", (), {"dtype": torch.float32, "shape": (1,), "stride": lambda self: (1,)})()
    key = mhc.static_key(stub, (torch.empty(2), warm, 64), {"h_blk": 256})
    assert key == (("h_blk", 256), ("hidden", 64), ("n_thr", 128))
