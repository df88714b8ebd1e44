"""The sweep report: one self-contained HTML file over a sweep's run directories.

    workbench report results/runs/replay --out results/runs/replay/report.html

`sweep_report_html(sweep_dir)` reads the run directories (`workbench.lab.runs.load_runs`) and renders: the sweep and
its environment (git sha and dirty flag, GPU or replay, versions), the best-speedup curves against GPU-seconds and
against GPU measurements (median and band across seeds per configuration), a table per configuration, a table per
run with a link to each run's executed notebook (relative to the report, so the sweep folder can be moved or
archived whole), the surrogate's calibration where runs were screened (its forecasts against what the GPU then
measured, per configuration), notebook 03's failures table (with each failed run's traceback) and the best run's
search tree (and the best screened run's, when the best run was not screened). plotly.js is inlined once, before
the first figure, so the file opens with no network.
"""
from __future__ import annotations

import datetime as _dt
import html
import json
import math
import os
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import quote

from .. import viz
from ..core.events import NodeEvent, NodeStatus
from ..core.outcomes import outcome_index
from . import runs as _runs

NOTEBOOK = "notebook.ipynb"  # what a sweep saves in each run directory (workbench.lab.sweep)

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1200px;
       color: #222; background: #fff; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.failed td { background: #fbe3e3; } code, pre { font-size: 12px; } pre { white-space: pre-wrap; }
.note { color: #555; font-size: 13px; }
"""


class _Figures:
    """Figures as HTML fragments, plotly.js (as `plotlyjs` says) with the first one only."""

    def __init__(self, plotlyjs: str | bool):
        self.plotlyjs, self.count = plotlyjs, 0

    def html(self, fig, div_id: str) -> str:
        first = self.count == 0
        self.count += 1
        return fig.to_html(full_html=False, include_plotlyjs=self.plotlyjs if first else False, div_id=div_id,
                           config={"displaylogo": False})


def _href(target: Path, base: Path) -> str:
    """`target` as a link relative to the folder `base` the report lives in."""
    return quote(Path(os.path.relpath(target.resolve(), base.resolve())).as_posix(), safe="/=,")


def _notebook_link(run_dir: str | Path, base: Path) -> str:
    nb = Path(run_dir) / NOTEBOOK
    return (f'<a href="{_href(nb, base)}">{html.escape(NOTEBOOK)}</a>' if nb.exists() else "—")



def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if math.isnan(v):
            return "—"
        return f"{v:.4g}"
    return str(v)


def _table(df, numeric: Sequence[str] = (), row_class=None, markup: Sequence[str] = ()) -> str:
    """`df` as a table; the columns in `markup` hold HTML already (links), every other cell is escaped."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = []
    for i, (_, r) in enumerate(df.iterrows()):
        cls = f' class="{row_class(r)}"' if row_class and row_class(r) else ""
        cells = "".join(f'<td{" class=num" if c in numeric else ""}>'
                        f'{r[c] if c in markup else html.escape(_fmt(r[c]))}</td>' for c in df.columns)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _kv(items: dict[str, Any]) -> str:
    def cell(v: Any) -> str:
        return html.escape(json.dumps(v) if isinstance(v, (list, dict)) else _fmt(v))

    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{cell(v)}</td></tr>" for k, v in items.items())
    return f"<table>{rows}</table>"


def _device_text(sr: _runs.SweepRuns) -> str:
    devs = sorted({str(d) for d in sr.runs.get("device", []) if isinstance(d, str)})
    if not devs:
        return "unknown (no run saved a report)"
    out = []
    for d in devs:
        if d.startswith("replay:"):
            out.append(f"{d} (no GPU: real measurements recorded on an {d.split(':')[-1]} replayed; never estimated)")
        else:
            out.append(d)
    return "; ".join(out)


def _environment(sr: _runs.SweepRuns, sweep_dir: Path) -> list[str]:
    env = sr.environment()
    rows = {"device": _device_text(sr), "GPU": env.get("gpu") or "none visible",
            "git sha": env.get("git_sha"), "uncommitted changes": env.get("git_dirty"),
            **{k: env.get(k) for k in ("python", "torch", "triton", "workbench", "host") if k in env},
            "varying parameters": ", ".join(sr.params) or "none"}
    parts = ["<h2>Environment</h2>", _kv(rows)]
    cfg_path = sweep_dir / "sweep.yaml"
    if cfg_path.exists():
        parts += ["<details><summary>sweep.yaml</summary>", f"<pre>{html.escape(cfg_path.read_text())}</pre></details>"]
    return parts


def _curves(sr: _runs.SweepRuns, quantiles: Sequence[float], figs: _Figures) -> list[str]:
    parts = ["<h2>Best speedup against budget</h2>"]
    traj = sr.ok_trajectories
    if not len(traj):
        return parts + ["<p>No finished run saved a trajectory (the notebook needs an <code>out_dir</code> parameter "
                        "and <code>workbench.lab.runs.save_run</code>), so there are no curves.</p>"]
    parts.append("<p class=note>Each line is one configuration: the median over its seeds of the best speedup vs "
                 "eager found so far; the shaded band spans the seeds (min to max unless other quantiles were asked "
                 "for). A run that ended holds its final best.</p>")
    for i, x in enumerate(("gpu_s", "measured")):
        fig = viz.plot_sweep_curves(viz.get_sweep_curves_info(traj, by=sr.config_params, x=x, quantiles=quantiles))
        fig.update_layout(height=460)
        parts.append(figs.html(fig, f"curve-{i}"))
    return parts


def _tables(sr: _runs.SweepRuns, base: Path) -> list[str]:
    parts = ["<h2>Per configuration</h2>"]
    if len(sr.ok):
        summ = sr.summary()
        parts.append(_table(summ, numeric=[c for c in summ.columns if c not in sr.config_params + ["runs"]]))
    else:
        parts.append("<p>No run finished.</p>")
    parts += ["<h2>Runs</h2>", "<p class=note>Each run's executed notebook (saved by the sweep, also when the run "
                               "failed) is linked relative to this file: open it in JupyterLab, or read it on a code "
                               "host.</p>"]
    numeric = ["best_speedup", "gpu_seconds", "measured", "candidates", "seconds"]
    cols = ["run_id", *sr.params, "status", *numeric]
    table = sr.runs[[c for c in cols if c in sr.runs.columns]].copy()
    table["notebook"] = [_notebook_link(d, base) for d in sr.runs["dir"]]
    parts.append(_table(table, numeric=numeric, markup=["notebook"],
                        row_class=lambda r: "failed" if r["status"] != "ok" else ""))
    return parts


def _config_label(row, keys: Sequence[str]) -> str:
    return ", ".join(f"{k}={row[k]}" for k in keys) or "all runs"


def forecast_rows(events) -> list[dict[str, Any]]:
    """Per forecast node of a run's events: its confidence, decision and, where the GPU then decided it (measured
    with a speedup, or failed), whether the most likely outcome was the measured one (`correct`, else None)."""
    rows = []
    for d in events:
        if d.get("type") != "node" or not (d.get("forecast") or {}).get("probs"):
            continue
        e = NodeEvent.from_dict(d)
        probs = [float(p) for p in e.forecast["probs"]]
        top = max(range(len(probs)), key=probs.__getitem__)
        if e.status == NodeStatus.MEASURED and e.speedup:
            measured = outcome_index(e.speedup)
        elif e.status == NodeStatus.FAILED:
            measured = outcome_index(None)
        else:
            measured = None
        rows.append({"nid": e.nid, "status": str(e.status), "decision": e.forecast.get("decision"),
                     "confidence": float(e.forecast.get("confidence") or max(probs)),
                     "correct": None if measured is None else float(top == measured)})
    return rows


def _calibration(sr: _runs.SweepRuns, figs: _Figures) -> list[str]:
    """The screened runs' forecasts against the GPU's answers, per configuration (nothing when no run screened)."""
    import pandas as pd  # as in workbench.lab.runs: pandas only once a report is written

    per: dict[str, list[dict[str, Any]]] = {}
    for _, r in sr.ok.iterrows():
        rows = forecast_rows(_runs.read_events(r["dir"]))
        if rows:
            per.setdefault(_config_label(r, sr.config_params), []).extend(rows)
    if not per:
        return []
    parts = ["<h2>The surrogate's calibration</h2>",
             "<p class=note>Every proposal of a screened run was forecast (9 outcomes against eager: 8 speedup bins "
             "and <i>fails</i>) before the selective policy chose what the GPU measures. Here each forecast the GPU "
             "then answered (measured, or failed) is checked: was the most likely outcome the measured one? "
             "Calibrated, the points lie on the diagonal (accuracy = confidence). Skipped nodes were never "
             "measured, so they are counted, not scored; the measured ones are those the policy picked, not a "
             "random sample.</p>"]
    frames, table = {}, []
    for name, rows in per.items():
        df = pd.DataFrame(rows)
        scored = df[df["correct"].notna()]
        table.append({"configuration": name, "forecasts": len(df), "measured or failed": len(scored),
                      "skipped": int((df["status"] == "skipped").sum()),
                      "top outcome right": float(scored["correct"].mean()) if len(scored) else float("nan"),
                      "mean confidence": float(scored["confidence"].mean()) if len(scored) else float("nan")})
        if len(scored):
            frames[name] = scored.assign(correct=scored["correct"].astype(float))
    if frames:
        info = viz.get_reliability_info(frames, n_bins=10)
        for t in table:
            t["ECE"] = info.ece.get(t["configuration"], float("nan"))
        fig = viz.plot_reliability(info, title="forecast confidence against how often the top outcome was measured")
        fig.update_layout(height=460)
        parts.append(figs.html(fig, "calibration"))
    summary = pd.DataFrame(table)
    parts.append(_table(summary, numeric=[c for c in summary.columns if c != "configuration"]))
    return parts


def _failures(sr: _runs.SweepRuns) -> list[str]:
    """Notebook 03's failures table (run, status, error), then each failed run's traceback."""
    parts = ["<h2>Failures</h2>"]
    if not len(sr.failed):
        return parts + [f"<p>None: all {len(sr.runs)} runs finished ok.</p>"]
    parts.append(_table(sr.failed[["run_id", "status", "error"]], row_class=lambda r: "failed"))
    for _, r in sr.failed.iterrows():
        tb = (_runs.read_manifest(r["dir"]) or {}).get("traceback") or ""
        parts.append(f"<details><summary><code>{html.escape(r['run_id'])}</code>: "
                     f"{html.escape(str(r['status']))} — {html.escape(str(r['error']))}</summary>"
                     f"<pre>{html.escape(tb)}</pre></details>")
    return parts


_TREE_NOTE = ("Each tile is a candidate: its speedup (or status), id and what it changed against its parent; the "
              "colour is log2 speedup vs eager, failed nodes grey, nodes the surrogate skipped lavender and labelled "
              "<i>skipped</i>, nodes it deferred to the GPU (an unsure forecast) marked ◇ and outlined. A tile's "
              "size is how many leaves grew from it, not its speed or cost.")


def _timed(speedup: Any) -> bool:
    return isinstance(speedup, (int, float)) and not math.isnan(speedup)


def _screened(events) -> bool:
    return any(e.get("type") == "node" and e.get("forecast") for e in events)


def _tree_section(sr: _runs.SweepRuns, row: dict[str, Any], events, figs: _Figures, base: Path,
                  div_id: str) -> list[str]:
    """A run's facts, a link to its notebook and its search tree."""
    facts = {"run": row["run_id"], **{k: row.get(k) for k in sr.params},
             "best speedup vs eager": row.get("best_speedup"), "GPU-seconds": row.get("gpu_seconds"),
             "GPU measurements": row.get("measured"), "candidates": row.get("candidates")}
    parts = [_kv(facts), f"<p class=note>Its notebook: {_notebook_link(row['dir'], base)}. {_TREE_NOTE}</p>"]
    if not any(e.get("type") == "node" for e in events):
        return parts + ["<p>The run saved no events (events.jsonl), so its tree cannot be drawn.</p>"]
    return parts + [figs.html(viz.plot_search_tree(viz.get_search_tree_info(events)), div_id)]


def _best_tree(sr: _runs.SweepRuns, figs: _Figures, base: Path) -> list[str]:
    """The best run (notebook 03's): its facts, a link to its notebook and its search tree; when it was not screened
    but other runs were, the best screened run's too, so the report shows where the surrogate skipped."""
    parts = ["<h2>The best run's tree</h2>"]
    best = sr.best_run()
    if best is None:
        return parts + ["<p>No finished run timed a candidate, so there is no best run.</p>"]
    events = sr.events(best["run_id"])
    parts += _tree_section(sr, best, events, figs, base, "best-tree")
    if _screened(events):
        return parts
    screened = [(r.to_dict(), ev) for _, r in sr.ok.iterrows() if _timed(r["best_speedup"])
                and _screened(ev := _runs.read_events(r["dir"]))]
    if not screened:
        return parts
    row, ev = max(screened, key=lambda rv: float(rv[0]["best_speedup"]))
    return parts + ["<h2>The best screened run's tree</h2>",
                    "<p class=note>The best run above was not screened; this is the best of the runs a surrogate "
                    "screened, with the nodes it kept off the GPU.</p>",
                    *_tree_section(sr, row, ev, figs, base, "best-screened-tree")]


def sweep_report_html(sweep_dir: str | Path, title: str | None = None, quantiles: Sequence[float] = (0.0, 1.0),
                      plotlyjs: str | bool = True, base: str | Path | None = None) -> str:
    """The report as one HTML string. `plotlyjs`: True inlines plotly.js (self-contained, no network); a path or
    URL string loads it from there instead (plotly's `include_plotlyjs`). `base`: the folder the report will be
    written to, which the links to the runs' notebooks are relative to (default `sweep_dir`)."""
    sr = _runs.load_runs(sweep_dir)
    base = Path(base) if base is not None else Path(sweep_dir)
    title = title or f"Sweep report: {sr.name}"
    n_ok, n_all = len(sr.ok), len(sr.runs)
    figs = _Figures(plotlyjs)
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p class=note>{n_ok} of {n_all} runs finished ok, {n_all - n_ok} failed or unfinished; run directories "
             f"under <code>{html.escape(str(Path(sweep_dir).resolve()))}</code>; generated "
             f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}.</p>",
             *_environment(sr, Path(sweep_dir)), *_curves(sr, quantiles, figs), *_tables(sr, base),
             *_calibration(sr, figs), *_failures(sr), *_best_tree(sr, figs, base),
             "<p class=note>Written by <code>workbench report</code> (workbench.lab.report_html) from each run's "
             "manifest.json, report.json, events.jsonl and trajectory.parquet.</p>"]
    return ("<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")


def write_sweep_report(sweep_dir: str | Path, out: str | Path | None = None, **kw) -> Path:
    """Write `sweep_report_html` to `out` (default `<sweep_dir>/report.html`) and return the path."""
    out = Path(out) if out is not None else Path(sweep_dir) / "report.html"
    kw.setdefault("base", out.parent)
    text = sweep_report_html(sweep_dir, **kw)  # first: a missing sweep creates no folder
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    return out


__all__ = ["forecast_rows", "sweep_report_html", "write_sweep_report"]
