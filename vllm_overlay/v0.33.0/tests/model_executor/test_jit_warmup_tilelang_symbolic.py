# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""TileLang warmup of a kernel with symbolic warmup arguments: one elaboration
per value of its other arguments, specialized to each key, checked against
elaborating the group's first key. Runs without TileLang or a GPU."""

import inspect
import sys
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from vllm.model_executor.warmup import jit_warmup_tilelang_helper as helper
from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry
from vllm.model_executor.warmup.jit_warmup_tilelang_helper import (
    VllmTileLangJitKernel,
    kernel_launcher,
)


@dataclass(frozen=True)
class Var:
    name: str


class PrimFunc:
    """A PrimFunc as the warmup uses it: params, specialize(), script()."""

    def __init__(self, body: tuple[Any, ...]) -> None:
        self.body = body
        self.params = [x for x in body if isinstance(x, Var)]

    def specialize(self, values: dict[Var, int]) -> "PrimFunc":
        return PrimFunc(tuple(values.get(x, x) for x in self.body))

    def script(self, show_meta: bool = False) -> str:
        return repr(self.body)


def kernel_source(x: Any, n_splits: Any, eps: float) -> None:
    """The parameters of the fake JIT's kernel."""


class SplitJit:
    """A JIT whose PrimFunc has n_splits in it (as buffer extent and loop
    bound); with ``reads_n_splits`` its Python also tests n_splits == 1, which
    a TIR variable answers False."""

    signature = inspect.signature(kernel_source)
    out_idx = None
    execution_backend = "auto"
    target = "auto"
    target_host = None
    verbose = False
    pass_configs = None
    compile_flags = None

    def __init__(
        self, reads_n_splits: bool = False, ranges_n_splits: bool = False
    ) -> None:
        self.reads_n_splits = reads_n_splits
        self.ranges_n_splits = ranges_n_splits
        self._kernel_cache: dict[Any, Any] = {}
        self.elaborated: list[Any] = []
        self.func = SimpleNamespace(parse_args=lambda *args, **kwargs: (args, None))

    def get_tir(self, *args: Any, **kwargs: Any) -> PrimFunc:
        bound = self.signature.bind(*args, **kwargs)
        n, eps = bound.arguments["n_splits"], bound.arguments["eps"]
        self.elaborated.append(n)
        if self.ranges_n_splits:
            list(range(n))  # a TIR variable is no Python int
        one = self.reads_n_splits and n == 1
        return PrimFunc(("tir", eps, "one" if one else "many", n))

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        return ("serial", self.get_tir(*args, **kwargs))


class SplitKernel(VllmTileLangJitKernel["SplitKernel.CompileKey"]):
    symbolic_warmup_args = ("n_splits",)
    jit = SplitJit()

    @dataclass(frozen=True)
    class CompileKey:
        n_splits: int
        eps: float

    def kernel(self, compile_key: CompileKey) -> Any:  # type: ignore[override]
        return self.jit

    def get_warmup_keys(self, *, keys: list[tuple[int, float]]) -> list[CompileKey]:
        return [self.CompileKey(n, eps) for n, eps in keys]

    def warmup_inputs(self, compile_key: CompileKey) -> dict[str, Any]:
        return {"n_splits": compile_key.n_splits, "eps": compile_key.eps}

    @kernel_launcher
    def __call__(self, *, n_splits: int, eps: float) -> Any:
        return (self.CompileKey(n_splits, eps),), ("x", n_splits, eps)


class PlainKernel(SplitKernel):
    symbolic_warmup_args = ()


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scripts of the PrimFuncs ``tilelang.compile`` gets."""
    scripts: list[str] = []
    module = ModuleType("tilelang")

    def compile(prim_func: PrimFunc, **options: Any) -> Any:
        scripts.append(prim_func.script(show_meta=True))
        return ("kernel", prim_func.script())

    module.compile = compile  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tilelang", module)
    monkeypatch.setattr(helper, "_symbolic_var", Var)
    monkeypatch.setattr(helper.current_platform, "is_cuda", lambda: True)
    monkeypatch.setenv("VLLM_TILELANG_JIT_WARMUP_NUM_THREADS", "4")
    return scripts


def static_script(jit: SplitJit, n: int, eps: float) -> str:
    return SplitJit(jit.reads_n_splits).get_tir("x", n, eps).script()


def test_one_elaboration_per_group_gives_every_key_its_primfunc(
    compiled: list[str],
) -> None:
    kernel = SplitKernel()
    kernel.jit = SplitJit()
    keys = [(16, 1e-6), (8, 1e-6), (4, 1e-6), (16, 1e-5), (2, 1e-5)]

    kernel.compile_many(kernel.get_warmup_keys(keys=keys))

    # per eps: its first key as given, then once with n_splits a variable
    assert kernel.jit.elaborated == [16, Var("n_splits"), 16, Var("n_splits")]
    assert sorted(compiled) == sorted(static_script(kernel.jit, n, e) for n, e in keys)
    assert kernel.jit._kernel_cache == {
        ("x", n, e): ("kernel", static_script(kernel.jit, n, e)) for n, e in keys
    }


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The helper's warnings, formatted."""
    logged: list[str] = []
    monkeypatch.setattr(
        helper.logger, "warning", lambda msg, *args: logged.append(msg % args)
    )
    return logged


@pytest.mark.parametrize(
    "jit_kwargs,ns,elaborated",
    [
        # specialized, the template is not the first key's PrimFunc
        ({"reads_n_splits": True}, (1, 2, 3), [1, Var("n_splits"), 2, 3]),
        # the template cannot be elaborated
        ({"ranges_n_splits": True}, (4, 2), [4, Var("n_splits"), 2]),
    ],
    ids=["template-differs", "template-fails"],
)
def test_a_template_that_is_not_usable_elaborates_each_key(
    compiled: list[str],
    warnings: list[str],
    jit_kwargs: dict[str, bool],
    ns: tuple[int, ...],
    elaborated: list[Any],
) -> None:
    kernel = SplitKernel()
    kernel.jit = SplitJit(**jit_kwargs)
    keys = [(n, 1e-6) for n in ns]

    kernel.compile_many(kernel.get_warmup_keys(keys=keys))

    assert kernel.jit.elaborated == elaborated
    assert sorted(compiled) == sorted(static_script(kernel.jit, n, e) for n, e in keys)
    assert len(warnings) == 1 and "n_splits" in warnings[0]


def test_kernels_without_symbolic_args_elaborate_each_key(compiled: list[str]) -> None:
    split, plain = SplitKernel(), PlainKernel()
    split.jit, plain.jit = SplitJit(), SplitJit()
    registry = JitWarmupRegistry(SimpleNamespace())
    with registry.activate():
        split.register_warmup(keys=[(16, 1e-6), (8, 1e-6)])
        plain.register_warmup(keys=[(16, 1e-6), (8, 1e-6)])

    registry.warmup()

    assert split.jit.elaborated == [16, Var("n_splits")]
    assert plain.jit.elaborated == [16, 8]
    assert len(compiled) == 4


def test_one_thread_elaborates_each_key(
    compiled: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_TILELANG_JIT_WARMUP_NUM_THREADS", "1")
    kernel = SplitKernel()
    kernel.jit = SplitJit()

    kernel.compile_many(kernel.get_warmup_keys(keys=[(16, 1e-6), (8, 1e-6)]))

    assert kernel.jit.elaborated == [16, 8]
    assert compiled == []  # JITImpl.compile(), not the pool's path


def test_symbolic_args_apply_only_while_their_kernel_warms(
    compiled: list[str],
) -> None:
    split = SplitKernel()
    split.jit, direct = SplitJit(), SplitJit()
    with helper.tilelang_warmup_pool(4):
        split.compile_many(split.get_warmup_keys(keys=[(16, 1e-6), (8, 1e-6)]))
        # A TileLang compile outside any kernel's compile(), in the same pool.
        helper.compile_tilelang(direct, "x", 16, 1e-6)
        helper.compile_tilelang(direct, "x", 8, 1e-6)

    assert split.jit.elaborated == [16, Var("n_splits")]
    assert direct.elaborated == [16, 8]
    assert len(compiled) == 4
