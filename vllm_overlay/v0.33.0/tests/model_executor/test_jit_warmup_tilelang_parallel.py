# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Parallel TileLang warmup: every key elaborated on the calling thread, then
compiled in a pool, every key in the JIT's call cache. Runs without TileLang
or a GPU."""

import sys
import threading
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from vllm.model_executor.warmup import jit_warmup_tilelang_helper as helper
from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry, VllmJitKernel
from vllm.model_executor.warmup.jit_warmup_tilelang_helper import (
    VllmTileLangJitKernel,
    kernel_launcher,
)


class FakeJit:
    """The parts of tilelang's JITImpl the warmup uses."""

    out_idx = None
    execution_backend = "auto"
    target = "auto"
    target_host = None
    verbose = False
    pass_configs = None
    compile_flags = None

    def __init__(self) -> None:
        self._kernel_cache: dict[Any, Any] = {}
        self.elaborated_on: list[str] = []
        self.elaborated: set[tuple[Any, ...]] = set()
        self.func = SimpleNamespace(parse_args=self.parse_args)

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:
        # TileLang's needs the JIT mode that elaborating these arguments settles.
        assert args in self.elaborated, "parse_args before elaboration"
        return args, None

    def get_tir(self, *args: Any, **kwargs: Any) -> Any:
        self.elaborated_on.append(threading.current_thread().name)
        self.elaborated.add(args)
        return ("tir", args)

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        return ("serial", self.get_tir(*args, **kwargs))


JIT = FakeJit()


class ToyTileLangKernel(VllmTileLangJitKernel["ToyTileLangKernel.CompileKey"]):
    @dataclass(frozen=True)
    class CompileKey:
        n: int

    @staticmethod
    def kernel(compile_key: CompileKey) -> Any:
        return JIT

    def get_warmup_keys(self, *, ns: tuple[int, ...]) -> list[CompileKey]:
        return [self.CompileKey(n) for n in ns]

    def warmup_inputs(self, compile_key: CompileKey) -> dict[str, Any]:
        return {"n": compile_key.n}

    @kernel_launcher
    def __call__(self, *, n: int) -> Any:
        return (self.CompileKey(n),), (n,)


@pytest.fixture
def fake_tilelang(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A ``tilelang.compile`` that records its thread and, for the first two
    calls, waits until both run at once (serial compiles time out)."""
    compiled_on: list[str] = []
    both_running = threading.Barrier(2, timeout=10)
    module = ModuleType("tilelang")

    def compile(prim_func: Any, **options: Any) -> Any:
        compiled_on.append(threading.current_thread().name)
        if len(compiled_on) <= 2:
            both_running.wait()
        if prim_func == ("tir", (13,)):
            raise RuntimeError("nvcc failed")
        return ("kernel", prim_func)

    module.compile = compile  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tilelang", module)
    monkeypatch.setattr(helper.current_platform, "is_cuda", lambda: True)
    monkeypatch.setenv("VLLM_TILELANG_JIT_WARMUP_NUM_THREADS", "4")
    JIT._kernel_cache.clear()
    JIT.elaborated_on.clear()
    JIT.elaborated.clear()
    return compiled_on


def test_compile_many_compiles_in_pool_threads(fake_tilelang: list[str]) -> None:
    kernel = ToyTileLangKernel()
    keys = kernel.get_warmup_keys(ns=(1, 2, 3, 5, 8))

    kernel.compile_many(keys)

    main = threading.current_thread().name
    assert JIT.elaborated_on == [main] * 5
    assert len(fake_tilelang) == 5
    assert all(name.startswith("tilelang-warmup") for name in fake_tilelang)
    assert JIT._kernel_cache == {
        (n,): ("kernel", ("tir", (n,))) for n in (1, 2, 3, 5, 8)
    }


def test_every_key_is_elaborated_before_any_compiles(
    fake_tilelang: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # TVM's IR builder is not safe beside another thread's TVM calls.
    events: list[str] = []
    compiling = threading.Event()
    tilelang_compile = sys.modules["tilelang"].compile
    get_tir = JIT.get_tir

    def compile(prim_func: Any, **options: Any) -> Any:
        events.append("compile")
        compiling.set()
        return tilelang_compile(prim_func, **options)

    def elaborate(*args: Any, **kwargs: Any) -> Any:
        # Time for a compile handed to the pool before this one to start.
        compiling.wait(0.2)
        events.append("elaborate")
        return get_tir(*args, **kwargs)

    monkeypatch.setattr(sys.modules["tilelang"], "compile", compile)
    monkeypatch.setattr(JIT, "get_tir", elaborate)
    kernel = ToyTileLangKernel()

    kernel.compile_many(kernel.get_warmup_keys(ns=(1, 2, 3)))

    assert events == ["elaborate"] * 3 + ["compile"] * 3
    assert sorted(JIT._kernel_cache) == [(1,), (2,), (3,)]


def test_a_key_dispatched_after_start_compiles_on_the_caller_after_the_pool(
    fake_tilelang: list[str],
) -> None:
    kernel = ToyTileLangKernel()
    keys = kernel.get_warmup_keys(ns=(1, 2, 3))

    with helper.tilelang_warmup_pool(len(keys)) as start:
        kernel.compile_many(keys[:2])
        start()
        kernel.compile_many(keys[2:])
        # The pool's two compiles were done before the third was elaborated.
        assert len(fake_tilelang) == 2

    assert JIT._kernel_cache[(3,)] == ("serial", ("tir", (3,)))
    assert sorted(JIT._kernel_cache) == [(1,), (2,), (3,)]
    assert JIT.elaborated_on == [threading.current_thread().name] * 3


def test_registry_compiles_tilelang_keys_in_one_pool(fake_tilelang: list[str]) -> None:
    registry = JitWarmupRegistry(SimpleNamespace())
    kernel = ToyTileLangKernel()
    with registry.activate():
        kernel.register_warmup(ns=(1, 2))
        kernel.register_warmup(ns=(2, 3))

    registry.warmup()

    assert sorted(JIT._kernel_cache) == [(1,), (2,), (3,)]
    assert len(fake_tilelang) == 3
    assert all(name.startswith("tilelang-warmup") for name in fake_tilelang)


def test_compile_error_is_raised_after_the_other_compiles(
    fake_tilelang: list[str],
) -> None:
    kernel = ToyTileLangKernel()

    with pytest.raises(RuntimeError, match="nvcc failed"):
        kernel.compile_many(kernel.get_warmup_keys(ns=(1, 2, 13, 4)))

    assert sorted(JIT._kernel_cache) == [(1,), (2,), (4,)]


def test_one_thread_compiles_serially_on_the_caller(
    fake_tilelang: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_TILELANG_JIT_WARMUP_NUM_THREADS", "1")
    kernel = ToyTileLangKernel()

    kernel.compile_many(kernel.get_warmup_keys(ns=(1, 2)))

    assert fake_tilelang == []  # JITImpl.compile(), not the pool's path
    assert JIT._kernel_cache == {(n,): ("serial", ("tir", (n,))) for n in (1, 2)}
    assert JIT.elaborated_on == [threading.current_thread().name] * 2


def test_tilelang_keys_compile_while_the_triton_pool_runs(
    fake_tilelang: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm.model_executor.warmup import jit_warmup_triton_helper as triton_helper

    tilelang_started = threading.Event()
    tilelang_compile = sys.modules["tilelang"].compile

    def compile(prim_func: Any, **options: Any) -> Any:
        tilelang_started.set()
        return tilelang_compile(prim_func, **options)

    monkeypatch.setattr(sys.modules["tilelang"], "compile", compile)

    class PooledTritonKernel:
        supports_parallel_compile = True

    class TritonKernel(PooledTritonKernel, VllmJitKernel[int]):
        def get_warmup_keys(self) -> list[int]:
            return [0]

        def compile(self, compile_key: int) -> None:
            # Had the Triton pool run first, no TileLang compile would start.
            assert tilelang_started.wait(10), "TileLang waited for the Triton pool"

    monkeypatch.setattr(triton_helper, "VllmTritonJitKernel", PooledTritonKernel)
    monkeypatch.setattr(
        triton_helper, "compile_triton_warmup", lambda compile_all, n: compile_all()
    )
    registry = JitWarmupRegistry(SimpleNamespace())
    with registry.activate():
        TritonKernel().register_warmup()
        ToyTileLangKernel().register_warmup(ns=(1, 2))

    registry.warmup()

    assert sorted(JIT._kernel_cache) == [(1,), (2,)]
