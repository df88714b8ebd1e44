"""The one rule that turns a device name into a device, used by the command line, the notebooks and the library.

    auto            the GPU when one is visible, else replay of the recorded NVIDIA H200 measurements: a search
                    then walks real numbers on any machine (the default of `workbench search` and the notebooks)
    local           the GPU when one is visible, else the CPU (Triton's interpreter: correctness only, timing
                    refused): a real evaluation on this machine (the default of `workbench eval`, `demo`, `profile`)
    cuda, cuda:N    a GPU of this machine (NoGPUError without one)
    cpu             the CPU
    replay          the recorded measurements on any machine: the shipped dataset plus any extra store files
    ray, ray:ADDR   a Ray cluster's GPUs, else its CPUs (the address defaults to $WORKBENCH_RAY_ADDRESS or
                    $RAY_ADDRESS, else a local cluster is started)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..core.contracts import Device, is_replay
from ..store.dataset import RecordedDataset
from . import ray_device  # RayDevice is looked up at call time (tests replace it); ray itself loads only when used
from .local import LocalDevice, cuda_gpu_count
from .replay import ReplayDevice

AUTO, LOCAL, REPLAY = "auto", "local", "replay"
NAMES = "auto, local, cuda, cuda:N, cpu, replay, ray or ray:ADDRESS"
REPLAY_FALLBACK = ("no GPU visible: replaying recorded NVIDIA H200 measurements (results/dataset). Candidates the "
                   "dataset never measured are answered 'not measured', never estimated.")


def resolve_name(spec: str) -> str:
    """The concrete device name `spec` stands for on this machine: "auto" and "local" become "cuda" when a GPU is
    visible, else "replay" and "cpu"; every other name is itself."""
    if spec not in (AUTO, LOCAL):
        return spec
    if cuda_gpu_count() > 0:
        return "cuda"
    return REPLAY if spec == AUTO else "cpu"


def get_device(spec: str, *, dataset: str | Path | None = None, replay_stores: Sequence[str | Path] = (),
               **kw: Any) -> Device:
    """The device `spec` names (see the module docstring). `dataset` (a directory, default the shipped one) and
    `replay_stores` (store files recorded on a GPU) are what a replay device answers from; `kw` go to the device's
    constructor."""
    name = resolve_name(spec)
    if name == REPLAY:
        return ReplayDevice.from_dataset(dataset, stores=list(replay_stores), **kw)
    if name == "ray" or name.startswith("ray:"):
        return ray_device.RayDevice(address=name[4:] or None, **{"kind": "local", **kw})
    if name == "cuda" or name.startswith("cuda:"):
        index = int(name.split(":")[1]) if ":" in name else 0
        return LocalDevice("cuda", gpu_index=index, **kw)
    if name == "cpu":
        return LocalDevice("cpu", **kw)
    raise ValueError(f"unknown device '{spec}' (expected {NAMES})")


def replays_dataset(device: Device) -> bool:
    """Whether `device` replays the shipped dataset (so a search should walk the dataset's measured points: anything
    else is answered "not measured")."""
    return is_replay(device) and any(isinstance(s, RecordedDataset) for s in device.stores)


def replay_counts(device: Device) -> dict[str, Any] | None:
    """What a replay device answered: the GPU it replays, recorded answers given, requests it had no recording for;
    None for a device that measures."""
    if not is_replay(device):
        return None
    return {"of": device.recorded_device, "answered": device.answered, "not_measured": device.not_measured}


__all__ = ["AUTO", "LOCAL", "NAMES", "REPLAY", "REPLAY_FALLBACK", "get_device", "replay_counts", "replays_dataset",
           "resolve_name"]
