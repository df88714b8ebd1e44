"""Run directories: what one notebook run leaves behind (`save_run`) and what a comparison reads back (`load_runs`).

A sweep (`workbench.lab.sweep`) gives every run a directory `<out_root>/<sweep>/<run_id>/` holding `manifest.json`
(status, parameters, grid point, git sha and dirty flag, versions, GPU), `config.yaml` and the executed notebook. A
notebook that declares an `out_dir` parameter and calls `save_run(search, out_dir)` adds:

    events.jsonl      the search's events, one JSON object a line (what `Search(search_id=...)` resumes from)
    nodes.parquet     one row per node (`search.table()`): move, status, stage, fidelity, speedups, times
    trajectory.parquet  one row per evaluated node: GPU-seconds spent, GPU measurements so far, best speedup so far
    report.json       `search.report()` (plus the replay device's answered / not-measured counts)

`load_runs(sweep_dir)` reads every run of a sweep into two DataFrames: `runs` (one row per run: parameters, status,
error, final best, GPU-seconds, environment) and `trajectories` (the trajectory rows of every run, with its
parameters), which `workbench.viz.get_sweep_curves_info` turns into median-and-band curves across seeds.

The trajectory's "best" is `workbench.core.events.trajectory`'s: the node `Tree.best` would pick so far (full-timing
results before quick ones, then the highest speedup), so a run's curve ends at the `best_speedup` its report holds.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.events import trajectory
from ..devices.resolve import replay_counts

if TYPE_CHECKING:
    from ..search.search import Search

EVENTS = "events.jsonl"
NODES = "nodes.parquet"
TRAJECTORY = "trajectory.parquet"
REPORT = "report.json"
MANIFEST = "manifest.json"
TRAJECTORY_COLUMNS = ["seq", "nid", "gpu_s", "measured", "speedup", "best", "status"]


def _jsonable_frame(df):
    """Object columns holding dicts/lists become JSON text (parquet wants flat columns)."""
    for c in df.columns:
        if df[c].dtype == object and df[c].map(lambda v: isinstance(v, (dict, list, tuple))).any():
            df[c] = df[c].map(lambda v: json.dumps(v, default=str) if isinstance(v, (dict, list, tuple)) else v)
    return df


def save_run(search: Search, out_dir: str | Path | None) -> Path | None:
    """Write the search's events, nodes, trajectory and report into `out_dir` (created). An empty `out_dir` (a
    notebook run by hand, not by a sweep) writes nothing and returns None."""
    import pandas as pd  # a light module: `import workbench.lab.runs` loads no pandas until a run is read or saved

    if not out_dir:
        return None
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / EVENTS, "w") as f:
        for e in search.events:
            f.write(json.dumps(e, default=str) + "\n")
    _jsonable_frame(search.table()).to_parquet(d / NODES, index=False)
    pd.DataFrame(trajectory(search.events), columns=TRAJECTORY_COLUMNS).to_parquet(d / TRAJECTORY, index=False)
    report = search.report()
    replayed = replay_counts(search.device)
    if replayed is not None:
        report["replay"] = replayed
    (d / REPORT).write_text(json.dumps(report, indent=1, default=str))
    return d


def read_events(run_dir: str | Path) -> list[dict[str, Any]]:
    p = Path(run_dir) / EVENTS
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p.exists() else []


def _read_json(p: Path) -> dict | None:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def read_manifest(run_dir: str | Path) -> dict | None:
    """A run's manifest.json, or None when it is missing or unreadable."""
    return _read_json(Path(run_dir) / MANIFEST)


ENV_KEYS = ("git_sha", "git_dirty", "python", "torch", "triton", "workbench", "host", "gpu")


@dataclasses.dataclass
class SweepRuns:
    """Every run of one sweep: `runs` (a row per run) and `trajectories` (a row per evaluated node of every run that
    saved one). `params` lists the parameters that differ between runs (the grid), `seed` the name of the one that is
    the replicate axis when it is among them."""
    name: str
    root: Path
    runs: Any  # pandas DataFrame
    trajectories: Any  # pandas DataFrame
    params: list[str]
    seed: str | None

    @property
    def config_params(self) -> list[str]:
        """The varying parameters that define a configuration (all but the seed)."""
        return [p for p in self.params if p != self.seed]

    @property
    def ok(self):
        return self.runs[self.runs["status"] == "ok"]

    @property
    def failed(self):
        return self.runs[self.runs["status"] != "ok"]

    @property
    def ok_trajectories(self):
        """The trajectory rows of the runs that finished ok."""
        return self.trajectories[self.trajectories["run_id"].isin(set(self.ok["run_id"]))]

    def best_run(self) -> dict[str, Any] | None:
        """The finished run with the highest final best speedup (its row as a dict), or None when none timed
        anything."""
        ok = self.ok[self.ok["best_speedup"].notna()]
        return None if not len(ok) else ok.loc[ok["best_speedup"].astype(float).idxmax()].to_dict()

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """One run's search events (for `workbench.viz.get_search_tree_info` and friends)."""
        rows = self.runs[self.runs["run_id"] == run_id]
        if not len(rows):
            raise KeyError(f"no run {run_id!r} in {self.root}")
        return read_events(rows.iloc[0]["dir"])

    def environment(self) -> dict[str, Any]:
        """Environment facts of the runs: a value when all runs agree, else the sorted distinct values."""
        out = {}
        for k in ENV_KEYS:
            if k in self.runs.columns:
                vals = {json.dumps(v, sort_keys=True, default=str): v for v in self.runs[k]}
                vals = [vals[j] for j in sorted(vals)]
                out[k] = vals[0] if len(vals) == 1 else vals
        return out

    def summary(self):
        """One row per configuration: runs (ok of all), the final best across seeds (median, min, max), GPU-seconds
        spent (median) and GPU measurements (median)."""
        import pandas as pd  # see save_run

        ok = self.ok
        keys = self.config_params
        rows = []
        groups = ok.groupby(keys, sort=False, dropna=False) if keys else [((), ok)]
        for key, g in groups:
            key = key if isinstance(key, tuple) else (key,)
            allg = self.runs
            for k, v in zip(keys, key):
                allg = allg[allg[k].astype(str) == str(v)]
            best = g["best_speedup"].astype(float)
            rows.append({**dict(zip(keys, key)), "runs": f"{len(g)}/{len(allg)}",
                         "best_median": best.median(), "best_min": best.min(), "best_max": best.max(),
                         "gpu_s_median": g["gpu_seconds"].astype(float).median(),
                         "measured_median": g["measured"].astype(float).median()})
        return pd.DataFrame(rows)


def _value(v: Any) -> Any:
    return json.dumps(v) if isinstance(v, (list, dict)) else v


def load_runs(sweep_dir: str | Path, seed: str = "seed") -> SweepRuns:
    """Read `<sweep_dir>/<run_id>/` for every run that has a manifest (failed and unfinished runs included, with
    their status and error)."""
    import pandas as pd  # see save_run

    root = Path(sweep_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no sweep directory at {root} (run `workbench sweep experiments/<name>.yaml` first)")
    run_rows, traj_frames, params = [], [], {}
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        m = _read_json(d / MANIFEST)
        if m is None:
            continue
        p = {k: _value(v) for k, v in (m.get("params") or {}).items()}
        for k, v in p.items():
            params.setdefault(k, set()).add(json.dumps(v, sort_keys=True, default=str))
        rep = _read_json(d / REPORT) or {}
        best = (rep.get("best") or {}).get("speedup_vs_eager")
        traj = pd.read_parquet(d / TRAJECTORY) if (d / TRAJECTORY).exists() else None
        row = {"run_id": m.get("run_id", d.name), **p, "status": m.get("status"), "error": m.get("error"),
               "seconds": m.get("seconds"), "best_speedup": float(best) if best else float("nan"),
               "gpu_seconds": float(rep["gpu_seconds"]) if "gpu_seconds" in rep else float("nan"),
               "measured": int(traj["measured"].max()) if traj is not None and len(traj) else float("nan"),
               "candidates": rep.get("candidates"), "device": rep.get("device"), "dir": str(d),
               **{k: m.get(k) for k in ENV_KEYS if k in m}}
        run_rows.append(row)
        if traj is not None and len(traj):
            traj_frames.append(traj.assign(run_id=row["run_id"], **p))
    if not run_rows:
        raise FileNotFoundError(f"{root} holds no run directories (no */manifest.json)")
    runs = pd.DataFrame(run_rows)
    varying = [k for k, vals in params.items() if len(vals) > 1]
    trajs = (pd.concat(traj_frames, ignore_index=True) if traj_frames else
             pd.DataFrame(columns=[*TRAJECTORY_COLUMNS, "run_id", *params]))
    return SweepRuns(root.name, root, runs, trajs, varying, seed if seed in varying else None)


__all__ = ["SweepRuns", "load_runs", "read_events", "read_manifest", "save_run", "trajectory"]
