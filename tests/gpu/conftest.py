"""GPU tests run forked (pytest-forked): a CUDA driver call in the pytest
process itself (at collection, e.g. an import that asks torch for a device)
would make every one of them fail with "Cannot re-initialize CUDA in forked
subprocess". Check once, in a throw-away fork, and say so up front."""

from __future__ import annotations

import os

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    if not os.path.exists("/dev/nvidiactl"):
        return
    if not any(item.get_closest_marker("forked") for item in session.items):
        return
    pid = os.fork()
    if pid == 0:  # child: can it still use CUDA?
        code = 1
        try:
            import torch

            torch.zeros(1, device="cuda")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise pytest.UsageError(
            "CUDA does not work in a fork of the pytest process, so no forked GPU test can "
            "use it: was CUDA initialised during collection (a module-level CUDA call or "
            "torch.cuda.is_available() in an import)?"
        )
