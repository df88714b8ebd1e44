"""The shipped measurement dataset: real H200 ladder outcomes of offline-proposer candidates, as parquet.

Files (written by experiments/export_dataset.py, read here):
- `candidates.parquet`: one row per measured candidate: problem and candidate identity, the proposer's choice (which
  regenerates the source exactly), coverage, the outcome (`failed_stage`, `fail_reason`), compile-stage facts, the
  quick timing (candidate and eager ms, speedup, spread), `log2_speedup` vs the eager anchor, and the full evaluation
  as JSON (what the replay device answers from);
- `problems.parquet`: per problem, FLOPs, bytes, intensity and the roofline floor on the H200, with the run-to-run
  noise measured by repeating the default candidate's quick timing;
- `full.parquet`: per problem, the best candidate by quick time through full timing against eager and torch.compile;
- `provenance.json`: GPU, driver, versions, collection runs and the sampling parameters.

`RecordedDataset` answers `find_evaluation` like a `Store`, so the replay device reads it directly.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..core import paths
from ..core.records import STAGES, Evaluation, StageRecord

RECORDED_DEVICE = "cuda:NVIDIA H200"


class DatasetMissing(FileNotFoundError):
    pass


def dataset_dir(path: str | Path | None = None) -> Path:
    d = Path(path) if path is not None else paths.dataset_dir()
    if not (d / "candidates.parquet").exists():
        raise DatasetMissing(f"no measurement dataset at {d} (candidates.parquet missing): the shipped one lives in "
                             "results/dataset of a workbench checkout; experiments/export_dataset.py builds it from "
                             "collected rows")
    return d


@lru_cache(maxsize=4)
def _read(path: str, table: str):
    import pandas as pd

    return pd.read_parquet(Path(path) / f"{table}.parquet")


def load(table: str = "candidates", path: str | Path | None = None):
    """One table of the dataset as a DataFrame (a copy: callers may change it)."""
    return _read(str(dataset_dir(path)), table).copy()


def evaluation_from_summary(summary: dict[str, Any]) -> Evaluation:
    """Rebuild an `Evaluation` from `Evaluation.summary()` (how rows store it)."""
    return Evaluation(problem=summary["problem"], candidate_hash=summary["candidate"], device=summary["device"],
                      stages=[StageRecord.from_dict(s) for s in summary["stages"]],
                      provenance=summary.get("provenance", {}))


class RecordedDataset:
    """The dataset's evaluations, looked up like a store: (problem key, candidate hash) -> Evaluation."""

    def __init__(self, path: str | Path | None = None, problems: list[str] | None = None):
        df = load("candidates", path)
        if problems is not None:
            df = df[df["problem"].isin(problems) | df["problem_key"].isin(problems)]
        self.device = RECORDED_DEVICE
        self._rows = {(k, h): js for k, h, js in zip(df["problem_key"], df["candidate"], df["evaluation_json"])}
        self._cache: dict[tuple[str, str], Evaluation] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._rows

    def keys(self) -> set[tuple[str, str]]:
        return set(self._rows)

    def evaluation(self, problem_key: str, candidate_hash: str) -> Evaluation | None:
        key = (problem_key, candidate_hash)
        if key not in self._rows:
            return None
        if key not in self._cache:
            self._cache[key] = evaluation_from_summary(json.loads(self._rows[key]))
        return self._cache[key]

    def find_evaluation(self, problem_key: str, candidate_hash: str, device: str, fidelity: str,
                        **_: Any) -> Evaluation | None:
        """Same contract as `Store.find_evaluation`: an evaluation that answers a request at `fidelity`."""
        from .sqlite import reaches

        if fidelity not in STAGES:
            raise ValueError(f"fidelity must be one of {STAGES}, got '{fidelity}'")
        if device != self.device:
            return None
        ev = self.evaluation(problem_key, candidate_hash)
        return ev if ev is not None and reaches(ev, fidelity) else None
