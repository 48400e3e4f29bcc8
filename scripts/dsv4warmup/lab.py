"""Pack vLLM source trees for the GPU lab machine (see the gpu-lab recipe):
the ``.py`` files of ``vllm/``, ``PKG-INFO`` and the upstream tests we run."""

from __future__ import annotations

import tarfile
from pathlib import Path

UPSTREAM_TESTS = (
    "tests/kernels/test_mhc_kernels.py",
    "tests/v1/spec_decode/test_eagle_step_kernel.py",
    # 0.33.0 moved the mHC tests and added the JIT registry's own
    "tests/kernels/mhc/test_mhc_kernels.py",
    "tests/kernels/mhc/test_mhc_jit_warmup.py",
    "tests/kernels/mhc/test_mhc_tilelang_jit.py",
    "tests/model_executor/test_jit_warmup.py",
    "tests/model_executor/test_triton_dispatcher.py",
    "tests/model_executor/test_jit_warmup_triton_launcher.py",
    # 0.34.0 removed the V1 EAGLE step kernel; the V2 runner's EAGLE helpers' test
    "tests/v1/worker/test_gpu_spec_decode_eagle_utils.py",
    # what the tests 0.34.0's series extends import beside vllm/
    "tests/__init__.py",
    "tests/utils.py",
    "tests/v1/__init__.py",
    "tests/v1/attention/utils.py",
    "tests/v1/worker/__init__.py",
    "tests/kernels/__init__.py",
    "tests/kernels/mhc/__init__.py",
    "tests/jit_monitor/__init__.py",
    "tests/jit_monitor/conftest.py",
    "tests/utils_/__init__.py",
)


def pack(tree: Path, out: Path, extra_tests: tuple[str, ...] = ()) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as tar:
        for p in sorted((tree / "vllm").rglob("*.py")):
            tar.add(p, arcname=str(p.relative_to(tree)))
        tar.add(tree / "PKG-INFO", arcname="PKG-INFO")
        for rel in (*UPSTREAM_TESTS, *extra_tests):
            if (tree / rel).is_file():
                tar.add(tree / rel, arcname=rel)
    return out
