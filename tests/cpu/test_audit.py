"""The key-coverage audit (``make audit``): pristine vs patched vLLM 0.26.0 and
0.25.1, the frozen bases (CI keeps their apply/revert and this audit).

Each tree is audited once, in its own interpreter (``audit.rows_for_tree``),
through the real ``dsv4warmup audit`` CLI; the tests read its printed tables
and its ``--json-out`` file. The mutation tests run the real comparison
(``tree_audit.rows_for``) in-process on the patched tree whose mHC warmup runs
without one of its wrapper calls.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from dsv4warmup import audit, tree_audit
from dsv4warmup.__main__ import main
from dsv4warmup.serving import FLASH

SPEC_DECODE_KERNELS = (
    "eagle_prepare_next_token_padded_kernel",
    "eagle_prepare_inputs_padded_kernel",
    "eagle_step_slot_mapping_metadata_kernel",
    "_mtp_shared_head_rmsnorm_kernel",
)
C128A = "_build_c128a_topk_metadata_kernel"
COMBINE = "_combine_topk_swa_indices_kernel"
MHC_KERNELS = (
    "mhc_pre_big_fuse_with_norm_tilelang",
    "mhc_pre_big_fuse_broadcast_with_norm_tilelang",
    "mhc_fused_tilelang",
    "mhc_post_tilelang",
    "hc_head_fuse_tilelang",
)
# DeepGEMM's tf32 prenorm GEMM (the 12th kernel) is not JIT-compiled by
# vLLM's TileLang / Triton path and has no row here.
FIELDS = {"kernel", "runtime_keys", "warmed_keys", "missing", "wasted", "group"}


def _mhc_kernels(base: str) -> tuple[str, ...]:
    # The 0.25.1 port has no broadcast first-layer path.
    broadcast = "mhc_pre_big_fuse_broadcast_with_norm_tilelang"
    return tuple(k for k in MHC_KERNELS if base != "0.25.1" or k != broadcast)


@pytest.fixture(scope="module", params=["0.26.0", "0.25.1"])
def audited(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """One run of ``dsv4warmup audit --json-out`` per base: base, exit code,
    JSON, stdout."""
    base = request.param
    path = tmp_path_factory.mktemp("audit") / "audit.json"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["audit", "--base", base, "--json-out", str(path)])
    print(out.getvalue())  # shown with -s / on failure
    return {"base": base, "rc": rc, "json": json.loads(path.read_text()), "stdout": out.getvalue()}


def _by_kernel(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["kernel"]: r for r in rows}


def test_json_schema(audited: dict[str, Any]) -> None:
    data = audited["json"]
    assert set(data) == {"pristine", "patched"}
    for rows in data.values():
        assert rows
        for row in rows:
            assert set(row) <= FIELDS
            assert set(row) >= FIELDS - {"group"}
            assert isinstance(row["kernel"], str)
            for field in ("runtime_keys", "warmed_keys", "missing", "wasted"):
                assert isinstance(row[field], int) and row[field] >= 0
            assert row["missing"] <= row["runtime_keys"]
            assert row["wasted"] <= row["warmed_keys"]
        assert len({r["kernel"] for r in rows}) == len(rows)


def test_patched_tree_misses_nothing(audited: dict[str, Any]) -> None:
    rows = _by_kernel(audited["json"]["patched"])
    kernels = (*SPEC_DECODE_KERNELS, C128A, COMBINE, *_mhc_kernels(audited["base"]))
    assert set(kernels) <= set(rows)
    for kernel in kernels:
        assert rows[kernel]["missing"] == 0, rows[kernel]
    assert audited["rc"] == 0
    assert "patched tree: 0 runtime key(s) not warmed" in audited["stdout"]


def test_patched_tree_warms_every_reached_kernel(audited: dict[str, Any]) -> None:
    rows = _by_kernel(audited["json"]["patched"])
    for kernel in (C128A, COMBINE, *_mhc_kernels(audited["base"]), *SPEC_DECODE_KERNELS):
        if rows[kernel]["runtime_keys"]:
            assert rows[kernel]["warmed_keys"] >= rows[kernel]["runtime_keys"]


def test_pristine_tree_shows_the_known_gaps(audited: dict[str, Any]) -> None:
    rows = _by_kernel(audited["json"]["pristine"])
    patched = _by_kernel(audited["json"]["patched"])
    assert set(rows) == set(patched)
    # Nothing warms the Eagle / MTP helpers or C128A: every runtime key is
    # missing. (FLASH drafts one token, so the per-extra-draft-step kernel
    # has no runtime key.)
    for kernel in (*SPEC_DECODE_KERNELS, C128A):
        assert rows[kernel]["warmed_keys"] == 0
        assert rows[kernel]["missing"] == rows[kernel]["runtime_keys"]
    for kernel in (C128A, *(k for k in SPEC_DECODE_KERNELS if k != SPEC_DECODE_KERNELS[2])):
        assert rows[kernel]["missing"] > 0, kernel
    # Upstream's mHC warmup is a no-op on NVIDIA.
    for kernel in _mhc_kernels(audited["base"]):
        assert rows[kernel]["runtime_keys"] > 0
        assert rows[kernel]["warmed_keys"] == 0
        assert rows[kernel]["missing"] == rows[kernel]["runtime_keys"]
    # The hard-coded combine cases cover part of the runtime keys.
    combine = rows[COMBINE]
    assert 0 < combine["missing"] < combine["runtime_keys"]
    assert combine["warmed_keys"] > 0


def test_tables_are_printed(audited: dict[str, Any]) -> None:
    out, base = audited["stdout"], audited["base"]
    assert f"pristine vLLM {base}" in out and f"patched vLLM {base}" in out
    assert "<-- MISSING" in out.split(f"patched vLLM {base}")[0]
    assert "<-- MISSING" not in out.split(f"patched vLLM {base}")[1]


# --- mutation: the real comparison on the patched tree, one warmup call dropped --


KERNEL = "mhc_pre_big_fuse_with_norm_tilelang"


def _in_process(monkeypatch: pytest.MonkeyPatch, drop: bool) -> None:
    """Audit only the mHC group (fast) of the tree this process imports (the
    patched one, see conftest), optionally with the warmup mutated: its first
    wrapper call that compiles a ``KERNEL`` key is left out."""
    from vllm.model_executor.warmup import deepseek_v4_mhc_warmup as warmup

    real = warmup.mhc_warmup_launches

    def without_one(*args: Any, **kwargs: Any) -> Any:
        launches = real(*args, **kwargs)
        index = next(
            i for i, launch in enumerate(launches) if any(k.kernel == KERNEL for k in launch.keys)
        )
        return launches[:index] + launches[index + 1 :]

    if drop:
        monkeypatch.setattr(warmup, "mhc_warmup_launches", without_one)
    monkeypatch.setattr(tree_audit, "GROUPS", ("mhc",))
    monkeypatch.setattr(
        audit, "rows_for_tree", lambda tree, overrides=None: tree_audit.rows_for(FLASH)
    )


@pytest.mark.parametrize("drop", [False, True], ids=["intact", "one-call-dropped"])
def test_dropping_a_warmup_call_fails_the_audit(
    drop: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    _in_process(monkeypatch, drop)
    path = tmp_path / "audit.json"
    rc = main(["audit", "--base", "0.26.0", "--json-out", str(path)])
    rows = _by_kernel(json.loads(path.read_text())["patched"])
    row = rows[KERNEL]
    missing = sum(r["missing"] for r in rows.values())
    if drop:
        assert rc == 1
        assert row["missing"] >= 1 and row["warmed_keys"] == row["runtime_keys"] - row["missing"]
        assert f"patched tree: {missing} runtime key(s) not warmed" in capsys.readouterr().out
    else:
        assert rc == 0
        assert missing == 0
