"""Reference outputs kept across the candidates of one problem, inside a worker.

Every candidate of a problem is judged on the same seeded inputs against the same reference (built from the same
seed), so its outputs for a seed need computing once per worker, not once per candidate: with five seeds that is
five reference runs (and the two runs of the determinism probe) saved per candidate after the first.

What keeps this as strong as running the reference each time:
- only inputs the reference leaves unchanged are kept (a reference that mutates its inputs is re-run every time, so
  the mutation check still compares like with like);
- each kept output carries a checksum, verified before it is used and again after the candidate ran: a candidate that
  finds the kept tensors in memory and alters them fails as tampering (and the entry is dropped);
- the last seed of every evaluation is fresh (drawn from the OS, recorded in the verdict) and judged against a
  reference run on the spot, so a candidate that returns kept outputs, or was written against the fixed seeds,
  still meets inputs nobody computed before.
The cache is bounded in bytes (oldest entries go first) and dies with the worker. `WORKBENCH_REFERENCE_CACHE=0`
turns it off (every seed's reference runs, as before; the fresh last seed stays), for measuring what it saves.
"""
from __future__ import annotations

import collections
import dataclasses
import os
from typing import Any, Callable

import torch

from .execution import nbytes, tensors

CUDA_BUDGET_BYTES = 4 << 30  # at most this, and at most 5 % of the GPU's memory
CPU_BUDGET_BYTES = 512 << 20


@dataclasses.dataclass
class Entry:
    out: Any
    sizes: list[int]
    checksum: list[tuple[float, float]]
    rounding: Any = None
    rounded: bool = False

    def rounding_once(self, compute: Callable[[], Any]) -> Any:
        """The reference's own rounding (its wider re-run) for these inputs: computed the first time it is asked."""
        if not self.rounded:
            self.rounding, self.rounded = compute(), True
        return self.rounding


_entries: collections.OrderedDict[tuple, Entry] = collections.OrderedDict()
_probes: dict[tuple, str | None] = {}  # problem -> why its reference cannot judge (None: it can)
_held = 0


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def budget_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        return min(CUDA_BUDGET_BYTES, total // 20)
    return CPU_BUDGET_BYTES


def checksum(out: Any) -> list[tuple[float, float]]:
    """Two float64 sums per output tensor (of the values and of their squares): any in-place change moves them."""
    sums = []
    for t in tensors(out):
        x = torch.nan_to_num(t.detach().to(torch.float64) if not t.is_complex() else torch.view_as_real(t).double())
        sums.append((float(x.sum()), float((x * x).sum())))
    return sums


def intact(entry: Entry) -> bool:
    return checksum(entry.out) == entry.checksum


def enabled() -> bool:
    return os.environ.get("WORKBENCH_REFERENCE_CACHE", "1") != "0"


def get(key: tuple) -> Entry | None:
    """The kept entry, verified; an altered one is dropped (None), so the reference runs again."""
    entry = _entries.get(key) if enabled() else None
    if entry is None:
        return None
    if not intact(entry):
        drop(key)
        return None
    _entries.move_to_end(key)
    return entry


def put(key: tuple, out: Any, sizes: list[int], device: torch.device) -> Entry | None:
    """Keep `out` (already a private copy) under `key` if it fits the budget; the entry, or None."""
    global _held
    size = sum(nbytes(t) for t in tensors(out))
    budget = budget_bytes(device)
    if size > budget or not enabled():
        return None
    while _entries and _held + size > budget:
        drop(next(iter(_entries)))
    entry = Entry(out, sizes, checksum(out))
    _entries[key] = entry
    _held += size
    return entry


def drop(key: tuple) -> None:
    global _held
    entry = _entries.pop(key, None)
    if entry is not None:
        _held -= sum(nbytes(t) for t in tensors(entry.out))


def probe(key: tuple, compute: Callable[[], str | None]) -> str | None:
    """Why the problem's reference cannot judge (its determinism and degeneracy probe), computed once per problem."""
    if not enabled():
        return compute()
    if key not in _probes:
        _probes[key] = compute()
    return _probes[key]


def keep_only(problem_key: str) -> None:
    """Forget other problems' entries: a worker judges one problem at a time, and GPU memory is the candidate's."""
    for key in [k for k in _entries if k[0] != problem_key]:
        drop(key)
    for key in [k for k in _probes if k[0] != problem_key]:
        del _probes[key]


def clear() -> None:
    global _held
    _entries.clear()
    _probes.clear()
    _held = 0
