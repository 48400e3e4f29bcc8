# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The CUDA DeepSeek V4 mHC warmup compiles every TileLang key the wrappers
select for a serving configuration, so calls afterwards compile nothing."""

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pytest
import torch

import vllm.model_executor.kernels.mhc  # noqa: F401
from vllm.model_executor.kernels.mhc import tilelang as mhc
from vllm.model_executor.kernels.mhc.tilelang_dispatch import (
    HcHeadParams,
    MhcCallSite,
    MhcPostParams,
    MhcPreParams,
    mhc_warmup_token_counts,
)
from vllm.model_executor.layers.mhc import HAS_TILELANG_MHC
from vllm.model_executor.warmup import deepseek_v4_mhc_warmup as warmup
from vllm.platforms import current_platform
from vllm.utils.import_utils import has_deep_gemm

pytestmark = pytest.mark.skipif(
    not (current_platform.is_cuda() and HAS_TILELANG_MHC),
    reason="CUDA and TileLang mHC required",
)

HC_MULT = 4
EPS = 1e-6
SINKHORN_ITERS = 20
POST_ALPHA = 2.0
MAX_TOKENS = 2048


@contextmanager
def count_compiles() -> Iterator[list[str]]:
    """Every @tilelang.jit in-memory cache miss, by factory name (a compile or
    a disk-cache load): JITImpl.__call__ calls JITImpl.compile exactly then,
    whatever TileLang's log settings."""
    from tilelang.jit import JITImpl

    real_compile = JITImpl.compile
    misses: list[str] = []

    def compile_and_count(self, *args, **kwargs):
        misses.append(self.func.orig_func.__name__)
        return real_compile(self, *args, **kwargs)

    with mock.patch.object(JITImpl, "compile", compile_and_count):
        yield misses


def torch_tf32_hc_prenorm_gemm(x, fn, out, sqrsum, num_split):
    """DeepGEMM's split-K pre-norm GEMM in torch: partial sums over K."""
    for i, (xs, fs) in enumerate(
        zip(x.float().tensor_split(num_split, 1), fn.tensor_split(num_split, 1))
    ):
        out[i] = xs @ fs.t()
        sqrsum[i] = xs.square().sum(-1)


@contextmanager
def deep_gemm_mode(enabled: bool) -> Iterator[None]:
    """DeepGEMM on or off. Without the package, a torch stand-in makes the
    wrappers take their DeepGEMM branch (the TileLang keys are the same)."""
    import vllm.utils.deep_gemm as deep_gemm

    patches: list[Any] = [
        mock.patch.object(deep_gemm, "is_deep_gemm_supported", lambda: enabled)
    ]
    if enabled and not has_deep_gemm():
        patches.append(
            mock.patch.object(
                deep_gemm, "tf32_hc_prenorm_gemm", torch_tf32_hc_prenorm_gemm
            )
        )
    for patch in patches:
        patch.start()
    try:
        yield
    finally:
        for patch in reversed(patches):
            patch.stop()


def make_sites(hidden_size: int, broadcast: bool) -> dict:
    """The mHC call sites of a DeepSeek V4 target (+ MTP) with random layer
    parameters."""
    dev = torch.device("cuda")
    hc_mult3 = HC_MULT * (2 + HC_MULT)
    fn = torch.randn(hc_mult3, HC_MULT * hidden_size, device=dev) * 1e-4
    scale = torch.randn(3, device=dev) * 0.1
    base = torch.randn(hc_mult3, device=dev) * 0.1
    norm_weight = torch.randn(hidden_size, device=dev, dtype=torch.bfloat16)
    pre = MhcPreParams(
        hidden_size, HC_MULT, EPS, EPS, EPS, POST_ALPHA, SINKHORN_ITERS, EPS
    )
    pre_args = dict(fn=fn, scale=scale, base=base, norm_weight=norm_weight)
    sites = {}
    entries = ["pre", "fused_post_pre"] + (["pre_broadcast"] if broadcast else [])
    for entry in entries:
        site = MhcCallSite(entry, pre)  # type: ignore[arg-type]
        fn_broadcast = None
        if entry == "pre_broadcast":
            fn_broadcast = fn.view(-1, HC_MULT, hidden_size).sum(dim=1)
        sites[site] = warmup.BoundMhcCallSite(
            site, dev, **pre_args, fn_broadcast=fn_broadcast
        )
    post = MhcCallSite("post", MhcPostParams(hidden_size, HC_MULT))
    sites[post] = warmup.BoundMhcCallSite(post, dev)
    head = MhcCallSite("hc_head", HcHeadParams(hidden_size, HC_MULT, EPS, EPS))
    sites[head] = warmup.BoundMhcCallSite(
        head,
        dev,
        fn=torch.randn(HC_MULT, HC_MULT * hidden_size, device=dev) * 1e-4,
        scale=torch.randn(1, device=dev) * 0.1,
        base=torch.randn(HC_MULT, device=dev) * 0.1,
    )
    return sites


def sample_token_counts() -> list[int]:
    """Token counts to check, by a rule of their own (not the warmup's key
    functions): every count up to 130 (small-FMA and pre-norm GEMM variants),
    both sides of 1024 and of every multiple of 64 (DeepGEMM's block_m, where
    split-K changes), the maximum, and a random sample."""
    counts = set(range(1, 131)) | {1023, 1024, 1025, MAX_TOKENS}
    for multiple in range(64, MAX_TOKENS + 1, 64):
        counts.update((multiple, multiple + 1))
    counts.update(random.Random(0).sample(range(1, MAX_TOKENS + 1), 24))
    return sorted(t for t in counts if 1 <= t <= MAX_TOKENS)


# References (tests/kernels/test_mhc_kernels.py), with the fused RMSNorm.
def sinkhorn_ref(x: torch.Tensor, repeat: int, eps: float) -> torch.Tensor:
    x = x.softmax(-1) + eps
    x = x / (x.sum(-2, keepdim=True) + eps)
    for _ in range(repeat - 1):
        x = x / (x.sum(-1, keepdim=True) + eps)
        x = x / (x.sum(-2, keepdim=True) + eps)
    return x


def pre_ref(residual, fn, scale, base, norm_weight):
    flat = residual.flatten(-2, -1).float()
    mixes = (
        flat @ fn.T * (flat.square().sum(-1, keepdim=True) / fn.shape[-1] + EPS).rsqrt()
    )
    scale = torch.cat(
        [
            scale[0].expand(HC_MULT),
            scale[1].expand(HC_MULT),
            scale[2].expand(HC_MULT**2),
        ]
    )
    mixes = mixes * scale + base
    pre_mix = mixes[:, :HC_MULT].sigmoid().unsqueeze(-1) + EPS
    post_mix = (mixes[:, HC_MULT : 2 * HC_MULT].sigmoid() * POST_ALPHA).unsqueeze(-1)
    comb = sinkhorn_ref(
        mixes[:, 2 * HC_MULT :].view(-1, HC_MULT, HC_MULT), SINKHORN_ITERS, EPS
    )
    y = (residual * pre_mix).sum(-2).bfloat16().float()
    y = y * (y.square().mean(-1, keepdim=True) + EPS).rsqrt() * norm_weight.float()
    return post_mix, comb, y.bfloat16()


def post_ref(x, residual, post_mix, comb):
    term = torch.bmm(comb.mT, residual.float())
    return (x.float().unsqueeze(-2) * post_mix + term).bfloat16()


def hc_head_ref(residual, fn, scale, base):
    flat = residual.flatten(-2).float()
    normed = flat * torch.rsqrt(flat.square().mean(-1, keepdim=True) + EPS)
    pre_mix = torch.sigmoid(torch.nn.functional.linear(normed, fn) * scale + base) + EPS
    return torch.sum(pre_mix.unsqueeze(-1) * residual.float(), dim=-2).bfloat16()


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual.float(), expected.float(), atol=5e-2, rtol=2e-2)


def run_and_check(sites: dict, num_tokens: int) -> None:
    """Call every site's wrapper as the model does and compare with torch."""
    T, dev = num_tokens, torch.device("cuda")
    for bound in sites.values():
        site, p = bound.site, bound.site.params
        H = p.hidden_size
        residual = torch.randn(T, HC_MULT, H, device=dev, dtype=torch.bfloat16)
        if site.entry == "hc_head":
            out = mhc.hc_head_fused_kernel_tilelang(
                residual, bound.fn, bound.scale, bound.base, EPS, EPS
            )
            close(out, hc_head_ref(residual, bound.fn, bound.scale, bound.base))
            continue
        x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
        post_mix = torch.rand(T, HC_MULT, 1, device=dev)
        comb = torch.rand(T, HC_MULT, HC_MULT, device=dev)
        if site.entry == "post":
            close(
                mhc.mhc_post_tilelang(x, residual, post_mix, comb),
                post_ref(x, residual, post_mix, comb),
            )
            continue
        args = (
            bound.fn,
            bound.scale,
            bound.base,
            EPS,
            EPS,
            EPS,
            POST_ALPHA,
            SINKHORN_ITERS,
        )
        norm = dict(norm_weight=bound.norm_weight, norm_eps=EPS)
        ref_args = (bound.fn, bound.scale, bound.base, bound.norm_weight)
        if site.entry == "pre":
            out = mhc.mhc_pre_tilelang(residual, *args, **norm)
            expected = pre_ref(residual, *ref_args)
        elif site.entry == "pre_broadcast":
            res_out, *out = mhc.mhc_pre_broadcast_tilelang(
                x, *args, **norm, fn_broadcast=bound.fn_broadcast
            )
            broadcast = x.unsqueeze(1).expand(T, HC_MULT, H)
            close(res_out, broadcast)
            expected = pre_ref(broadcast, *ref_args)
        else:
            res_out, *out = mhc.mhc_fused_post_pre_tilelang(
                x, residual, post_mix, comb, *args, n_splits=1, tile_n=1, **norm
            )
            res_ref = post_ref(x, residual, post_mix, comb)
            close(res_out, res_ref)
            expected = pre_ref(res_ref, *ref_args)
        for actual, want in zip(out, expected, strict=True):
            close(actual, want)


@pytest.mark.parametrize("deep_gemm", [False, True], ids=["tilelang-gemm", "deep-gemm"])
@pytest.mark.parametrize("hidden_size", [4096])
def test_mhc_warmup_then_no_compiles(hidden_size: int, deep_gemm: bool) -> None:
    # Imports TileLang: CUDA only.
    from vllm.model_executor.kernels.mhc import tilelang_kernels

    torch.manual_seed(0)
    num_sms = mhc.device_num_sms()
    # The broadcast first layer runs only with DeepGEMM (its GEMM is DeepGEMM's).
    sites = make_sites(hidden_size, broadcast=deep_gemm)
    counts = mhc_warmup_token_counts(MAX_TOKENS, [1, 2, 4, *range(8, 513, 8)])
    with deep_gemm_mode(deep_gemm):
        warmed, total = warmup.nvidia_mhc_warmup(
            sites, counts, use_deep_gemm=deep_gemm, num_sms=num_sms, num_threads=8
        )
        assert warmed == total > 0
        with count_compiles() as misses:
            for num_tokens in sample_token_counts():
                run_and_check(sites, num_tokens)
            after_warmup = list(misses)
            # Positive control, same counter: a kernel dropped from memory is
            # seen when a call needs it again.
            tilelang_kernels.mhc_post_tilelang._kernel_cache.clear()
            run_and_check(sites, 17)
    assert after_warmup == [], f"compiled after warmup: {after_warmup}"
    assert "mhc_post_tilelang" in misses, "the compile counter saw no compile"
