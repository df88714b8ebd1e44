"""The sweep report: one self-contained HTML file over a sweep's run directories.

    workbench report results/runs/replay --out results/runs/replay/report.html

`sweep_report_html(sweep_dir)` reads the run directories (`workbench.lab.runs.load_runs`) and renders: the sweep and
its environment (git sha and dirty flag, GPU or replay, versions), the best-speedup curves against GPU-seconds and
against GPU measurements (median and band across seeds per configuration), a table per configuration, a table per
run, and each failed run's error. plotly.js is inlined once, so the file opens with no network.
"""
from __future__ import annotations

import datetime as _dt
import html
import json
import math
from pathlib import Path
from typing import Any, Sequence

from .. import viz
from . import runs as _runs

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


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if math.isnan(v):
            return "—"
        return f"{v:.4g}"
    return str(v)


def _table(df, numeric: Sequence[str] = (), row_class=None) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = []
    for i, (_, r) in enumerate(df.iterrows()):
        cls = f' class="{row_class(r)}"' if row_class and row_class(r) else ""
        cells = "".join(f'<td{" class=num" if c in numeric else ""}>{html.escape(_fmt(r[c]))}</td>'
                        for c in df.columns)
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


def _curves(sr: _runs.SweepRuns, quantiles: Sequence[float], plotlyjs: str | bool) -> list[str]:
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
        parts.append(fig.to_html(full_html=False, include_plotlyjs=plotlyjs if i == 0 else False,
                                 div_id=f"curve-{i}", config={"displaylogo": False}))
    return parts


def _tables(sr: _runs.SweepRuns) -> list[str]:
    parts = ["<h2>Per configuration</h2>"]
    if len(sr.ok):
        summ = sr.summary()
        parts.append(_table(summ, numeric=[c for c in summ.columns if c not in sr.config_params + ["runs"]]))
    else:
        parts.append("<p>No run finished.</p>")
    parts.append("<h2>Runs</h2>")
    numeric = ["best_speedup", "gpu_seconds", "measured", "candidates", "seconds"]
    cols = ["run_id", *sr.params, "status", *numeric]
    parts.append(_table(sr.runs[[c for c in cols if c in sr.runs.columns]], numeric=numeric,
                        row_class=lambda r: "failed" if r["status"] != "ok" else ""))
    return parts


def _failures(sr: _runs.SweepRuns) -> list[str]:
    if not len(sr.failed):
        return []
    parts = ["<h2>Failures</h2>"]
    for _, r in sr.failed.iterrows():
        tb = (_runs.read_manifest(r["dir"]) or {}).get("traceback") or ""
        parts.append(f"<details open><summary><code>{html.escape(r['run_id'])}</code>: "
                     f"{html.escape(str(r['status']))} — {html.escape(str(r['error']))}</summary>"
                     f"<pre>{html.escape(tb)}</pre></details>")
    return parts


def sweep_report_html(sweep_dir: str | Path, title: str | None = None, quantiles: Sequence[float] = (0.0, 1.0),
                      plotlyjs: str | bool = True) -> str:
    """The report as one HTML string. `plotlyjs`: True inlines plotly.js (self-contained, no network); a path or
    URL string loads it from there instead (plotly's `include_plotlyjs`)."""
    sr = _runs.load_runs(sweep_dir)
    title = title or f"Sweep report: {sr.name}"
    n_ok, n_all = len(sr.ok), len(sr.runs)
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p class=note>{n_ok} of {n_all} runs finished ok, {n_all - n_ok} failed or unfinished; run directories "
             f"under <code>{html.escape(str(Path(sweep_dir).resolve()))}</code>; generated "
             f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}.</p>",
             *_environment(sr, Path(sweep_dir)), *_curves(sr, quantiles, plotlyjs), *_tables(sr), *_failures(sr),
             "<p class=note>Written by <code>workbench report</code> (workbench.lab.report_html) from each run's "
             "manifest.json, report.json and trajectory.parquet.</p>"]
    return ("<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")


def write_sweep_report(sweep_dir: str | Path, out: str | Path | None = None, **kw) -> Path:
    """Write `sweep_report_html` to `out` (default `<sweep_dir>/report.html`) and return the path."""
    text = sweep_report_html(sweep_dir, **kw)  # first: a missing sweep creates no folder
    out = Path(out) if out is not None else Path(sweep_dir) / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    return out


__all__ = ["sweep_report_html", "write_sweep_report"]
