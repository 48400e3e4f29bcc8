"""Coverage over the configuration space vLLM accepts for DeepSeek V4, and
vLLM's own answer for the configurations it refuses.

* Property: hypothesis draws ``vllm serve`` command lines + device facts from
  :func:`dsv4warmup.configspace.points`; each is resolved by the tree's own
  parser and config path (refused ones are rejected, never clamped) and the
  exact-key audit of the patched tree must miss nothing. The known boundaries
  (:data:`configspace.BOUNDARIES`) are audited first, every run. Hypothesis
  runs inside the tree's interpreter (one per base), so a draw costs one
  audit, not an import. Budget: ``DSV4_AUDIT_EXAMPLES`` drawn points on the
  default base (CI: 2; ``make audit-sample N=...`` more) and
  ``DSV4_AUDIT_EXAMPLES_OTHER`` on the others (CI: 0: 0.33.0 is kept, 0.26.0
  and 0.25.1 are frozen), ``DSV4_AUDIT_BOUNDARIES`` boundaries on every base
  (CI: all), ``DSV4_AUDIT_DEADLINE_S`` seconds of drawing per base. The frozen
  bases' runs of both tests are marked ``frozen``: not in CI, ``make
  test-frozen`` runs them.
  The seed is printed (``DSV4_AUDIT_SEED`` sets it); every audited point is
  printed as the ``make audit SERVE_ARGS=...`` line that reproduces it.
* Refusals: each bad value of issue #19 and a config file that is missing,
  unreadable or not DeepSeek V4 gives ``error: <flag>: <message>`` (one line),
  exit 2, no traceback, on every base (the frozen ones with ``make test-frozen``).

The patched 0.33.0 tree is ``trees.patched_tree("0.33.0")`` once
``patches/v0.33.0`` exists; ``DSV4_V033_PATCHED_TREE`` names another (a dev
tree) meanwhile.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dsv4warmup import configspace, series, sources, trees
from dsv4warmup.generation import is_registry_era
from dsv4warmup.paths import REPO
from helpers import base_params

EXAMPLES = int(os.environ.get("DSV4_AUDIT_EXAMPLES", "2"))
EXAMPLES_OTHER = int(os.environ.get("DSV4_AUDIT_EXAMPLES_OTHER", "0"))
BOUNDARIES = int(os.environ.get("DSV4_AUDIT_BOUNDARIES", str(len(configspace.BOUNDARIES))))
DEADLINE_S = float(os.environ.get("DSV4_AUDIT_DEADLINE_S", "120"))
SEED = int(os.environ.get("DSV4_AUDIT_SEED") or random.SystemRandom().randrange(1 << 32))


def _patched(base: str) -> Path | None:
    if base == "0.33.0" and os.environ.get("DSV4_V033_PATCHED_TREE"):
        return Path(os.environ["DSV4_V033_PATCHED_TREE"]).resolve()
    if base in series.available_bases():
        return trees.patched_tree(base)
    return None


def _has_patched(base: str) -> bool:  # without building the tree at collection
    return (base == "0.33.0" and bool(os.environ.get("DSV4_V033_PATCHED_TREE"))) or (
        base in series.available_bases()
    )


BASES = [b for b in ("0.34.0", "0.33.0", "0.26.0", "0.25.1") if _has_patched(b)]


# Boundaries the property audit found that the patch series does not fix yet:
# (base, predicate on the audited record, kernels, reason). A run whose only
# misses match these is an xfail naming them; any other miss fails.
ALL = None  # every kernel
KNOWN: tuple[tuple[str, Any, Any, str], ...] = tuple(
    (
        base,
        lambda rec: rec["config"].get("enable_jit_warmup") is False,
        ALL,
        f"vLLM {base} turns its JIT warmup off under --enforce-eager "
        "(kernel_config.enable_jit_warmup=False): every key compiles on first use",
    )
    for base in ("0.34.0", "0.33.0")
)


def _known(base: str, rec: dict[str, Any], kernel: str) -> str | None:
    for b, pred, kernels, reason in KNOWN:
        if b == base and pred(rec) and (kernels is ALL or kernel in kernels):
            return reason
    return None


def _reproduce(base: str, rec: dict[str, Any]) -> str:
    dg = "on" if rec["deep_gemm"] else "off"
    return (
        f"make audit BASE={base} GPU={rec['gpu']} DEEP_GEMM={dg} VARIANT={rec['model']} "
        f"SERVE_ARGS={shlex.quote(shlex.join(rec['argv']))}"
    )


def _sample(tree: Path, base: str, args: list[Any]) -> dict[str, Any]:
    """The hypothesis run in the tree's interpreter; registry era (0.33.0 on):
    one interpreter per kernel group (as ``audit.rows_for_tree``), same seed,
    so the same draws; their records merged per point."""

    def run(extra: list[str]) -> dict[str, Any]:
        arg = json.dumps([*args, *extra])
        return trees.json_from_tree(tree, "-m", "dsv4warmup.configspace", "--sample", arg)

    if not is_registry_era(base):
        return run([])
    from concurrent.futures import ThreadPoolExecutor

    from dsv4warmup.registry.audit import GROUPS

    with ThreadPoolExecutor(max_workers=2) as pool:
        parts = list(pool.map(lambda g: run([g]), GROUPS))
    merged: dict[str, Any] = {"rejected": max(p["rejected"] for p in parts)}
    merged["vllm_startup_failures"] = sorted({f for p in parts for f in p["vllm_startup_failures"]})
    by_point: dict[str, dict[str, Any]] = {}
    for p in parts:
        if "error" in p:
            merged["error"] = p["error"] + "\n" + p.get("traceback", "")
        for rec in p["audited"]:
            m = by_point.setdefault(rec["point"], dict(rec, missing=[], seconds=0.0, groups=0))
            m["missing"] = m["missing"] + rec["missing"]
            m["seconds"] = round(m["seconds"] + rec["seconds"], 1)
            m["groups"] += 1
    # a point vLLM's start-up code refuses in one group's run is refused; after
    # such a refusal (seen by the groups that reach that start-up step only)
    # the groups' draws may diverge: a point is audited when every group did
    refused = {f.split(" -> ")[0] for f in merged["vllm_startup_failures"]}
    merged["audited"] = [
        r for p, r in by_point.items() if p not in refused and r["groups"] == len(GROUPS)
    ]
    return merged


@pytest.mark.slow
@pytest.mark.parametrize("base", base_params(BASES))
def test_property_patched_misses_no_key(base: str) -> None:
    tree = _patched(base)
    assert tree is not None
    examples = EXAMPLES if base == sources.DEFAULT_BASE else EXAMPLES_OTHER
    print(f"\nDSV4_AUDIT_SEED={SEED} (base {base}, {examples} drawn + {BOUNDARIES} boundaries)")
    res = _sample(tree, base, [examples, SEED, BOUNDARIES, DEADLINE_S])
    failures, known = [], set()
    for rec in res["audited"]:
        status = "MISSING" if rec["missing"] else "ok"
        print(f"  {status:7} {rec['seconds']:6.1f}s  {_reproduce(base, rec)}")
        for row in rec["missing"]:
            reason = _known(base, rec, row["kernel"])
            if reason:
                known.add(reason)
                continue
            failures.append(
                f"{row['kernel']} ({row.get('runner') or '-'}): {row['missing']} missing, "
                f"e.g. {row.get('witnesses', ['?'])[:1]}\n    reproduce: {_reproduce(base, rec)}"
            )
    for line in res["vllm_startup_failures"]:
        print(f"  vLLM refuses at start-up: {line}")
    print(f"  {res['rejected']} drawn command line(s) refused by vLLM's config path")
    assert "error" not in res, res["error"] + res.get("traceback", "")
    assert len(res["audited"]) >= min(BOUNDARIES, 1), res
    assert not failures, f"seed {SEED}:\n" + "\n".join(failures)
    if known:
        pytest.xfail("known boundaries: " + "; ".join(sorted(known)))


# --------------------------------------------------------------------------- refusals

BAD_FLAGS: tuple[tuple[str, Any], ...] = (
    ("--block-size 0", "--block-size"),
    ("--block-size 7", "--block-size"),
    ("--block-size 128", "--block-size"),
    ("--max-num-batched-tokens -5", "--max-num-batched-tokens"),
    ("--max-num-batched-tokens 0", "--max-num-batched-tokens"),
    # 0.33.0 derives the token budget from max_num_seqs first and refuses that,
    # as `vllm serve` does
    ("--max-num-seqs 0", ("--max-num-seqs", "--max-num-batched-tokens")),
    ("--max-model-len 0", "--max-model-len"),
    ("--max-model-len 2000000", "--max-model-len"),
    ("--max-model-len abc", "--max-model-len"),
    ("--max-num-seqs 16 --max-num-batched-tokens 8", "--max-num-batched-tokens"),
    ("--hf-config-path /nonexistent", "--hf-config-path"),
    ("--model /nonexistent/DeepSeek-V4-Flash", "--model"),
    ("--no-such-flag 3", "--no-such-flag"),
    # vLLM refuses DCP for DeepSeek V4 at start-up (its sliding-window KV cache)
    ("-tp 4 -dcp 2", "--decode-context-parallel-size"),
    ("-tp 2 -dcp 3", "--decode-context-parallel-size"),
    ("--kv-cache-dtype bfloat16", "--kv-cache-dtype"),
)


@pytest.fixture(scope="module")
def config_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("configs")
    (root / "llama").mkdir()
    (root / "llama" / "config.json").write_text(
        json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    )
    (root / "unreadable").mkdir()
    (root / "unreadable" / "config.json").mkdir()  # unreadable as a file, even for root
    (root / "garbled").mkdir()
    (root / "garbled" / "config.json").write_text("{not json")
    (root / "empty").mkdir()
    return {name: str(root / name) for name in ("llama", "unreadable", "garbled", "empty")}


def _bad_points(files: dict[str, str]) -> list[tuple[str, Any]]:
    # each with DeepSeek's --kv-cache-dtype fp8, so that the bad value is the
    # only one (0.26.0 / 0.25.1 refuse the default kv-cache dtype)
    return [
        (args if "--kv-cache-dtype" in args else f"{args} --kv-cache-dtype fp8", flag)
        for args, flag in (
            *BAD_FLAGS,
            *((f"--hf-config-path {files[n]}", "--hf-config-path") for n in files),
            (f"--model {files['llama']}", "--model"),
        )
    ]


@pytest.mark.parametrize("base", base_params(["0.34.0", "0.33.0", "0.26.0", "0.25.1"]))
def test_refused_values_name_the_flag(base: str, config_files: dict[str, str]) -> None:
    """All refusals resolved in one interpreter of the pristine tree."""
    cases = _bad_points(config_files)
    if not is_registry_era(base):  # vLLM maps auto to fp8 for DeepSeek V4 from 0.33.0 on
        cases.append(("--kv-cache-dtype auto", "--kv-cache-dtype"))
    good = (
        "--max-model-len 4096 --max-num-seqs 8 --kv-cache-dtype fp8 "
        '-sc \'{"method":"mtp","num_speculative_tokens":2}\''
    )
    arg = json.dumps([{"argv": shlex.split(a)} for a, _ in cases] + [{"argv": shlex.split(good)}])
    out = trees.json_from_tree(
        trees.pristine_tree(base), "-m", "dsv4warmup.configspace", "--resolve", arg
    )
    # an accepted command line: resolved values under vLLM's names
    config = out.pop()["config"]
    assert (config["max_model_len"], config["max_num_seqs"]) == (4096, 8)
    assert (config["block_size"], config["num_speculative_tokens"]) == (256, 2)
    # vllm serve's default budget on an H200 (its usage context), not EngineArgs' 2048
    assert config["max_num_batched_tokens"] == 8192 and config["serve_args"] == shlex.split(good)
    # the runner vllm serve starts for DeepSeek V4 + MTP: V2 from 0.33.0 on
    # (0.34.0 has no other); 0.34.0's KV cache is extensible
    assert config["use_v2_model_runner"] is is_registry_era(base)
    if base == "0.34.0":
        assert config["enable_extensible_kv_cache"] is True
    for (args, flag), res in zip(cases, out, strict=True):
        assert "error" in res, (args, res.get("config"))
        flags = flag if isinstance(flag, tuple) else (flag,)
        assert res["flag"] in flags, (args, res["error"])
        assert "\n" not in res["error"] and res["error"].startswith(res["flag"] + ": ")
    dcp = out[[a for a, _ in cases].index("-tp 4 -dcp 2 --kv-cache-dtype fp8")]["error"]
    assert "DCP not support sliding window" in dcp and "planner" in dcp, dcp


def test_make_audit_bad_value_exits_2_one_line() -> None:
    """End to end: `python -m dsv4warmup audit --serve-args=...` (what
    `make audit SERVE_ARGS=...` runs): exit 2, one stderr line, no traceback."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "scripts"))
    for args in ("--max-num-batched-tokens -5", "--hf-config-path /nonexistent"):
        res = subprocess.run(
            [sys.executable, "-m", "dsv4warmup", "audit", "--base", "0.26.0",
             f"--serve-args={args}"],
            capture_output=True, text=True, env=env, cwd=REPO,
        )  # fmt: skip
        assert res.returncode == 2, res.stderr[-2000:]
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --"), res.stderr[-2000:]
        assert "Traceback" not in res.stderr


def test_points_are_command_lines() -> None:
    """The strategy draws parseable command lines over the whole space (no
    tree needed): max_model_len spans 1 … 1M, MTP k 0 … 4, all GPUs."""
    from hypothesis import HealthCheck, given, settings

    seen: dict[str, set[Any]] = {"len": set(), "k": set(), "gpu": set()}

    @settings(max_examples=300, database=None, suppress_health_check=list(HealthCheck))
    @given(configspace.points())
    def run(p: configspace.Point) -> None:
        argv = list(p.argv)
        seen["len"].add(int(argv[argv.index("--max-model-len") + 1]))
        k = 0
        if "--speculative-config" in argv:
            k = json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens"]
        seen["k"].add(k)
        seen["gpu"].add(p.gpu)

    run()
    assert min(seen["len"]) == 1 and max(seen["len"]) > 1 << 16
    assert seen["k"] == {0, 1, 2, 3, 4} and seen["gpu"] == set(configspace.GPUS)
