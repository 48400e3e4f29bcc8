# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""MhcPreBigFuseTileLangKernel declares n_splits a symbolic warmup argument:
its three epilogues elaborated once with n_splits a TIR variable and
specialized to a split count are the PrimFunc elaborating them with that split
count gives, script for script (TileLang's disk cache key). Elaboration needs
TileLang, not a GPU."""

import inspect
from typing import Any

import pytest

from vllm.platforms import current_platform

if not current_platform.is_cuda():
    pytest.skip("NVIDIA dispatch tests require CUDA", allow_module_level=True)
pytest.importorskip("tilelang")

from vllm.model_executor.kernels.mhc.tilelang_kernels import (  # noqa: E402
    MhcPreBigFuseTileLangKernel,
)
from vllm.tilelang_utils import T  # noqa: E402

EPS = dict(
    rms_eps=1e-6,
    hc_pre_eps=1e-6,
    hc_sinkhorn_eps=1e-6,
    hc_post_mult_value=2.0,
    sinkhorn_repeat=20,
)


def _launch_args(kernel: MhcPreBigFuseTileLangKernel, key: Any) -> tuple[Any, ...]:
    """What the runtime passes the key's TileLang JIT, without launching."""
    launch = inspect.unwrap(MhcPreBigFuseTileLangKernel.__call__)
    (launched_key,), args = launch(kernel, **kernel.warmup_inputs(key))[:2]
    assert launched_key == key
    return args


@pytest.mark.parametrize("hidden_size", [4096, 7168])
@pytest.mark.parametrize(
    "is_broadcast,use_norm_weight",
    [(True, True), (False, True), (False, False)],
    ids=["broadcast", "with_norm", "plain"],
)
def test_specialized_template_is_the_static_primfunc(
    hidden_size: int, is_broadcast: bool, use_norm_weight: bool
) -> None:
    kernel = MhcPreBigFuseTileLangKernel()
    assert kernel.symbolic_warmup_args == ("n_splits",)
    template = None
    for n_splits in (1, 2, 3, 5, 8, 16, 33, 64):
        key = MhcPreBigFuseTileLangKernel.CompileKey(
            hidden_size=hidden_size,
            hc_mult=4,
            n_splits=n_splits,
            use_norm_weight=use_norm_weight,
            is_broadcast=is_broadcast,
            norm_eps=1e-6 if use_norm_weight else 0.0,
            **EPS,
        )
        jit = kernel.kernel(key)
        args = _launch_args(kernel, key)
        if template is None:
            bound = jit.signature.bind(*args)
            bound.arguments["n_splits"] = T.dynamic("n_splits")
            template = jit.get_tir(*bound.args, **bound.kwargs)
            (param,) = [p for p in template.params if p.name == "n_splits"]
        specialized = template.specialize({param: n_splits})
        static = jit.get_tir(*args)
        assert specialized.script(show_meta=True) == static.script(show_meta=True), (
            n_splits
        )
