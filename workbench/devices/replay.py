"""The replay device: answers GPU ladder stages from recorded real measurements, never from a model.

It reads evaluations recorded on a real GPU (`recorded_device`, e.g. "cuda:NVIDIA H200") from stores: the shipped
measurement dataset (`from_dataset`, results/dataset), or store files written by evaluations on a GPU (`from_paths`),
or both. A candidate is matched with the problem key by its source hash; the dataset resolves an offline-proposer
candidate by its identity instead (`workbench.kernels.identity`), so a cosmetic template edit since the measurement
still replays, and `drifted` counts the sources answered that way. A stage that was never measured for a candidate is
answered "refused: not measured", never with an invented number. Recorded GPU-seconds are charged as they were spent,
so budgets mean the same as on the GPU. A compile stage with no recording runs for real on the CPU (it needs no GPU).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from .. import HARNESS_VERSION
from ..core.candidate import content_hash
from ..core.records import REFUSED, STAGES, StageRecord
from ..core.target import H200
from ..problems.problem import Problem
from ..store import Store
from ..store.dataset import RecordedDataset
from .local import LocalDevice

NOT_MEASURED = ("not measured: no recorded {gpu} measurement of this candidate at this stage (replay answers only "
                "from real measurements)")


class ReplayDevice:
    kind = "replay"

    def __init__(self, stores: list[Any], recorded_device: str = H200.device, compile_device=None):
        if not stores:
            raise ValueError("the replay device needs at least one store of recorded measurements")
        self.stores = stores
        self.recorded_device = recorded_device
        self._compile_device = compile_device
        self.answered = 0
        self.not_measured = 0

    @classmethod
    def from_paths(cls, paths: list[str | Path], **kw) -> "ReplayDevice":
        missing = [str(p) for p in paths if not Path(p).exists()]
        if missing:
            raise FileNotFoundError(f"replay data not found: {', '.join(missing)}")
        return cls([Store(p) for p in paths], **kw)

    @classmethod
    def from_dataset(cls, path: str | Path | None = None, stores: list[str | Path] = (), problems=None,
                     **kw) -> "ReplayDevice":
        """Replay the shipped measurement dataset (plus any extra store files)."""
        missing = [str(p) for p in stores if not Path(p).exists()]
        if missing:
            raise FileNotFoundError(f"replay data not found: {', '.join(missing)}")
        return cls([RecordedDataset(path, problems=problems), *(Store(p) for p in stores)], **kw)

    slots = 1  # answers come from recordings: nothing to spread

    @property
    def name(self) -> str:
        return f"replay:{self.recorded_device}"

    @property
    def gpu_name(self) -> str:
        return self.recorded_device.split(":", 1)[-1]

    @property
    def timeouts(self) -> dict[str, float]:
        return {}

    @property
    def drifted(self) -> int:
        """Sources answered from a recording of the same candidate with another text (a cosmetic template edit)."""
        return sum(len(s.drift) for s in self.stores if isinstance(s, RecordedDataset))

    def provenance(self) -> dict[str, Any]:
        return {"device": self.name, "replay_of": self.recorded_device, "harness_version": HARNESS_VERSION}

    def close(self) -> None:
        if self._compile_device is not None:
            self._compile_device.close()

    def _recorded(self, problem: Problem, source_hash: str, stage: str):
        for store in self.stores:
            ev = store.find_evaluation(problem.key, source_hash, self.recorded_device, stage)
            if ev is not None:
                return ev
        return None

    def compile(self, problem: Problem, cand_path) -> StageRecord:
        h = content_hash(Path(cand_path).read_text())
        ev = self._recorded(problem, h, "compile")
        rec = ev.stage("compile") if ev is not None else None
        if rec is not None:
            return rec
        if self._compile_device is None:
            self._compile_device = LocalDevice("cpu")
        return self._compile_device.compile(problem, cand_path)

    def map_compile(self, problem: Problem, cand_paths: Sequence[str | Path], workers: int = 2) -> list[StageRecord]:
        return [self.compile(problem, p) for p in cand_paths]  # recorded answers: nothing to spread over workers

    def run_stages(self, problem: Problem, cand_path, stages: list[str],
                   options: dict[str, Any] | None = None) -> list[StageRecord]:
        h = content_hash(Path(cand_path).read_text())
        out: list[StageRecord] = []
        for stage in stages:
            ev = self._recorded(problem, h, stage)
            rec = ev.stage(stage) if ev is not None else None
            if rec is None:
                failed = ev.stages[-1] if ev is not None and ev.stages and not ev.stages[-1].ok else None
                if failed is not None and STAGES.index(failed.name) < STAGES.index(stage):
                    out.append(failed)  # it failed earlier on the GPU: that is the recorded answer
                else:
                    self.not_measured += 1
                    out.append(StageRecord(stage, REFUSED, NOT_MEASURED.format(gpu=self.gpu_name), retry=True))
                break
            self.answered += 1
            answer = StageRecord.from_dict({**rec.to_dict(), "data": {**rec.data, "replayed": True}})
            if stage == "correctness" and answer.ok:
                answer = rung_share(answer, options or {})
            out.append(answer)
            if not rec.ok:
                break
        return out


def rung_share(rec: StageRecord, options: dict[str, Any]) -> StageRecord:
    """A recorded correctness pass answering one rung of the ladder's correctness (`seed_start` .. `seed_stop` of
    `seeds`): the rung's share of the recorded seeds, charged that share of the recorded cost (the recording's cost
    taken as the same for every seed). The rungs of one candidate add up to the recording. A recorded failure is
    answered whole at the rung that asks first (the recording's cost, its verdict)."""
    n = int(options.get("seeds") or 0)
    start, stop = int(options.get("seed_start") or 0), options.get("seed_stop")
    stop = n if stop is None else int(stop)
    if n <= 0 or (start == 0 and stop >= n):
        return rec
    recorded = int(rec.data.get("seeds") or n)
    # this rung's seeds, as a count of the recorded ones: the cheap rung's own, the rest what is left
    cheap = min(stop, recorded) if start == 0 else min(start, recorded)
    ran = cheap if start == 0 else recorded - cheap
    share = ran / recorded if recorded else 0.0
    reason = (f"replayed: {ran} of the {recorded} recorded seeds ({'cheap rung' if start == 0 else 'the rest'}); "
              f"{rec.reason}")
    return dataclasses.replace(rec, reason=reason, cost_s=rec.cost_s * share, gpu_s=rec.gpu_s * share,
                               data={**rec.data, "seeds": ran, "recorded_seeds": recorded, "replay_share": share})
