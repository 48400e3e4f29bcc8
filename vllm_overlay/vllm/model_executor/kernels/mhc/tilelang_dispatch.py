# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Compile-key selection for the mHC TileLang kernels.

Every ``@tilelang.jit`` factory in ``tilelang_kernels`` treats ``num_tokens``
as dynamic; what makes it compile is a new combination of the static
(non-tensor) arguments it is called with. The wrappers in ``tilelang.py``
choose those arguments from the token count (split-K factor, small-FMA path,
pre-norm GEMM variant), the device's SM count and DeepGEMM availability.

The choice lives here as pure functions of plain parameters so that the
wrappers launch exactly the key these functions return, and the startup
warmup can enumerate the keys a serving configuration will select without
touching a GPU. Nothing here imports TileLang or queries a device.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from vllm.utils.math_utils import cdiv

# DeepGEMM's tf32_hc_prenorm_gemm tiles; its split-K factor follows from them.
DEEP_GEMM_HC_BLOCK_K = 64
DEEP_GEMM_HC_BLOCK_M = 64
# mhc_fused_post_pre_tilelang fuses post + pre-norm GEMM up to this many tokens.
SMALL_FMA_MAX_TOKENS = 16

StaticArg = tuple[str, int | float]


@dataclass(frozen=True)
class TileLangKernelKey:
    """One compile key of an mHC ``@tilelang.jit`` factory.

    ``static_args`` are the non-tensor arguments, by name and sorted, exactly
    as the factory receives them; TileLang's in-memory kernel cache keys on
    the same (name, value) pairs.
    """

    kernel: str
    static_args: tuple[StaticArg, ...]

    @classmethod
    def of(cls, kernel: str, **static_args: int | float) -> "TileLangKernelKey":
        return cls(kernel, tuple(sorted(static_args.items())))

    @property
    def kwargs(self) -> dict[str, int | float]:
        return dict(self.static_args)


@dataclass(frozen=True)
class MhcPreParams:
    """Static parameters of one mHC pre block (also the pre half of the
    fused post/pre block)."""

    hidden_size: int
    hc_mult: int
    rms_eps: float
    hc_pre_eps: float
    hc_sinkhorn_eps: float
    hc_post_mult_value: float
    sinkhorn_repeat: int
    # Epsilon of the RMSNorm fused into the layer-input write; None when the
    # caller passes no norm weight.
    norm_eps: float | None = None

    @property
    def hc_mult3(self) -> int:
        return self.hc_mult * (2 + self.hc_mult)


@dataclass(frozen=True)
class MhcPostParams:
    hidden_size: int
    hc_mult: int


@dataclass(frozen=True)
class HcHeadParams:
    hidden_size: int
    hc_mult: int
    rms_eps: float
    hc_eps: float


def num_split_for_sms(block_k: int, k: int | None, grid_size: int, num_sms: int) -> int:
    """Split-K factor that fills ``num_sms`` SMs (``compute_num_split``)."""
    split_k = num_sms // grid_size
    if k is not None:
        # avoid split_k for small k
        num_block_k = cdiv(k, block_k)
        split_k = min(split_k, num_block_k // 4)
    return max(split_k, 1)


def deep_gemm_num_splits(num_tokens: int, k: int, num_sms: int) -> int:
    """Split-K factor of DeepGEMM's ``tf32_hc_prenorm_gemm`` for a K of ``k``."""
    return num_split_for_sms(
        DEEP_GEMM_HC_BLOCK_K, k, cdiv(num_tokens, DEEP_GEMM_HC_BLOCK_M), num_sms
    )


def prenorm_gemm_key(
    num_tokens: int,
    hidden_size: int,
    hc_mult: int,
    n_out: int,
    tile_n: int = 12,
    n_thr: int = 512,
    n_splits: int = 1,
) -> TileLangKernelKey:
    """The TileLang pre-norm GEMM variant ``_tilelang_hc_prenorm_gemm`` runs."""
    use_default_config = tile_n == 12 and n_thr == 512
    common = dict(hidden_size=hidden_size, hc_mult=hc_mult, n_out=n_out)
    if n_splits == 1 and use_default_config and num_tokens >= 1024:
        return TileLangKernelKey.of(
            "hc_prenorm_gemm_block_m_tilelang",
            **common,
            n_thr=n_thr,
            tile_n=tile_n,
            block_m=2,
        )
    if (
        n_splits == 1
        and use_default_config
        and num_tokens < 128
        and (hc_mult * hidden_size) % 1024 == 0
    ):
        return TileLangKernelKey.of(
            "hc_prenorm_gemm_tilelang",
            **common,
            n_thr=1024,
            tile_n=4,
            n_splits=n_splits,
        )
    return TileLangKernelKey.of(
        "hc_prenorm_gemm_tilelang",
        **common,
        n_thr=n_thr,
        tile_n=tile_n,
        n_splits=n_splits,
    )


def _pre_fuse_args(params: MhcPreParams, n_splits: int) -> dict[str, int | float]:
    args: dict[str, int | float] = dict(
        hidden_size=params.hidden_size,
        rms_eps=params.rms_eps,
        hc_pre_eps=params.hc_pre_eps,
        hc_sinkhorn_eps=params.hc_sinkhorn_eps,
        hc_post_mult_value=params.hc_post_mult_value,
        sinkhorn_repeat=params.sinkhorn_repeat,
        n_splits=n_splits,
        hc_mult=params.hc_mult,
    )
    if params.norm_eps is not None:
        args["norm_eps"] = params.norm_eps
    return args


@lru_cache(maxsize=1024)
def pre_big_fuse_key(params: MhcPreParams, n_splits: int) -> TileLangKernelKey:
    """Everything of mHC pre after the GEMM, with or without fused RMSNorm."""
    kernel = (
        "mhc_pre_big_fuse_tilelang"
        if params.norm_eps is None
        else "mhc_pre_big_fuse_with_norm_tilelang"
    )
    return TileLangKernelKey.of(kernel, **_pre_fuse_args(params, n_splits))


@dataclass(frozen=True)
class MhcPrePlan:
    """What one mHC pre call launches."""

    n_splits: int
    # TileLang pre-norm GEMM; None when DeepGEMM's tf32_hc_prenorm_gemm runs.
    gemm: TileLangKernelKey | None
    fuse: TileLangKernelKey

    @property
    def keys(self) -> tuple[TileLangKernelKey, ...]:
        return tuple(k for k in (self.gemm, self.fuse) if k is not None)


@dataclass(frozen=True)
class MhcFusedPostPrePlan:
    """What one fused mHC post + pre call launches."""

    n_splits: int
    # Post-mapping fused with the pre-norm GEMM by FMA (few tokens), else None.
    small_fma: TileLangKernelKey | None
    post: TileLangKernelKey | None
    # TileLang pre-norm GEMM; None with small_fma or when DeepGEMM runs it.
    gemm: TileLangKernelKey | None
    fuse: TileLangKernelKey

    @property
    def uses_deep_gemm(self) -> bool:
        return self.small_fma is None and self.gemm is None

    @property
    def keys(self) -> tuple[TileLangKernelKey, ...]:
        parts = (self.small_fma, self.post, self.gemm, self.fuse)
        return tuple(k for k in parts if k is not None)


@lru_cache(maxsize=256)
def mhc_post_key(params: MhcPostParams) -> TileLangKernelKey:
    return TileLangKernelKey.of(
        "mhc_post_tilelang", hc=params.hc_mult, hidden=params.hidden_size
    )


@lru_cache(maxsize=256)
def hc_head_key(params: HcHeadParams) -> TileLangKernelKey:
    return TileLangKernelKey.of(
        "hc_head_fuse_tilelang",
        hidden_size=params.hidden_size,
        rms_eps=params.rms_eps,
        hc_eps=params.hc_eps,
        hc_mult=params.hc_mult,
    )


def _mhc_pre_plan(
    num_tokens: int, params: MhcPreParams, use_deep_gemm: bool, num_sms: int
) -> MhcPrePlan:
    hc_hidden_size = params.hc_mult * params.hidden_size
    if use_deep_gemm:
        n_splits = deep_gemm_num_splits(num_tokens, hc_hidden_size, num_sms)
        gemm = None
    else:
        n_splits = 1
        gemm = prenorm_gemm_key(
            num_tokens, params.hidden_size, params.hc_mult, params.hc_mult3
        )
    return MhcPrePlan(n_splits, gemm, pre_big_fuse_key(params, n_splits))


def _mhc_pre_broadcast_plan(
    num_tokens: int, params: MhcPreParams, num_sms: int
) -> MhcPrePlan:
    # The GEMM runs on the (T, H) residual against the hc-summed fn, so K is
    # hidden_size; it is always DeepGEMM's.
    n_splits = deep_gemm_num_splits(num_tokens, params.hidden_size, num_sms)
    fuse = TileLangKernelKey.of(
        "mhc_pre_big_fuse_broadcast_with_norm_tilelang",
        **_pre_fuse_args(params, n_splits),
    )
    return MhcPrePlan(n_splits, None, fuse)


def _mhc_fused_post_pre_plan(
    num_tokens: int, params: MhcPreParams, use_deep_gemm: bool, num_sms: int
) -> MhcFusedPostPrePlan:
    hidden_size, hc_mult = params.hidden_size, params.hc_mult
    if num_tokens <= SMALL_FMA_MAX_TOKENS:
        # TODO(gnovack): investigate autotuning these heuristics
        tile_n = 2 if num_tokens < 8 else 3
        n_splits = 8 if (num_tokens < 8 and hidden_size <= 4096) else 4
        small_fma = TileLangKernelKey.of(
            "mhc_fused_tilelang",
            hc=hc_mult,
            hidden=hidden_size,
            n_out=params.hc_mult3,
            tile_n=tile_n,
            n_splits=n_splits,
        )
        fuse = pre_big_fuse_key(params, n_splits)
        return MhcFusedPostPrePlan(n_splits, small_fma, None, None, fuse)
    pre = _mhc_pre_plan(num_tokens, params, use_deep_gemm, num_sms)
    post = mhc_post_key(MhcPostParams(hidden_size, hc_mult))
    return MhcFusedPostPrePlan(pre.n_splits, None, post, pre.gemm, pre.fuse)


# The wrappers call these once per layer and step; cache the answers.
mhc_pre_plan = lru_cache(maxsize=4096)(_mhc_pre_plan)
mhc_pre_broadcast_plan = lru_cache(maxsize=4096)(_mhc_pre_broadcast_plan)
mhc_fused_post_pre_plan = lru_cache(maxsize=4096)(_mhc_fused_post_pre_plan)


# --------------------------------------------------------------------------
# Warmup enumeration
# --------------------------------------------------------------------------

MhcEntry = Literal["pre", "pre_broadcast", "fused_post_pre", "post", "hc_head"]


@dataclass(frozen=True)
class MhcCallSite:
    """One way a model calls an mHC wrapper: the entry point and the static
    parameters it passes."""

    entry: MhcEntry
    params: MhcPreParams | MhcPostParams | HcHeadParams


@dataclass(frozen=True)
class MhcWarmupLaunch:
    """Call ``site``'s wrapper with ``num_tokens`` tokens to compile ``keys``."""

    site: MhcCallSite
    num_tokens: int
    keys: tuple[TileLangKernelKey, ...]


def mhc_site_keys(
    site: MhcCallSite, num_tokens: int, *, use_deep_gemm: bool, num_sms: int
) -> tuple[TileLangKernelKey, ...]:
    """Keys one call of ``site`` with ``num_tokens`` tokens launches."""
    params = site.params
    if site.entry == "post":
        assert isinstance(params, MhcPostParams)
        return (mhc_post_key(params),)
    if site.entry == "hc_head":
        assert isinstance(params, HcHeadParams)
        return (hc_head_key(params),)
    assert isinstance(params, MhcPreParams)
    if site.entry == "pre":
        return _mhc_pre_plan(num_tokens, params, use_deep_gemm, num_sms).keys
    if site.entry == "pre_broadcast":
        # Its GEMM is DeepGEMM's only: without DeepGEMM the call fails
        # before any TileLang kernel runs.
        if not use_deep_gemm:
            return ()
        return _mhc_pre_broadcast_plan(num_tokens, params, num_sms).keys
    assert site.entry == "fused_post_pre", site.entry
    return _mhc_fused_post_pre_plan(num_tokens, params, use_deep_gemm, num_sms).keys


def mhc_warmup_token_counts(
    max_num_batched_tokens: int, cudagraph_capture_sizes: Iterable[int] = ()
) -> list[int]:
    """Every token count a forward pass can see."""
    counts = set(range(1, max_num_batched_tokens + 1))
    counts.update(size for size in cudagraph_capture_sizes if size >= 1)
    return sorted(counts)


def mhc_warmup_launches(
    sites: Iterable[MhcCallSite],
    token_counts: Sequence[int],
    *,
    use_deep_gemm: bool,
    num_sms: int,
) -> list[MhcWarmupLaunch]:
    """The fewest wrapper calls that launch every key ``sites`` select over
    ``token_counts``: per site, the smallest token count that first selects a
    key not yet covered. Each key appears in exactly one launch's ``keys``."""
    counts = sorted(set(token_counts))
    covered: set[TileLangKernelKey] = set()
    launches: list[MhcWarmupLaunch] = []
    for site in dict.fromkeys(sites):
        for num_tokens in counts:
            keys = mhc_site_keys(
                site, num_tokens, use_deep_gemm=use_deep_gemm, num_sms=num_sms
            )
            if covered.issuperset(keys):
                continue
            new = tuple(k for k in dict.fromkeys(keys) if k not in covered)
            if new:
                covered.update(new)
                launches.append(MhcWarmupLaunch(site, num_tokens, new))
    return launches
