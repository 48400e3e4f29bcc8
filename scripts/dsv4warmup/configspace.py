"""The space of DeepSeek V4 serving configurations the kernels' keys depend on.

A point of the space is a ``vllm serve`` command line (vLLM's own flag names)
plus two device facts that are not flags: the GPU (its SM count: H100 / H200
132, B200 148; its compute capability) and whether vLLM uses DeepGEMM
(``VLLM_USE_DEEP_GEMM``). The model is DeepSeek V4 Flash or Pro (a generated
``config.json`` with the model's dimensions, or the user's ``--model`` /
``--hf-config-path``).

Which points are valid is not decided here: a drawn command line is parsed by
the tree's own serve argument parser and resolved through the tree's own
``EngineArgs.create_engine_config`` (:func:`resolve`, in the interpreter that
imports the tree). What vLLM refuses is rejected (hypothesis ``assume``), never
clamped; what vLLM accepts is audited with the configuration vLLM resolved
(defaults filled in: token budget, capture sizes, ...).

Dimensions (bounded by what vLLM accepts, not by a sample):

* ``--max-model-len`` 1 … 1M (vLLM: positive, ≤ the model's
  ``max_position_embeddings``), drawn log-uniformly plus the branch points of
  the key derivations: below / at / above the sliding window (128) and the
  compress ratios (4, 128), one KV block, one token;
* ``--max-num-batched-tokens`` 1 … 64k or vLLM's default (vLLM refuses a budget
  below ``max_num_seqs`` or ``max_model_len`` without chunked prefill, and says
  so); ``--max-num-seqs`` 1 … 1024 or default;
* ``--block-size``: any positive int (vLLM and the model's KV layout decide);
* MTP off or ``num_speculative_tokens`` 1 … 4;
* ``--tensor-parallel-size`` 1, 2, 4, 8;
* CUDA-graph capture sizes: vLLM's default, ``--enforce-eager``, or an explicit
  list ``--cuda-graph-sizes``-style via ``--compilation-config``;
* GPU h100 / h200 / b200; DeepGEMM on / off.

Not drawn: decode context parallelism (``-dcp`` > 1). vLLM refuses it for
DeepSeek V4 on every supported base: its KV-cache planner asserts
``DCP not support sliding window.`` on the model's sliding-window cache spec
(:func:`_kv_cache_memory_check`, on the layers' own specs), so such a command
line is a refusal, tested as one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .serving import FLASH, PRO, ServingConfig

GPUS = ("h100", "h200", "b200")
MODELS = {"flash": FLASH, "pro": PRO}
SM_COUNT = {"h100": 132, "h200": 132, "b200": 148}
MAX_MODEL_LEN = 1 << 20  # DeepSeek V4's max_position_embeddings (1M)

# Branch points of the key derivations: sliding window, compress ratios, a
# block, a prefill chunk / capture-size step, powers of two around them.
BOUNDARY_LENS = (1, 2, 3, 4, 5, 7, 8, 64, 127, 128, 129, 255, 256, 257, 512, 4096)


class ConfigError(Exception):
    """A command line vLLM refuses: ``error: <flag>: <vLLM's message>``."""

    def __init__(self, flag: str, message: str) -> None:
        self.flag, self.message = flag, " ".join(str(message).split())
        super().__init__(f"{flag}: {self.message}" if flag else self.message)


@dataclass(frozen=True)
class Point:
    """One point of the space: serve flags + device facts + model."""

    argv: tuple[str, ...] = ()
    gpu: str = "h200"
    deep_gemm: bool = True
    model: str = "flash"

    def describe(self) -> str:
        dg = "on" if self.deep_gemm else "off"
        return f"model={self.model} gpu={self.gpu} deep_gemm={dg} serve {shlex.join(self.argv)}"


@dataclass
class Resolved:
    cfg: ServingConfig
    config: dict[str, Any]
    vllm_config: Any = field(repr=False, default=None)


# --------------------------------------------------------------------------- strategies


def points() -> Any:
    """Hypothesis strategy over :class:`Point` (command lines vLLM may refuse:
    :func:`resolve` decides)."""
    from hypothesis import strategies as st

    def log_int(lo: int, hi: int) -> Any:
        # log-uniform: small values (the branches) as likely as large ones
        return st.integers(0, (hi.bit_length() - 1) * 8).map(
            lambda e: max(lo, min(hi, round(2 ** (e / 8))))
        )

    lens = st.one_of(st.sampled_from(BOUNDARY_LENS), log_int(1, MAX_MODEL_LEN))
    budgets = st.one_of(st.none(), st.sampled_from((1, 2, 8, 64, 128, 256)), log_int(1, 1 << 16))
    seqs = st.one_of(st.none(), st.sampled_from((1, 2, 3)), log_int(1, 1024))
    # vLLM takes multiples of DeepSeek V4's 256-token kernel block only (the
    # worker's select_common_block_size); others are drawn to check the refusal
    blocks = st.one_of(
        st.none(),
        st.sampled_from((256, 512, 1024)),
        st.sampled_from((256, 512, 768, 1024, 2048)),
        st.integers(1, 1024),
    )
    graphs = st.one_of(
        st.just("default"),
        st.just("eager"),
        st.lists(st.integers(1, 512), min_size=1, max_size=6, unique=True).map(sorted),
    )

    @st.composite
    def point(draw: Any) -> Point:
        argv: list[str] = ["--max-model-len", str(draw(lens))]
        for flag, strat in (
            ("--max-num-batched-tokens", budgets),
            ("--max-num-seqs", seqs),
            ("--block-size", blocks),
        ):
            value = draw(strat)
            if value is not None:
                argv += [flag, str(value)]
        argv += ["--tensor-parallel-size", str(draw(st.sampled_from((1, 2, 4, 8))))]
        argv += ["--kv-cache-dtype", draw(st.sampled_from(("fp8", "auto")))]
        k = draw(st.integers(0, 4))
        if k:
            spec = {"method": "mtp", "num_speculative_tokens": k}
            argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
        g = draw(graphs)
        if g == "eager":
            argv.append("--enforce-eager")
        elif g != "default":
            cc = {"cudagraph_capture_sizes": g}
            argv += ["--compilation-config", json.dumps(cc, separators=(",", ":"))]
        return Point(
            tuple(argv),
            gpu=draw(st.sampled_from(GPUS)),
            deep_gemm=draw(st.booleans()),
            model=draw(st.sampled_from(tuple(MODELS))),
        )

    return point()


# --------------------------------------------------------------------------- resolution
# Everything below runs in the interpreter that imports the tree.


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


class _ParserError(Exception):
    pass


def _parser() -> Any:
    """The tree's ``vllm serve`` parser (its own ``make_arg_parser`` when it
    imports here, else ``AsyncEngineArgs.add_cli_args`` + the model tag);
    argparse errors raise instead of exiting."""
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class Parser(FlexibleArgumentParser):
        def error(self, message: str) -> Any:  # type: ignore[override]
            raise _ParserError(message)

        def exit(self, status: int = 0, message: str | None = None) -> Any:  # --help
            raise _ParserError(message or "exit")

    parser = Parser(prog="vllm serve")
    try:
        from vllm.entrypoints.common.cli_args import make_arg_parser

        return make_arg_parser(parser)
    except Exception:  # the API server's deps are not needed for the engine's flags
        from vllm.engine.arg_utils import AsyncEngineArgs

        parser = Parser(prog="vllm serve")
        parser.add_argument("model_tag", nargs="?")
        return AsyncEngineArgs.add_cli_args(parser)


def _parse_error(message: str) -> ConfigError:
    # argparse: "argument --block-size: invalid int value: '7x'"
    if message.startswith("argument "):
        flag, _, rest = message[len("argument ") :].partition(": ")
        names = flag.split("/")
        return ConfigError(next((n for n in names if n.startswith("--")), names[0]), rest)
    if message.startswith("unrecognized arguments:"):
        return ConfigError(message.split()[2], "unrecognized argument (not a `vllm serve` flag)")
    return ConfigError("", message)


def _check_model_path(flag: str, path: str) -> Path:
    p = Path(path)
    cfg = p / "config.json" if p.is_dir() or not p.suffix else p
    if not p.exists():
        raise ConfigError(flag, f"{path}: no such file or directory")
    try:
        data = json.loads(cfg.read_text())
    except FileNotFoundError:
        raise ConfigError(flag, f"{path}: no config.json in it") from None
    except PermissionError:
        raise ConfigError(flag, f"{cfg}: not readable (permission denied)") from None
    except (OSError, ValueError) as e:
        raise ConfigError(flag, f"{cfg}: not a readable JSON config ({e})") from None
    arch = data.get("architectures") or []
    if data.get("model_type") != "deepseek_v4" and not any("DeepseekV4" in a for a in arch):
        raise ConfigError(
            flag,
            f"{cfg} is not a DeepSeek V4 config (model_type {data.get('model_type')!r}, "
            f"architectures {arch}); this audit covers DeepSeek V4 only",
        )
    return cfg


def _engine_error(exc: BaseException) -> ConfigError:
    """vLLM's refusal as ``(flag, message)``: pydantic errors name the field."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            loc = [str(x) for x in first.get("loc", ()) if not str(x).isdigit()]
            msg = first.get("msg", str(exc))
            if loc:
                return ConfigError(_flag(loc[-1]), msg)
            return _guess_flag(msg)
        except Exception:
            pass
    return _guess_flag(str(exc) or type(exc).__name__)


_FLAG_WORDS = (
    "max_num_batched_tokens",
    "max_num_seqs",
    "max_model_len",
    "block_size",
    "num_speculative_tokens",
    "cudagraph_capture_sizes",
    "tensor_parallel_size",
    "decode_context_parallel_size",
    "kv_cache_dtype",
)


# vLLM's own abbreviations in messages (``DCP not support ...``,
# ``tp_size=2 must be divisible by dcp_size=3``): the flag they blame
# (0.25.1 spells the latter "divisible bydcp_size=3": no word boundary)
_FLAG_ABBREVIATIONS = {
    r"\bDCP\b": "--decode-context-parallel-size",
    r"dcp_size\b": "--decode-context-parallel-size",
    r"\bkv-cache\b": "--kv-cache-dtype",  # "only supports fp8 kv-cache, got auto"
}


def _guess_flag(message: str) -> ConfigError:
    text = " ".join(message.split())
    for pattern, flag in _FLAG_ABBREVIATIONS.items():
        if re.search(pattern, text):
            return ConfigError(flag, text)
    for word in _FLAG_WORDS:
        if word in text or word.replace("_", "-") in text:
            flag = "--speculative-config" if word == "num_speculative_tokens" else _flag(word)
            if word == "cudagraph_capture_sizes":
                flag = "--compilation-config"
            return ConfigError(flag, text)
    return ConfigError("", text)


_UNSET = object()


def _given_flags(argv: Sequence[str]) -> dict[str, Any]:
    """The flags ``argv`` sets, parsed by the tree's ``vllm serve`` parser (a
    flag given at its default value included: ``--tensor-parallel-size 1`` is
    the user's TP 1, not "keep the report's deployment"); the positional model
    tag as ``model``; model paths checked.

    Raises :class:`ConfigError` where the parser or a model path refuses.
    """
    try:
        ns = _parser().parse_args(list(argv))
    except _ParserError as e:
        raise _parse_error(str(e)) from None
    marker = _parser()
    marker.set_defaults(
        **{a.dest: _UNSET for a in marker._actions if a.dest not in ("help", argparse.SUPPRESS)}
    )
    seen = marker.parse_args(list(argv))
    given = {k: v for k, v in vars(ns).items() if getattr(seen, k, _UNSET) is not _UNSET}
    given.pop("model_tag", None)
    if getattr(ns, "model_tag", None):
        given["model"] = ns.model_tag
    for name in ("model", "hf_config_path"):
        if given.get(name):
            _check_model_path(_flag(name), given[name])
    return given


def resolve(point: Point) -> Resolved:
    """``point``'s command line as the tree's ``vllm serve`` resolves it.

    Raises :class:`ConfigError` with vLLM's own message where vLLM refuses it.
    """
    from dsv4warmup.registry import engine, platform

    os.environ["DSV4_GPU"] = point.gpu
    os.environ["VLLM_USE_DEEP_GEMM"] = "1" if point.deep_gemm else "0"
    gpu = platform.GPUS[point.gpu]
    platform.install(gpu)
    given = _given_flags(point.argv)
    base = MODELS[point.model].replace(sm_count=SM_COUNT[point.gpu], deep_gemm=point.deep_gemm)
    from vllm.engine.arg_utils import EngineArgs

    kwargs = engine.engine_args_kwargs(base, engine.model_dir(base))
    for name in (
        "max_model_len",
        "max_num_batched_tokens",
        "max_num_seqs",
        "block_size",
        "kv_cache_dtype",
        "tensor_parallel_size",
        "speculative_config",
    ):
        kwargs.pop(name, None)  # vLLM's defaults unless the command line sets them
    fields = {f for f in EngineArgs.__dataclass_fields__}
    kwargs.update({k: v for k, v in given.items() if k in fields})
    try:
        vllm_config = engine.create_engine_config(EngineArgs(**kwargs))
    except Exception as e:  # vLLM's refusal: ValueError, pydantic ValidationError, ...
        raise _engine_error(e) from None
    spec = vllm_config.speculative_config
    if spec is not None and spec.method not in ("mtp", "deepseek_mtp"):
        raise ConfigError(
            "--speculative-config",
            f"method {spec.method!r}: the audit covers DeepSeek V4's own MTP drafter ('mtp') only",
        )
    _worker_block_size(vllm_config)
    return Resolved(
        _serving_config(vllm_config, base), _config_dict(vllm_config, point), vllm_config
    )


def _worker_block_size(vc: Any) -> None:
    """The KV block size the worker settles on: after building the model's
    attention layers it calls ``update_block_size_for_backend`` (the backends'
    preferred size when ``--block-size`` is not given: 256 for DeepSeek V4,
    not ``CacheConfig``'s 16), ``validate_block_size`` and, on the KV cache,
    ``select_common_block_size`` (DeepSeek V4's kernels take 256-token blocks)."""
    from vllm.platforms import current_platform

    from dsv4warmup.registry import sparse_mla

    hf = vc.model_config.hf_config
    try:
        with sparse_mla.model_env(vc), sparse_mla.meta_layers():
            indices = sparse_mla.layer_indices(hf, target=True, one_per_ratio=True)
            sparse_mla.build_attention_layers(vc, indices)
            current_platform.update_block_size_for_backend(vc)
            vc.validate_block_size()
            find_backends = getattr(type(current_platform), "_find_non_ssm_backends", None)
            backends = find_backends(vc) if find_backends is not None else None
            _kv_cache_memory_check(vc)
    except ConfigError:
        raise
    except Exception as e:
        refusal = _engine_error(e)
        raise ConfigError(
            refusal.flag,
            f"{refusal.message} (vLLM's worker, setting up the model's attention layers; "
            "vllm serve fails on it at start-up)",
        ) from None
    if backends is None:  # 0.26.0 / 0.25.1: checked per KV cache group
        _legacy_kernel_block_size(vc.cache_config.block_size)
        return
    from vllm.v1.worker.utils import select_common_block_size

    try:  # the attention backends' kernel block sizes (as the worker checks them)
        select_common_block_size(vc.cache_config.block_size, backends)
    except ValueError as e:
        raise ConfigError("--block-size", f"{e} (vllm serve fails on it at start-up)") from None


def _kv_cache_memory_check(vc: Any) -> None:
    """The engine core's KV-cache planner asks every layer's KV cache spec for
    its largest footprint (``max_memory_usage_bytes``) before allocating; the
    specs refuse what they cannot hold, e.g. DeepSeek V4's sliding-window cache
    under decode context parallelism (``DCP not support sliding window.``)."""
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    for spec in get_kv_cache_spec(vc).values():
        try:
            spec.max_memory_usage_bytes(vc)
        except Exception as e:
            refusal = _engine_error(e)
            raise ConfigError(
                refusal.flag,
                f"{refusal.message} (vLLM's KV-cache planner; vllm serve fails on it at start-up)",
            ) from None


def _serving_config(vc: Any, base: ServingConfig) -> ServingConfig:
    hf = vc.model_config.hf_config
    spec = vc.speculative_config
    k = spec.num_speculative_tokens if spec is not None else 0
    return base.replace(
        max_num_seqs=vc.scheduler_config.max_num_seqs,
        max_num_batched_tokens=vc.scheduler_config.max_num_batched_tokens,
        max_model_len=vc.model_config.max_model_len,
        block_size=vc.cache_config.block_size,
        kv_cache_dtype=vc.cache_config.cache_dtype,
        num_speculative_tokens=k,
        speculative_method="mtp" if k else None,
        tensor_parallel_size=vc.parallel_config.tensor_parallel_size,
        # None: the drivers rebuild vLLM's own default (an explicit list on the
        # command line travels with the other flags, :func:`engine_pin`)
        cudagraph_capture_sizes=None,
        hidden_size=hf.hidden_size,
        vocab_size=hf.vocab_size,
        index_topk=getattr(hf, "index_topk", base.index_topk),
        sliding_window=getattr(hf, "sliding_window", base.sliding_window) or base.sliding_window,
        num_nextn_predict_layers=getattr(hf, "num_nextn_predict_layers", 1),
    )


def _config_dict(vc: Any, point: Point) -> dict[str, Any]:
    from dsv4warmup.registry import lifecycle

    spec = vc.speculative_config
    cc = vc.compilation_config
    extensible = getattr(vc.cache_config, "enable_extensible_kv_cache", None)
    return {
        "model": str(vc.model_config.model),
        "max_model_len": vc.model_config.max_model_len,
        "max_num_batched_tokens": vc.scheduler_config.max_num_batched_tokens,
        "max_num_seqs": vc.scheduler_config.max_num_seqs,
        "enable_chunked_prefill": vc.scheduler_config.enable_chunked_prefill,
        "block_size": vc.cache_config.block_size,
        "kv_cache_dtype": vc.cache_config.cache_dtype,
        "speculative_method": spec.method if spec is not None else None,
        "num_speculative_tokens": spec.num_speculative_tokens if spec is not None else 0,
        "tensor_parallel_size": vc.parallel_config.tensor_parallel_size,
        "decode_context_parallel_size": vc.parallel_config.decode_context_parallel_size,
        "enforce_eager": vc.model_config.enforce_eager,
        # vLLM turns its JIT warmup off under --enforce-eager (VllmConfig.__post_init__)
        "enable_jit_warmup": bool(getattr(vc.kernel_config, "enable_jit_warmup", True)),
        "cudagraph_mode": str(cc.cudagraph_mode),
        "cudagraph_capture_sizes": list(cc.cudagraph_capture_sizes or []),
        "use_v2_model_runner": lifecycle.configured_runner(vc) == "v2",
        # 0.34.0 on: the KV cache reserves its capacity and commits a prefix
        **({} if extensible is None else {"enable_extensible_kv_cache": bool(extensible)}),
        "gpu": point.gpu,
        "sm_count": SM_COUNT[point.gpu],
        "deep_gemm": point.deep_gemm,
        "serve_args": list(point.argv),
    }


def _registry_era() -> bool:
    from dsv4warmup.generation import tree_is_registry_era

    return tree_is_registry_era(Path(os.environ.get("DSV4_VLLM_TREE", ".")))


def resolve_legacy(point: Point) -> Resolved:
    """0.26.0 / 0.25.1: :func:`resolve` (the same path: the tree's parser and
    ``EngineArgs`` in ``vllm serve``'s usage context, its worker's layer
    construction, block-size and KV-planner checks, on the checkpoint-style
    ``config.json`` those releases read), then the CUDA-graph capture sizes
    the legacy drivers take: none under ``--enforce-eager``, the list given on
    the command line as vLLM keeps it (``VllmConfig._set_cudagraph_sizes``
    drops sizes above ``max_num_batched_tokens``; none left: no CUDA graph
    pads a batch), else vLLM's default rule (``serving.capture_sizes``)."""
    res = resolve(point)
    given = _given_flags(point.argv)
    cc = given.get("compilation_config")
    sizes = getattr(cc, "cudagraph_capture_sizes", None) if cc is not None else None
    if sizes is not None:
        sizes = list(res.vllm_config.compilation_config.cudagraph_capture_sizes or [])
    if given.get("enforce_eager"):
        sizes = []
    cfg = res.cfg.replace(cudagraph_capture_sizes=None if sizes is None else tuple(sizes))
    config = dict(res.config, cudagraph_capture_sizes=list(cfg.capture_sizes))
    return Resolved(cfg, config, res.vllm_config)


# Boundaries of the key derivations, audited before any drawn point (one
# command line exercises several: a prompt shorter than a compress ratio is
# also shorter than the sliding window and than a block).
def serve(args: str, **facts: Any) -> Point:
    """A :class:`Point` from a ``vllm serve`` flag string."""
    return Point(tuple(shlex.split(args)), **facts)


MTP = '{"method":"mtp","num_speculative_tokens":%d}'
# DeepSeek's serving recipe; 0.26.0 / 0.25.1 refuse the default (auto) on the
# FlashMLA layout (0.33.0 maps auto to it), so boundaries valid on every base
FP8 = "--kv-cache-dtype fp8"
BOUNDARIES: tuple[Point, ...] = (
    # smallest context: one token, one request, one-token budget
    serve(f"--max-model-len 1 --max-num-seqs 1 --max-num-batched-tokens 1 {FP8}"),
    # eager mode (no CUDA graphs; 0.33.0 also turns its JIT warmup off)
    serve(f"--max-model-len 512 --max-num-seqs 2 --enforce-eager -sc '{MTP % 3}' {FP8}"),
    # context < C4A ratio and < window, MTP k=4, tiny budget, B200, no DeepGEMM
    serve(
        f"--max-model-len 3 --max-num-seqs 2 --max-num-batched-tokens 5 -sc '{MTP % 4}' {FP8}",
        gpu="b200",
        deep_gemm=False,
    ),
    # one past the sliding window, Pro, MTP k=1, three requests
    serve(f"--max-model-len 129 --max-num-seqs 3 -sc '{MTP % 1}' {FP8}", model="pro"),
    # B200 (148 SMs) with DeepGEMM, no MTP, Pro, vllm serve's default budget there
    serve(f"--max-model-len 4096 --max-num-seqs 16 -tp 8 {FP8}", gpu="b200", model="pro"),
    # a single 256-token block, budget below one prefill chunk, odd capture sizes
    serve(
        "--max-model-len 256 --max-num-batched-tokens 100 --max-num-seqs 7 "
        f"""-cc '{{"cudagraph_capture_sizes":[1,3,7]}}' -sc '{MTP % 2}' {FP8}""",
        gpu="h100",
    ),
    # KV-manager blocks of 8 kernel blocks (0.26.0 / 0.25.1 split them; 0.33.0
    # refuses blocks above 256 for DeepSeek V4): the builders' block size and
    # block-table width are the kernel's, not --block-size
    serve(f"--max-model-len 4096 --block-size 2048 -tp 4 {FP8}", model="pro"),
    # one request, capture sizes above max_num_seqs * (1 + k): vLLM captures no
    # FULL decode graph, so a lone decode replays PIECEWISE, its metadata unpadded
    serve(
        f"""--max-model-len 4096 --max-num-seqs 1 -cc '{{"cudagraph_capture_sizes":[2]}}' {FP8}"""
    ),
    # every capture size above the token budget: vLLM drops them all, no CUDA
    # graph pads a batch (0.33.0 refuses MTP k=2 over a 2-token budget)
    serve(
        "--max-model-len 6 --max-num-batched-tokens 2 --max-num-seqs 1 "
        f"""-cc '{{"cudagraph_capture_sizes":[119]}}' -sc '{MTP % 2}' {FP8}""",
        model="pro",
    ),
)


def vllm_failure(exc: BaseException, point: Point) -> ConfigError | None:
    """An exception raised inside the tree's own code while the drivers run
    vLLM's start-up steps (KV-cache planning, attention-backend set-up) on a
    configuration ``create_engine_config`` accepted: vLLM fails on it the same
    way at ``vllm serve`` start-up, so it is vLLM's refusal, not a coverage
    result. ``None`` when the innermost frame outside the standard library and
    site-packages is not vLLM's (a driver bug)."""
    import sysconfig
    import traceback

    tree = os.environ.get("DSV4_VLLM_TREE")
    frames = traceback.extract_tb(exc.__traceback__)
    if not tree or not frames:
        return None
    root = str(Path(tree).resolve())
    # libraries vLLM calls (pydantic validating a vLLM config, torch) raise
    # for vLLM: the innermost frame outside them decides whose failure it is
    libraries = tuple(
        str(Path(sysconfig.get_paths()[k]).resolve()) for k in ("stdlib", "purelib", "platlib")
    )
    own = [f for f in frames if not str(Path(f.filename).resolve()).startswith(libraries)]
    if not own or not str(Path(own[-1].filename).resolve()).startswith(root):
        return None
    last = own[-1]
    where = f"{os.path.relpath(last.filename, root)}:{last.lineno}"
    flag = _engine_error(exc).flag
    if not flag and isinstance(exc, ZeroDivisionError) and "--block-size" in point.argv:
        flag = "--block-size"  # the KV-cache planner divides by the block size
    return ConfigError(
        flag,
        f"vLLM's own start-up code fails for this configuration "
        f"({type(exc).__name__}: {exc} at {where}); vllm serve would too",
    )


def _rows(res: Resolved, point: Point, group: str | None = None) -> list[Any]:
    from dsv4warmup import tree_audit

    if _registry_era():
        engine_pin(res)

    def runner_fails(runner: str, exc: BaseException) -> bool:
        # a runner other than the one vllm serve picks, failing inside vLLM:
        # a deployment cannot select it, so it has no keys to cover
        refusal = vllm_failure(exc, point)
        if refusal is not None:
            res.config.setdefault("runner_failures", {})[runner] = refusal.message
        return refusal is not None

    try:
        return tree_audit.rows_for(res.cfg, group, runner_fails)
    except Exception as e:
        refusal = vllm_failure(e, point)
        if refusal is None:
            raise
        raise refusal from None


def sample(
    examples: int, seed: int, boundaries: int, deadline_s: float, group: str | None = None
) -> dict[str, Any]:
    """Hypothesis over :func:`points` in this interpreter (the tree's): the
    first ``boundaries`` of :data:`BOUNDARIES`, then ``examples`` drawn points
    that vLLM accepts (refused ones are ``assume``-rejected, never clamped).
    No shrinking (an audit is seconds): every point is reported with its
    command line, which ``make audit SERVE_ARGS=...`` reproduces; the run
    stops drawing after ``deadline_s``."""
    import time

    from hypothesis import HealthCheck, Phase, assume, example, given, settings
    from hypothesis import seed as hseed

    start = time.monotonic()
    audited: list[dict[str, Any]] = []
    rejected: list[str] = []
    failed_at_startup: list[str] = []
    current: list[Point] = []

    def check(point: Point) -> None:
        if time.monotonic() - start > deadline_s and audited:
            assume(False)  # budget spent: the rest of the run only rejects
        current[:] = [point]
        try:
            res = resolve(point) if _registry_era() else resolve_legacy(point)
        except ConfigError as e:
            rejected.append(f"{point.describe()} -> {e}")
            assume(False)
            return
        t0 = time.monotonic()
        try:
            rows = _rows(res, point, group)
        except ConfigError as e:
            failed_at_startup.append(f"{point.describe()} -> {e}")
            assume(False)
            return
        audited.append(
            {
                "point": point.describe(),
                "argv": list(point.argv),
                "gpu": point.gpu,
                "deep_gemm": point.deep_gemm,
                "model": point.model,
                "config": res.config,
                "seconds": round(time.monotonic() - t0, 1),
                "missing": [r.as_dict() for r in rows if r.missing],
            }
        )

    test = given(points())(check)
    for point in reversed(BOUNDARIES[:boundaries]):
        test = example(point)(test)
    test = settings(
        max_examples=max(examples, 1),
        deadline=None,
        database=None,
        derandomize=False,
        phases=[Phase.explicit, Phase.generate] if examples else [Phase.explicit],
        suppress_health_check=list(HealthCheck),
    )(test)
    test = hseed(seed)(test)
    out = {
        "audited": audited,
        "rejected": len(rejected),
        "rejected_examples": rejected[:5],
        "vllm_startup_failures": failed_at_startup,
    }
    try:
        test()
    except Exception as e:  # hypothesis gave up (all rejected): report, not crash
        import traceback

        out["error"] = f"{type(e).__name__}: {e}"
        if current:  # the point being audited when it failed, to reproduce it
            out["error"] += f"\n  at {current[0].describe()}"
        out["traceback"] = traceback.format_exc()[-3000:]
    return out


def _legacy_kernel_block_size(block_size: int) -> None:
    """The worker's check (``select_common_block_size``) of the KV manager's
    block size against DeepSeek V4's attention backends (kernel block 256):
    ``vllm serve`` fails at start-up on a block size that is not a multiple."""
    from dsv4warmup.legacy.sparse_mla import mla_group_backends

    try:
        from vllm.v1.worker.utils import select_common_block_size

        backends = mla_group_backends()
    except ImportError:  # a layout this rule was not read from
        return
    try:
        select_common_block_size(block_size, backends)
    except ValueError as e:
        raise ConfigError(
            "--block-size",
            f"{' '.join(str(e).split())} (DeepSeek V4's attention kernels take KV blocks of "
            f"256 tokens: vllm serve accepts multiples of 256 only)",
        ) from None


def main() -> None:
    """Subprocess entry (tree importable).

    ``main POINTS [GROUP]``: resolve and audit each point (0.33.0 trees: one
    kernel group per interpreter, as ``audit.rows_for_tree``);
    ``main --resolve POINTS``: resolve only (any base), the audit's
    ``ServingConfig`` overrides in "overrides". argv: a JSON list of points
    (``{"argv": [...], "gpu": ..., "deep_gemm": ..., "model": ...}``). Prints
    one JSON line: a list of ``{"config", "rows"|"overrides"}`` or
    ``{"error", "flag"}``, one per point.
    """

    if sys.argv[1] == "--sample":
        examples, seed, boundaries, deadline, *group = json.loads(sys.argv[2])
        result = sample(examples, seed, boundaries, deadline, *group)
        sys.stdout.write("\n" + json.dumps(result) + "\n")
        return
    resolve_only = sys.argv[1] == "--resolve"
    points_arg = sys.argv[2] if resolve_only else sys.argv[1]
    group = None if resolve_only or len(sys.argv) < 3 else sys.argv[2]
    out: list[dict[str, Any]] = []
    for p in json.loads(points_arg):
        point = Point(
            tuple(p.get("argv", ())),
            p.get("gpu", "h200"),
            bool(p.get("deep_gemm", True)),
            p.get("model", "flash"),
        )
        try:
            res = resolve(point) if _registry_era() else resolve_legacy(point)
        except ConfigError as e:
            out.append({"error": str(e), "flag": e.flag})
            continue
        if resolve_only:
            overrides = {f: getattr(res.cfg, f) for f in res.cfg.__dataclass_fields__}
            out.append({"config": res.config, "overrides": overrides})
            continue
        try:
            rows = _rows(res, point, group)
        except ConfigError as e:
            out.append({"error": str(e), "flag": e.flag})
            continue
        out.append({"config": res.config, "rows": [r.as_dict() for r in rows]})
    sys.stdout.write("\n" + json.dumps(out, default=list) + "\n")


def engine_pin(res: Resolved) -> None:
    """Make the drivers' ``engine.vllm_config(cfg)`` build from the same
    command line (flags that ``ServingConfig`` has no field for included)."""
    from dsv4warmup.registry import engine

    engine.EXTRA_KWARGS[res.cfg] = _extra_kwargs(res)


def _extra_kwargs(res: Resolved) -> dict[str, Any]:
    given = _given_flags(res.config["serve_args"])
    from vllm.engine.arg_utils import EngineArgs

    keep = set(EngineArgs.__dataclass_fields__) - {
        "max_model_len",
        "max_num_batched_tokens",
        "max_num_seqs",
        "block_size",
        "kv_cache_dtype",
        "tensor_parallel_size",
    }
    return {k: v for k, v in given.items() if k in keep}


if __name__ == "__main__":
    main()
