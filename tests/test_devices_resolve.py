"""The one device-name rule (workbench.devices.resolve): "auto" is the GPU else replay, "local" the GPU else the CPU,
and every caller (get_device, the CLI, the notebooks' open_device) reads names the same way."""
from __future__ import annotations

import pytest

from workbench.devices import LocalDevice, ReplayDevice, get_device, replay_counts, replays_dataset, resolve


@pytest.mark.parametrize("gpus, auto, local", [(0, "replay", "cpu"), (1, "cuda", "cuda")])
def test_auto_and_local_name_one_thing_each(monkeypatch, gpus, auto, local):
    monkeypatch.setattr(resolve, "cuda_gpu_count", lambda: gpus)
    assert resolve.resolve_name("auto") == auto and resolve.resolve_name("local") == local
    assert [resolve.resolve_name(n) for n in ("cuda:1", "cpu", "replay", "ray:host:1")] == \
        ["cuda:1", "cpu", "replay", "ray:host:1"]


def test_devices_by_name_without_a_gpu(monkeypatch):
    monkeypatch.setattr(resolve, "cuda_gpu_count", lambda: 0)
    auto = get_device("auto")
    assert isinstance(auto, ReplayDevice) and replays_dataset(auto)
    assert replay_counts(auto) == {"of": "cuda:NVIDIA H200", "answered": 0, "not_measured": 0}
    auto.close()
    local = get_device("local")
    assert isinstance(local, LocalDevice) and local.kind == "cpu" and replay_counts(local) is None
    assert not replays_dataset(local)
    local.close()
    with pytest.raises(ValueError, match="expected auto, local, cuda, cuda:N, cpu, replay, ray or ray:ADDRESS"):
        get_device("gpu")


def test_replay_of_store_files_alone_is_not_the_dataset(tmp_path):
    from workbench.store import Store

    Store(tmp_path / "s.sqlite").close()
    device = ReplayDevice.from_paths([tmp_path / "s.sqlite"])
    assert not replays_dataset(device) and replay_counts(device)["answered"] == 0
