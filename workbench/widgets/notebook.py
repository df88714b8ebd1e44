"""Small helpers the notebooks call so that they hold no logic of their own."""
from __future__ import annotations

from ..core.contracts import Device, is_replay
from ..devices import ReplayDevice, get_device, replays_dataset
from ..harness.budget import Budget
from ..search.search import make_search
from .search_widget import SearchWidget, display_static

CPU_NOTE = ("This machine has no GPU: the device is the CPU (Triton's interpreter), which refuses the timing stages. "
            "The search records correctness only: nodes are 'refused' (correct, not timed) or 'failed', there are no "
            "speedups, so the tree is pale/grey and the budget curve empty.")
REPLAY_NOTE = ("No GPU here: the device replays real measurements recorded on an {gpu} ({what}). Every speedup and "
               "GPU-second is one measured there; a candidate never measured is answered 'not measured', never "
               "estimated, so the search walks the measured part of the space.")


def open_device(device: str = "auto", replay_data: str | list[str] = "") -> Device:
    """The device a notebook's parameters name: `replay_data` (a store file, or several separated by commas) replays
    those measurements alone; else `device` by the one rule of `workbench.devices.resolve` ("auto": the GPU when one
    is visible, else replay of the shipped H200 dataset)."""
    if replay_data:
        paths = replay_data.split(",") if isinstance(replay_data, str) else list(replay_data)
        return ReplayDevice.from_paths([p.strip() for p in paths if p.strip()])
    return get_device(device)


def device_note(device: Device) -> str:
    """One line on what the device can measure (the CPU note where timing is refused, the replay note)."""
    if device.kind == "cpu":
        return CPU_NOTE
    if is_replay(device):
        what = "the shipped dataset, results/dataset" if replays_dataset(device) else "the given store files"
        return REPLAY_NOTE.format(gpu=device.gpu_name, what=what)
    return f"device: {device.name} (timing stages run)"


def open_search(problem, device, strategy: str = "greedy", seed: int = 0, budget_gpu_s: float = 0.0, **kw):
    """A `Search` for a notebook (`make_search`: on a replay of the shipped dataset the proposer walks its measured
    points); `budget_gpu_s` <= 0 means no GPU-seconds limit. `kw` go to `make_search`."""
    budget = Budget(budget_gpu_s if budget_gpu_s and budget_gpu_s > 0 else None)
    return make_search(problem, device, strategy=strategy, seed=seed, budget=budget, **kw)


def show(search, interactive: bool = True, **kw):
    """A `SearchWidget` when `interactive` (JupyterLab), else `display_static` (papermill and other headless runs)."""
    return SearchWidget(search, **kw) if interactive else display_static(search, **kw)
