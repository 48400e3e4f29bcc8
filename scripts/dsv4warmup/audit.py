"""Key-coverage audit (``make audit``): the keys the runtime produces vs the
keys start-up compiles, pristine vs patched.

The runtime side comes from driving vLLM's own call sites (wrappers, metadata
builders, model forward, samplers) over a serving sweep with recording hooks;
the warmed side from running the tree's start-up warmup with the same hooks.
Each tree is audited in its own interpreters (:mod:`dsv4warmup.tree_audit`),
so a pristine and a patched tree can be audited side by side; this module is
the parent side: it never imports a tree.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .generation import tree_is_registry_era
from .rows import Row, format_table
from .trees import json_from_tree


def rows_for_tree(tree: Path, cfg_overrides: dict[str, Any] | None = None) -> list[Row]:
    """Audit ``tree`` in fresh interpreters: one for a 0.25/0.26 tree; one per
    kernel group from 0.33.0 on, whose drivers stand in for different GPU-only
    packages (vLLM caches what it finds installed), two at a time."""
    overrides = json.dumps(cfg_overrides or {})
    if not tree_is_registry_era(tree):
        return [Row(**r) for r in json_from_tree(tree, "-m", "dsv4warmup.tree_audit", overrides)]
    results = _per_group(tree, "dsv4warmup.tree_audit", overrides)
    return _default_runner_first([Row(**r) for rows in results for r in rows])


def _per_group(tree: Path, module: str, *args: str) -> list[Any]:
    """``module``'s JSON answer for each kernel group that audits ``tree``,
    in fresh interpreters, two at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from .generation import audit_groups
    from .tree import declared_version

    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(
            pool.map(
                lambda group: json_from_tree(tree, "-m", module, *args, group),
                audit_groups(declared_version(tree)),
            )
        )


def _default_runner_first(rows: list[Row]) -> list[Row]:
    """One table per runner, the default first (a stable sort keeps group order)."""
    return sorted(rows, key=lambda r: (not r.runner.endswith("(default)"), r.runner))


def audit_point(tree: Path, point: Any) -> dict[str, Any]:
    """``{"config", "rows"}`` or ``{"error", "flag"}`` for one configuration
    space point (a ``vllm serve`` command line) on ``tree``, in a fresh
    interpreter: registry-era trees resolve and audit in one; older ones resolve
    first (their own parser and config classes), then audit."""
    from . import configspace

    arg = json.dumps(
        [dict(argv=list(point.argv), gpu=point.gpu, deep_gemm=point.deep_gemm, model=point.model)]
    )
    if tree_is_registry_era(tree):
        return _registry_era_point(tree, arg)
    res = json_from_tree(tree, "-m", "dsv4warmup.configspace", "--resolve", arg)[0]
    if "error" in res:
        return res
    overrides = res["overrides"]
    rows = rows_for_tree(tree, overrides)
    del configspace  # the parent never imports the tree
    return {"config": res["config"], "rows": [r.as_dict() for r in rows]}


def _registry_era_point(tree: Path, arg: str) -> dict[str, Any]:
    """One interpreter per kernel group (as :func:`rows_for_tree`), rows merged."""
    results = [answer[0] for answer in _per_group(tree, "dsv4warmup.configspace", arg)]
    for res in results:
        if "error" in res:
            return res
    rows = _default_runner_first([Row(**r) for res in results for r in res["rows"]])
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
