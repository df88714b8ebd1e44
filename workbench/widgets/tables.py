"""Tables for notebook cells, so a report reads as a table rather than a printed dict.

- `as_table(d)`: a dict (a search's `report()`, a sweep's `environment()` or `best_run()`) as a two-column frame,
  nested dicts flattened to dotted keys.
- `node_table(search)`: the search's nodes, one row each: ids as integers, speedups rounded, the forecast as its
  confidence and the policy's decision, the reason cut short.
- `runs_table(sweep)`: a sweep's runs with the columns that tell them apart (the parameters that vary, status, best
  speedup, GPU-seconds), not every manifest field.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

REASON_WIDTH = 70


def _flatten(d: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out += _flatten(v, key + ".") if v else [(key, None)]
        elif isinstance(v, (list, tuple)):
            out.append((key, ", ".join(map(str, v)) if all(not isinstance(x, (dict, list)) for x in v)
                        else json.dumps(v, default=str)))
        else:
            out.append((key, v))
    return out


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "—" if v is None else v


def as_table(d: Mapping[str, Any] | None, name: str = "value"):
    """`d` as a frame indexed by (dotted) key with one `name` column; numbers kept short."""
    import pandas as pd

    rows = _flatten(d or {})
    return pd.DataFrame({name: [_fmt(v) for _, v in rows]}, index=pd.Index([k for k, _ in rows], name="key"))


def _short(text: Any, width: int = REASON_WIDTH) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= width else s[:width - 1] + "…"


NODE_COLUMNS = ["nid", "parent", "depth", "move", "status", "stage", "fidelity", "speedup", "speedup_vs_compile",
                "candidate_ms", "decision", "confidence", "findings", "reason", "candidate"]


def node_table(search_or_frame, reason_width: int = REASON_WIDTH):
    """One row per node (`search.table()`), readable: integer ids (`parent` empty for the root), the surrogate's
    decision and confidence from the forecast, the number of findings, the reason cut to `reason_width`."""
    import pandas as pd

    df = search_or_frame.table() if hasattr(search_or_frame, "table") else search_or_frame
    df = df.copy()
    if "forecast" in df:
        df["decision"] = [(f or {}).get("decision", "") if isinstance(f, Mapping) else "" for f in df["forecast"]]
        df["confidence"] = [(f or {}).get("confidence") if isinstance(f, Mapping) else None for f in df["forecast"]]
    if "findings" in df:
        df["findings"] = [len(f) if isinstance(f, list) else 0 for f in df["findings"]]
    for c in ("nid", "parent", "depth"):
        if c in df:
            df[c] = pd.array(df[c], dtype="Int64")
    for c in ("speedup", "speedup_vs_compile", "confidence"):
        if c in df:
            df[c] = pd.to_numeric(df[c], errors="coerce").round(3)
    if "candidate_ms" in df:
        df["candidate_ms"] = pd.to_numeric(df["candidate_ms"], errors="coerce").round(4)
    if "reason" in df:
        if {"status", "stage", "fidelity"} <= set(df.columns):  # timed at quick timing, full timing not run
            df["reason"] = [f"{sg} not run: {r}" if st == "measured" and fid and sg and sg != fid and r else r
                            for st, sg, fid, r in zip(df["status"], df["stage"], df["fidelity"], df["reason"])]
        df["reason"] = [_short(r, reason_width) for r in df["reason"]]
    cols = [c for c in NODE_COLUMNS if c in df]
    out = df[cols]
    return out.set_index("nid") if "nid" in out else out


RUN_COLUMNS = ["status", "best_speedup", "gpu_seconds", "candidates", "steps", "error"]


def runs_table(sweep, extra: list[str] | tuple[str, ...] = ()):
    """A sweep's runs (`workbench.lab.runs.load_runs(...)`): run id, the parameters that vary, then status, best
    speedup, GPU-seconds, candidates, steps and error where present (and any `extra` columns)."""
    df = sweep.runs
    cols = ["run_id", *sweep.params, *[c for c in RUN_COLUMNS if c in df], *extra]
    seen: list[str] = []
    for c in cols:
        if c in df and c not in seen:
            seen.append(c)
    out = df[seen].copy()
    for c in ("best_speedup", "gpu_seconds"):
        if c in out:
            out[c] = out[c].astype(float).round(3)
    if "error" in out:
        out["error"] = [_short(e, 90) if isinstance(e, str) else "" for e in out["error"]]
    return out.set_index("run_id")
