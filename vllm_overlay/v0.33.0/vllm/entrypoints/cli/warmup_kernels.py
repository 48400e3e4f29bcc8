# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The `warmup-kernels` subcommand for the vLLM CLI.

Compiles the JIT kernels that `vllm serve` warms up at startup into Triton's
and TileLang's disk caches, without reading weights or starting an engine, so
that an image build or a node's first boot can bake them:

    vllm warmup-kernels deepseek-ai/DeepSeek-V4-Flash \\
        --tensor-parallel-size 4 --kv-cache-dtype fp8 --block-size 256 \\
        --speculative-config '{"method": "mtp", "num_speculative_tokens": 1}'

It takes the same flags as `vllm serve` and reads only the model's config.
Run it on the GPU type that will serve: Triton and TileLang key their caches
by device architecture and by their own versions.
"""

import argparse
import contextlib
import json
import logging
import os
import sys
import time
import typing
from typing import Any

from vllm.entrypoints.cli.types import CLISubcommand
from vllm.entrypoints.common.startup import VLLM_SUBCMD_PARSER_EPILOG
from vllm.logger import init_logger

if typing.TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser
else:
    FlexibleArgumentParser = argparse.ArgumentParser

logger = init_logger(__name__)

EXIT_COMPILE_FAILED = 1
EXIT_INVALID_CONFIG = 2
# What config validation, model constructors and the KV cache planner raise
# for a deployment they cannot set up.
_CONFIG_ERRORS = (
    ValueError,
    TypeError,
    NotImplementedError,
    OSError,
    ArithmeticError,
    AssertionError,
)


class InvalidConfigError(Exception):
    """The flags or the model's config do not describe a valid deployment."""


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    # pydantic appends a documentation link to every validation error.
    text = text.split(" For further information visit ")[0]
    if not isinstance(error, ValueError) or not text:
        text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text


def _invalid(error: BaseException, phase: str) -> InvalidConfigError:
    # The offline warmup notes which set-up step raised.
    phase = next(iter(getattr(error, "__notes__", ())), phase)
    logger.debug("Invalid configuration (%s)", phase, exc_info=error)
    return InvalidConfigError(f"{_one_line(error)} ({phase})")


def _engine_config(args: argparse.Namespace) -> "VllmConfig":
    """The VllmConfig that `vllm serve` builds from the same flags."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.common.cli_args import propagate_flash_late_interaction
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext

    if getattr(args, "model_tag", None) is not None:
        args.model = args.model_tag
    if current_platform.is_cpu() or current_platform.is_unspecified():
        raise InvalidConfigError(
            "no GPU platform detected; run on the GPU type that will serve"
        )
    try:
        engine_args = AsyncEngineArgs.from_cli_args(args)
        propagate_flash_late_interaction(args, engine_args)
        _allow_fewer_gpus_than_world_size(engine_args)
        return engine_args.create_engine_config(
            usage_context=UsageContext.OPENAI_API_SERVER
        )
    except _CONFIG_ERRORS as e:
        raise _invalid(e, "engine configuration") from e


def _allow_fewer_gpus_than_world_size(engine_args: "AsyncEngineArgs") -> None:
    """Let a host with fewer GPUs than the deployment pre-warm it.

    The command compiles in one process on one GPU whatever the world size,
    so an image build host with one GPU can warm a TP=4 deployment. vLLM
    refuses a world size larger than the node's GPU count only when it picks
    the executor itself; no executor is started here, so name the one it
    picks on a single CUDA node.
    """
    from vllm.platforms import current_platform

    world_size = engine_args.tensor_parallel_size * engine_args.pipeline_parallel_size
    if (
        engine_args.distributed_executor_backend is None
        and current_platform.device_count() < world_size
    ):
        logger.info(
            "Pre-warming a world size of %d on a host with %d GPU(s).",
            world_size,
            current_platform.device_count(),
        )
        engine_args.distributed_executor_backend = "mp"


def _describe_deployment(vllm_config: "VllmConfig") -> dict[str, Any]:
    parallel = vllm_config.parallel_config
    spec = vllm_config.speculative_config
    return {
        "model": vllm_config.model_config.model,
        "architecture": vllm_config.model_config.architecture,
        "model_runner": "v2" if vllm_config.use_v2_model_runner else "v1",
        "tensor_parallel_size": parallel.tensor_parallel_size,
        "pipeline_parallel_size": parallel.pipeline_parallel_size,
        "speculative_method": spec.method if spec is not None else None,
    }


def _summary_lines(summary: dict[str, Any]) -> list[str]:
    d = summary["deployment"]
    where = (
        f"{d['architecture']}, model runner {d['model_runner'].upper()}, "
        f"TP {d['tensor_parallel_size']}"
        + (
            f", PP {d['pipeline_parallel_size']}"
            if d["pipeline_parallel_size"] > 1
            else ""
        )
        + (f", {d['speculative_method']} drafter" if d["speculative_method"] else "")
    )
    if not summary["enable_jit_warmup"]:
        return [
            (
                f"JIT warmup is disabled for {where} "
                "(kernel_config.enable_jit_warmup=false): nothing to compile."
            )
        ]
    n_kernels, n_keys = len(summary["kernels"]), summary["num_keys"]
    if summary["dry_run"]:
        lines = [f"Would compile {n_keys} keys of {n_kernels} JIT kernels for {where}:"]
        for kernel in summary["kernels"]:
            lines.append(
                f"  {kernel['name']} ({kernel['backend']}, {len(kernel['keys'])} keys)"
            )
            lines.extend(f"    {key}" for key in kernel["keys"])
        return lines
    lines = [
        (
            f"Compiled {n_keys} keys of {n_kernels} JIT kernels for {where} "
            f"in {summary['seconds']:.1f} s."
        )
    ]
    for backend, label in (("triton", "Triton"), ("tilelang", "TileLang")):
        compiled = summary["compiled"].get(backend, 0)
        loaded = summary["loaded_from_cache"].get(backend, 0)
        cache_dir = summary["cache_dirs"].get(backend)
        lines.append(
            f"  {label}: {compiled} compiled, {loaded} loaded from the disk cache "
            f"({cache_dir or 'not installed'})"
        )
    triton_keys = sum(
        len(kernel["keys"])
        for kernel in summary["kernels"]
        if kernel["backend"] == "triton"
    )
    if triton_keys and not summary["triton_cache_dir_set"]:
        # vllm serve's torch.compile points Triton at a per-rank cache under
        # VLLM_CACHE_ROOT unless TRITON_CACHE_DIR names one.
        lines.append(
            "  TRITON_CACHE_DIR is not set: vllm serve will keep Triton kernels in "
            "torch.compile's per-rank cache and compile these Triton keys again. "
            "Set TRITON_CACHE_DIR to the same directory here and for vllm serve."
        )
    for kernel in summary["kernels"]:
        lines.append(
            f"  {kernel['name']} ({kernel['backend']}): {len(kernel['keys'])} keys"
        )
    return lines


def warmup_kernels(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    """Run `vllm warmup-kernels`.

    Returns:
        The process exit code and the summary.

    Raises:
        InvalidConfigError: The flags or the model's config are invalid.

    """
    from vllm.model_executor.warmup import offline_warmup

    start = time.perf_counter()
    vllm_config = _engine_config(args)
    summary: dict[str, Any] = {
        "deployment": _describe_deployment(vllm_config),
        "enable_jit_warmup": vllm_config.kernel_config.enable_jit_warmup,
        "dry_run": args.dry_run,
        "kernels": [],
        "num_keys": 0,
        "compiled": {},
        "loaded_from_cache": {},
        "cache_dirs": offline_warmup.cache_dirs(),
        "triton_cache_dir_set": bool(os.environ.get("TRITON_CACHE_DIR")),
        "seconds": 0.0,
    }
    exit_code = 0
    if vllm_config.kernel_config.enable_jit_warmup:
        try:
            registry = offline_warmup.collect_jit_warmup_registry(vllm_config)
            kernels = registry.warmup_keys()
        except _CONFIG_ERRORS as e:
            raise _invalid(e, "collecting JIT warmup registrations") from e
        summary["kernels"] = [
            {
                "name": offline_warmup.kernel_name(kernel),
                "backend": offline_warmup.kernel_backend(kernel),
                "keys": [offline_warmup.describe_key(key) for key in keys],
            }
            for kernel, keys in kernels
        ]
        summary["num_keys"] = sum(len(keys) for _, keys in kernels)
        if not args.dry_run:
            try:
                counts = registry.warmup(kernels)
            except Exception as e:
                logger.exception("JIT kernel warmup failed")
                summary["error"] = _one_line(e)
                exit_code = EXIT_COMPILE_FAILED
            else:
                summary["compiled"] = dict(counts.compiled)
                summary["loaded_from_cache"] = dict(counts.loaded)
    summary["seconds"] = round(time.perf_counter() - start, 3)
    return exit_code, summary


@contextlib.contextmanager
def _logs_to_stderr():
    """Keep stdout for the summary: vLLM logs to stdout by default."""
    moved = []
    for handler in logging.getLogger("vllm").handlers:
        if (
            isinstance(handler, logging.StreamHandler)
            and getattr(handler, "stream", None) is sys.stdout
        ):
            moved.append(handler)
            handler.setStream(sys.stderr)
    try:
        # Libraries that print (compilers, progress) go to stderr too.
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        for handler in moved:
            handler.setStream(sys.stdout)


class WarmupKernelsSubcommand(CLISubcommand):
    """The `warmup-kernels` subcommand for the vLLM CLI."""

    name = "warmup-kernels"

    @staticmethod
    def add_cli_args(parser: FlexibleArgumentParser) -> FlexibleArgumentParser:
        from vllm.entrypoints.common.cli_args import make_arg_parser

        # Every `vllm serve` flag, so a deployment's command line works as is.
        parser = make_arg_parser(parser)
        group = parser.add_argument_group("warmup-kernels")
        group.add_argument(
            "--dry-run",
            action="store_true",
            help="List the kernels and compile keys without compiling them.",
        )
        group.add_argument(
            "--json",
            action="store_true",
            help="Print the summary as one JSON object.",
        )
        return parser

    @staticmethod
    def cmd(args: argparse.Namespace) -> None:
        try:
            with _logs_to_stderr():
                exit_code, summary = warmup_kernels(args)
        except InvalidConfigError as e:
            print(f"vllm warmup-kernels: error: {e}", file=sys.stderr)
            sys.exit(EXIT_INVALID_CONFIG)
        if args.json:
            print(json.dumps(summary))
        else:
            print("\n".join(_summary_lines(summary)))
        if "error" in summary:
            print(f"vllm warmup-kernels: error: {summary['error']}", file=sys.stderr)
        sys.exit(exit_code)

    def subparser_init(
        self, subparsers: argparse._SubParsersAction
    ) -> FlexibleArgumentParser:
        parser = subparsers.add_parser(
            self.name,
            help="Compile a deployment's JIT kernels into the disk caches.",
            description=(
                "Compile the JIT kernels (Triton, TileLang) that `vllm serve` "
                "with the same flags warms up at startup into their disk "
                "caches, without loading weights or starting an engine."
            ),
            usage="vllm warmup-kernels [model_tag] [options]",
        )
        parser = WarmupKernelsSubcommand.add_cli_args(parser)
        parser.epilog = VLLM_SUBCMD_PARSER_EPILOG.format(subcmd=self.name)
        return parser


def cmd_init() -> list[CLISubcommand]:
    return [WarmupKernelsSubcommand()]
