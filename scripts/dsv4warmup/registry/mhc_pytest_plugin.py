"""pytest plugin: run a 0.33.0 tree's mHC dispatch/warmup tests on CPU.

``pytest -p dsv4warmup.registry.mhc_pytest_plugin <tree>/tests/kernels/mhc/test_mhc_jit_warmup.py``
with the tree on ``PYTHONPATH``: before collection the platform becomes a CUDA
platform answering as the GPU named by ``DSV4_GPU`` (h100, h200, b200;
default h200), ``tilelang_kernels`` imports (the real TileLang when it imports,
else the stand-in of :mod:`dsv4warmup.registry.mhc`), and the SM count comes from
that GPU. Tests that launch kernels cannot run this way; the dispatch, key and
compile-only warmup tests can. Python processes the tests start inherit the
same set-up (a ``sitecustomize`` on their ``PYTHONPATH``), so a test whose
warmers run in subprocesses runs too.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

_stack = contextlib.ExitStack()
_SITECUSTOMIZE = """\
import os

if os.environ.get("DSV4_CPU_HOSTED_GPU"):
    from dsv4warmup.registry import mhc_pytest_plugin

    mhc_pytest_plugin.set_up(os.environ["DSV4_CPU_HOSTED_GPU"])
"""


def set_up(gpu: str) -> None:
    import atexit

    from . import mhc, platform

    platform.install(platform.GPUS[gpu])
    mhc.kernels_module()
    _stack.enter_context(mhc._device())
    atexit.register(_stack.close)  # before the interpreter tears modules down


def pytest_configure(config: Any) -> None:
    import tempfile

    gpu = os.environ.get("DSV4_GPU", "h200")
    set_up(gpu)
    folder = tempfile.mkdtemp(prefix="dsv4-cpu-hosted-")
    with open(os.path.join(folder, "sitecustomize.py"), "w") as f:
        f.write(_SITECUSTOMIZE)
    os.environ["DSV4_CPU_HOSTED_GPU"] = gpu
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [folder, *filter(None, [os.environ.get("PYTHONPATH")])]
    )


def pytest_unconfigure(config: Any) -> None:
    _stack.close()
