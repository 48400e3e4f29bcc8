# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Compile the speculative-decoding helper Triton kernels at startup.

The EAGLE/MTP proposer prepares every draft step with three small Triton
kernels (``vllm/v1/spec_decode/utils.py``) and DeepSeek V4's MTP head normalizes
its hidden states with a fourth one. None of them runs during the dummy runs or
the CUDA-graph capture, so without this warmup each of their specializations
is JIT-compiled on the first request that reaches it, stalling the engine.

The keys are derived from plain serving parameters by the functions that sit
beside each kernel; this module only maps the engine's configuration (and the
drafter's KV block table, which fixes two compile-time constants) onto them.
"""

from dataclasses import dataclass, replace
from typing import Any

import torch

import vllm.envs as envs
from vllm.config import VllmConfig
from vllm.logger import init_logger
from vllm.model_executor.warmup.triton_specialization import (
    TritonWarmupLaunch,
    compile_triton_warmup,
)
from vllm.platforms import current_platform

logger = init_logger(__name__)

_DEEPSEEK_V4_MTP_ARCH = "DeepSeekV4MTPModel"


@dataclass(frozen=True)
class DrafterBlockTable:
    """The drafter's KV block table as the proposer passes it to the draft
    step kernel."""

    block_size: int
    n_blocks_per_req: int
    stride: int


@dataclass(frozen=True)
class SpecDecodeTritonWarmupParams:
    """Plain serving parameters that decide the helper kernels' keys."""

    max_num_seqs: int
    num_speculative_tokens: int
    vocab_size: int
    max_model_len: int
    # The runner drives the EAGLE-style proposer (SpecDecodeBaseProposer).
    eagle_proposer: bool = False
    # Not disabled through ``disable_padded_drafter_batch``.
    padded_drafter_batch: bool = True
    # Set when the proposer advances draft positions step by step
    # (num_speculative_tokens > 1, no parallel drafting).
    drafter_block_table: DrafterBlockTable | None = None
    # Set for DeepSeek V4 MTP on NVIDIA.
    mtp_norm_hidden_size: int | None = None
    mtp_norm_weight_dtype: torch.dtype = torch.bfloat16
    mtp_norm_eps: float = 1e-6


def spec_decode_triton_warmup_launches(
    params: SpecDecodeTritonWarmupParams,
) -> list[TritonWarmupLaunch]:
    """Every launch the helper kernels can key on for ``params``."""
    from vllm.v1.spec_decode.utils import (
        eagle_prepare_inputs_padded_warmup_launches,
        eagle_prepare_next_token_padded_warmup_launches,
        eagle_step_slot_mapping_metadata_warmup_launches,
    )

    launches: list[TritonWarmupLaunch] = []
    if params.eagle_proposer and params.padded_drafter_batch:
        launches += eagle_prepare_next_token_padded_warmup_launches(
            params.max_num_seqs, params.num_speculative_tokens, params.vocab_size
        )
        launches += eagle_prepare_inputs_padded_warmup_launches(params.max_num_seqs)
    table = params.drafter_block_table
    if params.eagle_proposer and table is not None:
        launches += eagle_step_slot_mapping_metadata_warmup_launches(
            params.max_num_seqs,
            table.block_size,
            params.max_model_len,
            table.n_blocks_per_req,
            table.stride,
        )
    if params.mtp_norm_hidden_size is not None:
        from vllm.models.deepseek_v4.common.ops.fused_mtp_input_rmsnorm import (
            mtp_shared_head_rmsnorm_warmup_launches,
        )

        launches += mtp_shared_head_rmsnorm_warmup_launches(
            params.mtp_norm_hidden_size,
            params.mtp_norm_weight_dtype,
            params.mtp_norm_eps,
        )
    return launches


def warmup_spec_decode_triton(params: SpecDecodeTritonWarmupParams) -> None:
    """Compile every key of ``params`` (compile only; logs one line)."""
    compile_triton_warmup(
        "Spec decode helper kernels", spec_decode_triton_warmup_launches(params)
    )


def _drafter_block_table(
    model_runner: Any, drafter: Any, num_speculative_tokens: int
) -> DrafterBlockTable | None:
    """The block table the proposer hands to the draft step kernel, or None
    when it never calls it (single draft step, parallel drafting, fixed draft
    positions)."""
    if (
        num_speculative_tokens <= 1
        or drafter.parallel_drafting
        or drafter.constant_draft_positions
        or drafter.block_size <= 0
    ):
        return None
    # The same tensor the runner puts into the drafter's attention metadata.
    block_table = model_runner.input_batch.block_table[drafter.kv_cache_gid]
    tensor = block_table.get_device_tensor(1)
    return DrafterBlockTable(
        block_size=drafter.block_size,
        n_blocks_per_req=tensor.shape[1],
        stride=tensor.stride(0),
    )


def spec_decode_triton_warmup_params(
    vllm_config: VllmConfig, model_runner: Any = None
) -> SpecDecodeTritonWarmupParams | None:
    """Map the engine configuration onto the kernels' plain parameters; None
    when no helper kernel can run."""
    spec_config = vllm_config.speculative_config
    if spec_config is None or spec_config.num_speculative_tokens is None:
        return None
    model_config = vllm_config.model_config
    params = SpecDecodeTritonWarmupParams(
        max_num_seqs=vllm_config.scheduler_config.max_num_seqs,
        num_speculative_tokens=spec_config.num_speculative_tokens,
        vocab_size=model_config.get_vocab_size(),
        max_model_len=model_config.max_model_len,
        padded_drafter_batch=not spec_config.disable_padded_drafter_batch,
    )

    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    drafter = getattr(model_runner, "drafter", None)
    if current_platform.is_cuda_alike() and isinstance(drafter, SpecDecodeBaseProposer):
        params = replace(
            params,
            eagle_proposer=True,
            drafter_block_table=_drafter_block_table(
                model_runner, drafter, params.num_speculative_tokens
            ),
        )

    draft_model_config = spec_config.draft_model_config
    draft_archs = getattr(draft_model_config.hf_config, "architectures", None) or []
    if (
        current_platform.is_cuda()
        and spec_config.method == "mtp"
        and _DEEPSEEK_V4_MTP_ARCH in draft_archs
    ):
        hf_config = draft_model_config.hf_config
        # ModelConfig resolves "auto" and dtype names to a torch.dtype.
        weight_dtype = draft_model_config.dtype
        assert isinstance(weight_dtype, torch.dtype)
        params = replace(
            params,
            mtp_norm_hidden_size=hf_config.hidden_size,
            mtp_norm_weight_dtype=weight_dtype,
            mtp_norm_eps=hf_config.rms_norm_eps,
        )
    if not params.eagle_proposer and params.mtp_norm_hidden_size is None:
        return None
    return params


def spec_decode_triton_warmup(
    vllm_config: VllmConfig,
    device: torch.device | None = None,
    model_runner: Any = None,
) -> None:
    """Startup hook: compile the helper kernels a speculative-decoding
    configuration can reach. Returns quietly for every other configuration;
    a failure is logged and never stops the server (the kernels then compile
    on first use, as without warmup). ``VLLM_DSV4_JIT_WARMUP=0`` skips it."""
    if vllm_config.speculative_config is None or not envs.VLLM_DSV4_JIT_WARMUP:
        return
    try:
        params = spec_decode_triton_warmup_params(vllm_config, model_runner)
        if params is None:
            return
        # Compiled kernels are loaded onto the current device: the worker's.
        with torch.accelerator.device_index(
            device.index if device is not None else None
        ):
            warmup_spec_decode_triton(params)
    except Exception:
        logger.warning(
            "Spec decode helper kernel warmup failed; the kernels will compile "
            "on first use.",
            exc_info=True,
        )
