"""Legacy call-site drivers, frozen: the exact kernel keys the real call sites and
warmups of vLLM 0.25.1 and 0.26.0 produce (the releases before the JIT warmup
registry). Kept working for those pinned bases; no new work. Registry-era
releases (0.33.0 on) are driven by :mod:`dsv4warmup.registry`; which one serves
a tree is decided in :mod:`dsv4warmup.generation`.

Importing this package also lets vLLM keep Triton on a CPU-only machine
(:func:`enable_triton_without_gpu`), which is why CPU entry points import it
first."""

import os


def enable_triton_without_gpu() -> None:
    """vLLM replaces Triton by a placeholder when no driver is active unless
    ``CUDA_VISIBLE_DEVICES`` is empty; runs before any driver imports vLLM.

    Looks for the NVIDIA device node rather than asking torch: any CUDA
    driver call here (``torch.cuda.is_available()`` included) would poison
    every fork of this process (pytest-forked GPU tests) with "Cannot
    re-initialize CUDA in forked subprocess"."""
    if not os.path.exists("/dev/nvidiactl"):
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


enable_triton_without_gpu()


def max_num_blocks_per_req(spec: object, vllm_config: object, max_len: int) -> int:
    """Block-table width of a KV-cache group, as the model runner sizes it:
    the spec's own method (0.26.0), else 0.25.1's runner formula (no context
    parallelism): ceil(max_len / block_size)."""
    method = getattr(spec, "max_num_blocks_per_req", None)
    if method is not None:
        return int(method(vllm_config, max_len))
    block_size = int(spec.block_size)  # type: ignore[attr-defined]
    return -(-max_len // block_size)
