"""pytest plugin: the fixtures of vLLM's ``tests/conftest.py`` that the tree
tests we run on the GPU lab use, for ``pytest --noconftest -p`` this module.

vLLM's own conftest imports the engine, the multimodal assets and HTTP
clients the lab does not install. These fixtures do what its ``dist_init`` and
``workspace_init`` do: a one-rank distributed environment, and the workspace
manager on the current device.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture
def dist_init() -> Iterator[None]:
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import (
        cleanup_dist_env_and_memory,
        init_distributed_environment,
        initialize_model_parallel,
    )

    fd, path = tempfile.mkstemp()
    os.close(fd)
    try:
        with set_current_vllm_config(VllmConfig()):
            init_distributed_environment(
                world_size=1,
                rank=0,
                distributed_init_method=f"file://{path}",
                local_rank=0,
                backend="nccl" if torch.cuda.is_available() else "gloo",
            )
            initialize_model_parallel(1, 1)
            yield
        cleanup_dist_env_and_memory()
    finally:
        os.unlink(path)


@pytest.fixture
def workspace_init() -> Iterator[None]:
    import torch
    from vllm.v1.worker.workspace import init_workspace_manager, reset_workspace_manager

    if torch.accelerator.is_available():
        init_workspace_manager(torch.device(0))
    yield
    reset_workspace_manager()
