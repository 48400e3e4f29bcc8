"""Command line: ``python -m dsv4warmup <command>`` (the Makefile wraps it).

apply / check / revert / status / fetch / pr need only the standard library,
git and patch (imported here at module level: keep them so); wheel also needs
the ``wheel`` and ``packaging`` packages, imported when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import devtree, pr, series, sources, tree
from .paths import BUILD, REPO


def default_tree() -> Path:
    return BUILD / f"vllm-{sources.DEFAULT_BASE}"


def _tree_arg(value: str | None) -> Path:
    """--tree, else the default tree, extracted once: never replaced, since
    it may hold the user's edits (``make clean`` starts afresh)."""
    if value:
        return Path(value).resolve()
    path = default_tree()
    if not path.exists():
        sources.extract(sources.DEFAULT_BASE, path)
        print(f"fresh pristine vLLM {sources.DEFAULT_BASE} tree at {path}", file=sys.stderr)
    return path


def _default_tree_hint(args: argparse.Namespace, error: tree.TreeError) -> str:
    """How to start afresh, when the default tree is refused."""
    if args.cmd not in ("apply", "check", "revert") or args.tree is not None:
        return ""
    if not str(error).startswith("refusing"):
        return ""
    rel = default_tree().relative_to(REPO) if default_tree().is_relative_to(REPO) else None
    where = rel or default_tree()
    return (
        f" ({where} is the default tree and keeps your edits; to start from a fresh "
        f"pristine copy, `rm -rf {where}` or `make clean`, then `make apply`)"
    )


def _print_outcome(outcome: tree.Outcome) -> None:
    for note in outcome.notes:
        print(note)
    for w in outcome.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(outcome.message)
    for rel in outcome.changed:
        print(f"  {rel}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dsv4warmup", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("fetch", help="download and verify pristine sdists")
    p.add_argument("versions", nargs="*", default=[sources.DEFAULT_BASE])

    for name, help_ in (
        ("apply", "apply the series + overlay to a vLLM tree"),
        ("check", "dry run of apply"),
        ("revert", "take the series + overlay out again"),
        ("status", "which base, applied or not"),
    ):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--tree", help="vLLM tree (default: a fresh pristine tree under build/)")
        if name == "apply":
            p.add_argument("--mode", choices=("apply", "am"), default="apply")
            p.add_argument("--branch", help="branch for --mode am")

    p = sub.add_parser("devtree", help="git tree of a base with the series as commits")
    p.add_argument("base")
    p.add_argument("dest", type=Path)
    p = sub.add_parser("regen", help="rewrite patches/v<base> + overlay from a devtree")
    p.add_argument("base")
    p.add_argument("src", type=Path)
    p = sub.add_parser("port", help="replay one base's series onto another and regen it")
    p.add_argument("from_base")
    p.add_argument("to_base")
    p.add_argument("dest", type=Path)
    sub.add_parser("fingerprints", help="recompute patches/fingerprints.json from the sdists")
    p = sub.add_parser("lab", help="pack pristine + patched trees for the GPU lab (.lab/trees)")
    p.add_argument("--base", default=sources.DEFAULT_BASE)
    p.add_argument(
        "--pristine-only",
        action="store_true",
        help="pack the pristine tree only (gpu-run.sh applies the series there)",
    )
    p = sub.add_parser("audit", help="key-coverage audit, pristine vs patched")
    p.add_argument("--json-out", type=Path, help="also write both tables as JSON here")
    p.add_argument("--base", default=sources.DEFAULT_BASE, help="vLLM release to audit")
    p.add_argument(
        "--serve-args",
        help="a `vllm serve` command line (flags) to audit instead of the report's deployment",
    )
    p.add_argument("--gpu", default="h200", help="h100, h200 or b200 (SM count, capability)")
    p.add_argument("--deep-gemm", default="on", choices=("on", "off"), help="VLLM_USE_DEEP_GEMM")
    p.add_argument("--model-variant", default="flash", help="flash or pro (generated config.json)")
    p.add_argument("--patched-tree", type=Path, help="audit this tree as the patched one")
    p = sub.add_parser("tree", help="a fresh pristine (or --patched) tree of a base")
    p.add_argument("base")
    p.add_argument("dest", type=Path)
    p.add_argument("--patched", action="store_true")
    p = sub.add_parser("wheel", help="a pip-installable vLLM wheel carrying the series")
    p.add_argument("--wheel", type=Path, help="official vLLM wheel (default: fetch the x86_64 one)")
    p.add_argument(
        "--base", help=f"base to fetch, or to insist on (default {sources.DEFAULT_BASE})"
    )
    p.add_argument("--dest", type=Path, help="output folder (default dist/)")
    p = sub.add_parser("verify-wheel", help="check a wheel's RECORD (hashes, sizes, listing)")
    p.add_argument("wheels", type=Path, nargs="+")
    p = sub.add_parser("pr", help="per PR: a git am branch and a PR body, after vLLM's checks")
    p.add_argument("--base", action="append", help="base (repeatable; default: the newest series)")
    p.add_argument(
        "--signoff",
        default=os.environ.get("SIGNOFF") or None,
        help='"Name <email>" who signs the commits off (default: $SIGNOFF, else git user)',
    )
    p.add_argument(
        "--coauthor",
        default=os.environ.get("AI_COAUTHOR") or pr.COAUTHOR,
        help=f"Co-authored-by trailer for the AI assistance (default: {pr.COAUTHOR})",
    )
    p.add_argument(
        "--skip",
        default=os.environ.get("SKIP", ""),
        help="comma-separated hook ids not to run, like pre-commit's SKIP (default: $SKIP)",
    )
    p.add_argument("--out", type=Path, default=BUILD / "pr", help="output (default build/pr)")

    args = parser.parse_args(argv)
    try:
        if args.cmd == "fetch":
            for v in args.versions:
                print(sources.sdist(v))
        elif args.cmd in ("apply", "check"):
            path = _tree_arg(args.tree)
            if args.cmd == "apply" and args.mode == "am":
                _print_outcome(tree.apply_am(path, args.branch))
            else:
                _print_outcome(tree.apply(path, dry_run=args.cmd == "check"))
        elif args.cmd == "revert":
            _print_outcome(tree.revert(_tree_arg(args.tree)))
        elif args.cmd == "status":
            print(tree.status(_tree_arg(args.tree)))
        elif args.cmd == "devtree":
            print(devtree.devtree(args.base, args.dest.resolve()))
        elif args.cmd == "regen":
            print(devtree.regen(args.base, args.src.resolve()))
        elif args.cmd == "port":
            print(devtree.port(args.from_base, args.to_base, args.dest.resolve()))
        elif args.cmd == "fingerprints":
            devtree.write_fingerprints()
        elif args.cmd == "lab":
            from . import lab, trees

            lab_trees = [("pristine", trees.pristine_tree(args.base))]
            if args.base in series.available_bases() and not args.pristine_only:
                lab_trees.append(("patched", trees.patched_tree(args.base)))
            stale = REPO / ".lab" / "trees" / "patched.tgz"
            if len(lab_trees) == 1 and stale.exists():
                stale.unlink()  # another base's: gpu-run.sh builds this one's
            lab_series = series.load(args.base) if args.base in series.available_bases() else None
            for name, path in lab_trees:
                # the files outside vllm/ the series edits (tests, docs) must be there to apply it
                wanted = (
                    [*lab_series.touched_files, *lab_series.overlay_files] if lab_series else []
                )
                extra = tuple(
                    rel
                    for rel in wanted
                    if not rel.startswith("vllm/") and (name == "patched" or (path / rel).is_file())
                )
                print(lab.pack(path, REPO / ".lab" / "trees" / f"{name}.tgz", extra))
        elif args.cmd == "audit":
            from . import audit

            return audit.cli(
                args.json_out,
                sources.check_known(args.base),
                args.serve_args,
                args.gpu,
                args.deep_gemm == "on",
                args.model_variant,
                args.patched_tree,
            )
        elif args.cmd == "tree":
            dest = sources.extract(args.base, args.dest.resolve())
            if args.patched:
                _print_outcome(tree.apply(dest))
            print(dest)
        elif args.cmd in ("wheel", "verify-wheel"):
            return _wheel_cmd(args)
        elif args.cmd == "pr":
            bases = args.base or pr.newest_bases()
            if not bases:
                raise series.SeriesError("no patch series exists yet")
            opts = pr.Options(
                signoff=args.signoff,
                coauthor=args.coauthor,
                skip={s.strip() for s in args.skip.split(",") if s.strip()},
            )
            pr.identity(opts.signoff)  # refuse before any work
            for base in bases:
                prs = pr.export(base.removeprefix("v"), args.out.resolve(), opts)
                print(pr.summary(base.removeprefix("v"), args.out.resolve(), prs))
    except tree.TreeError as e:
        print(f"error: {e}{_default_tree_hint(args, e)}", file=sys.stderr)
        return 1
    except (series.SeriesError, sources.SourceError, pr.PrError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Not mid-write (a write rolls back and says so): the tree is as it was,
        # or a recovery's journal is still there for the next run.
        print("error: interrupted", file=sys.stderr)
        return 130
    return 0


def _wheel_cmd(args: argparse.Namespace) -> int:
    try:
        from . import wheel
    except ImportError as e:
        print(
            f"error: {args.cmd} needs the `wheel` and `packaging` packages ({e}); "
            "`make wheel` installs them under .cache/tools/",
            file=sys.stderr,
        )
        return 1
    try:
        if args.cmd == "wheel":
            built = wheel.build(args.wheel, args.base, (args.dest or wheel.DIST).resolve())
            print(wheel.summary(built))
            return 0
        bad = 0
        for path in args.wheels:
            problems = wheel.verify_record(path)
            bad += bool(problems)
            print(f"{path}: " + ("RECORD verifies" if not problems else "RECORD does not verify"))
            for problem in problems:
                print(f"  {problem}")
        return 1 if bad else 0
    except (wheel.WheelError, tree.TreeError, series.SeriesError, sources.SourceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        # `make status | head`: the work is done; only the reader went away.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
