# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Compiler processes for the TileLang JIT warmup.

TileLang compiles in threads of one process stop scaling at a few threads,
while the same compiles in separate processes scale with the host's cores.
Each thread of the TileLang warmup pool therefore hands the specializations
it compiles to a compiler process of its own (the script
``jit_warmup_tilelang_compile_worker.py``): the process rebuilds the
elaborated ``PrimFunc`` from its JSON form, compiles it into TileLang's disk
cache with the options the kernel's JIT uses, and the warmup then loads it
from there. The cache key is derived from the ``PrimFunc``'s script and the
options, so the load finds exactly what the process built; anything else (a
process that cannot start, an option that does not serialize, a failed
compile) is compiled in the warming process as before.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from vllm.logger import init_logger
from vllm.model_executor.warmup.jit_warmup import (
    counted_as_compiles,
    tilelang_kernel_from_database,
)

logger = init_logger(__name__)

# Run as a script: importing vLLM would add seconds to each process's start.
_WORKER = str(Path(__file__).with_name("jit_warmup_tilelang_compile_worker.py"))


def _json_options(options: Mapping[str, Any], target: str) -> dict[str, Any]:
    """``tilelang.compile()`` options as JSON values, ``target`` resolved."""
    out = dict(options, target=target)
    if out.get("target_host") is not None:
        out["target_host"] = str(out["target_host"])
    if out.get("pass_configs"):
        # PassConfigKey members are str enums: their values are the keys
        # TileLang's pass context and cache key use.
        out["pass_configs"] = {
            str(getattr(key, "value", key)): value
            for key, value in out["pass_configs"].items()
        }
    return out


class _NotInDiskCache(Exception):
    pass


# Set while a kernel may only be loaded from the disk cache, not compiled.
_loads_only: ContextVar[bool] = ContextVar("tilelang_warmup_loads_only", default=False)


@contextmanager
def _refusing_compiles_when_loading_only() -> Iterator[None]:
    """Make ``JITKernel`` refuse to compile inside :data:`_loads_only`, so
    ``tilelang.compile()`` there returns only what the disk cache holds."""
    jit_kernel = importlib.import_module("tilelang.jit.kernel").JITKernel
    original_init = jit_kernel.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        if _loads_only.get() and not tilelang_kernel_from_database(args, kwargs):
            raise _NotInDiskCache
        original_init(self, *args, **kwargs)

    jit_kernel.__init__ = init
    try:
        yield
    finally:
        jit_kernel.__init__ = original_init


def _load(prim_func: Any, options: Mapping[str, Any]) -> Any:
    """``tilelang.compile()`` that only reads TileLang's caches: raises
    :class:`_NotInDiskCache` where it would compile."""
    import tilelang

    token = _loads_only.set(True)
    try:
        return tilelang.compile(prim_func, **options)
    finally:
        _loads_only.reset(token)


class TileLangCompilerProcesses:
    """One compiler process per calling thread, started on its first compile."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = dict(env)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._started: list[subprocess.Popen[str]] = []
        self._targets: dict[str, str] = {}
        self._failed = False

    def kernel(self, prim_func: Any, options: Mapping[str, Any]) -> Any:
        """``tilelang.compile(prim_func, **options)``: read from the disk
        cache, else compiled there by this thread's process and read, else
        (the process could not) compiled here."""
        import tilelang

        with contextlib.suppress(_NotInDiskCache):
            return _load(prim_func, options)
        if self._compile(prim_func, options):
            try:
                # Built for this process: reading it counts as its compile.
                with counted_as_compiles():
                    return _load(prim_func, options)
            except _NotInDiskCache:
                # Built under another cache key than this process computes:
                # every key would be compiled twice.
                self._failed = True
                logger.warning(
                    "TileLang warmup: the compiler process's kernel is not "
                    "where this process looks it up; compiling the remaining "
                    "TileLang keys in this process."
                )
        return tilelang.compile(prim_func, **options)

    def _target(self, target: Any) -> str:
        """``target`` as TileLang resolves it here ("auto" probes the GPU)."""
        name = repr(target)
        with self._lock:
            if name not in self._targets:
                from tilelang import env as tilelang_env
                from tilelang.backend.target import determine_target

                chosen = (
                    target if target is not None else tilelang_env.get_default_target()
                )
                self._targets[name] = str(determine_target(chosen, return_object=True))
            return self._targets[name]

    def _process(self) -> subprocess.Popen[str]:
        proc = getattr(self._local, "proc", None)
        if proc is None:
            proc = subprocess.Popen(
                [sys.executable, _WORKER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=self._env,
                text=True,
            )
            with self._lock:
                self._started.append(proc)
            self._local.proc = proc
        return proc

    def _compile(self, prim_func: Any, options: Mapping[str, Any]) -> bool:
        """Compile ``prim_func`` into the disk cache in this thread's process.

        Returns:
            True if the process compiled it; False if it found it in the disk
            cache (another process compiled it meanwhile) or could not (the
            caller compiles it).

        """
        if self._failed:
            return False
        try:
            import tvm

            task = json.dumps(
                {
                    "tir": tvm.ir.save_json(prim_func),
                    "options": _json_options(options, self._target(options["target"])),
                }
            )
        except Exception:
            logger.debug("TileLang warmup: compiling in this process", exc_info=True)
            return False
        proc = None
        try:
            proc = self._process()
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(task + "\n")
            proc.stdin.flush()
            reply = proc.stdout.readline()
        except OSError:
            reply = ""
        if not reply:
            # Not one restart per key: the rest compile in this process.
            self._failed = True
            code = None
            # Its output closed; if it runs on, close() ends it.
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = proc.wait(timeout=10)
            logger.warning(
                "TileLang warmup compiler process exited (code %s); compiling "
                "the remaining TileLang keys in this process.",
                code,
            )
            return False
        result = json.loads(reply)
        if "error" in result:
            # Compiled again here, where the error reaches the caller.
            logger.debug("TileLang warmup compiler process: %s", result["error"])
            return False
        return bool(result["compiled"])

    def close(self) -> None:
        """End the compiler processes (end of input ends their loop)."""
        with self._lock:
            started, self._started = self._started, []
        for proc in started:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in started:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


@contextmanager
def tilelang_compiler_processes() -> Iterator[TileLangCompilerProcesses | None]:
    """Compiler processes writing this process's TileLang disk cache while
    active, ended on exit; None if that cache is disabled (nothing to hand
    a compile through) or TileLang is missing."""
    try:
        import tvm  # noqa: F401
        from tilelang import env as tilelang_env
    except ImportError:
        yield None
        return
    if not tilelang_env.is_cache_enabled():
        yield None
        return
    env = dict(os.environ)
    # The same packages and cache as this process, and no GPU: compiling for
    # an explicit target needs none, and a CUDA context per compiler would
    # take device memory from the server.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["TILELANG_CACHE_DIR"] = str(tilelang_env.TILELANG_CACHE_DIR)
    env["CUDA_VISIBLE_DEVICES"] = ""
    compilers = TileLangCompilerProcesses(env)
    try:
        with _refusing_compiles_when_loading_only():
            yield compilers
    finally:
        compilers.close()
