"""The GPU lab's Python environment, on this CPU-only machine, for
:mod:`dsv4warmup.gpu.prewarm_runner` (``python -m dsv4warmup.registry.lab_host
<model dir> <flash|pro> [runner flags]``).

The lab machine has TileLang but not CuTeDSL, ``cuda.bindings``, quack,
FlashInfer or DeepGEMM, and its ``vllm._C`` is a stub without the ops vLLM
looks up while it configures and builds DeepSeek V4. Here the platform answers
as an H200 (:mod:`.platform`, whose ``vllm._C`` stub is the same kind) and only
TileLang, which the lab has, is stood in for; what the lab lacks is left
missing, so the runner's own stand-ins are what make the command get through.
Writes the model's ``config.json``, then runs the runner with the serving
configuration's ``vllm serve`` flags. ``DSV4_LAB_HOST_NO_OP_STUBS=1`` disables
the runner's compiled-op stubs (the control: the command must then fail as it
did on the lab).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from dsv4warmup.serving import FLASH, PRO

from . import cpu_cli, engine, lifecycle, meta_models, platform, prewarm


@contextlib.contextmanager
def _no_op_stubs() -> Iterator[None]:
    yield


def main(argv: list[str]) -> None:
    model, variant, *runner_flags = argv
    cfg = {"flash": FLASH, "pro": PRO}[variant]
    # The lab has TileLang (missing here); what it lacks stays missing.
    cpu_cli.install(platform.H200, stand_ins=("tilelang",), permissive_ops=False)
    if os.environ.get("DSV4_LAB_HOST_NO_OP_STUBS") == "1":
        meta_models._stub_compiled_ops = _no_op_stubs  # type: ignore[assignment]
    root = Path(model)
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(engine.hf_config_dict(cfg), default=str))
    from dsv4warmup.gpu import prewarm_runner

    with lifecycle.cpu_triton_driver():
        prewarm_runner.main([*prewarm.serve_flags(cfg, model), *runner_flags])


if __name__ == "__main__":
    main(sys.argv[1:])
