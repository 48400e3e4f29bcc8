"""pytest plugin: run a 0.33.0 tree's mHC dispatch/warmup tests on CPU.

``pytest -p dsv4warmup.registry.mhc_pytest_plugin <tree>/tests/kernels/mhc/test_mhc_jit_warmup.py``
with the tree on ``PYTHONPATH``: before collection the platform becomes a CUDA
platform answering as the GPU named by ``DSV4_GPU`` (h100, h200, b200;
default h200), ``tilelang_kernels`` imports (the real TileLang when it imports,
else the stand-in of :mod:`dsv4warmup.registry.mhc`), and the SM count comes from
that GPU. Tests that launch kernels cannot run this way; the dispatch, key and
compile-only warmup tests can.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

_stack = contextlib.ExitStack()


def pytest_configure(config: Any) -> None:
    from . import mhc, platform

    platform.install(platform.GPUS[os.environ.get("DSV4_GPU", "h200")])
    mhc.kernels_module()
    _stack.enter_context(mhc._device())


def pytest_unconfigure(config: Any) -> None:
    _stack.close()
