"""Exact Triton keys of a 0.33.0 tree under two Triton releases, compared.

The CPU audit computes 0.33.0's keys with triton 3.8.0 (torch 2.14.0's pin);
the GPU lab runs the tree with its own triton 3.6.0. This prints, per model
runner and Triton kernel, the runtime and warmed key sets under each release
and whether they agree, so a GPU result on 3.6.0 can be read against the
3.8.0 audit::

    python -m dsv4warmup.registry.triton_key_diff [--tree DIR] [--json FILE]

Each release runs in its own interpreter (``trees.json_from_tree`` with the
release's folder as its toolchain), for the report's deployment.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# The Triton kernel groups (mHC is TileLang).
TRITON_GROUPS = ("spec_decode", "sparse_mla")


def dump(group: str) -> dict[str, Any]:
    """Runtime and warmed keys (their reprs) of ``group`` per runner and kernel,
    in this interpreter (which imports the tree and one Triton release)."""
    import triton

    from dsv4warmup.serving import FLASH

    from . import audit, engine, lifecycle

    cfg = FLASH
    vllm_config = engine.vllm_config(cfg, audit.gpu_for(cfg))
    groups = audit.group_modules((group,))
    out: dict[str, Any] = {"triton": triton.__version__, "keys": {}}
    for runner in lifecycle.available_runners():
        run = lifecycle.warmed_keys(
            vllm_config,
            runner,
            [mod.register for _, mod in groups],
            keep=audit._owned_by(groups),
        )
        for _, mod in groups:
            runtime = mod.runtime_keys(cfg, runner)
            for kernel in audit.kernels_of(mod):
                out["keys"][f"{runner} {kernel}"] = {
                    "runtime": sorted(repr(k) for k in runtime.get(kernel, {})),
                    "warmed": sorted(repr(k) for k in run.keys.get(kernel, set())),
                }
    return out


def compare(tree: Path) -> list[dict[str, Any]]:
    """One row per (runner, kernel): key counts under both releases and
    whether the sets are equal."""
    from dsv4warmup import toolchains, trees

    releases = {
        toolchains.VENV_TRITON: [],
        toolchains.triton_version("0.33.0"): toolchains.extra_python_path("0.33.0"),
    }
    by_release: dict[str, dict[str, Any]] = {}
    for version, path in releases.items():
        merged: dict[str, Any] = {}
        for group in TRITON_GROUPS:
            got = trees.json_from_tree(
                tree, "-m", "dsv4warmup.registry.triton_key_diff", "--dump", group, toolchain=path
            )
            assert got["triton"] == version, (got["triton"], version)
            merged.update(got["keys"])
        by_release[version] = merged
    old, new = list(by_release)
    rows = []
    for name in by_release[new]:
        a, b = by_release[old][name], by_release[new][name]
        runtime_equal = a["runtime"] == b["runtime"]
        rows.append(
            {
                "kernel": name,
                f"runtime_{old}": len(a["runtime"]),
                f"runtime_{new}": len(b["runtime"]),
                f"warmed_{old}": len(a["warmed"]),
                f"warmed_{new}": len(b["warmed"]),
                f"missing_{old}": len(set(a["runtime"]) - set(a["warmed"])),
                f"missing_{new}": len(set(b["runtime"]) - set(b["warmed"])),
                "same_keys": runtime_equal and a["warmed"] == b["warmed"],
            }
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, help="a patched 0.33.0 tree (default: build's)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.dump:
        sys.stdout.write("\n" + json.dumps(dump(args.dump)) + "\n")
        return 0
    from dsv4warmup import trees

    tree = (args.tree or trees.patched_tree("0.33.0")).resolve()
    rows = compare(tree)
    head = list(rows[0])
    print(" | ".join(head))
    for row in rows:
        print(" | ".join(str(row[h]) for h in head))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["same_keys"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
