# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Report DeepSeek V4 kernels that JIT-compile after warmup.

``VLLM_DSV4_JIT_SENTINEL=warn`` logs a warning naming the kernel and its key
when one of the DeepSeek V4 model-specific Triton or TileLang kernels compiles
after start-up warmup finished; ``raise`` raises instead (for CI and canary
deployments). Unset (the default), nothing is installed.
"""

import logging
from typing import Any

import regex as re

import vllm.envs as envs
from vllm.logger import init_logger

logger = init_logger(__name__)

ENV = "VLLM_DSV4_JIT_SENTINEL"

# The Triton kernels whose keys the DeepSeek V4 warmups cover.
TRITON_KERNELS = frozenset(
    {
        "eagle_step_slot_mapping_metadata_kernel",
        "eagle_prepare_inputs_padded_kernel",
        "eagle_prepare_next_token_padded_kernel",
        "_mtp_shared_head_rmsnorm_kernel",
        "_build_c128a_topk_metadata_kernel",
        "_combine_topk_swa_indices_kernel",
    }
)
# TileLang logs "TileLang begins to compile kernel `<name>` ..." per compile;
# the mHC and hc_head kernels are the model-specific ones.
_TILELANG_LOGGER = "tilelang.jit.kernel"
_TILELANG_COMPILE = re.compile(r"begins to compile kernel `?([A-Za-z0-9_]+)")
_TILELANG_KERNEL = re.compile(r"^(mhc_|hc_)")


class JitAfterWarmupError(RuntimeError):
    """A covered kernel compiled after warmup (sentinel mode ``raise``)."""


_armed_mode: str | None = None


def sentinel_mode() -> str | None:
    """The mode ``VLLM_DSV4_JIT_SENTINEL`` asks for: ``warn``, ``raise`` or None."""
    mode = (envs.VLLM_DSV4_JIT_SENTINEL or "").strip().lower()
    if mode in ("", "0", "off", "none"):
        return None
    if mode not in ("warn", "raise"):
        logger.warning("Ignoring %s=%r: expected 'warn' or 'raise'.", ENV, mode)
        return None
    return mode


def _report(kind: str, kernel: str, key: Any) -> None:
    message = (
        f"DeepSeek V4 {kind} kernel {kernel} is compiling after warmup "
        f"(key {key}); a warmup path is not covered."
    )
    if _armed_mode == "raise":
        raise JitAfterWarmupError(message)
    logger.warning(message)


def _triton_hook(previous: Any) -> Any:
    def hook(*args: Any, **kwargs: Any) -> Any:
        fn = kwargs.get("fn")
        name = getattr(fn, "name", "")
        if name.rsplit(".", 1)[-1] in TRITON_KERNELS:
            # The cache key (argument specializations, options): Triton 3.6's
            # "repr" mislabels the argument types.
            _report("Triton", name, kwargs.get("key", kwargs.get("repr")))
        return previous(*args, **kwargs) if previous is not None else None

    return hook


class _TileLangCompileHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        match = _TILELANG_COMPILE.search(record.getMessage())
        if match and _TILELANG_KERNEL.match(match.group(1)):
            _report("TileLang", match.group(1), record.getMessage())


def arm() -> bool:
    """Start watching; call once warmup is complete. Returns whether armed."""
    global _armed_mode
    mode = sentinel_mode()
    if mode is None or _armed_mode is not None:
        return _armed_mode is not None
    _armed_mode = mode
    try:
        from triton import knobs

        knobs.runtime.jit_cache_hook = _triton_hook(knobs.runtime.jit_cache_hook)
    except (ImportError, AttributeError):
        logger.debug("Triton compile hook unavailable; Triton is not watched.")
    tilelang_logger = logging.getLogger(_TILELANG_LOGGER)
    tilelang_logger.addHandler(_TileLangCompileHandler(level=logging.NOTSET))
    if tilelang_logger.level == logging.NOTSET or tilelang_logger.level > logging.INFO:
        # TileLang logs the compile line at INFO.
        tilelang_logger.setLevel(logging.INFO)
    logger.info("DeepSeek V4 JIT sentinel armed (%s=%s).", ENV, mode)
    return True
