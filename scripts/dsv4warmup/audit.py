"""Key-coverage audit: the keys the runtime produces vs the keys warmup compiles.

For each of the 12 kernels, the runtime side comes from driving vLLM's own call
sites (wrappers, proposer helpers, metadata builders, model forward) over a
serving sweep with recording hooks; the warmup side from running the tree's
start-up warmup with the same hooks. A tree is imported in a subprocess, so a
pristine and a patched tree can be audited side by side.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .serving import FLASH, ServingConfig
from .trees import json_from_tree

GROUPS = ("spec_decode", "sparse_mla", "mhc")


@dataclass
class Row:
    kernel: str
    runtime_keys: int
    warmed_keys: int
    missing: int
    wasted: int
    group: str = ""
    # registry-era rows (0.33.0 on): which model runner, and a witness batch per missing key
    runner: str = ""
    witnesses: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.runner:
            del d["runner"], d["witnesses"]
        return d


def _is_v033(tree: Path) -> bool:
    from .generation import tree_is_registry_era

    return tree_is_registry_era(tree)


def rows_for(
    cfg: ServingConfig,
    group: str | None = None,
    runner_fails: Callable[[str, BaseException], bool] | None = None,
) -> list[Row]:
    """Audit the vLLM tree importable in this process (registry era: one kernel
    group; ``runner_fails`` as in :func:`dsv4warmup.v033.audit.rows_for`)."""
    if _is_v033(Path(os.environ.get("DSV4_VLLM_TREE", "."))):
        from .v033 import audit as v033_audit

        return v033_audit.rows_for(cfg, None if group is None else (group,), runner_fails)
    rows: list[Row] = []
    for group in GROUPS:
        mod: Any = importlib.import_module(f"dsv4warmup.callsites.{group}")
        runtime = mod.runtime_keys(cfg)
        warm = mod.warmup_keys(cfg)
        for kernel in sorted(set(runtime) | set(getattr(mod, "KERNELS", ())) | set(warm)):
            rt, wk = set(runtime.get(kernel, ())), set(warm.get(kernel, ()))
            rows.append(Row(kernel, len(rt), len(wk), len(rt - wk), len(wk - rt), group))
    return rows


def rows_for_tree(tree: Path, cfg_overrides: dict[str, Any] | None = None) -> list[Row]:
    """Audit ``tree`` in fresh interpreters: one for a 0.25/0.26 tree; one per
    kernel group from 0.33.0 on, whose drivers stand in for different GPU-only
    packages (vLLM caches what it finds installed), two at a time."""
    overrides = json.dumps(cfg_overrides or {})
    if not _is_v033(tree):
        return [Row(**r) for r in json_from_tree(tree, "-m", "dsv4warmup.audit", overrides)]
    from concurrent.futures import ThreadPoolExecutor

    from .generation import audit_groups
    from .tree import declared_version

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(
            lambda group: json_from_tree(tree, "-m", "dsv4warmup.audit", overrides, group),
            audit_groups(declared_version(tree)),
        )
        rows = [Row(**r) for rows in results for r in rows]
    # one table per runner, the default first (a stable sort keeps group order)
    return sorted(rows, key=lambda r: (not r.runner.endswith("(default)"), r.runner))


def format_table(title: str, rows: list[Row]) -> str:
    width = max([len(r.kernel) for r in rows] + [6])
    lines = [title]
    runner = None
    for r in rows:
        if r.runner != runner or len(lines) == 1:
            runner = r.runner
            if runner:
                lines.append(f"  model runner {runner}:")
            lines.append(f"  {'kernel':<{width}}  runtime  warmed  missing  wasted")
        flag = "  <-- MISSING" if r.missing else ""
        lines.append(
            f"  {r.kernel:<{width}}  {r.runtime_keys:>7}  {r.warmed_keys:>6}  "
            f"{r.missing:>7}  {r.wasted:>6}{flag}"
        )
        for witness in r.witnesses:
            lines.append(f"      missing key, e.g. from: {witness}")
    tot = [
        sum(getattr(r, f) for r in rows)
        for f in ("runtime_keys", "warmed_keys", "missing", "wasted")
    ]
    lines.append(f"  {'total':<{width}}  {tot[0]:>7}  {tot[1]:>6}  {tot[2]:>7}  {tot[3]:>6}")
    return "\n".join(lines)


def main() -> None:  # subprocess entry: rows of the importable tree as JSON
    overrides = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    # JSON has no tuples: ServingConfig's sequence fields are (hashable) tuples
    overrides = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    cfg = FLASH.replace(**overrides) if overrides else FLASH
    rows = rows_for(cfg, sys.argv[2] if len(sys.argv) > 2 else None)
    sys.stdout.write("\n" + json.dumps([r.as_dict() for r in rows]) + "\n")


if __name__ == "__main__":
    main()


def audit_point(tree: Path, point: Any) -> dict[str, Any]:
    """``{"config", "rows"}`` or ``{"error", "flag"}`` for one configuration
    space point (a ``vllm serve`` command line) on ``tree``, in a fresh
    interpreter: registry-era trees resolve and audit in one; older ones resolve
    first (their own parser and config classes), then audit."""
    from . import configspace

    arg = json.dumps(
        [dict(argv=list(point.argv), gpu=point.gpu, deep_gemm=point.deep_gemm, model=point.model)]
    )
    if _is_v033(tree):
        return _v033_point(tree, arg)
    res = json_from_tree(tree, "-m", "dsv4warmup.configspace", "--resolve", arg)[0]
    if "error" in res:
        return res
    overrides = res["overrides"]
    rows = rows_for_tree(tree, overrides)
    del configspace  # the parent never imports the tree
    return {"config": res["config"], "rows": [r.as_dict() for r in rows]}


def _v033_point(tree: Path, arg: str) -> dict[str, Any]:
    """One interpreter per kernel group (as :func:`rows_for_tree`), rows merged."""
    from concurrent.futures import ThreadPoolExecutor

    from .v033.audit import GROUPS as V033_GROUPS

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(
            pool.map(
                lambda g: json_from_tree(tree, "-m", "dsv4warmup.configspace", arg, g)[0],
                V033_GROUPS,
            )
        )
    for res in results:
        if "error" in res:
            return res
    rows = [Row(**r) for res in results for r in res["rows"]]
    rows.sort(key=lambda r: (not r.runner.endswith("(default)"), r.runner))
    config = dict(results[0]["config"])
    failures = {
        k: v for res in results for k, v in res["config"].get("runner_failures", {}).items()
    }
    if failures:  # a runner that fails at start-up: none of its rows, from any group
        config["runner_failures"] = failures
        rows = [r for r in rows if r.runner not in failures]
    return {"config": config, "rows": [r.as_dict() for r in rows]}


def cli(
    json_out: Path | None = None,
    base: str = "0.26.0",
    serve_args: str | None = None,
    gpu: str = "h200",
    deep_gemm: bool = True,
    model: str = "flash",
    patched: Path | None = None,
) -> int:
    """`make audit`: pristine vs patched ``base`` for the report's
    configuration, or for the ``vllm serve`` command line ``serve_args``
    (resolved by the tree's own parser and config path; a refused one is one
    line ``error: <flag>: <vLLM's message>``, exit 2)."""
    from . import series, trees

    trees_by_name = [("pristine", trees.pristine_tree(base))]
    if patched is not None:
        trees_by_name.append(("patched", patched))
    elif base in series.available_bases():
        trees_by_name.append(("patched", trees.patched_tree(base)))
    if serve_args is not None:
        return _cli_serve_args(trees_by_name, json_out, base, serve_args, gpu, deep_gemm, model)
    tables: dict[str, list[Row]] = {}
    for name, tree in trees_by_name:
        tables[name] = rows_for_tree(tree)
        print(format_table(f"{name} vLLM {base} ({tree}):", tables[name]))
        print()
    if json_out is not None:
        json_out.write_text(
            json.dumps({k: [r.as_dict() for r in v] for k, v in tables.items()}, indent=1) + "\n"
        )
    return _verdict(tables, base)


def _verdict(tables: dict[str, list[Row]], base: str) -> int:
    """Exit status of ``make audit``: 0 when the patched tree misses no key."""
    if "patched" not in tables:
        print(f"no patch series for vLLM {base} yet: audited the pristine tree only")
        return 1
    missing = sum(r.missing for r in tables["patched"])
    print(f"patched tree: {missing} runtime key(s) not warmed")
    return 1 if missing else 0


def _cli_serve_args(
    trees_by_name: list[tuple[str, Path]],
    json_out: Path | None,
    base: str,
    serve_args: str,
    gpu: str,
    deep_gemm: bool,
    model: str,
) -> int:
    import shlex

    from .configspace import GPUS, MODELS, Point

    try:
        argv = tuple(shlex.split(serve_args))
    except ValueError as e:
        print(f"error: SERVE_ARGS: {e}", file=sys.stderr)
        return 2
    if gpu not in GPUS:
        print(f"error: GPU: {gpu!r}: one of {', '.join(GPUS)}", file=sys.stderr)
        return 2
    if model not in MODELS:
        print(f"error: MODEL: {model!r}: one of {', '.join(MODELS)}", file=sys.stderr)
        return 2
    point = Point(argv, gpu, deep_gemm, model)
    out: dict[str, Any] = {}
    tables: dict[str, list[Row]] = {}
    for name, tree in trees_by_name:
        res = audit_point(tree, point)
        if "error" in res:
            print(f"error: {res['error']}", file=sys.stderr)
            return 2
        out.setdefault("config", res["config"])
        tables[name] = [Row(**r) for r in res["rows"]]
    print("configuration (vLLM's names, as the tree resolved it):")
    for k, v in out["config"].items():
        print(f"  {k}: {v}")
    print()
    for name, tree in trees_by_name:
        print(format_table(f"{name} vLLM {base} ({tree}):", tables[name]))
        print()
    for runner, why in out["config"].get("runner_failures", {}).items():
        print(
            f"note: vLLM {base}'s {runner} model runner: {why}; audited the runner "
            "vllm serve starts with\n"
        )
    if out["config"].get("enable_jit_warmup") is False:
        print(
            f"note: vLLM {base} turns its JIT warmup off for this configuration "
            "(kernel_config.enable_jit_warmup=False, e.g. under --enforce-eager): every key "
            "compiles on first use, patched or not\n"
        )
    if json_out is not None:
        doc = {"config": out["config"], **{k: [r.as_dict() for r in v] for k, v in tables.items()}}
        json_out.write_text(json.dumps(doc, indent=1) + "\n")
    return _verdict(tables, base)
