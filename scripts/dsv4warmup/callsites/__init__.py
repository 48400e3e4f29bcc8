"""Call-site drivers: the exact kernel keys the real vLLM call sites and the warmups produce."""

import os


def enable_triton_without_gpu() -> None:
    """vLLM replaces Triton by a placeholder when no driver is active unless
    ``CUDA_VISIBLE_DEVICES`` is empty; runs before any driver imports vLLM."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    if not has_cuda:
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


enable_triton_without_gpu()
