# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
import argparse
from pathlib import Path

import pytest

from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.cli import warmup_kernels
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.platforms import current_platform
from vllm.utils.argparse_utils import FlexibleArgumentParser


def _parser(subcommand) -> FlexibleArgumentParser:
    parser = FlexibleArgumentParser()
    subparsers = parser.add_subparsers(dest="subparser")
    subcommand.subparser_init(subparsers)
    return parser


def _options(parser: argparse.ArgumentParser) -> set[str]:
    subparsers = next(
        action
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    (subparser,) = subparsers.choices.values()
    return {option for action in subparser._actions for option in action.option_strings}


def test_accepts_every_serve_flag() -> None:
    serve = _options(_parser(ServeSubcommand()))
    warmup = _options(_parser(warmup_kernels.WarmupKernelsSubcommand()))
    assert serve <= warmup
    assert {"--dry-run", "--json"} <= warmup - serve


def _run(argv: list[str]) -> int:
    parser = _parser(warmup_kernels.WarmupKernelsSubcommand())
    args = parser.parse_args(["warmup-kernels", *argv])
    with pytest.raises(SystemExit) as exit_info:
        warmup_kernels.WarmupKernelsSubcommand.cmd(args)
    assert isinstance(exit_info.value.code, int)
    return exit_info.value.code


def _error_lines(err: str) -> list[str]:
    return [
        line
        for line in err.splitlines()
        if line.startswith("vllm warmup-kernels: error: ")
    ]


@pytest.mark.parametrize(
    "flags",
    [
        [],  # the folder has no config.json
        ["--max-num-batched-tokens", "0"],
    ],
)
def test_invalid_configuration_exits_2_with_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
) -> None:
    monkeypatch.setattr(current_platform, "is_cpu", lambda: False)
    monkeypatch.setattr(current_platform, "is_unspecified", lambda: False)

    assert _run([str(tmp_path), *flags, "--dry-run"]) == 2

    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    assert len(_error_lines(captured.err)) == 1


def test_no_gpu_platform_exits_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(current_platform, "is_cpu", lambda: True)

    assert _run([str(tmp_path), "--dry-run"]) == 2
    (line,) = _error_lines(capsys.readouterr().err)
    assert "no GPU platform" in line


@pytest.mark.parametrize("backend", [None, "ray"])
def test_fewer_gpus_than_world_size(
    monkeypatch: pytest.MonkeyPatch, backend: str | None
) -> None:
    # An image build host with one GPU pre-warms a TP=4 deployment.
    monkeypatch.setattr(current_platform, "device_count", lambda: 1)
    engine_args = AsyncEngineArgs(
        tensor_parallel_size=4, distributed_executor_backend=backend
    )

    warmup_kernels._allow_fewer_gpus_than_world_size(engine_args)

    assert engine_args.distributed_executor_backend == (backend or "mp")


@pytest.mark.parametrize("triton_cache_dir_set", [False, True])
def test_summary_says_when_vllm_serve_would_miss_the_triton_kernels(
    triton_cache_dir_set: bool,
) -> None:
    summary = {
        "deployment": {
            "architecture": "DeepseekV4ForCausalLM",
            "model_runner": "v2",
            "tensor_parallel_size": 4,
            "pipeline_parallel_size": 1,
            "speculative_method": None,
        },
        "enable_jit_warmup": True,
        "dry_run": False,
        "kernels": [{"name": "Kernel", "backend": "triton", "keys": ["a", "b"]}],
        "num_keys": 2,
        "compiled": {"triton": 2},
        "loaded_from_cache": {},
        "cache_dirs": {"triton": "/cache/triton", "tilelang": None},
        "triton_cache_dir_set": triton_cache_dir_set,
        "seconds": 1.0,
    }

    lines = warmup_kernels._summary_lines(summary)

    noted = [line for line in lines if "TRITON_CACHE_DIR is not set" in line]
    assert len(noted) == (0 if triton_cache_dir_set else 1)
