# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""CPU tests of the offline JIT warmup behind `vllm warmup-kernels`."""

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from vllm.config import ParallelConfig, VllmConfig
from vllm.distributed import parallel_state
from vllm.model_executor.warmup import offline_warmup


@pytest.mark.parametrize("pp_rank", [0, 1])
def test_process_groups_answer_as_one_rank_of_the_deployment(pp_rank: int) -> None:
    config = VllmConfig(
        parallel_config=ParallelConfig(
            tensor_parallel_size=4,
            pipeline_parallel_size=2,
            data_parallel_size=2,
            # Any host: only the groups are built, no worker is started.
            distributed_executor_backend="mp",
        )
    )

    with offline_warmup._process_groups(config, pp_rank):
        tp = parallel_state.get_tp_group()
        pp = parallel_state.get_pp_group()
        assert (tp.world_size, tp.rank_in_group) == (4, 0)
        assert parallel_state.get_tensor_model_parallel_world_size() == 4
        assert (pp.world_size, pp.rank_in_group) == (2, pp_rank)
        assert pp.is_first_rank == (pp_rank == 0)
        assert pp.is_last_rank == (pp_rank == 1)
        assert parallel_state.get_dp_group().world_size == 2
        assert parallel_state.get_ep_group().world_size == 8
        # One process: the groups behind the views stay single-rank.
        assert tp.device_communicator is None

    assert not parallel_state.model_parallel_is_initialized()


def test_describe_key_sorts_triton_keys() -> None:
    @dataclass(frozen=True)
    class JitKey:
        cache_key: str

    key = SimpleNamespace(jit_keys=frozenset({JitKey("b"), JitKey("a")}))
    assert offline_warmup.describe_key(key) == "a | b"
    assert offline_warmup.describe_key(("x", 1)) == "('x', 1)"
