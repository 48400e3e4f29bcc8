"""The pre-warm counts by default (0.34.0 series, patch 0013): a process that
warms the report's deployment's Triton keys without torch.compile (a pre-warm
step) fills Triton's default cache; serving starts set up by vLLM's own
torch.compile code afterwards (``initialize_inductor_cache``, and AOT
compile's Inductor), with no cache variable set, then read every binary of
their JIT warmup from those caches and build none.

Each start is its own process on one fresh ``HOME``
(:mod:`dsv4warmup.gpu.serving_start`). Positive controls: the pre-warm builds
(the counter counts), and each serving start's set-up really moved
``TRITON_CACHE_DIR`` into vLLM's compile cache (on the pristine tree the
serving starts rebuild every Triton key there). Run with ``pytest -m gpu`` and
``DSV4_VLLM_TREE`` on the PYTHONPATH's tree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.forked]


def test_serving_starts_read_the_prewarm_with_no_cache_variables(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from dsv4warmup.gpu import serving_start

    home = tmp_path / "home"
    # Triton's groups: torch.compile moves Triton's cache, not TileLang's (the
    # mHC keys' disk reads are shown by the lab's cpu_bake_serve phase).
    prewarm, *serving = serving_start.run_starts(home, tilelang=False)
    print(prewarm, *serving, sep="\n")
    assert prewarm["triton_built"] > 0, prewarm
    assert prewarm["TRITON_CACHE_DIR"] is None, prewarm

    compile_cache = str(home / ".cache" / "vllm" / "torch_compile_cache")
    for start in serving:
        assert str(start["TRITON_CACHE_DIR"]).startswith(compile_cache), start
        assert start["after_warmup_TRITON_CACHE_DIR"] == start["TRITON_CACHE_DIR"], start
        assert start["triton_built"] == 0, start
        assert start["triton_read"] == prewarm["triton_built"], start
