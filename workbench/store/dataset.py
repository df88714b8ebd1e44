"""The shipped measurement dataset: real H200 ladder outcomes of offline-proposer candidates, as parquet.

Files (written by experiments/export_dataset.py, read here):
- `candidates.parquet`: one row per measured candidate: problem and candidate (source hash), the proposer's choice,
  `regenerates` (the choice still renders the kernels that were measured), `identity` in newer exports (see
  `workbench.kernels.identity`), coverage, the outcome (`failed_stage`, `fail_reason`), compile-stage facts, the
  quick timing (candidate and eager ms, speedup, spread), `log2_speedup` vs the eager anchor, and the full evaluation
  as JSON (what the replay device answers from);
- `problems.parquet`: per problem, FLOPs, bytes, intensity and the roofline floor on the H200, with the run-to-run
  noise measured by repeating the default candidate's quick timing;
- `full.parquet`: per problem, the best candidate by quick time through full timing against eager and torch.compile;
- `provenance.json`: GPU, driver, versions, collection runs and the sampling parameters.

`RecordedDataset` answers `find_evaluation` like a `Store`, so the replay device reads it directly. A source the
offline proposer rendered is answered by identity (problem key and choice, the kernels' template versions checked),
so a cosmetic template edit since the measurement keeps its row; the differing text is reported as drift. Any other
source is answered only when its exact text was measured.
"""
from __future__ import annotations

import json
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..core import paths
from ..core.records import STAGES, Evaluation, StageRecord
from ..core.target import H200
from ..kernels.identity import rendered
from .sqlite import reaches

RECORDED_DEVICE = H200.device


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
    import pandas as pd  # pandas loads when a table is read, not when the module is imported

    return pd.read_parquet(Path(path) / f"{table}.parquet")


def load(table: str = "candidates", path: str | Path | None = None):
    """One table of the dataset as a DataFrame (a copy: callers may change it)."""
    return _read(str(dataset_dir(path)), table).copy()


def evaluation_from_summary(summary: dict[str, Any]) -> Evaluation:
    """Rebuild an `Evaluation` from `Evaluation.summary()` (how rows store it)."""
    return Evaluation(problem=summary["problem"], candidate_hash=summary["candidate"], device=summary["device"],
                      stages=[StageRecord.from_dict(s) for s in summary["stages"]],
                      provenance=summary.get("provenance", {}))


def measured_identities(candidates) -> list[str | None]:
    """Per row, the identity key recorded with its measurement; None for rows exported before identities were
    recorded (their `regenerates` was checked on the exact source text, see `workbench.kernels.identity`)."""
    if "identity" not in candidates.columns:
        return [None] * len(candidates)
    return [k if isinstance(k, str) and k else None for k in candidates["identity"]]


def answering_rows(candidates):
    """The rows that answer by identity: those whose choice still renders the kernels that were measured."""
    if "regenerates" not in candidates.columns:
        return candidates.iloc[0:0]
    return candidates[candidates["regenerates"].astype(bool)]


class RecordedDataset:
    """The dataset's evaluations, looked up like a store: (problem key, candidate) -> Evaluation."""

    def __init__(self, path: str | Path | None = None, problems: list[str] | None = None):
        df = load("candidates", path)
        if problems is not None:
            df = df[df["problem"].isin(problems) | df["problem_key"].isin(problems)]
        self.device = RECORDED_DEVICE
        self._rows = {(k, h): js for k, h, js in zip(df["problem_key"], df["candidate"], df["evaluation_json"])}
        ok = answering_rows(df)
        # (problem key, canonical choice) -> (recorded source hash, recorded identity key or None)
        self._by_choice = {(k, json.dumps(json.loads(cj), sort_keys=True)): (h, ident)
                           for k, h, cj, ident in zip(ok["problem_key"], ok["candidate"], ok["choice_json"],
                                                      measured_identities(ok))}
        self._cache: dict[tuple[str, str], Evaluation] = {}
        # (problem key, source hash) -> the recorded source hash that answered for it with another text
        self.drift: dict[tuple[str, str], str] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return self.resolve(*key) is not None

    def keys(self) -> set[tuple[str, str]]:
        """The recorded (problem key, source hash) pairs."""
        return set(self._rows)

    def resolve(self, problem_key: str, candidate_hash: str) -> str | None:
        """The recorded candidate (source hash) that answers for this source, or None. A source the offline proposer
        rendered in this process is matched by identity; any other only by its exact text."""
        ident = rendered(problem_key, candidate_hash)
        if ident is None:
            return candidate_hash if (problem_key, candidate_hash) in self._rows else None
        found = self._by_choice.get((problem_key, ident.choice))
        if found is None or not ident.measured_by(found[1]):
            return None  # not measured, or measured at another template version: another candidate
        recorded = found[0]
        if recorded != candidate_hash and (problem_key, candidate_hash) not in self.drift:
            if not self.drift:
                warnings.warn(f"{problem_key}: candidate {candidate_hash} answered by recorded candidate {recorded} "
                              "(same kernels, different source text: a template was edited since the measurement; "
                              "RecordedDataset.drift lists every such source)", stacklevel=2)
            self.drift[(problem_key, candidate_hash)] = recorded
        return recorded

    def evaluation(self, problem_key: str, candidate_hash: str) -> Evaluation | None:
        recorded = self.resolve(problem_key, candidate_hash)
        if recorded is None:
            return None
        key = (problem_key, recorded)
        if key not in self._cache:
            self._cache[key] = evaluation_from_summary(json.loads(self._rows[key]))
        return self._cache[key]

    def find_evaluation(self, problem_key: str, candidate_hash: str, device: str, fidelity: str,
                        **_: Any) -> Evaluation | None:
        """Same contract as `Store.find_evaluation`: an evaluation that answers a request at `fidelity`."""
        if fidelity not in STAGES:
            raise ValueError(f"fidelity must be one of {STAGES}, got '{fidelity}'")
        if device != self.device:
            return None
        ev = self.evaluation(problem_key, candidate_hash)
        return ev if ev is not None and reaches(ev, fidelity) else None
