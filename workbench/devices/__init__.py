"""Where ladder stages run: a local CUDA GPU, or the CPU (Triton interpreter; correctness only, never timing)."""
from __future__ import annotations

from .local import LocalDevice, NoGPUError, cuda_gpu_count


def get_device(spec: str = "auto", **kw):
    """'auto' (a GPU when one is visible, else the CPU), 'cuda', 'cuda:N', 'cpu', or 'ray' / 'ray:ADDRESS' (a Ray
    cluster's GPUs, or its CPUs when it has none; the address defaults to $WORKBENCH_RAY_ADDRESS or $RAY_ADDRESS,
    else a local cluster is started)."""
    if spec == "ray" or spec.startswith("ray:"):
        from .ray_device import RayDevice  # ray is an optional dependency: imported only when asked for

        return RayDevice(address=spec[4:] or None, **{"kind": "auto", **kw})
    if spec == "auto":
        return LocalDevice("cuda", **kw) if cuda_gpu_count() > 0 else LocalDevice("cpu", **kw)
    if spec.startswith("cuda"):
        index = int(spec.split(":")[1]) if ":" in spec else 0
        return LocalDevice("cuda", gpu_index=index, **kw)
    if spec == "cpu":
        return LocalDevice("cpu", **kw)
    raise ValueError(f"unknown device '{spec}' (expected auto, cuda, cuda:N, cpu, ray or ray:ADDRESS)")


__all__ = ["LocalDevice", "NoGPUError", "cuda_gpu_count", "get_device"]
