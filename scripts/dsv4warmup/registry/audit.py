"""Key-coverage audit of a registry-era vLLM tree (0.33.0, 0.34.0), per model runner.

Runtime side: each kernel group's driver (``dsv4warmup.registry.<group>``) drives
the tree's real call sites of one runner over the serving sweep of the
configuration and returns every key with one witness batch. Warmed side: the
tree's real registration lifecycle for that runner (:mod:`.lifecycle`), fed by
the same groups' ``register`` (the real objects whose construction registers
the kernels). Both run in the interpreter that imports the tree. The runners
are the tree's own (:func:`lifecycle.available_runners`); a group's kernels are
those the tree defines (its ``present_kernels()`` where a kernel may be gone).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from dsv4warmup.generation import REGISTRY_AUDIT_GROUPS
from dsv4warmup.rows import Row
from dsv4warmup.serving import ServingConfig

from . import engine, lifecycle

# The groups of every registry-era release (0.34.0 adds sampling: generation.audit_groups).
GROUPS = REGISTRY_AUDIT_GROUPS
MAX_WITNESSES = 3  # per kernel row; the JSON keeps the same number


def group_modules(groups: tuple[str, ...] = GROUPS) -> list[tuple[str, ModuleType]]:
    out = []
    for group in groups:
        try:
            out.append((group, importlib.import_module(f"dsv4warmup.registry.{group}")))
        except ModuleNotFoundError as e:
            if e.name != f"dsv4warmup.registry.{group}":
                raise
    return out


def default_runner(vllm_config: Any) -> str:
    """The runner ``vllm serve`` starts for this configuration."""
    return lifecycle.configured_runner(vllm_config)


def kernels_of(mod: ModuleType) -> tuple[str, ...]:
    """The audit rows of a group module in the importable tree: its
    ``present_kernels()`` where it has one, else all its ``KERNELS``."""
    present = getattr(mod, "present_kernels", None)
    return tuple(present()) if present is not None else tuple(mod.KERNELS)


def _owned_by(groups: list[tuple[str, ModuleType]]) -> Callable[[Any], bool]:
    """Registered kernels the audited groups own: a group's ``owns(kernel)``,
    else a Triton owner whose kernel is one of the group's rows."""
    from dsv4warmup.triton_keys import kernel_name

    def keep(kernel: Any) -> bool:
        for _, mod in groups:
            owns = getattr(mod, "owns", None)
            if owns is not None:
                if owns(kernel):
                    return True
                continue
            triton_fn = getattr(kernel, "kernel", None)
            if triton_fn is not None and kernel_name(triton_fn) in mod.KERNELS:
                return True
        return False

    return keep


def gpu_for(cfg: ServingConfig) -> Any:
    """The GPU whose SM count ``cfg`` names (the installed one if it agrees):
    the warmed side must see the device the runtime side sees (mHC keys
    follow the SM count)."""
    from . import platform

    installed = platform.installed_gpu()
    if installed is not None and installed.sm_count == cfg.sm_count:
        return installed
    for gpu in (platform.H200, platform.B200, platform.H100):
        if gpu.sm_count == cfg.sm_count:
            return gpu
    return platform.H200


def _witness_sort_key(item: tuple[Any, str]) -> tuple[int, str]:
    return (len(item[1]), item[1])


def rows_for(
    cfg: ServingConfig,
    groups: tuple[str, ...] | None = None,
    runner_fails: Callable[[str, BaseException], bool] | None = None,
) -> list[Row]:
    """Rows for every (runner, kernel) of ``groups`` in the importable tree.

    Args:
        cfg: The serving configuration.
        groups: Kernel groups (default: all).
        runner_fails: Asked when auditing the non-default model runner raises;
            True (vLLM's own start-up code fails for that runner, so a
            deployment cannot use it) leaves that runner's rows out.
    """
    vllm_config = engine.vllm_config(cfg, gpu_for(cfg))
    default = default_runner(vllm_config)
    groups_ = group_modules(groups or GROUPS)
    rows: list[Row] = []
    for runner in lifecycle.available_runners():
        try:
            rows += _runner_rows(cfg, vllm_config, runner, default, groups_)
        except Exception as e:
            if runner == default or runner_fails is None or not runner_fails(runner, e):
                raise
    return rows


def _runner_rows(
    cfg: ServingConfig, vllm_config: Any, runner: str, default: str, groups_: Any
) -> list[Row]:
    """Rows of ``runner``. A group with ``startup_keys`` (sampling) audits what
    the runner's whole start-up launches; the others what its registry
    warmup compiles, through the real registration lifecycle."""
    rows: list[Row] = []
    registry_groups = [(g, m) for g, m in groups_ if not hasattr(m, "startup_keys")]
    warmed_by_registry: dict[str, set[Any]] = {}
    if registry_groups:
        warmed_by_registry = lifecycle.warmed_keys(
            vllm_config,
            runner,
            [mod.register for _, mod in registry_groups],
            [mod.record_compiles for _, mod in registry_groups if hasattr(mod, "record_compiles")],
            keep=_owned_by(registry_groups),
        ).keys
    label = f"{runner} (default)" if runner == default else runner
    for group, mod in groups_:
        if hasattr(mod, "startup_keys"):
            if runner not in mod.RUNNERS:
                continue
            runtime = mod.runtime_keys(cfg, runner)
            warmed = mod.startup_keys(cfg, runner)
            kernels = tuple(sorted(set(runtime) | set(warmed)))
        else:
            runtime = mod.runtime_keys(cfg, runner)
            warmed = warmed_by_registry
            kernels = kernels_of(mod)
        for kernel in kernels:
            rt = runtime.get(kernel, {})
            wk = warmed.get(kernel, set())
            missing = sorted(((k, w) for k, w in rt.items() if k not in wk), key=_witness_sort_key)
            rows.append(
                Row(
                    kernel,
                    len(rt),
                    len(wk),
                    len(missing),
                    len(wk - set(rt)),
                    group,
                    runner=label,
                    witnesses=list(dict.fromkeys(w for _, w in missing))[:MAX_WITNESSES],
                )
            )
    return rows
