"""Where ladder stages run: a local GPU or the CPU (`LocalDevice`), recorded measurements (`ReplayDevice`), a Ray
cluster (`ray_device.RayDevice`). `get_device(name)` turns a device name into one (the rule: `devices.resolve`)."""
from __future__ import annotations

from .local import LocalDevice, NoGPUError, cuda_gpu_count
from .replay import ReplayDevice
from .resolve import get_device, replay_counts, replays_dataset, resolve_name

__all__ = ["LocalDevice", "NoGPUError", "ReplayDevice", "cuda_gpu_count", "get_device", "replay_counts",
           "replays_dataset", "resolve_name"]
