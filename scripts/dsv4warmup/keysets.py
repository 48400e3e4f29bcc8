"""Pristine vs patched: the same call sites launch the same binaries.

The series changes how launch arguments are computed (helpers shared by a
launch and its warmup, e.g. ``eagle_prepare_next_token_block_size`` or
``_combine_topk_swa_indices_kernel_args``), never *what* is launched, but for
the arguments a patch adds on purpose (:data:`INTENDED`). The warmup-vs-runtime
tests cannot see a wrong shared helper: both sides move with it. Here the
reference is the pristine tree of the same base: the call-site drivers
(``callsites/*.py``) drive only code both trees have (proposer methods,
metadata builders, attention forward, the model forward on meta tensors), once
in each tree's own interpreter, over :func:`sweeps`, and every kernel's key set
must be equal.

Keys are compared as sets of ``(name, value)`` pairs: a Triton key by
parameter name (so a parameter a patch adds can be left out, and shown not to
split keys), an mHC TileLang key by static argument plus the token count it
was launched at (the same factories at every sampled count).

``python -m dsv4warmup.keysets SWEEPS_JSON`` prints the keys of the importable
tree as JSON (``key_sets_of_tree`` runs it for a tree).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .serving import FLASH, PRO, ServingConfig

# A key as compared across trees: sorted (name, repr(value)) pairs.
NamedKey = tuple[tuple[str, str], ...]
# sweep id -> kernel -> keys
KeySets = dict[str, dict[str, set[NamedKey]]]

_MODELS = {"flash": FLASH, "pro": PRO}


@dataclass(frozen=True)
class Sweep:
    """One driver run: ``group``'s call sites over a configuration."""

    group: str  # spec_decode | sparse_mla | mhc
    name: str
    model: str = "flash"  # FLASH or PRO
    config: dict[str, Any] = field(default_factory=dict)  # ServingConfig changes
    options: dict[str, Any] = field(default_factory=dict)  # driver keywords
    # The call-site driver; default dsv4warmup.legacy.<group>. A base with
    # another layout names its own (same functions: runtime_keys, or for mhc
    # launched_keys_by_tokens + pristine_token_counts).
    driver: str = ""

    @property
    def id(self) -> str:
        return f"{self.group}/{self.name}"

    @property
    def driver_module(self) -> Any:
        import importlib

        return importlib.import_module(self.driver or f"dsv4warmup.legacy.{self.group}")

    def serving_config(self) -> ServingConfig:
        config = {k: tuple(v) if isinstance(v, list) else v for k, v in self.config.items()}
        return _MODELS[self.model].replace(**config)


@dataclass(frozen=True)
class Intended:
    """Parameters a patch adds to a kernel on purpose. They are left out of
    the comparison, and must not split keys (the patched tree launches no
    more binaries for them)."""

    kernel: str
    added_params: frozenset[str]
    why: str
    # Parameters a patch stops specializing on purpose (do_not_specialize):
    # left out on both sides; the patched tree may launch fewer binaries.
    unspecialized: frozenset[str] = frozenset()


# --- what each base is compared on -------------------------------------------


def _spec_decode_sweeps() -> list[Sweep]:
    """Every width 1..k+1 and request count up to max_num_seqs per config
    (the driver's own step sweep): MTP and EAGLE, both block sizes, block
    tables of one block and of odd widths, long drafts, 1M context, the
    unpadded drafter batch and M-RoPE drafters."""
    s = "spec_decode"
    short = {"max_model_len": 8192}
    return [
        Sweep(s, "mtp-k1", config={**short, "max_num_seqs": 7}),
        Sweep(s, "mtp-k3", config={**short, "num_speculative_tokens": 3, "max_num_seqs": 33}),
        Sweep(
            s,
            "eagle-k2-block16",
            config={
                **short,
                "speculative_method": "eagle",
                "num_speculative_tokens": 2,
                "max_num_seqs": 17,
                "block_size": 16,
            },
        ),
        Sweep(
            s,
            "eagle-one-block",
            config={
                "speculative_method": "eagle",
                "num_speculative_tokens": 3,
                "max_num_seqs": 20,
                "max_model_len": 256,
            },
        ),
        Sweep(
            s,
            "eagle-odd-width-vocab",
            config={
                "speculative_method": "eagle",
                "num_speculative_tokens": 4,
                "max_num_seqs": 9,
                "max_model_len": 5000,
                "vocab_size": 32001,
            },
        ),
        Sweep(
            s,
            "eagle3-k15",
            config={
                **short,
                "speculative_method": "eagle3",
                "num_speculative_tokens": 15,
                "max_num_seqs": 5,
            },
        ),
        Sweep(
            s,
            "pro-k2-1m",
            model="pro",
            config={"max_model_len": 1 << 20, "max_num_seqs": 17, "num_speculative_tokens": 2},
        ),
        Sweep(
            s,
            "mtp-k3-unpadded",
            config={**short, "num_speculative_tokens": 3, "max_num_seqs": 7},
            options={"padded_drafter_batch": False},
        ),
        Sweep(
            s,
            "eagle-k3-mrope",
            config={
                **short,
                "speculative_method": "eagle",
                "num_speculative_tokens": 3,
                "max_num_seqs": 9,
            },
            options={"mrope": True},
        ),
    ]


def _sparse_mla_sweeps() -> list[Sweep]:
    """The realistic batch sweep plus the chunk-boundary batches."""
    s = "sparse_mla"
    return [
        Sweep(s, "flash-4k", config={"max_model_len": 4096}),
        Sweep(s, "pro-64k", model="pro"),
        Sweep(s, "pro-mtp-3", model="pro", config={"num_speculative_tokens": 3}),
        Sweep(s, "no-mtp", config={"num_speculative_tokens": 0, "speculative_method": None}),
        Sweep(s, "tiny-context", config={"max_num_seqs": 2, "max_model_len": 256}),
    ]


def _mhc_sweeps() -> list[Sweep]:
    """Target + MTP forward at every token count up to 130, both sides of
    every multiple of 64, the capture sizes and the maximum
    (``mhc.pristine_token_counts``: not the warmup's rule)."""
    return [
        Sweep(
            "mhc",
            f"{model}-{sms}sm-{'deepgemm' if deep_gemm else 'tilelang-gemm'}",
            model=model,
            config={"sm_count": sms, "max_num_batched_tokens": 8192},
            options={"deep_gemm": deep_gemm},
        )
        for model in ("flash", "pro")
        for sms in (132, 148)
        for deep_gemm in (True, False)
    ]


def _seed_layout_sweeps() -> list[Sweep]:
    return [*_spec_decode_sweeps(), *_sparse_mla_sweeps(), *_mhc_sweeps()]


def _registry_era_sweeps() -> list[Sweep]:
    """The registry-era drivers (``dsv4warmup.registry``: 0.33.0, 0.34.0), one
    configuration per group and runner: the report's deployment, with k=2 and
    a 100k context where the EAGLE helpers depend on them. Each driver sweeps
    its own batches (every request count / token count the configuration
    allows). A runner the tree lacks (V1 from 0.34.0 on) has no sweep there
    (:func:`key_sets_of_tree`)."""
    from .registry.lifecycle import RUNNERS

    out = []
    for runner in RUNNERS:
        out += [
            Sweep(
                "spec_decode",
                f"{runner}-mtp-k2-100k",
                config={"num_speculative_tokens": 2, "max_model_len": 100000, "max_num_seqs": 9},
                options={"runner": runner},
                driver="dsv4warmup.registry.spec_decode",
            ),
            Sweep(
                "sparse_mla",
                f"{runner}-flash",
                options={"runner": runner},
                driver="dsv4warmup.registry.sparse_mla",
            ),
        ]
    out.append(
        Sweep(
            "mhc",
            "v2-flash-2048",
            config={"max_num_batched_tokens": 2048},
            options={"runner": "v2"},
            driver="dsv4warmup.registry.mhc",
        )
    )
    return out


_V033_INTENDED = (
    Intended(
        "BuildC128ATopkMetadataKernel.kernel",
        frozenset({"block_table_rows", "readable_width", "num_kv_blocks"}),
        "0001 passes the block-table rows, the readable width and the KV block count "
        "for the _is_safe guards (do_not_specialize)",
    ),
    Intended(
        "eagle_step_slot_mapping_metadata_kernel",
        frozenset(),
        "0004 stops specializing the step kernel's int scalars but block_size: one variant "
        "per block size for every KV layout",
        unspecialized=frozenset(
            {"block_table_stride", "max_model_len", "n_blocks_per_req", "batch_size"}
        ),
    ),
)

# 0.34.0 has no V1 runner, hence no EAGLE step kernel (0004 is 0.33.0 only).
# The C128A guard's parameters as 0.33.0's 0001 names them: compare() calls an
# entry stale if the 0.34.0 series names them otherwise.
_V034_INTENDED = tuple(i for i in _V033_INTENDED if i.kernel.startswith("BuildC128A"))

_SEED_LAYOUT_INTENDED = (
    Intended(
        "_build_c128a_topk_metadata_kernel",
        frozenset({"block_table_rows", "block_table_width", "num_kv_blocks"}),
        "0001 passes the block-table shape and KV block count for the _is_safe "
        "guards (do_not_specialize)",
    ),
)

# Per base: the sweeps and the intended differences. 0.25.1 and 0.26.0 share
# the seed's layout (the drivers in callsites/ are written for it); a base
# with another layout registers its own.
_BASES: dict[str, tuple[Callable[[], list[Sweep]], tuple[Intended, ...]]] = {
    "0.25.1": (_seed_layout_sweeps, _SEED_LAYOUT_INTENDED),
    "0.26.0": (_seed_layout_sweeps, _SEED_LAYOUT_INTENDED),
    "0.33.0": (_registry_era_sweeps, _V033_INTENDED),
    "0.34.0": (_registry_era_sweeps, _V034_INTENDED),
}


class UnregisteredBase(LookupError):
    pass


def _registered(base: str) -> tuple[Callable[[], list[Sweep]], tuple[Intended, ...]]:
    if base not in _BASES:
        raise UnregisteredBase(
            f"vLLM {base} has a patch series but no pristine-vs-patched key sweeps: "
            "register its drivers in dsv4warmup/keysets.py (_BASES)"
        )
    return _BASES[base]


def sweeps(base: str) -> list[Sweep]:
    return _registered(base)[0]()


def intended(base: str) -> tuple[Intended, ...]:
    return _registered(base)[1]


# --- recording (inside one tree's interpreter) --------------------------------


def _triton_named(kernel: str, key: tuple[Any, ...]) -> NamedKey:
    from .triton_keys import param_names

    specialization, options = key
    names = param_names(kernel)
    assert len(names) == len(specialization), (kernel, names, specialization)
    pairs = [(name, repr(spec)) for name, spec in zip(names, specialization, strict=True)]
    return tuple(sorted([*pairs, ("<options>", repr(options))]))


def _triton_key_sets(sweep: Sweep) -> dict[str, set[NamedKey]]:
    keys = sweep.driver_module.runtime_keys(sweep.serving_config(), **sweep.options)
    return {k: {_triton_named(k, key) for key in v} for k, v in keys.items() if v}


def _mhc_key_sets(sweep: Sweep) -> dict[str, set[NamedKey]]:
    mhc = sweep.driver_module
    cfg = sweep.serving_config()
    counts = mhc.pristine_token_counts(cfg)
    launched = mhc.launched_keys_by_tokens(cfg, counts, sweep.options["deep_gemm"])
    out: dict[str, set[NamedKey]] = {}
    for num_tokens, by_kernel in launched.items():
        for kernel, keys in by_kernel.items():
            for static in keys:
                pairs = [(name, repr(value)) for name, value in static]
                out.setdefault(kernel, set()).add(
                    tuple(sorted([*pairs, ("<num_tokens>", str(num_tokens))]))
                )
    return out


def _static_key_sets(sweep: Sweep) -> dict[str, set[NamedKey]]:
    """TileLang keys a driver already returns as (name, value) pairs (0.33.0)."""
    keys = sweep.driver_module.runtime_keys(sweep.serving_config(), **sweep.options)
    return {
        k: {tuple(sorted((name, repr(value)) for name, value in key)) for key in v}
        for k, v in keys.items()
        if v
    }


def record(sweep_list: Iterable[Sweep]) -> KeySets:
    """Keys the importable tree's call sites launch, per sweep and kernel."""
    import dsv4warmup.legacy  # noqa: F401  (Triton without a GPU)

    out: KeySets = {}
    for sweep in sweep_list:
        if sweep.group != "mhc":
            record_one = _triton_key_sets
        elif hasattr(sweep.driver_module, "launched_keys_by_tokens"):
            record_one = _mhc_key_sets
        else:
            record_one = _static_key_sets
        out[sweep.id] = record_one(sweep)
    return out


def _to_json(sets: KeySets) -> dict[str, dict[str, list[list[list[str]]]]]:
    return {
        sid: {k: sorted([list(map(list, key)) for key in keys]) for k, keys in by_kernel.items()}
        for sid, by_kernel in sets.items()
    }


def _from_json(data: dict[str, dict[str, list[list[list[str]]]]]) -> KeySets:
    return {
        sid: {
            k: {tuple(tuple(pair) for pair in key) for key in keys} for k, keys in kernels.items()
        }  # type: ignore[misc]
        for sid, kernels in data.items()
    }


def key_sets_of_tree(tree: Path, sweep_list: list[Sweep]) -> KeySets:
    """:func:`record` in a fresh interpreter importing ``tree``; one per kernel
    group when the sweeps name their own drivers (0.33.0's stand in for
    different GPU-only packages, and vLLM caches what it finds installed).
    A sweep of a model runner ``tree`` does not have is left out."""
    from .registry.lifecycle import runners_in_tree
    from .trees import json_from_tree

    runners = runners_in_tree(tree)
    batches: dict[str, list[Sweep]] = {}
    for sweep in sweep_list:
        runner = sweep.options.get("runner")
        if runner is not None and runner not in runners:
            continue
        batches.setdefault(sweep.group if sweep.driver else "", []).append(sweep)
    out: KeySets = {}
    for batch in batches.values():
        arg = json.dumps([asdict(s) for s in batch])
        out.update(_from_json(json_from_tree(tree, "-m", "dsv4warmup.keysets", arg)))
    return out


# --- comparison ----------------------------------------------------------------


@dataclass
class Difference:
    sweep: str
    kernel: str
    only_pristine: list[NamedKey]
    only_patched: list[NamedKey]

    def __str__(self) -> str:
        def show(keys: list[NamedKey]) -> str:
            return "; ".join(str(dict(k)) for k in keys[:2]) + (" ..." if len(keys) > 2 else "")

        return (
            f"{self.sweep} {self.kernel}: {len(self.only_pristine)} key(s) only pristine "
            f"[{show(self.only_pristine)}], {len(self.only_patched)} only patched "
            f"[{show(self.only_patched)}]"
        )


def _without(keys: set[NamedKey], params: frozenset[str]) -> set[NamedKey]:
    return {tuple(p for p in key if p[0] not in params) for key in keys}


def compare(pristine: KeySets, patched: KeySets, allowed: Iterable[Intended]) -> list[str]:
    """Every difference between the two trees' key sets, as messages: keys
    launched by one tree only (after leaving out intended parameters),
    intended parameters that split keys or are no longer there, sweeps or
    kernels one side lacks."""
    allowed = list(allowed)
    added = {i.kernel: i.added_params for i in allowed}
    unspecialized = {i.kernel: i.unspecialized for i in allowed}
    problems: list[str] = []
    if pristine.keys() != patched.keys():
        problems.append(f"sweeps differ: {sorted(pristine.keys() ^ patched.keys())}")
    for sid in sorted(pristine.keys() & patched.keys()):
        for kernel in sorted(pristine[sid].keys() | patched[sid].keys()):
            old, new = pristine[sid].get(kernel, set()), patched[sid].get(kernel, set())
            loose = unspecialized.get(kernel, frozenset())
            if loose:
                old, new = _without(old, loose), _without(new, loose)
            params = added.get(kernel, frozenset())
            if params and new:
                present = {name for key in new for name, _ in key}
                if not params <= present:
                    problems.append(
                        f"{sid} {kernel}: intended parameters {sorted(params - present)} "
                        "are not in the patched keys (stale allow-list)"
                    )
                if len(_without(new, params)) != len(new):
                    problems.append(f"{sid} {kernel}: parameters {sorted(params)} split keys")
                new = _without(new, params)
            if old != new:
                problems.append(str(Difference(sid, kernel, sorted(old - new), sorted(new - old))))
    return problems


def main() -> None:  # subprocess entry: key sets of the importable tree as JSON
    sweep_list = [Sweep(**s) for s in json.loads(sys.argv[1])]
    sys.stdout.write("\n" + json.dumps(_to_json(record(sweep_list))) + "\n")


if __name__ == "__main__":
    main()
