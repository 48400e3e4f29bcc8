"""Block-wide reductions in the C128A top-k metadata kernel's sm90 SASS, on CPU.

    python -m dsv4warmup.registry.c128a_sass [--tree NAME=DIR ...]

Compiles ``BuildC128ATopkMetadataKernel.kernel`` of each 0.33.0 tree (default:
the generated pristine and patched trees), in the variant a real launch makes,
for sm90 with the Triton that imports
(0.33.0's toolchain: ``dsv4warmup.toolchains.extra_python_path('0.33.0')`` on
PYTHONPATH, with the tree after it) and prints its instruction count and the
instructions a block-wide ``tl.sum`` needs: barriers, shared-memory stores and
loads, warp shuffles. 0.33.0's 0001 computes the length without that sum;
the GPU measured the effect, this shows where it comes from.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

KERNEL = Path("vllm/models/deepseek_v4/sparse_mla.py")
# Instruction classes of a cross-warp reduction, and the global loads/stores.
CLASSES = {
    "BAR": r"\bBAR\b",
    "STS": r"\bSTS\b",
    "LDS": r"\bLDS\b",
    "SHFL": r"\bSHFL\b",
    "LDG": r"\bLDG\b",
    "STG": r"\bSTG\b",
}


def sass_of(tree: Path) -> str:
    """The kernel of ``tree`` as nvdisasm prints it, in the variant a real
    launch compiles: ``build_c128a_topk_metadata`` on a 64-decode + 64-prefill
    batch (``c128a_guard_check.make_batch``, on CPU), built for sm90 by
    ``triton_keys.compile_launches_for_sm90`` instead of run."""
    import triton

    from dsv4warmup import triton_keys
    from dsv4warmup.gpu import c128a_guard_check as check

    module = check.load_module(tree / KERNEL, f"c128a_sass_{abs(hash(str(tree)))}")
    batch = check.make_batch(65536, 64, 64, device="cpu")
    with triton_keys.compile_launches_for_sm90() as built:
        check.launch(module, batch, patched=hasattr(module, "_is_safe"))
    ((_, compiled),) = built
    nvdisasm = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        return subprocess.run(
            [str(nvdisasm), "-c", str(cubin)], check=True, capture_output=True, text=True
        ).stdout


def counts(sass: str) -> dict[str, int]:
    """Instructions in all, and per class of ``CLASSES``."""
    lines = [line for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", line)]
    out = {"instructions": len(lines)}
    out.update({k: sum(1 for line in lines if re.search(v, line)) for k, v in CLASSES.items()})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], help="NAME=DIR (repeatable)")
    args = parser.parse_args()
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    from dsv4warmup.registry import platform

    platform.install(platform.H200)  # before vLLM is imported
    if args.tree:
        trees = dict(t.split("=", 1) for t in args.tree)
    else:
        from dsv4warmup import trees as generated

        trees = {
            "pristine": str(generated.pristine_tree("0.33.0")),
            "patched": str(generated.patched_tree("0.33.0")),
        }
    import triton

    print(f"triton {triton.__version__}, sm90")
    for name, tree in trees.items():
        print(name, counts(sass_of(Path(tree))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
