"""GPU-seconds as a counted budget: what each ladder stage actually held a GPU for, workers included."""
from __future__ import annotations

import dataclasses
import threading
import time
from collections import defaultdict


@dataclasses.dataclass
class Budget:
    gpu_seconds: float | None = None  # None: unlimited
    wall_seconds: float | None = None
    spent: dict[str, float] = dataclasses.field(default_factory=lambda: defaultdict(float))
    evaluations: dict[str, int] = dataclasses.field(default_factory=lambda: defaultdict(int))
    started: float = dataclasses.field(default_factory=time.monotonic)
    # a search over a multi-GPU device charges from several threads at once
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def gpu_spent(self) -> float:
        with self._lock:
            return sum(self.spent.values())

    def exhausted(self) -> str | None:
        """Why no more GPU work may start, or None."""
        if self.gpu_seconds is not None and self.gpu_spent >= self.gpu_seconds:
            return f"GPU budget spent ({self.gpu_spent:.1f} of {self.gpu_seconds:.1f} GPU-s)"
        if self.wall_seconds is not None and time.monotonic() - self.started >= self.wall_seconds:
            return f"wall-clock limit reached ({self.wall_seconds:.0f} s)"
        return None

    def charge(self, stage: str, gpu_s: float) -> None:
        with self._lock:
            self.spent[stage] += gpu_s
            self.evaluations[stage] += 1

    def carry_over(self, gpu_s: float) -> None:
        """What a resumed search had already spent (its last event's GPU-seconds), counted as stage "resumed"."""
        with self._lock:
            self.spent["resumed"] = gpu_s

    def report(self) -> dict[str, object]:
        return {"gpu_seconds_limit": self.gpu_seconds, "gpu_seconds_spent": self.gpu_spent,
                "by_stage": {k: {"gpu_s": v, "runs": self.evaluations[k]} for k, v in self.spent.items()}}
