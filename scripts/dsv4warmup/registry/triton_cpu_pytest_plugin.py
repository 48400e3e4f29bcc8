"""pytest plugin: run a registry-era tree's compile-only Triton warmup tests on CPU.

``pytest --noconftest -p dsv4warmup.registry.triton_cpu_pytest_plugin <test> -k ...``
with the tree on ``PYTHONPATH``: before collection the platform becomes a CUDA
platform answering as the GPU named by ``DSV4_GPU`` (h100, h200, b200; default
h100), which also makes ``vllm.triton_utils`` use the real Triton, and Triton's
active driver answers for an sm_90 GPU (:func:`.lifecycle.cpu_triton_driver`).
Compile-only warmups then compile with Triton's own compiler and ptxas into
its disk cache, as on that GPU. Tests that launch a kernel cannot run this way.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

_stack = contextlib.ExitStack()


def pytest_configure(config: Any) -> None:
    from . import lifecycle, platform

    platform.install(platform.GPUS[os.environ.get("DSV4_GPU", "h100")])
    _stack.enter_context(lifecycle.cpu_triton_driver())


def pytest_unconfigure(config: Any) -> None:
    _stack.close()
