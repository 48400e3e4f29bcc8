"""A registry-era tree's own ``VllmConfig`` for a serving configuration, built on CPU.

The configuration goes through the tree's ``EngineArgs.create_engine_config``
exactly as ``vllm serve`` flags do (same defaults, same validation errors), for
a model folder holding only a DeepSeek V4 ``config.json`` (no weights, no
tokenizer). The platform answers as the configured NVIDIA GPU
(:mod:`.platform`).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from dsv4warmup.serving import ServingConfig

from . import platform

_MODEL_DIRS: dict[str, Path] = {}


@atexit.register
def _remove_model_dirs() -> None:
    # Runs in the process that made them (forked children leave with os._exit).
    for folder in _MODEL_DIRS.values():
        shutil.rmtree(folder, ignore_errors=True)


# Further ``EngineArgs`` keyword arguments per configuration: the flags of a
# ``vllm serve`` command line that ``ServingConfig`` has no field for
# (:func:`dsv4warmup.configspace.engine_pin`).
EXTRA_KWARGS: dict[ServingConfig, dict[str, Any]] = {}


def hf_config_dict(cfg: ServingConfig) -> dict[str, Any]:
    """A DeepSeek V4 ``config.json`` with ``cfg``'s model dimensions."""
    from transformers.models.deepseek_v4.configuration_deepseek_v4 import DeepseekV4Config

    hf = DeepseekV4Config(
        architectures=["DeepseekV4ForCausalLM"],
        hidden_size=cfg.hidden_size,
        vocab_size=cfg.vocab_size,
        hc_mult=cfg.hc_mult,
        index_topk=cfg.index_topk,
        sliding_window=cfg.sliding_window,
        num_nextn_predict_layers=cfg.num_nextn_predict_layers,
        rms_norm_eps=cfg.rms_norm_eps,
        hc_eps=cfg.hc_eps,
        hc_sinkhorn_iters=cfg.hc_sinkhorn_iters,
    )
    data = hf.to_dict()
    if _reads_checkpoint_config():
        data = _checkpoint_style(data)
    return data


def _reads_checkpoint_config() -> bool:
    """Whether the tree reads DeepSeek V4's ``config.json`` with its own
    config class (0.26.0 / 0.25.1), not transformers': the released
    checkpoints' keys then, which transformers renames."""
    import importlib.util

    return importlib.util.find_spec("vllm.transformers_utils.configs.deepseek_v4") is not None


_LAYER_TYPE_RATIO = {
    "sliding_attention": 0,
    "compressed_sparse_attention": 4,
    "heavily_compressed_attention": 128,
}


def _checkpoint_style(data: dict[str, Any]) -> dict[str, Any]:
    """transformers' DeepSeek V4 config dict in the released checkpoints'
    keys: per-layer ``compress_ratios`` (not ``layer_types`` /
    ``compress_rates``), one flat ``rope_parameters`` (the main attention's;
    the layers take ``compress_rope_theta`` for compressed ones), and no
    ``mlp_layer_types`` (values the older config class does not know)."""
    data = dict(data)
    data["compress_ratios"] = [_LAYER_TYPE_RATIO[t] for t in data.pop("layer_types")]
    data.pop("compress_rates", None)
    data.pop("mlp_layer_types", None)
    rope = data.get("rope_parameters") or {}
    data["rope_parameters"] = dict(rope.get("main", rope))
    return data


def model_dir(cfg: ServingConfig) -> Path:
    """A folder with ``cfg``'s ``config.json`` (cached per content)."""
    data = json.dumps(hf_config_dict(cfg), sort_keys=True, default=str)
    digest = hashlib.sha256(data.encode()).hexdigest()[:16]
    if digest not in _MODEL_DIRS:
        folder = Path(tempfile.mkdtemp(prefix=f"dsv4-config-{digest}-"))
        (folder / "config.json").write_text(data)
        _MODEL_DIRS[digest] = folder
    return _MODEL_DIRS[digest]


def engine_args_kwargs(cfg: ServingConfig, model: Path) -> dict[str, Any]:
    """``cfg`` as ``EngineArgs`` keyword arguments (``vllm serve``'s names)."""
    kwargs: dict[str, Any] = dict(
        model=str(model),
        tensor_parallel_size=cfg.tensor_parallel_size,
        kv_cache_dtype=cfg.kv_cache_dtype,
        block_size=cfg.block_size,
        max_model_len=cfg.max_model_len,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_num_seqs=cfg.max_num_seqs,
        skip_tokenizer_init=True,
        load_format="dummy",
    )
    if cfg.speculative_method and cfg.num_speculative_tokens > 0:
        kwargs["speculative_config"] = {
            "method": cfg.speculative_method,
            "num_speculative_tokens": cfg.num_speculative_tokens,
        }
    if cfg.cudagraph_capture_sizes is not None:
        kwargs["compilation_config"] = {
            "cudagraph_capture_sizes": list(cfg.cudagraph_capture_sizes)
        }
    kwargs.update(EXTRA_KWARGS.get(cfg, {}))
    return kwargs


_MACHINE = "machine"


def vllm_config(cfg: ServingConfig, gpu: platform.Gpu | str | None = None) -> Any:
    """The tree's ``VllmConfig`` for ``cfg``, as ``vllm serve`` would build it.

    Args:
        cfg: The serving configuration.
        gpu: The GPU the CPU-hosted platform answers as; ``"machine"`` builds
            on this machine's own platform (the GPU tests); ``None`` picks
            the machine's platform when it has a CUDA GPU, else an H200.
    """
    if gpu is None:
        gpu = _MACHINE if _has_cuda() else platform.H200
    kwargs = engine_args_kwargs(cfg, model_dir(cfg))
    if gpu == _MACHINE:
        from vllm.platforms import current_platform

        if current_platform.device_count() < cfg.tensor_parallel_size:
            # Only the configuration is built, no worker is started: TP 4 on a
            # one-GPU lab must not fail vLLM's "world size > GPUs" check,
            # which applies only when vLLM picks the executor itself.
            kwargs["distributed_executor_backend"] = "mp"
    else:
        assert isinstance(gpu, platform.Gpu), gpu
        platform.install(gpu)
    from vllm.engine.arg_utils import EngineArgs

    return create_engine_config(EngineArgs(**kwargs))


def create_engine_config(engine_args: Any) -> Any:
    """``engine_args.create_engine_config`` in ``vllm serve``'s usage context:
    its defaults for flags not given (token budget, ``max_num_seqs``) follow
    the serving device's memory, e.g. 8192 / 1024 on an H200, not the
    ``SchedulerConfig`` defaults (2048 / 128) a context-free call gives."""
    from vllm.usage.usage_lib import UsageContext

    return engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)


def _has_cuda() -> bool:
    if platform.installed_gpu() is not None:
        return False  # a CPU-hosted platform is in place: keep answering as it
    import torch

    return torch.cuda.is_available()
