"""``vllm warmup-kernels`` (0.33.0 series) as a process of its own, on the GPU lab.

    PYTHONPATH=<tree>:scripts python -m dsv4warmup.gpu.prewarm_runner <model> [serve flags] --json

Runs the subcommand the way ``vllm`` does, without importing the API server.
The lab machine lacks packages a production install has: CuTeDSL
(``nvidia-cutlass-dsl``), which DeepSeek V4's layers import at construction,
FlashInfer, which V1's sampler asks whether it can sample, and DeepGEMM,
without which its sparse indexer refuses to build. When they are missing, this
stands in for them as the GPU tests' drivers do (:mod:`dsv4warmup.registry.meta_models`
modules whose attributes are mocks, stubs for compiled ops its ``vllm._C``
lacks, the indexer's DeepGEMM check answered yes; mHC still sees no DeepGEMM)
and skips the CuTeDSL kernels' compiles (none is this series'), naming them on
stderr (``lab: skipped``). On a full install it runs the command unchanged.

``DSV4_TP_RANK=rank/world`` and ``DSV4_TP_STORE=<file>``: the registry warms as
one rank of a gloo tensor-parallel group of such processes, joined through that
file store (``scripts/bench/bench_node_warmup.py``).

``DSV4_DEEP_GEMM_KEYS=1`` (where DeepGEMM is missing): vLLM is told DeepGEMM
is there, so the registrations and keys are a DeepGEMM deployment's, e.g. the
mHC pre epilogues' split counts (nothing calls DeepGEMM while keys are only
compiled).

``DSV4_WARM_MODEL_KERNELS_ONLY=1``: the registry warms only DeepSeek V4's 12
model-specific kernels (:func:`model_kernel_family`: sparse MLA, speculative
decoding, mHC), its other registrations left out: the warmup cost those
kernels add, the issue's "every key of all 12 kernels".

``DSV4_PREWARM_TIMINGS=1``: one more stderr line, ``timings: {json}``, with the
seconds each kernel's ``compile_many`` took (Triton kernels compile in parallel
threads, so theirs overlap) and its key count, by kernel name; with the 0.33.0
series' TileLang compile pool (patch 0009) also a row ``TileLang compile pool``
(``"pool": true``) with its wall time and keys: the TileLang kernels'
``compile_many`` then only dispatches and elaborates, the pool compiles, and
the registry's Triton pool runs inside that wall time, beside the compiles;
``Triton compile pool`` (its wall time each time the registry runs it) and,
for a rank of a TP group (patch 0010), ``wait for the other ranks`` (seconds
at the barrier after its own share); ``TileLang compile per key`` (``"per_key":
true``): ``each``, [kernel, seconds] of every TileLang key's compile and load,
in the pool or serial; ``registry warmup``: the registry's whole warmup, what
a serving process pays (the command adds configuration and model building).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

TIMINGS_PREFIX = "timings: "
POOL_ROW = "TileLang compile pool"
TRITON_POOL_ROW = "Triton compile pool"
# Patch 0010: the time a rank waits at the barrier for the other ranks' shares.
WAIT_ROW = "wait for the other ranks"
# Each TileLang key's compile (and load) on its own, with the kernel's name:
# the slowest is the floor of any parallel pool.
KEYS_ROW = "TileLang compile per key"
# The registry's whole warmup (JitWarmupRegistry.warmup): what a serving
# process pays at start-up, without the command's configuration and model.
REGISTRY_ROW = "registry warmup"
# "1": where DeepGEMM is missing, derive the keys of a deployment that has it.
DEEP_GEMM_KEYS_ENV = "DSV4_DEEP_GEMM_KEYS"
# "1": warm only DeepSeek V4's 12 model-specific kernels (model_kernel_family).
MODEL_KERNELS_ONLY_ENV = "DSV4_WARM_MODEL_KERNELS_ONLY"
# The model-specific kernels by the registry's kernel names (offline_warmup.kernel_name):
# the sparse-MLA and speculative-decoding ones; the mHC ones are their module's.
SPARSE_MLA_KERNELS = frozenset({"BuildC128ATopkMetadataKernel", "CombineTopkSwaIndicesKernel"})
SPEC_DECODE_KERNELS = frozenset(
    {
        "MTPSharedHeadRMSNormKernel",
        "_eagle_prepare_inputs_padded",
        "_eagle_prepare_next_token_padded",
        "eagle_step_slot_mapping_metadata_kernel",
    }
)
MHC_MODULE_PREFIX = "vllm.model_executor.kernels.mhc."
# DeepGEMM and TileLang stay as installed: they decide the mHC keys.
_STAND_IN_ROOTS = ("cutlass", "cuda", "quack", "flashinfer", "vllm.vllm_flash_attn.cute")
# The stand-ins stay for the whole process: a context manager entered without a
# reference is closed (and undone) when its generator is collected.
_STAND_INS = contextlib.ExitStack()


def model_kernel_family(name: str, module: str) -> str | None:
    """The model-specific kernel family of a registered kernel (its name and module):
    ``sparse-MLA``, ``spec-decode`` or ``mHC``; None for any other kernel."""
    if name in SPARSE_MLA_KERNELS:
        return "sparse-MLA"
    if name in SPEC_DECODE_KERNELS or name.startswith(("_eagle_", "eagle_")):
        return "spec-decode"
    if module.startswith(MHC_MODULE_PREFIX):
        return "mHC"
    return None


def _warm_model_kernels_only() -> None:
    """Leave every registration but the model-specific kernels out of the registry's
    warmup (and of ``--dry-run``'s listing: both read ``warmup_keys``)."""
    from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry
    from vllm.model_executor.warmup.offline_warmup import kernel_name

    warmup_keys = JitWarmupRegistry.warmup_keys

    def model_kernel_keys(self: Any) -> Any:
        items = warmup_keys(self)
        kept = [
            (kernel, keys)
            for kernel, keys in items
            if model_kernel_family(kernel_name(kernel), type(kernel).__module__)
        ]
        print(
            f"lab: warming the model-specific kernels only ({len(kept)} of {len(items)} kernels)",
            file=sys.stderr,
        )
        return kept

    JitWarmupRegistry.warmup_keys = model_kernel_keys  # type: ignore[method-assign]


def timings_from(stderr: str) -> dict[str, dict[str, Any]] | None:
    """The table of the (last) ``timings:`` line in a runner's stderr, if any."""
    return next(
        (
            json.loads(line[len(TIMINGS_PREFIX) :])
            for line in reversed(stderr.splitlines())
            if line.startswith(TIMINGS_PREFIX)
        ),
        None,
    )


def missing(name: str) -> bool:
    """Whether ``name`` is not importable here (what the runner stands in for)."""
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def _stand_in_for_what_the_lab_lacks() -> tuple[str, ...]:
    from dsv4warmup.registry import meta_models

    lacking = tuple(m for m in _STAND_IN_ROOTS if missing(m))
    if lacking:
        sys.meta_path.insert(0, meta_models._MockModuleFinder(lacking))
        print(f"lab: stand-ins for {lacking}", file=sys.stderr)
    # Compiled ops the lab's vllm._C lacks: stubs that raise if called (nothing
    # calls them while the model is only built); a real build keeps its own.
    _STAND_INS.enter_context(meta_models._stub_compiled_ops())
    if missing("deep_gemm"):
        _STAND_INS.enter_context(
            mock.patch("vllm.model_executor.layers.sparse_attn_indexer.has_deep_gemm", lambda: True)
        )
        if os.environ.get(DEEP_GEMM_KEYS_ENV) == "1":
            _answer_deep_gemm_present()
    return lacking


def _answer_deep_gemm_present() -> None:
    """vLLM asked whether DeepGEMM is there answers yes, so the registrations
    are a DeepGEMM deployment's (the mHC epilogues then read DeepGEMM's
    split-k partials: their keys are the production ones). Only keys are
    derived and compiled here; nothing calls DeepGEMM."""
    import vllm.utils.deep_gemm as deep_gemm
    from vllm.utils import import_utils

    os.environ["VLLM_USE_DEEP_GEMM"] = "1"
    for module in (import_utils, deep_gemm):
        _STAND_INS.enter_context(mock.patch.object(module, "has_deep_gemm", lambda: True))
    deep_gemm.is_deep_gemm_supported.cache_clear()
    print("lab: DeepGEMM answered present (its deployment's keys)", file=sys.stderr)


def _timed(func: Any, done: Any) -> Any:
    """``func`` calling ``done(args, seconds)`` after each call, also on error."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            done(args, time.perf_counter() - start)

    return timed


def _time_compiles() -> dict[str, dict[str, Any]]:
    from vllm.model_executor.warmup.jit_warmup import VllmJitKernel
    from vllm.model_executor.warmup.offline_warmup import kernel_name

    timings: dict[str, dict[str, Any]] = {}
    compile_many = VllmJitKernel.compile_many

    def timed(self: Any, keys: Any) -> None:
        keys = list(keys)
        start = time.perf_counter()
        try:
            compile_many(self, keys)
        finally:
            row = timings.setdefault(
                kernel_name(self), {"module": type(self).__module__, "keys": 0, "seconds": 0.0}
            )
            row["keys"] += len(keys)
            row["seconds"] += time.perf_counter() - start

    VllmJitKernel.compile_many = timed  # type: ignore[method-assign]

    def add_row(name: str, module: str, keys: int, seconds: float) -> None:
        """A row of wall time (``"pool": true``), not a kernel's compiles."""
        row = timings.setdefault(name, {"module": module, "keys": 0, "seconds": 0.0, "pool": True})
        row["keys"] += keys
        row["seconds"] += seconds

    from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry

    JitWarmupRegistry.warmup = _timed(  # type: ignore[method-assign]
        JitWarmupRegistry.warmup,
        lambda args, seconds: add_row(REGISTRY_ROW, JitWarmupRegistry.__module__, 0, seconds),
    )

    from vllm.model_executor.warmup import jit_warmup_tilelang_helper as helper

    _time_each_tilelang_key(helper, timings)
    pool = getattr(helper, "tilelang_warmup_pool", None)
    if pool is not None:
        depth = [0]

        @contextlib.contextmanager
        def timed_pool(num_keys: int) -> Iterator[Any]:
            # The registry's pool spans its TileLang compiles and the Triton
            # pool beside them; each TileLang kernel's compile_many enters it
            # again (a no-op there): time the outermost entry only.
            outermost = not depth[0]
            depth[0] += 1
            start = time.perf_counter()
            try:
                with pool(num_keys) as start_compiles:
                    yield start_compiles  # 0009: the pool's compiles begin there
            finally:
                depth[0] -= 1
                if outermost:
                    add_row(POOL_ROW, helper.__name__, num_keys, time.perf_counter() - start)

        helper.tilelang_warmup_pool = timed_pool

    from vllm.model_executor.warmup import jit_warmup_triton_helper as triton_helper

    triton_pool = triton_helper.compile_triton_warmup

    def timed_triton_pool(compile_all: Any, num_keys: int) -> None:
        start = time.perf_counter()
        try:
            triton_pool(compile_all, num_keys)
        finally:
            add_row(TRITON_POOL_ROW, triton_helper.__name__, num_keys, time.perf_counter() - start)

    triton_helper.compile_triton_warmup = timed_triton_pool
    try:
        from vllm.model_executor.warmup import jit_warmup_sharing as sharing
    except ImportError:  # the series before patch 0010
        sharing = None
    if sharing is not None:
        share_compiles = sharing.share_compiles

        def timed_shares(*args: Any, **kwargs: Any) -> Any:
            shares = share_compiles(*args, **kwargs)
            if shares.wait is not None:
                shares.wait = _timed(
                    shares.wait,
                    lambda args, seconds: add_row(WAIT_ROW, sharing.__name__, 0, seconds),
                )
            return shares

        sharing.share_compiles = timed_shares
    atexit.register(lambda: print(TIMINGS_PREFIX + json.dumps(timings), file=sys.stderr))
    return timings


def _tilelang_kernel_name(jit_impl: Any) -> str:
    func = getattr(jit_impl, "func", None)
    return str(
        getattr(func, "__name__", None) or getattr(jit_impl, "__name__", type(jit_impl).__name__)
    )


def _time_each_tilelang_key(helper: Any, timings: dict[str, dict[str, Any]]) -> None:
    """Record every TileLang key's compile seconds under :data:`KEYS_ROW`: in
    the pool (patch 0009's ``_compile_elaborated``, on a pool thread) or, with
    one thread or before 0009, ``compile_tilelang`` itself."""
    lock = threading.Lock()

    def record(jit_impl: Any, seconds: float) -> None:
        with lock:
            row = timings.setdefault(
                KEYS_ROW,
                {"module": helper.__name__, "keys": 0, "seconds": 0.0, "per_key": True, "each": []},
            )
            row["keys"] += 1
            row["seconds"] = max(row["seconds"], seconds)
            row["each"].append([_tilelang_kernel_name(jit_impl), round(seconds, 3)])

    def record_key(args: tuple[Any, ...], seconds: float) -> None:
        record(args[0], seconds)  # the JIT is the first argument

    elaborated = getattr(helper, "_compile_elaborated", None)
    if elaborated is not None:
        helper._compile_elaborated = _timed(elaborated, record_key)
    whole = helper.compile_tilelang
    timed_whole = _timed(whole, record_key)
    pool = getattr(helper, "_compile_pool", None)

    def compile_tilelang(jit_impl: Any, *args: Any, **kwargs: Any) -> Any:
        # In the pool this only elaborates and submits: timed above.
        if pool is not None and pool.get() is not None and hasattr(jit_impl, "get_tir"):
            return whole(jit_impl, *args, **kwargs)
        return timed_whole(jit_impl, *args, **kwargs)

    helper.compile_tilelang = compile_tilelang


def warm_as_a_tensor_parallel_rank(rank_of_world: str, store: Path) -> None:
    """Run the registry's warmup as one rank of a gloo TP group of processes
    (``rank/world``, joined through the file ``store``), as a serving node's
    ranks run it:
    the command collects its registrations in its own one-rank world first,
    then warms in the group, where patch 0010 shares cold compiles."""
    from dsv4warmup.registry.tp_group import parse, tensor_parallel_group
    from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry

    rank, world = parse(rank_of_world)
    warmup = JitWarmupRegistry.warmup

    def as_rank(self: Any, kernel_items: Any = None) -> Any:
        with tensor_parallel_group(rank, world, store):
            return warmup(self, kernel_items)

    JitWarmupRegistry.warmup = as_rank  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    lacking = _stand_in_for_what_the_lab_lacks()
    from vllm.entrypoints.cli.warmup_kernels import WarmupKernelsSubcommand
    from vllm.logger import configure_logging_from_args
    from vllm.model_executor.warmup.jit_warmup_cutedsl_helper import VllmCuTeDSLJitKernel
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    if "cutlass" in lacking:

        def skip(self: Any, keys: Any) -> None:
            keys = list(keys)
            print(f"lab: skipped {type(self).__name__} ({len(keys)} keys)", file=sys.stderr)

        VllmCuTeDSLJitKernel.compile_many = skip  # type: ignore[method-assign]
    if os.environ.get(MODEL_KERNELS_ONLY_ENV) == "1":
        _warm_model_kernels_only()
    if os.environ.get("DSV4_PREWARM_TIMINGS") == "1":
        _time_compiles()
    if os.environ.get("DSV4_TP_RANK"):
        warm_as_a_tensor_parallel_rank(
            os.environ["DSV4_TP_RANK"], Path(os.environ["DSV4_TP_STORE"])
        )
    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subparser")
    WarmupKernelsSubcommand().subparser_init(subparsers)
    args = parser.parse_args(["warmup-kernels", *argv])
    configure_logging_from_args(args)
    WarmupKernelsSubcommand.cmd(args)


if __name__ == "__main__":
    main(sys.argv[1:])
