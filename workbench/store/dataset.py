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
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..harness.records import STAGES, Evaluation, StageRecord

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "results" / "dataset"
RECORDED_DEVICE = "cuda:NVIDIA H200"


class DatasetMissing(FileNotFoundError):
    pass


def dataset_dir(path: str | Path | None = None) -> Path:
    d = Path(path) if path is not None else DEFAULT_DIR
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


def log2_or_nan(x: float | None) -> float:
    return math.log2(x) if x and x > 0 else float("nan")


class DatasetSources:
    """Candidate sources and problems of dataset rows, rebuilt from the recorded choices (built-in problems at the
    sizes the dataset was measured at): a row whose choice no longer renders to its recorded hash is refused."""

    def __init__(self, candidates):
        need = {"problem", "problem_key", "candidate", "choice_json"}
        if need - set(candidates.columns):
            raise ValueError(f"candidate rows lack {sorted(need - set(candidates.columns))} "
                             "(see workbench/store/dataset.py)")
        ok = candidates["regenerates"].astype(bool) if "regenerates" in candidates.columns else True
        rows = candidates[ok]
        self._choice = {(k, h): cj for k, h, cj in zip(rows["problem_key"], rows["candidate"], rows["choice_json"])}
        self._name = dict(zip(candidates["problem_key"], candidates["problem"]))
        self._problems: dict[str, Any] = {}
        self._proposers: dict[str, Any] = {}

    def available(self, table):
        """Per row of `table`: is its candidate's source regenerable?"""
        import numpy as np

        return np.array([(k, h) in self._choice for k, h in zip(table["problem_key"], table["candidate"])], bool)

    def problem(self, problem_key: str):
        if problem_key not in self._problems:
            from ..problems import Problem

            name = self._name.get(problem_key) or problem_key.split("@")[0]
            p = Problem.load(name)
            if p.key != problem_key:
                raise ValueError(f"dataset problem {problem_key} is not the built-in {name} at its default sizes "
                                 f"(that is {p.key}): its candidates cannot be rebuilt here")
            self._problems[problem_key] = p
        return self._problems[problem_key]

    def candidate(self, problem_key: str, candidate_hash: str):
        cj = self._choice.get((problem_key, candidate_hash))
        if cj is None:
            raise ValueError(f"no regenerable source for candidate {candidate_hash} of {problem_key} (its recorded "
                             "choice no longer renders to that hash, or it is not in the dataset)")
        if problem_key not in self._proposers:
            from ..proposers.offline import OfflineProposer

            self._proposers[problem_key] = OfflineProposer(self.problem(problem_key))
        from ..proposers.offline import Choice

        cand = self._proposers[problem_key].render(Choice.from_dict(json.loads(cj)))
        if cand.hash != candidate_hash:
            raise ValueError(f"candidate {candidate_hash} of {problem_key} renders to {cand.hash} now: the kernel "
                             "templates changed since it was measured")
        return cand
