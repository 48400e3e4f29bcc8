"""``make mutants``: deliberate one-line bugs that the CPU tests must catch.

Each mutant is an exact text in a file of ``patches/`` or ``vllm_overlay/``
and its replacement: a launch constant, a threshold, a warmup that drops a
key, a removed guard or initialisation. For each one, a scratch copy of the
repository gets the mutation (inside a patch, only a ``+`` line changes, so
the patch still applies) and pytest runs the tests named to kill it; the
mutant is killed when one of them fails. A baseline run of the same tests on
the unmutated copy must pass first (otherwise a kill means nothing).

Prints ``mutant | file | killed by | seconds`` and exits 1 if a mutant
survives. Not part of CI (it rebuilds a patched tree per mutant); every test
it names is.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import series, trees
from .junit import outcomes
from .paths import REPO

_P26 = "patches/v0.26.0"
_P25 = "patches/v0.25.1"
_P33 = "patches/v0.33.0"
_CLI33 = "vllm_overlay/v0.33.0/vllm/entrypoints/cli/warmup_kernels.py"
_SHARING33 = "vllm_overlay/v0.33.0/vllm/model_executor/warmup/jit_warmup_sharing.py"
_SHARING_TESTS = "tests/cpu/test_v033_prewarm.py::test_tree_tests_of_compile_sharing_pass"
_COMPILER33 = "vllm_overlay/v0.33.0/vllm/model_executor/warmup/jit_warmup_tilelang_compiler.py"
_COMPILER_TESTS = (
    "tests/cpu/test_v033_prewarm.py::test_tree_tests_of_the_tilelang_compiler_processes_pass"
)
_TL15 = "patches/tilelang/v0.1.15"
_TL_TEST = (
    "tests/cpu/test_tilelang_reduce_macro.py::"
    "test_tilelang_test_fails_before_the_change_and_passes_after"
)
_DISPATCH = "vllm_overlay/vllm/model_executor/kernels/mhc/tilelang_dispatch.py"
_SENTINEL = "vllm_overlay/vllm/model_executor/warmup/deepseek_v4_jit_sentinel.py"

_PRISTINE_26 = (
    "tests/cpu/test_pristine_keys.py::test_patched_launches_what_pristine_launches[0.26.0]"
)
_PRISTINE_25 = (
    "tests/cpu/test_pristine_keys.py::test_patched_launches_what_pristine_launches[0.25.1]"
)
_GUARDS = "tests/cpu/test_c128a_guard_interpret.py::test_under_triton_interpreter"
_BUFFERS = "tests/cpu/test_c128a_guard_interpret.py::test_builder_buffers_are_initialised"


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository
    old: str  # occurs exactly once in the file
    new: str
    tests: tuple[str, ...]  # pytest node ids, any failing one kills it


def _patch(base_dir: str, prefix: str) -> str:
    """The patch file of ``base_dir`` whose name starts with ``prefix``."""
    (match,) = sorted((REPO / base_dir).glob(f"{prefix}-*.patch"))
    return str(match.relative_to(REPO))


def mutants() -> list[Mutant]:
    return [
        # Launch constants shared by a launch and its warmup.
        Mutant(
            "eagle-block-size-x2",
            _patch(_P26, "0003"),
            "+    return next_power_of_2(num_sampled_tokens_per_req)",
            "+    return 2 * next_power_of_2(num_sampled_tokens_per_req)",
            (_PRISTINE_26,),
        ),
        Mutant(
            "eagle-block-size-x2-on-0.25.1",
            _patch(_P25, "0003"),
            "+    return next_power_of_2(num_sampled_tokens_per_req)",
            "+    return 2 * next_power_of_2(num_sampled_tokens_per_req)",
            (_PRISTINE_25,),
        ),
        Mutant(
            "eagle-step-pad-id",
            _patch(_P26, "0003"),
            '+        "PAD_ID": PADDING_SLOT_ID,',
            '+        "PAD_ID": PADDING_SLOT_ID - 1,',
            (_PRISTINE_26,),
        ),
        Mutant(
            "mtp-norm-block-size-x2",
            _patch(_P26, "0004"),
            '"BLOCK_SIZE": triton.next_power_of_2(hidden)}',
            '"BLOCK_SIZE": 2 * triton.next_power_of_2(hidden)}',
            (_PRISTINE_26,),
        ),
        Mutant(
            "combine-padded-top-k-x2",
            _patch(_P26, "0002"),
            "+        PADDED_TOP_K=triton.next_power_of_2(topk_indices_width),",
            "+        PADDED_TOP_K=2 * triton.next_power_of_2(topk_indices_width),",
            (_PRISTINE_26,),
        ),
        # A threshold of the mHC key choice.
        Mutant(
            "mhc-small-fma-tile-n-threshold",
            _DISPATCH,
            "tile_n = 2 if num_tokens < 8 else 3",
            "tile_n = 2 if num_tokens < 4 else 3",
            (_PRISTINE_26,),
        ),
        # Warmups that drop a key (their derivation, not their output).
        Mutant(
            "spec-decode-warmup-drops-batch-of-one",
            _patch(_P26, "0003"),
            "+        for num_reqs in int_key_reps(1, max_num_seqs)\n+    ]",
            "+        for num_reqs in int_key_reps(2, max_num_seqs)\n+    ]",
            (
                "tests/cpu/test_spec_decode_keys.py::"
                "test_warmup_keys_equal_runtime_keys[mtp-k1-seqs7-block256]",
            ),
        ),
        Mutant(
            "sparse-mla-warmup-drops-a-c128a-key",
            _patch(_P26, "0002"),
            "in int_key_reps(min_decode_tokens, max_decode_tokens):",
            "in int_key_reps(min_decode_tokens, max_decode_tokens)[1:]:",
            ("tests/cpu/test_sparse_mla_keys.py::test_every_runtime_key_is_warmed[flash-4k]",),
        ),
        Mutant(
            "mhc-warmup-drops-hc-head",
            _patch(_P26, "0007"),
            "+        for bound in _hc_head_sites(model):",
            "+        for bound in ():",
            (
                "tests/cpu/test_mhc_keys.py::"
                "test_warmup_keys_equal_runtime_keys[flash-132-2048-deepgemm]",
            ),
        ),
        # Removed guards and initialisations.
        Mutant(
            "c128a-no-row-guard",
            _patch(_P26, "0001"),
            "row_is_safe = is_valid_token & _is_safe(req_idx, block_table_rows)",
            "row_is_safe = is_valid_token",
            (_GUARDS,),
        ),
        Mutant(
            "c128a-no-block-number-guard",
            _patch(_P26, "0001"),
            "is_valid = is_valid & _is_safe(block_numbers, num_kv_blocks)",
            "is_valid = is_valid",
            (_GUARDS,),
        ),
        Mutant(
            "c128a-lens-buffer-not-zeroed",
            _patch(_P26, "0001"),
            "+            self.c128a_decode_lens_buffer = torch.zeros(",
            "+            self.c128a_decode_lens_buffer = torch.empty(",
            (_BUFFERS,),
        ),
        Mutant(
            "c128a-req-ids-not-zeroed",
            _patch(_P26, "0001"),
            "+        self.req_id_per_token_buffer = torch.zeros(",
            "+        self.req_id_per_token_buffer = torch.empty(",
            (_BUFFERS,),
        ),
        # 0.33.0: a guard, the mHC token walk, the pre-warm on a small host,
        # the registry's closing counts.
        Mutant(
            "v033-c128a-no-block-id-guard",
            _patch(_P33, "0001"),
            "+                is_valid = is_valid & _is_safe(block_numbers, num_kv_blocks)",
            "+                is_valid = is_valid",
            ("tests/cpu/test_v033_c128a_guard_interpret.py",),
        ),
        Mutant(
            "v033-c128a-no-row-guard",
            _patch(_P33, "0001"),
            "+                _is_safe(req_idx, block_table_rows), num_readable, 0",
            "+                True, num_readable, 0",
            ("tests/cpu/test_v033_c128a_guard_interpret.py",),
        ),
        Mutant(
            "v033-c128a-width-not-clamped",
            _patch(_P33, "0001"),
            "+            num_readable = tl.minimum((position + 1) // compress_ratio, readable_width)",
            "+            num_readable = num_compressed",
            ("tests/cpu/test_v033_c128a_guard_interpret.py",),
        ),
        Mutant(
            "v033-c128a-width-in-blocks",
            _patch(_P33, "0001"),
            "+                block_table.shape[1] * block_size, max_compressed_tokens",
            "+                block_table.shape[1] * block_size * 2, max_compressed_tokens",
            ("tests/cpu/test_v033_c128a_guard_interpret.py",),
        ),
        Mutant(
            "v033-c128a-length-ignores-the-row-guard",
            _patch(_P33, "0001"),
            "+            count = tl.maximum(num_readable, 0).to(tl.int32)",
            "+            count = tl.maximum(num_compressed, 0).to(tl.int32)",
            ("tests/cpu/test_v033_c128a_guard_interpret.py",),
        ),
        Mutant(
            "v033-c128a-negative-length",
            _patch(_P33, "0001"),
            "+            count = tl.maximum(num_readable, 0).to(tl.int32)",
            "+            count = num_readable.to(tl.int32)",
            ("tests/cpu/test_v033_c128a_guard_interpret.py",),
        ),
        Mutant(
            "v033-eagle-step-one-block-size",
            _patch(_P33, "0004"),
            "+        block_size=WarmupIntRange(1, 257, advance=lambda value: value * 2),",
            "+        block_size=1,",
            ("tests/cpu/test_v033_spec_decode.py::test_patched_warms_every_launched_key",),
        ),
        Mutant(
            "v033-mhc-fused-walk-stops-at-4",
            _patch(_P33, "0008"),
            "+                    if value < _FUSED_POST_PRE_MAX_TOKENS",
            "+                    if value < 4",
            (
                "tests/cpu/test_v033_mhc.py::"
                "test_tree_mhc_warmup_tests_pass_patched_and_fail_pristine",
            ),
        ),
        Mutant(
            "v033-prewarm-needs-every-gpu",
            _CLI33,
            "and current_platform.device_count() < world_size",
            "and current_platform.device_count() < 0",
            ("tests/cpu/test_v033_prewarm.py::test_one_gpu_host_prewarms_a_tp4_deployment",),
        ),
        Mutant(
            "v033-warmup-log-swaps-compiled-and-loaded",
            _patch(_P33, "0006"),
            "+            counts = self.loaded if cache_hit else self.compiled",
            "+            counts = self.compiled if cache_hit else self.loaded",
            (
                "tests/cpu/test_v033_prewarm.py::"
                "test_tree_tests_of_the_command_pass_on_a_one_gpu_host",
            ),
        ),
        # 0.33.0 0009: the TileLang pool is never used (every key compiles on
        # the dispatching thread, as before the patch).
        Mutant(
            "v033-tilelang-pool-unused",
            _patch(_P33, "0009"),
            '+    if active is not None and hasattr(jit_impl, "get_tir"):',
            '+    if False and active is not None and hasattr(jit_impl, "get_tir"):',
            ("tests/cpu/test_v033_prewarm.py::test_tree_tests_of_the_tilelang_compile_pool_pass",),
        ),
        # 0.33.0 0009/0010: the registry does not start its TileLang compiles
        # before the Triton pool (they wait for it to finish).
        Mutant(
            "v033-tilelang-compiles-wait-for-the-triton-pool",
            _patch(_P33, "0010"),
            "+                    start_tilelang_compiles()",
            "+                    pass",
            ("tests/cpu/test_v033_prewarm.py::test_tree_tests_of_the_tilelang_compile_pool_pass",),
        ),
        # 0.33.0 0010: every rank compiles every shared key (nothing dealt).
        Mutant(
            "v033-sharing-deals-every-key-to-every-rank",
            _SHARING33,
            "(own if ranks[turn % len(ranks)] == me else others)",
            "(own if ranks[turn % len(ranks)] is not None else others)",
            (_SHARING_TESTS,),
        ),
        # 0.33.0 0010: Triton-derived keys identified by their process-local
        # repr (JIT function id, device): ranks never share those kernels.
        Mutant(
            "v033-sharing-ids-from-process-local-repr",
            _SHARING33,
            "    if jit_keys is not None:",
            "    if False:",
            (
                "tests/cpu/test_v033_compile_sharing.py::"
                "test_report_deployment_kernels_have_one_id_in_every_process",
            ),
        ),
        # 0.33.0 0010: a rank whose share fails to compile leaves the others
        # waiting at the barrier.
        Mutant(
            "v033-sharing-no-wait-after-a-failed-share",
            _patch(_P33, "0010"),
            "+            try:\n+                compile_all(shares.first)\n+            finally:",
            "+            if True:\n+                compile_all(shares.first)\n+            if True:",
            (_SHARING_TESTS,),
        ),
        # 0.33.0 0011: the pool compiles in its threads, not through the
        # compiler processes (as before the patch).
        Mutant(
            "v033-compiler-processes-unused",
            _patch(_P33, "0011"),
            "+    if compilers is not None:\n+        compiled = compilers.kernel(",
            "+    if False:\n+        compiled = compilers.kernel(",
            (_COMPILER_TESTS,),
        ),
        # 0.33.0 0011: a key a compiler process built counts as a disk-cache
        # load (a cold start would report no TileLang compiles).
        Mutant(
            "v033-compiler-builds-counted-as-loads",
            _COMPILER33,
            "                with counted_as_compiles():",
            "                with contextlib.nullcontext():",
            (_COMPILER_TESTS,),
        ),
        # 0.33.0 0011: no disk-cache read before handing a key to a process
        # (every warm start would start compiler processes).
        Mutant(
            "v033-compiler-no-read-first",
            _COMPILER33,
            "        with contextlib.suppress(_NotInDiskCache):\n"
            "            return _load(prim_func, options)\n",
            "",
            (_COMPILER_TESTS,),
        ),
        # 0.33.0 0011: what a compiler process built is compiled again here,
        # unseen, when this process computes another cache key for it.
        Mutant(
            "v033-compiler-build-not-checked",
            _COMPILER33,
            "                    return _load(prim_func, options)",
            "                    return tilelang.compile(prim_func, **options)",
            (_COMPILER_TESTS,),
        ),
        # 0.26.0 0010: the C128A block table counted in KV-manager blocks again.
        Mutant(
            "c128a-table-width-in-kv-blocks",
            _patch(_P26, "0010"),
            "+    return width * (kv_block_size // block_size)",
            "+    return width",
            (
                "tests/cpu/test_prewarm_cli.py::"
                "test_c128a_keys_follow_the_kernel_blocks_of_the_block_table",
            ),
        ),
        # The post-warmup sentinel stops watching a kernel.
        Mutant(
            "sentinel-forgets-a-kernel",
            _SENTINEL,
            '"eagle_prepare_inputs_padded_kernel",',
            '"eagle_prepare_inputs_padded_kernel_",',
            ("tests/cpu/test_sentinel.py::test_warn_names_kernel_and_key",),
        ),
        # The TileLang change (a mail for TileLang, not the vLLM series): the
        # hoisted macro must get each call's arguments.
        Mutant(
            "tilelang-reduce-clear-always",
            _patch(_TL15, "0001"),
            "+    _reduce_macro(buffer, out, reduce_type, dim, clear, annotations)",
            "+    _reduce_macro(buffer, out, reduce_type, dim, True, annotations)",
            (_TL_TEST,),
        ),
        Mutant(
            "tilelang-reduce-annotations-dropped",
            _patch(_TL15, "0001"),
            "+    _reduce_macro(buffer, out, reduce_type, dim, clear, annotations)",
            "+    _reduce_macro(buffer, out, reduce_type, dim, clear, {})",
            (_TL_TEST,),
        ),
        Mutant(
            "tilelang-reduce-kind-sum",
            _patch(_TL15, "0001"),
            "+    _reduce_macro(buffer, out, reduce_type, dim, clear, annotations)",
            '+    _reduce_macro(buffer, out, "sum", dim, clear, annotations)',
            ("tests/cpu/test_tilelang_reduce_macro.py::test_deployment_tilelang_keys_unchanged",),
        ),
    ]


# --- applying one --------------------------------------------------------------


class MutantError(RuntimeError):
    pass


def mutate(text: str, mutant: Mutant) -> str:
    """``text`` with the mutation; refuses one that is ambiguous or, in a
    patch, touches anything but ``+`` lines (the patch must still apply)."""
    count = text.count(mutant.old)
    if count != 1:
        raise MutantError(f"{mutant.name}: {mutant.old!r} occurs {count} times in {mutant.path}")
    out = text.replace(mutant.old, mutant.new)
    if mutant.path.endswith(".patch"):
        before, after = text.splitlines(), out.splitlines()
        if len(before) != len(after):
            raise MutantError(f"{mutant.name}: changes the line count of a patch")
        for old_line, new_line in zip(before, after, strict=True):
            if old_line != new_line and not (old_line[:1] == new_line[:1] == "+"):
                raise MutantError(f"{mutant.name}: edits a line that is not a '+' line")
    return out


_COPIED = ("patches", "vllm_overlay", "scripts", "tests", "pytest.ini")
_ENV_OVERRIDES = (
    "DSV4_VLLM_TREE",
    "DSV4_USE_INSTALLED_VLLM",
    "DSV4_PATCHES_DIR",
    "DSV4_OVERLAY_DIR",
    "DSV4_BUILD_DIR",
)


def scratch_repo(dest: Path) -> Path:
    """A copy of what the tests read, sharing ``.venv``, ``.cache`` and the
    pristine trees (read only) with this repository."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in _COPIED:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore, symlinks=True)
        else:
            shutil.copy2(src, dest / name)
    for name in (".venv", ".cache"):
        (dest / name).symlink_to((REPO / name).resolve())
    shared = dest / "build" / "trees"
    shared.mkdir(parents=True)
    for base in series.available_bases():
        pristine = trees.pristine_tree(base)
        (shared / pristine.name).symlink_to(pristine)
        stamp = pristine.parent / f"{pristine.name}.stamp"
        shutil.copy2(stamp, shared / stamp.name)
    return dest


@dataclass
class Outcome:
    name: str
    path: str
    killed_by: list[str]
    seconds: float
    error: str = ""

    @property
    def killed(self) -> bool:
        return bool(self.killed_by) and not self.error


def run_tests(root: Path, tests: tuple[str, ...]) -> tuple[int, list[str], str]:
    """pytest on ``tests`` in ``root``: (exit code, failed node ids, tail)."""
    env = {k: v for k, v in os.environ.items() if k not in _ENV_OVERRIDES}
    report = root / "build" / "mutant-report.xml"
    report.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
    res = subprocess.run(
        [*cmd, f"--junitxml={report}", *tests],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    ran = outcomes(report) if report.exists() else {}
    failed = [name for name, outcome in ran.items() if outcome in ("failed", "error")]
    return res.returncode, failed, (res.stdout + res.stderr)[-3000:]


def run_mutant(root: Path, mutant: Mutant) -> Outcome:
    target = root / mutant.path
    original = target.read_text()
    start = time.monotonic()
    try:
        target.write_text(mutate(original, mutant))
        rc, failed, tail = run_tests(root, mutant.tests)
    except MutantError as exc:
        return Outcome(mutant.name, mutant.path, [], 0.0, str(exc))
    finally:
        target.write_text(original)
    seconds = time.monotonic() - start
    # 1: tests ran and some failed. Anything else (usage error, collection
    # error, nothing collected) kills nothing.
    error = "" if rc in (0, 1) else f"pytest exit {rc}:\n{tail}"
    return Outcome(mutant.name, mutant.path, failed if rc == 1 else [], seconds, error)


def _short_test(junit_name: str) -> str:
    # "tests.cpu.test_x::test_y[a]" -> "test_x::test_y[a]"
    classname, _, name = junit_name.partition("::")
    return f"{classname.rsplit('.', 1)[-1]}::{name}"


def _short_file(path: str) -> str:
    # patches/v0.26.0/0003-derive-....patch -> v0.26.0/0003 (patches/tilelang/v0.1.15/0001-...
    # -> tilelang/v0.1.15/0001); overlay: file name
    parts = Path(path).parts
    if parts[0] == "patches":
        return "/".join([*parts[1:-1], parts[-1].split("-", 1)[0]])
    return parts[-1]


def format_table(outcomes: list[Outcome]) -> str:
    rows = [("mutant", "file", "killed by", "seconds")]
    for o in outcomes:
        if o.killed:
            killer = ", ".join(_short_test(t) for t in o.killed_by)
        else:
            killer = "ERROR" if o.error else "SURVIVED"
        rows.append((o.name, _short_file(o.path), killer, f"{o.seconds:.0f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [" | ".join(r[i].ljust(widths[i]) for i in range(3)) + " | " + r[3] for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths) + "-+-" + "-" * 7)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dsv4warmup.mutants", description=__doc__)
    parser.add_argument("--only", help="comma-separated mutant names")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args(argv)
    selected = mutants()
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {m.name for m in selected}
        if unknown:
            parser.error(f"unknown mutants: {', '.join(sorted(unknown))}")
        selected = [m for m in selected if m.name in names]
    if args.list:
        for m in selected:
            print(f"{m.name}: {m.path}\n  - {m.old}\n  + {m.new}\n  killed by {', '.join(m.tests)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="dsv4-mutants-") as tmp:
        root = scratch_repo(Path(tmp) / "repo")
        if not args.no_baseline:
            tests = tuple(dict.fromkeys(t for m in selected for t in m.tests))
            start = time.monotonic()
            rc, failed, tail = run_tests(root, tests)
            print(f"baseline: {len(tests)} test(s), exit {rc}, {time.monotonic() - start:.0f} s")
            if rc != 0:
                print(f"the unmutated tests fail, so no kill means anything:\n{tail}")
                return 1
        outcomes = []
        for mutant in selected:
            outcomes.append(run_mutant(root, mutant))
            o = outcomes[-1]
            state = "killed" if o.killed else ("ERROR" if o.error else "SURVIVED")
            print(f"{o.name}: {state} ({o.seconds:.0f} s)", flush=True)
            if o.error:
                print(o.error)
    print()
    print(format_table(outcomes))
    survivors = [o.name for o in outcomes if not o.killed]
    if survivors:
        print(f"\n{len(survivors)} mutant(s) not killed: {', '.join(survivors)}")
        return 1
    print(f"\nall {len(outcomes)} mutants killed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
