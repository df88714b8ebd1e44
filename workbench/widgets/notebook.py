"""Small helpers the notebooks call so that they hold no logic of their own."""
from __future__ import annotations

from typing import Any

CPU_NOTE = ("This machine has no GPU: the device is the CPU (Triton's interpreter), which refuses the timing stages. "
            "The search records correctness only: nodes are 'refused' (correct, not timed) or 'failed', there are no "
            "speedups, so the tree is pale/grey and the budget curve empty.")


def open_device(device: str = "auto", replay_data: str | list[str] = ""):
    """The device a notebook's parameters name: a replay device over recorded measurements when `replay_data` (a
    store file, or several separated by commas) is given, else `workbench.devices.get_device(device)`."""
    if replay_data:
        from ..devices.replay import ReplayDevice

        paths = replay_data.split(",") if isinstance(replay_data, str) else list(replay_data)
        return ReplayDevice.from_paths([p.strip() for p in paths if p.strip()])
    from ..devices import get_device

    return get_device(device)


def device_note(device: Any) -> str:
    """One line on what the device can measure (the CPU note where timing is refused)."""
    if getattr(device, "kind", None) == "cpu":
        return CPU_NOTE
    return f"device: {device.name} (timing stages run)"


def show(search, interactive: bool = True, **kw):
    """A `SearchWidget` when `interactive` (JupyterLab), else `display_static` (papermill and other headless runs)."""
    from .search_widget import SearchWidget, display_static

    return SearchWidget(search, **kw) if interactive else display_static(search, **kw)
