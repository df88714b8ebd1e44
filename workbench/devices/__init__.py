"""Where ladder stages run: a local CUDA GPU, or the CPU (Triton interpreter; correctness only, never timing)."""
from __future__ import annotations

from .local import LocalDevice, NoGPUError, cuda_gpu_count


def get_device(spec: str = "auto", **kw) -> LocalDevice:
    """'auto' (a GPU when one is visible, else the CPU), 'cuda', 'cuda:N' or 'cpu'."""
    if spec == "auto":
        return LocalDevice("cuda", **kw) if cuda_gpu_count() > 0 else LocalDevice("cpu", **kw)
    if spec.startswith("cuda"):
        index = int(spec.split(":")[1]) if ":" in spec else 0
        return LocalDevice("cuda", gpu_index=index, **kw)
    if spec == "cpu":
        return LocalDevice("cpu", **kw)
    raise ValueError(f"unknown device '{spec}' (expected auto, cuda, cuda:N or cpu)")


__all__ = ["LocalDevice", "NoGPUError", "cuda_gpu_count", "get_device"]
