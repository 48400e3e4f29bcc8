"""What a registry-era tree's start-up path really warms, recorded on CPU.

vLLM 0.33.0 and 0.34.0 collect JIT warmup registrations in a ``JitWarmupRegistry`` that
only listens while it is *active*: the runner activates it around some of its
set-up steps (``with self.jit_warmup_registry.activate()``, or a whole
``@JitWarmupRegistry.capture`` method). ``register_warmup`` calls made while no
registry is active are dropped. The worker's ``kernel_warmup`` then calls
``registry.warmup()`` when ``kernel_config.enable_jit_warmup`` is on.

This module reproduces that lifecycle without a GPU:

* every ``JitWarmupRegistry.register`` call is recorded with the set-up *step*
  that made it (the kernel-group drivers build the real objects inside
  :func:`step`);
* which steps are active for a runner is read from the runner's own source
  (:func:`active_steps`), so a tree whose runner activates the registry
  elsewhere is audited as it is;
* the registrations of active steps go into a real ``JitWarmupRegistry`` whose
  real ``warmup()`` runs with Triton's launches intercepted
  (:mod:`dsv4warmup.triton_keys`) and TileLang compiles recorded by the group
  that owns them; Triton's driver is a CPU stand-in for an sm90 device.

Which model runners a tree has is read from the tree (:func:`available_runners`):
0.33.0 has Model Runner V2 and V1 (``VLLM_USE_V2_MODEL_RUNNER`` picks one),
0.34.0 removed V1. Everything that depends on the runner asks here
(:func:`selected`, :func:`configured_runner`), so no driver compares versions.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.util
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUNNERS = ("v2", "v1")  # every runner a release may have; v2: the default for DeepSeek V4 + MTP
STEPS = (
    "runner_init",
    "target_model",
    "drafter_model",
    "attn_backend",
    "input_batch",
    "kv_cache",
)


@dataclass(frozen=True)
class _CallSite:
    """The call by which a runner performs a set-up step."""

    method: str  # runner method holding the call
    callee: str  # dotted source of the called expression, e.g. "self.drafter.load_model"


@dataclass(frozen=True)
class _Runner:
    module: str
    cls: str
    steps: dict[str, _CallSite] = field(default_factory=dict)


_RUNNERS: dict[str, _Runner] = {
    "v1": _Runner(
        "vllm.v1.worker.gpu_model_runner",
        "GPUModelRunner",
        {
            "runner_init": _CallSite("__init__", "EagleProposer"),
            "target_model": _CallSite("load_model", "model_loader.load_model"),
            "drafter_model": _CallSite("load_model", "self.drafter.load_model"),
            "attn_backend": _CallSite("initialize_kv_cache", "self.initialize_metadata_builders"),
            "input_batch": _CallSite("may_reinitialize_input_batch", "InputBatch"),
            "kv_cache": _CallSite("initialize_kv_cache", "self.initialize_kv_cache_tensors"),
        },
    ),
    "v2": _Runner(
        "vllm.v1.worker.gpu.model_runner",
        "GPUModelRunner",
        {
            "runner_init": _CallSite("__init__", "init_speculator"),
            "target_model": _CallSite("load_model", "model_loader.load_model"),
            "drafter_model": _CallSite("load_model", "self.speculator.load_model"),
            "attn_backend": _CallSite("initialize_kv_cache", "init_attn_backend"),
            "kv_cache": _CallSite("initialize_kv_cache", "init_kv_cache"),
        },
    ),
}


class LifecycleError(RuntimeError):
    """The tree's runner no longer matches what this driver knows about it."""


# --------------------------------------------------------------------------
# Which model runners the tree has, and how a user picks one

# Where a tree has several runners, ``vllm serve`` starts the one this
# variable selects (0.33.0: unset or "1" is V2, "0" is V1).
_SELECTOR_ENV = "VLLM_USE_V2_MODEL_RUNNER"
_SELECTOR_VALUE = {"v2": "1", "v1": "0"}


def _module_file(tree: Path, module: str) -> Path:
    return (tree / Path(*module.split("."))).with_suffix(".py")


def runners_in_tree(tree: Path) -> tuple[str, ...]:
    """The :data:`RUNNERS` whose module the vLLM tree at ``tree`` holds
    (read from its files: nothing is imported), default first."""
    return tuple(r for r in RUNNERS if _module_file(tree, _RUNNERS[r].module).is_file())


@functools.cache
def available_runners() -> tuple[str, ...]:
    """The :data:`RUNNERS` of the importable vLLM tree, default first; a
    runner whose module the tree lacks is absent (0.34.0 has V2 only)."""
    return tuple(r for r in RUNNERS if importlib.util.find_spec(_RUNNERS[r].module) is not None)


def selection_env(runner: str) -> dict[str, str]:
    """The environment by which a user makes ``vllm serve`` start ``runner``:
    empty where the tree has no other runner."""
    runners = available_runners()
    if runner not in runners:
        raise LifecycleError(f"this vLLM tree has no model runner {runner!r} (it has {runners})")
    return {} if len(runners) == 1 else {_SELECTOR_ENV: _SELECTOR_VALUE[runner]}


@contextlib.contextmanager
def selected(runner: str) -> Iterator[None]:
    """``runner`` selected as a user selects it (:func:`selection_env`). vLLM
    reads the selector whenever the configuration is asked which runner it
    uses (also while a model is built), so keep it for the whole drive; only
    the selector is restored afterwards."""
    env = selection_env(runner)
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def configured_runner(vllm_config: Any) -> str:
    """The runner ``vllm serve`` starts for ``vllm_config``."""
    runners = available_runners()
    if len(runners) == 1:
        return runners[0]
    return "v2" if vllm_config.use_v2_model_runner else "v1"


# --------------------------------------------------------------------------
# Which set-up steps run with an active registry (from the runner's source)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        parent = _dotted(node.value)
        return f"{parent}.{node.attr}" if parent else None
    return None


def _activates_registry(item: ast.withitem) -> bool:
    expr = item.context_expr
    return (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "activate"
        and (_dotted(expr.func.value) or "").endswith("jit_warmup_registry")
    )


def _captures(fn: ast.FunctionDef) -> bool:
    return any(_dotted(d) == "JitWarmupRegistry.capture" for d in fn.decorator_list)


def _calls_with_activity(fn: ast.FunctionDef, callee: str) -> list[bool]:
    """For each call of ``callee`` in ``fn``: is a registry active there?"""
    found: list[bool] = []

    def visit(node: ast.AST, active: bool) -> None:
        if isinstance(node, (ast.With, ast.AsyncWith)):
            active = active or any(_activates_registry(item) for item in node.items)
        if isinstance(node, ast.Call) and _dotted(node.func) == callee:
            found.append(active)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue  # a nested function runs later, under its caller's state
            visit(child, active)

    for stmt in fn.body:
        visit(stmt, _captures(fn))
    return found


def _runner_class(runner: str) -> tuple[_Runner, ast.ClassDef]:
    spec = _RUNNERS[runner]
    module = importlib.util.find_spec(spec.module)  # type: ignore[attr-defined]
    if module is None or module.origin is None:
        raise LifecycleError(f"{spec.module} is not importable")
    tree = ast.parse(Path(module.origin).read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == spec.cls:
            return spec, node
    raise LifecycleError(f"{spec.module} has no class {spec.cls}")


def active_steps(runner: str) -> frozenset[str]:
    """The set-up steps of ``runner`` whose registrations reach the registry.

    Raises LifecycleError when a step's call site is missing or appears both
    inside and outside an active registry.
    """
    spec, cls = _runner_class(runner)
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    active: set[str] = set()
    for step_name, site in spec.steps.items():
        fn = methods.get(site.method)
        if fn is None:
            raise LifecycleError(f"{spec.module}.{spec.cls} has no method {site.method}")
        states = set(_calls_with_activity(fn, site.callee))
        if not states:
            raise LifecycleError(
                f"{spec.module}.{spec.cls}.{site.method} no longer calls {site.callee}"
            )
        if len(states) > 1:
            raise LifecycleError(
                f"{spec.module}.{spec.cls}.{site.method} calls {site.callee} both inside "
                "and outside an active JIT warmup registry"
            )
        if states.pop():
            active.add(step_name)
    return frozenset(active)


# --------------------------------------------------------------------------
# Recording registrations with the step that made them


@dataclass
class Registration:
    kernel: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    step: str


@dataclass
class _Recorder:
    registrations: list[Registration] = field(default_factory=list)
    current_step: str | None = None


_recorder: _Recorder | None = None


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    """Registrations made inside are attributed to set-up step ``name``."""
    if name not in STEPS:
        raise ValueError(f"unknown set-up step {name!r}; one of {STEPS}")
    if _recorder is None:
        yield
        return
    previous, _recorder.current_step = _recorder.current_step, name
    try:
        yield
    finally:
        _recorder.current_step = previous


@contextlib.contextmanager
def registrations() -> Iterator[list[Registration]]:
    """Record every ``JitWarmupRegistry.register`` call (none reaches a registry)."""
    global _recorder
    from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry

    recorder = _Recorder()

    def register(cls: Any, kernel: Any, *args: Any, **kwargs: Any) -> None:
        if recorder.current_step is None:
            raise LifecycleError(
                f"{type(kernel).__name__} registered outside any lifecycle.step(): "
                "the driver must say where the runner builds this object"
            )
        recorder.registrations.append(Registration(kernel, args, kwargs, recorder.current_step))

    original = JitWarmupRegistry.__dict__["register"]
    JitWarmupRegistry.register = classmethod(register)  # type: ignore[method-assign,assignment]
    _recorder = recorder
    try:
        yield recorder.registrations
    finally:
        _recorder = None
        JitWarmupRegistry.register = original  # type: ignore[method-assign]


def warm_registry(
    vllm_config: Any,
    runner: str,
    register: Callable[[Any, str], None],
    keep: Callable[[Any], bool] | None = None,
) -> Any:
    """A real ``JitWarmupRegistry`` holding what ``runner``'s start-up keeps of
    the registrations ``register(vllm_config, runner)`` makes (its steps
    attributed with :func:`step`; the runner's active steps only, and the
    kernels ``keep`` accepts); call its ``warmup()``."""
    from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry

    active = active_steps(runner)
    with registrations() as recorded:
        register(vllm_config, runner)
    registry = JitWarmupRegistry(vllm_config)
    for r in recorded:
        if r.step in active and (keep is None or keep(r.kernel)):
            registry._add(r.kernel, r.args, r.kwargs)
    return registry


# --------------------------------------------------------------------------
# Running the real registry warmup on CPU


class _CpuCudaDriver:
    """What Triton asks its active driver while binding, keying and compiling
    launches for an sm_90 GPU."""

    def get_current_device(self) -> int:
        return 0

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def get_current_stream(self, device: int | None = None) -> int:
        return 0  # a compile-only launch (``warmup``) asks, and never launches

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"no GPU here: Triton asked its driver for {name!r}")


@contextlib.contextmanager
def cpu_triton_driver() -> Iterator[None]:
    from triton.runtime import driver

    previous = driver._active
    driver.set_active(_CpuCudaDriver())  # type: ignore[arg-type]
    try:
        yield
    finally:
        driver._active = previous


KeysByKernel = dict[str, set[Any]]
CompileRecorder = Callable[[], contextlib.AbstractContextManager[KeysByKernel]]


@dataclass
class WarmupRun:
    keys: KeysByKernel
    active: frozenset[str]
    dropped: list[str]  # kernels registered only in inactive steps


def warmed_keys(
    vllm_config: Any,
    runner: str,
    register_fns: Iterable[Callable[[Any, str], None]],
    compile_recorders: Iterable[CompileRecorder] = (),
    keep: Callable[[Any], bool] | None = None,
) -> WarmupRun:
    """Keys the real start-up warmup of ``runner`` compiles for ``vllm_config``.

    ``keep`` limits the warmup to the registered kernels it accepts (an audit
    of one kernel group need not expand every other kernel's keys).
    """
    from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry

    from dsv4warmup import triton_keys

    active = active_steps(runner)
    with registrations() as recorded:
        for register in register_fns:
            register(vllm_config, runner)
    if keep is not None:
        recorded = [r for r in recorded if keep(r.kernel)]
    reached = [r for r in recorded if r.step in active]
    dropped = sorted(
        {type(r.kernel).__name__ for r in recorded} - {type(r.kernel).__name__ for r in reached}
    )
    keys: KeysByKernel = {}
    if not vllm_config.kernel_config.enable_jit_warmup:  # kernel_warmup's gate
        return WarmupRun(keys, active, dropped)
    registry = JitWarmupRegistry(vllm_config)
    for r in reached:
        registry._add(r.kernel, r.args, r.kwargs)
    with contextlib.ExitStack() as stack:
        stack.enter_context(cpu_triton_driver())
        launches = stack.enter_context(triton_keys.record_launches())
        recorded_elsewhere = [stack.enter_context(rec()) for rec in compile_recorders]
        registry.warmup()
    for name, found in triton_keys.keys_by_kernel(launches).items():
        keys.setdefault(name, set()).update(found)
    for extra in recorded_elsewhere:
        for name, found in extra.items():
            keys.setdefault(name, set()).update(found)
    return WarmupRun(keys, active, dropped)
