"""Drive a 0.33.0 tree's ``vllm warmup-kernels`` on CPU and compare it with the
recorded start-up lifecycle (:mod:`.lifecycle`).

Run in a fresh interpreter that imports the tree
(``trees.json_from_tree(tree, "-m", "dsv4warmup.registry.prewarm", MODE, ARG)``);
the last stdout line is the JSON answer:

* ``cli CASES_JSON``: each case is an argv list for ``vllm`` (or
  ``{"argv": [...], "serving": {...}, "env": {...}, "record": true}``, where
  ``serving`` puts ``vllm warmup-kernels`` and the flags of ``FLASH`` with
  those fields replaced in front of ``argv``); each answer holds the exit
  code, stdout and stderr of the tree's own CLI ``main()``, and with
  ``record`` the exact keys its (non-dry-run) warmup launched, per kernel row,
  as :func:`.lifecycle.warmed_keys` names and records them;
* ``lifecycle CFG_JSON``: for a serving configuration and a runner, the exact
  keys :func:`.lifecycle.warmed_keys` records with the drafter's registrations
  active, and the compile keys of the same registrations as the CLI prints
  them (``describe_key``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from typing import Any

from dsv4warmup.serving import FLASH, ServingConfig

from . import cpu_cli, engine


def serve_flags(cfg: ServingConfig, model: str) -> list[str]:
    """``cfg`` as ``vllm serve`` flags (what :func:`.engine.vllm_config` passes,
    but the tokenizer: ``vllm serve`` loads it, the pre-warm never does)."""
    kwargs = engine.engine_args_kwargs(cfg, engine.model_dir(cfg))
    argv = [model]
    for name, value in kwargs.items():
        if name in ("model", "load_format", "skip_tokenizer_init"):
            continue
        flag = "--" + name.replace("_", "-")
        argv += [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
    return argv


def _keys_json(keys: dict[str, set[Any]]) -> dict[str, list[str]]:
    return {name: sorted(repr(k) for k in found) for name, found in keys.items()}


@contextlib.contextmanager
def _env(env: dict[str, str]) -> Any:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_cli(argv: list[str], env: dict[str, str] | None = None, record: bool = False) -> dict:
    """The tree's ``vllm`` CLI in this process: exit code, stdout, stderr."""
    from dsv4warmup import triton_keys

    from . import audit

    out, err = io.StringIO(), io.StringIO()
    exit_code: Any = 0
    answer: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        stack.enter_context(_env(env or {}))
        stack.enter_context(cpu_cli.cpu_hosted_gpu())
        if record:
            launches = stack.enter_context(triton_keys.record_launches())
            elsewhere = [
                stack.enter_context(mod.record_compiles())
                for _, mod in audit.group_modules()
                if hasattr(mod, "record_compiles")
            ]
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        from vllm.entrypoints.cli.main import main as vllm_main

        sys.argv = ["vllm", *argv]
        try:
            vllm_main()
        except SystemExit as e:
            exit_code = e.code
    if record:
        keys: dict[str, set[Any]] = {}
        for name, found in triton_keys.keys_by_kernel(launches).items():
            keys.setdefault(name, set()).update(found)
        for extra in elsewhere:
            for name, found in extra.items():
                keys.setdefault(name, set()).update(found)
        answer["keys"] = _keys_json(keys)
    answer.update(exit_code=exit_code, stdout=out.getvalue(), stderr=err.getvalue())
    return answer


def _launched_rows(kernel: Any, keys: Any, groups: list[tuple[str, Any]]) -> set[str]:
    """The audit rows (Triton functions, TileLang factories) ``kernel``'s
    compile of ``keys`` launches, recorded without compiling."""
    from dsv4warmup import triton_keys

    from . import lifecycle

    with contextlib.ExitStack() as stack:
        stack.enter_context(lifecycle.cpu_triton_driver())
        launches = stack.enter_context(triton_keys.record_launches())
        elsewhere = [
            stack.enter_context(mod.record_compiles())
            for _, mod in groups
            if hasattr(mod, "record_compiles")
        ]
        kernel.compile_many(keys)
    found = set(triton_keys.keys_by_kernel(launches))
    for extra in elsewhere:
        found.update(extra)
    return found


def lifecycle_side(cfg: ServingConfig, runner: str) -> dict:
    """What the lifecycle records for ``runner`` once drafter registrations are
    active (as the runner patches of the kernel groups make them)."""
    from vllm.model_executor.warmup import offline_warmup
    from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry

    from . import audit, lifecycle

    cpu_cli.install()
    env = lifecycle.selection_env(runner)
    groups = audit.group_modules()
    with _env(env), cpu_cli.cpu_hosted_gpu():
        vllm_config = engine.vllm_config(cfg)
        original = lifecycle.active_steps
        active = original(runner) | {"drafter_model"}
        lifecycle.active_steps = lambda r: active  # type: ignore[assignment]
        try:
            with lifecycle.registrations() as recorded:
                for _, mod in groups:
                    mod.register(vllm_config, runner)
            # Only the audited groups' kernels: another kernel's warmup keys may
            # need state these CPU drivers do not build (a bound KV cache).
            keep = audit._owned_by(groups)
            registry = JitWarmupRegistry(vllm_config)
            for r in recorded:
                if r.step in active and keep(r.kernel):
                    registry._add(r.kernel, r.args, r.kwargs)
            compile_keys: dict[str, list[str]] = {}
            rows: dict[str, list[str]] = {}  # audit row -> kernels launching it
            for kernel, keys in registry.warmup_keys():
                name = offline_warmup.kernel_name(kernel)
                compile_keys[name] = sorted(offline_warmup.describe_key(k) for k in keys)
                for row in _launched_rows(kernel, keys, groups):
                    rows.setdefault(row, []).append(name)
            run = lifecycle.warmed_keys(
                vllm_config,
                runner,
                [mod.register for _, mod in groups],
                [mod.record_compiles for _, mod in groups if hasattr(mod, "record_compiles")],
                keep=keep,
            )
        finally:
            lifecycle.active_steps = original  # type: ignore[assignment]
    return {
        "groups": [name for name, _ in groups],
        "kernels": [k for _, mod in groups for k in mod.KERNELS],
        "active": sorted(active),
        "keys": _keys_json(run.keys),
        "compile_keys": compile_keys,
        "rows": rows,
    }


def main(argv: list[str]) -> None:
    mode, arg = argv
    if mode == "cli":
        cases = json.loads(arg)
        answers = []
        for case in cases:
            if isinstance(case, list):
                case = {"argv": case}
            argv = case["argv"]
            if "serving" in case:
                cfg = FLASH.replace(**case["serving"])
                argv = ["warmup-kernels", *serve_flags(cfg, str(engine.model_dir(cfg))), *argv]
            answers.append(run_cli(argv, case.get("env"), case.get("record", False)))
        result: Any = answers
    elif mode == "lifecycle":
        spec = json.loads(arg)
        cfg = FLASH.replace(**spec.get("cfg", {}))
        result = lifecycle_side(cfg, spec["runner"])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    sys.__stdout__.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
