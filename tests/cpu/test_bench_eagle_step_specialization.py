"""scripts/bench/bench_eagle_step_specialization.py's harness on CPU, under the
Triton interpreter (pristine and patched 0.33.0 trees, Triton 3.8.0).

The benchmark's timings need a GPU; what it compares does not. Here its
launcher drives both trees' ``eagle_step_update_slot_mapping_and_metadata``
on the benchmark's own inputs: the outputs must agree (0004 and the
variants the benchmark times change no result), the comparison must catch a launcher that writes something else,
and the patched-tree check must tell the two kernels apart.

The pytest process imports a 0.26.0 tree (tests/conftest.py), so this module
re-runs itself in a subprocess that imports the patched 0.33.0 tree.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import run_interpreted, v033_interpreted_env

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1" and os.environ.get("DSV4_V033_INTERPRET")
REPO = Path(__file__).resolve().parents[2]


if not INTERPRETED:

    def test_under_triton_interpreter() -> None:
        from dsv4warmup import trees
        from dsv4warmup.paths import PATCHES

        if not (PATCHES / "v0.33.0" / "series").exists():
            pytest.skip("patches/v0.33.0 has no series yet")
        patched = trees.patched_tree("0.33.0")
        env = {
            **v033_interpreted_env(patched),
            "DSV4_V033_PRISTINE_TREE": str(trees.pristine_tree("0.33.0")),
        }
        proc = run_interpreted(__file__, env)
        assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-2000:]

else:
    import importlib.util
    import tempfile
    from types import ModuleType, SimpleNamespace

    from dsv4warmup.registry import platform

    platform.install(platform.H200)  # before vLLM is imported

    def _bench() -> ModuleType:
        path = REPO / "scripts" / "bench" / "bench_eagle_step_specialization.py"
        spec = importlib.util.spec_from_file_location("bench_eagle_step", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    bench = _bench()
    PRISTINE = bench.load_pristine(Path(os.environ["DSV4_V033_PRISTINE_TREE"]))
    PATCHED = bench.load_patched()
    VARIANTS = {
        name: bench.load_variant(PATCHED, name, Path(tempfile.mkdtemp())) for name in bench.VARIANTS
    }

    def test_the_patched_check_tells_the_trees_apart(monkeypatch: pytest.MonkeyPatch) -> None:
        import vllm.v1.spec_decode as package

        for name in ("max_model_len", "n_blocks_per_req"):
            assert bench.is_constexpr(PRISTINE.eagle_step_slot_mapping_metadata_kernel, name)
            assert not bench.is_constexpr(PATCHED.eagle_step_slot_mapping_metadata_kernel, name)
        # 0004 keeps block_size a constexpr; the variants make it a runtime scalar
        assert bench.is_constexpr(PATCHED.eagle_step_slot_mapping_metadata_kernel, "block_size")
        for variant in VARIANTS.values():
            assert not bench.is_constexpr(
                variant.eagle_step_slot_mapping_metadata_kernel, "block_size"
            )
        monkeypatch.setattr(package, "utils", PRISTINE)
        with pytest.raises(AssertionError, match="not patched"):
            bench.load_patched()

    @pytest.mark.parametrize(
        "block_size,max_model_len,requests,padded",
        [(64, 4096, 5, 8), (16, 65536, 1, 1), (256, 100000, 13, 16), (64, 2048, 9, 9)],
    )
    def test_both_trees_agree_on_the_benchmark_inputs(
        block_size: int, max_model_len: int, requests: int, padded: int
    ) -> None:
        import torch

        inputs = bench.make_inputs(block_size, max_model_len, requests, seed=requests, device="cpu")
        assert bench.same_outputs(PRISTINE, PATCHED, inputs, padded)
        for variant in VARIANTS.values():
            assert bench.same_outputs(PRISTINE, variant, inputs, padded)
        launch = bench.launcher(PATCHED, inputs, padded)
        launch()
        seq_lens, positions, slots = launch.outputs
        # the launcher really ran: padding programs write -1, real ones a slot
        assert (slots[requests:] == -1).all()
        clamped = inputs["positions"] + 1 >= max_model_len
        assert (slots[:requests][~clamped] >= 0).all() and (slots[:requests][clamped] == -1).all()
        assert torch.equal(seq_lens, torch.where(clamped, 1, inputs["seq_lens"] + 1).int())
        assert torch.equal(positions, torch.where(clamped, 0, inputs["positions"] + 1))

    def test_the_comparison_catches_different_outputs() -> None:
        def writes_zeros(**kwargs: object) -> None:
            PATCHED.eagle_step_update_slot_mapping_and_metadata(**kwargs)
            kwargs["out_slot_mapping"].zero_()  # type: ignore[attr-defined]

        wrong = SimpleNamespace(eagle_step_update_slot_mapping_and_metadata=writes_zeros)
        inputs = bench.make_inputs(64, 4096, 5, seed=5, device="cpu")
        assert not bench.same_outputs(PRISTINE, wrong, inputs, 8)
