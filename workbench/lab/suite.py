"""The suite benchmark's tables for notebook 04: the dataset's full timings, or the benchmark's own rows."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from ..core import paths
from ..store.dataset import load


def suite_data(data: str | Path | None = None) -> tuple[Any, Any]:
    """(full, problems): the dataset's full-timing and problem tables (default results/dataset)."""
    data = data or None
    return load("full", data), load("problems", data)


def suite_benchmark_data(path: str | Path | None = None) -> tuple[Any, Any]:
    """(full, problems) from the suite benchmark (`experiments/bench_suite.py`'s rows.jsonl, default
    results/suite/rows.jsonl) in the dataset's full-timing shape, with `speedup_vs_max_autotune`; the problems
    table (roofline floors) is the shipped dataset's."""
    p = Path(path) if path else paths.suite_dir() / "rows.jsonl"
    if p.is_dir():
        p = p / "rows.jsonl"
    if not p.exists():
        raise FileNotFoundError(f"no suite benchmark rows at {p} (run experiments/bench_suite.py on a GPU)")
    rows = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    full = pd.DataFrame([{"problem": r["problem"], "problem_key": r.get("key"), "t": i, "ok": r.get("status") == "ok",
                          "candidate_ms": r.get("candidate_ms"), "eager_ms": r.get("eager_ms"),
                          "compile_ms": r.get("compile_ms"), "speedup_vs_eager": r.get("speedup_vs_eager"),
                          "speedup_vs_compile": r.get("speedup_vs_compile"), "floor_ms": r.get("floor_ms"),
                          "floor_bound": r.get("bound"), "speedup_vs_max_autotune": r.get("speedup_vs_max_autotune")}
                         for i, r in enumerate(rows)])
    return full, load("problems")
