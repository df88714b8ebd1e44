"""Reports: the data behind notebooks 02 and 04, and the sweep report as one self-contained HTML file.

    workbench report results/runs/replay --out results/runs/replay/report.html

`sweep_report_html(sweep_dir)` reads a sweep's run directories (`workbench.runs.load_runs`) and renders: the sweep
and its environment (git sha and dirty flag, GPU or replay, versions), the best-speedup curves against GPU-seconds
and against GPU measurements (median and band across seeds per configuration), a table per configuration, a table per
run, and each failed run's error. plotly.js is inlined once, so the file opens with no network.

`surrogate_comparison(...)` runs the cross-validated evaluation of surrogates on the shipped dataset
(`workbench.surrogates.evaluate`) and returns the per-candidate frames the calibration views take
(`calibration_frames`).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import html
import json
import math
from pathlib import Path
from typing import Any, Sequence

from . import runs as _runs

# ---------------------------------------------------------------------------------------------- surrogates (02)


@dataclasses.dataclass
class SurrogateComparison:
    """Held-out predictions of several surrogates on the same dataset rows. `table`: the training table (one row per
    candidate: problem, problem_key, log2_speedup, failed, ...); `predictions`: name -> frame with `score`, `mu`,
    `confidence` and the outcome probabilities p0..p8, indexed like `table`; `metrics`: name -> the metrics dict of
    `workbench.surrogates.evaluate.metrics`."""
    split: str
    folds: int
    table: Any
    predictions: dict[str, Any]
    metrics: dict[str, dict[str, Any]]

    def frames(self) -> dict[str, Any]:
        return calibration_frames(self.table, self.predictions)

    def metrics_frame(self, columns: Sequence[str] | None = None):
        """One row per surrogate: the headline metrics (`evaluate.HEADLINE`) and the mean training seconds."""
        import pandas as pd

        from .surrogates.evaluate import HEADLINE

        cols = list(columns or HEADLINE) + ["train_seconds"]
        return pd.DataFrame([{"surrogate": n, **{c: m.get(c, math.nan) for c in cols}}
                             for n, m in self.metrics.items()]).set_index("surrogate")

    def per_problem(self, name: str):
        """One surrogate's metrics per problem (`workbench.surrogates.evaluate.per_problem`): where it does well."""
        from .surrogates.evaluate import per_problem

        if name not in self.predictions:
            raise KeyError(f"no predictions of {name!r}; have {list(self.predictions)}")
        return per_problem(self.table, self.predictions[name])


def surrogate_comparison(surrogates: Sequence[str] = ("learned", "roofline", "prior", "random"),
                         split: str = "problem", folds: int = 5, seed: int = 0, trees: int = 250,
                         data: str | Path | None = None) -> SurrogateComparison:
    """Cross-validated predictions of the named surrogates (see `workbench.surrogates.evaluate.default_surrogates`)
    on the dataset at `data` (default results/dataset), each trained afresh per fold of `split`."""
    from .store.dataset import load
    from .surrogates.evaluate import default_surrogates, evaluate
    from .surrogates.features import training_table

    factories = default_surrogates(seed, trees)
    unknown = [s for s in surrogates if s not in factories]
    if unknown or not surrogates:
        raise ValueError(f"unknown surrogate(s) {unknown}; choose from {sorted(factories)}")
    data = data or None  # "" (a notebook parameter) means the shipped dataset
    table = training_table(load("candidates", data), load("problems", data))
    preds: dict[str, Any] = {}
    results = evaluate(table, split, {s: factories[s] for s in surrogates}, k=folds, seed=seed, predictions=preds)
    n_folds = next(iter(results.values()))["folds"]
    return SurrogateComparison(split, n_folds, table, preds, results)


def calibration_frames(table, predictions: dict[str, Any]) -> dict[str, Any]:
    """Per surrogate, the plain per-candidate columns `workbench.viz.calibration` takes: problem, confidence (top
    outcome probability), correct (that outcome was the measured one: a speedup bin, or "fails"), error
    (1 - correct), score and the measured speedup (NaN for a failed candidate)."""
    import numpy as np
    import pandas as pd

    from .metrics import to_bin

    true = np.atleast_1d(to_bin(table["log2_speedup"].to_numpy(float), table["failed"].to_numpy(bool)))
    speed = np.where(table["failed"].to_numpy(bool), np.nan, 2.0 ** table["log2_speedup"].to_numpy(float))
    out = {}
    for name, pred in predictions.items():
        probs = pred[[f"p{i}" for i in range(9)]].to_numpy(float)
        correct = (probs.argmax(1) == true).astype(float)
        out[name] = pd.DataFrame({"problem": table["problem"].to_numpy(), "confidence": probs.max(1),
                                  "correct": correct, "error": 1.0 - correct,
                                  "score": pred["score"].to_numpy(float), "speedup": speed}, index=table.index)
    return out


# ---------------------------------------------------------------------------------------------- the suite (04)


def suite_data(data: str | Path | None = None) -> tuple[Any, Any]:
    """(full, problems): the dataset's full-timing and problem tables (default results/dataset)."""
    from .store.dataset import load

    data = data or None
    return load("full", data), load("problems", data)


def suite_benchmark_data(path: str | Path | None = None) -> tuple[Any, Any]:
    """(full, problems) from the suite benchmark (`experiments/bench_suite.py`'s rows.jsonl, default
    results/suite/rows.jsonl) in the dataset's full-timing shape, with `speedup_vs_max_autotune`; the problems
    table (roofline floors) is the shipped dataset's."""
    import pandas as pd

    from .store.dataset import load

    p = Path(path) if path else Path(__file__).resolve().parents[1] / "results" / "suite" / "rows.jsonl"
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


# ---------------------------------------------------------------------------------------------- the sweep report

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
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(_fmt(v) if not isinstance(v, (list, dict)) else json.dumps(v))}</td></tr>"  # noqa: E501
                   for k, v in items.items())
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


def sweep_report_html(sweep_dir: str | Path, title: str | None = None, quantiles: Sequence[float] = (0.0, 1.0),
                      plotlyjs: str | bool = True) -> str:
    """The report as one HTML string. `plotlyjs`: True inlines plotly.js (self-contained, no network); a path or
    URL string loads it from there instead (plotly's `include_plotlyjs`)."""
    from . import viz

    sr = _runs.load_runs(sweep_dir)
    cfg_path = Path(sweep_dir) / "sweep.yaml"
    cfg_text = cfg_path.read_text() if cfg_path.exists() else None
    title = title or f"Sweep report: {sr.name}"
    n_ok, n_all = len(sr.ok), len(sr.runs)
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p class=note>{n_ok} of {n_all} runs finished ok, {n_all - n_ok} failed or unfinished; run directories "
             f"under <code>{html.escape(str(Path(sweep_dir).resolve()))}</code>; generated "
             f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}.</p>"]
    env = sr.environment()
    env_rows = {"device": _device_text(sr), "GPU": env.get("gpu") or "none visible",
                "git sha": env.get("git_sha"), "uncommitted changes": env.get("git_dirty"),
                **{k: env.get(k) for k in ("python", "torch", "triton", "workbench", "host") if k in env},
                "varying parameters": ", ".join(sr.params) or "none"}
    parts += ["<h2>Environment</h2>", _kv(env_rows)]
    if cfg_text:
        parts += ["<details><summary>sweep.yaml</summary>", f"<pre>{html.escape(cfg_text)}</pre></details>"]

    parts.append("<h2>Best speedup against budget</h2>")
    figures = []
    if len(sr.trajectories):
        ok_ids = set(sr.ok["run_id"])
        traj = sr.trajectories[sr.trajectories["run_id"].isin(ok_ids)]
        if len(traj):
            for x in ("gpu_s", "measured"):
                info = viz.get_sweep_curves_info(traj, by=sr.config_params, x=x, quantiles=quantiles)
                figures.append(viz.plot_sweep_curves(info))
    if figures:
        parts.append("<p class=note>Each line is one configuration: the median over its seeds of the best speedup "
                     "vs eager found so far; the shaded band spans the seeds (min to max unless other quantiles were "
                     "asked for). A run that ended holds its final best.</p>")
        for i, fig in enumerate(figures):
            fig.update_layout(height=460)
            parts.append(fig.to_html(full_html=False, include_plotlyjs=plotlyjs if i == 0 else False,
                                     div_id=f"curve-{i}", config={"displaylogo": False}))
    else:
        parts.append("<p>No finished run saved a trajectory (the notebook needs an <code>out_dir</code> parameter and "
                     "<code>workbench.runs.save_run</code>), so there are no curves.</p>")

    parts.append("<h2>Per configuration</h2>")
    if n_ok:
        summ = sr.summary()
        parts.append(_table(summ, numeric=[c for c in summ.columns if c not in sr.config_params + ["runs"]]))
    else:
        parts.append("<p>No run finished.</p>")

    parts.append("<h2>Runs</h2>")
    cols = ["run_id", *sr.params, "status", "best_speedup", "gpu_seconds", "measured", "candidates", "seconds"]
    runs_df = sr.runs[[c for c in cols if c in sr.runs.columns]]
    parts.append(_table(runs_df, numeric=["best_speedup", "gpu_seconds", "measured", "candidates", "seconds"],
                        row_class=lambda r: "failed" if r["status"] != "ok" else ""))
    failed = sr.failed
    if len(failed):
        parts.append("<h2>Failures</h2>")
        for _, r in failed.iterrows():
            m = _runs._read_json(Path(r["dir"]) / _runs.MANIFEST) or {}
            parts.append(f"<details open><summary><code>{html.escape(r['run_id'])}</code>: {html.escape(str(r['status']))}"
                         f" — {html.escape(str(r['error']))}</summary><pre>{html.escape(m.get('traceback') or '')}"
                         "</pre></details>")
    parts.append("<p class=note>Written by <code>workbench report</code> (workbench.reports.sweep_report_html) from "
                 "each run's manifest.json, report.json and trajectory.parquet.</p>")
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


__all__ = ["SurrogateComparison", "calibration_frames", "suite_data", "surrogate_comparison", "sweep_report_html",
           "write_sweep_report"]
