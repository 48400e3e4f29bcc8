"""Test set-up: which vLLM tree the tests import.

* ``DSV4_VLLM_TREE=<dir>``: that source tree (e.g. a patched tree on the GPU lab).
* ``DSV4_USE_INSTALLED_VLLM=1``: whatever ``import vllm`` finds (a patched wheel).
* otherwise: a patched vLLM 0.26.0 tree generated under ``build/trees/``
  from the cached sdist, reused while the series is unchanged.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "tests"))


def _vllm_tree() -> Path | None:
    if os.environ.get("DSV4_USE_INSTALLED_VLLM") == "1":
        return None
    if os.environ.get("DSV4_VLLM_TREE"):
        return Path(os.environ["DSV4_VLLM_TREE"]).resolve()
    from dsv4warmup import trees

    return trees.patched_tree("0.26.0")


# Before anything imports vLLM: keep Triton on a CPU-only machine.
import dsv4warmup.legacy  # noqa: E402, F401

_tree = _vllm_tree()
if _tree is not None:
    sys.path.insert(0, str(_tree))
    os.environ["DSV4_VLLM_TREE"] = str(_tree)  # forked / subprocess tests see it too
