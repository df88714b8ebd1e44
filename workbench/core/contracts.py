"""The contracts between layers, written down: what a device is, and what answers like a store.

`Device` is where ladder stages run: `LocalDevice` (a GPU or the CPU), `ReplayDevice` (recorded H200 answers),
`RayDevice` (a cluster's GPUs) and the tests' recording double all have this shape, and the ladder, the search and the
widgets rely on nothing else. `EvaluationSource` is anything that answers "was this candidate evaluated at this
fidelity on this device?" like the SQLite `Store` does; the shipped dataset answers it too, so the replay device reads
either.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

from .records import Evaluation, StageRecord

if TYPE_CHECKING:  # the core imports no layer above it at run time
    from ..problems.problem import Problem


@runtime_checkable
class Device(Protocol):
    kind: str  # "cuda" measures; "cpu" checks correctness in the interpreter and refuses timing; "replay" answers
    # from recordings and never measures
    timeouts: dict[str, float]  # seconds per stage name
    slots: int  # evaluations it runs at once (a Ray device's GPU actors; 1 for one GPU, the CPU or a replay)

    @property
    def name(self) -> str:
        """The device string evaluations are stored under, e.g. "cuda:NVIDIA H200", "cpu"."""
        ...

    @property
    def gpu_name(self) -> str | None:
        """The GPU's name (its measured ceilings give the roofline floor); None for the CPU."""
        ...

    def provenance(self) -> dict[str, Any]:
        """Device name, driver and library versions, harness version: stored with every evaluation."""
        ...

    def compile(self, problem: Problem, cand_path: str | Path) -> StageRecord:
        """The compile stage for one candidate file (sm_90, on a CPU worker where the device compiles for real)."""
        ...

    def map_compile(self, problem: Problem, cand_paths: Sequence[str | Path], workers: int = 2) -> list[StageRecord]:
        """The compile stage for many candidates, concurrently where the device can; records in input order."""
        ...

    def run_stages(self, problem: Problem, cand_path: str | Path, stages: list[str],
                   options: dict[str, Any] | None = None) -> list[StageRecord]:
        """Run device stages in order, stopping at the first that does not pass."""
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class EvaluationSource(Protocol):
    def find_evaluation(self, problem_key: str, candidate_hash: str, device: str, fidelity: str, *,
                        harness_version: str | None = None) -> Evaluation | None:
        """The evaluation of this candidate on this device that reached `fidelity`, or None."""
        ...


def is_replay(device: Device) -> bool:
    """A replay device answers from recordings: nothing it returns was measured in this run."""
    return device.kind == "replay"
