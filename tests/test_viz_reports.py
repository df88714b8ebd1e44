"""The sweep, calibration and suite views (workbench.viz: sweep, calibration, suite) asserted on their info, and run
directories (workbench.lab.runs) read back. Fast: no papermill, no browser (tests/test_notebooks.py does those)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from workbench import viz
from workbench.lab import runs

# ---------------------------------------------------------------------------------------------- trajectories


def _node(seq, nid, gpu, sp=None, verdict="pass", stage="quick_timing", skipped=False):
    e = {"type": "node", "seq": seq, "nid": nid, "gpu_seconds": gpu, "summary": {"speedup_vs_eager": sp},
         "last_stage": {"name": stage, "verdict": verdict}}
    if skipped:
        e["skipped"] = True
    return e


def test_trajectory_counts_measurements_and_keeps_the_best():
    events = [_node(0, 0, 0.5, 2.0, verdict="refused", stage="full_timing"),  # quick-timed, full not recorded
              {"type": "step", "seq": 1, "step": 1},
              _node(2, 1, 0.9, 1.5),
              _node(3, 2, 0.9, None, skipped=True),  # skipped by the surrogate: no row
              _node(4, 3, 1.2, None, verdict="fail", stage="correctness"),
              _node(5, 4, 1.2, 3.0, verdict="refused", stage="full_timing"),  # answered from the store: no GPU-s
              _node(6, 5, 1.6, 2.5)]
    t = runs.trajectory(events)
    assert [r["nid"] for r in t] == [0, 1, 3, 4, 5]
    assert [r["measured"] for r in t] == [1, 2, 3, 4, 5]
    assert [r["best"] for r in t] == [2.0, 2.0, 2.0, 3.0, 3.0]
    assert [r["status"] for r in t] == ["measured", "measured", "failed", "measured", "measured"]
    assert t[2]["speedup"] is None and t[-1]["gpu_s"] == 1.6


# ---------------------------------------------------------------------------------------------- sweep curves


def _traj(run, strategy, seed, pts):
    return [{"run_id": run, "strategy": strategy, "seed": seed, "seq": i, "gpu_s": x, "measured": i + 1, "best": b}
            for i, (x, b) in enumerate(pts)]


def test_sweep_curves_median_and_band():
    rows = (_traj("g0", "greedy", 0, [(1.0, None), (2.0, 2.0), (4.0, 3.0)])
            + _traj("g1", "greedy", 1, [(1.5, 1.0), (3.0, 4.0)])
            + _traj("g2", "greedy", 2, [(1.0, 1.5), (2.0, 1.5), (5.0, 2.0)])
            + _traj("m0", "mcts", 0, [(1.0, 1.2)]))
    df = pd.DataFrame(rows)
    info = viz.get_sweep_curves_info(df, by=["strategy"])
    assert [c.label for c in info.curves] == ["strategy=greedy", "strategy=mcts"]
    g = info.curve("strategy=greedy")
    assert g.runs == ["g0", "g1", "g2"] and g.final == [3.0, 4.0, 2.0]
    assert g.x == [1.0, 1.5, 2.0, 3.0, 4.0, 5.0]
    # at x=1: only g2 has a timed result (g0 timed nothing yet, g1 had not started)
    assert g.n == [1, 2, 3, 3, 3, 3]
    assert g.median == [1.5, 1.25, 1.5, 2.0, 3.0, 3.0]
    assert g.lo == [1.5, 1.0, 1.0, 1.5, 1.5, 2.0] and g.hi == [1.5, 1.5, 2.0, 4.0, 4.0, 4.0]
    iqr = viz.get_sweep_curves_info(df, by=["strategy"], quantiles=(0.25, 0.75)).curve("strategy=greedy")
    assert iqr.lo[-1] == pytest.approx(2.5) and iqr.hi[-1] == pytest.approx(3.5)  # of (2, 3, 4)
    by_measured = viz.get_sweep_curves_info(df, by=["strategy"], x="measured").curve("strategy=greedy")
    assert by_measured.x == [1.0, 2.0, 3.0] and by_measured.median[-1] == 3.0
    whole = viz.get_sweep_curves_info(df)  # no configuration columns: one curve over every run
    assert len(whole) == 1 and whole.curves[0].label == "all runs" and len(whole.curves[0].runs) == 4
    with pytest.raises(ValueError, match="x must be"):
        viz.get_sweep_curves_info(df, x="wall")
    with pytest.raises(ValueError, match="lack column"):
        viz.get_sweep_curves_info(df, by=["temperature"])


def test_plot_sweep_curves():
    go = pytest.importorskip("plotly.graph_objects")
    df = pd.DataFrame(_traj("a", "greedy", 0, [(1.0, None), (2.0, 2.0)]) + _traj("b", "greedy", 1, [(1.0, 3.0)]))
    fig = viz.plot_sweep_curves(viz.get_sweep_curves_info(df, by=["strategy"]))
    assert isinstance(fig, go.Figure) and len(fig.data) == 3  # band upper, band lower (filled), median
    med = fig.data[2]
    assert list(med.x) == [1.0, 2.0] and list(med.y) == [3.0, 2.5] and med.line.shape == "hv"
    assert fig.data[1].fill == "tonexty" and list(fig.data[1].y) == [3.0, 2.0] and list(fig.data[0].y) == [3.0, 3.0]


# ---------------------------------------------------------------------------------------------- calibration


def test_reliability_info():
    a = pd.DataFrame({"confidence": [0.95, 0.95, 0.55, 0.55, 0.55, 0.55], "correct": [1, 1, 1, 0, 0, 0]})
    b = pd.DataFrame({"confidence": [0.2] * 6, "correct": [1, 0, 0, 0, 0, 0]})
    info = viz.get_reliability_info({"a": a, "b": b}, n_bins=10)
    assert info.names == ["a", "b"]
    assert info.confidence["a"] == pytest.approx([0.55, 0.95]) and info.accuracy["a"] == pytest.approx([0.25, 1.0])
    assert info.count["a"] == [4, 2]
    # ECE: 4/6 * |0.25 - 0.55| + 2/6 * |1 - 0.95|
    assert info.ece["a"] == pytest.approx(4 / 6 * 0.3 + 2 / 6 * 0.05)
    assert info.count["b"] == [6] and info.ece["b"] == pytest.approx(abs(1 / 6 - 0.2))
    with pytest.raises(ValueError, match="missing column"):
        viz.get_reliability_info({"a": a.drop(columns="correct")})


def test_risk_coverage_info():
    df = pd.DataFrame({"confidence": [0.9, 0.8, 0.7, 0.6], "error": [0, 0, 1, 1]})
    info = viz.get_risk_coverage_info({"s": df})
    assert info.coverage["s"] == [0.25, 0.5, 0.75, 1.0] and info.risk["s"] == pytest.approx([0, 0, 1 / 3, 0.5])
    assert info.aurc["s"] == pytest.approx((0 + 0 + 1 / 3 + 0.5) / 4) and info.full_risk["s"] == 0.5
    thin = viz.get_risk_coverage_info({"s": pd.DataFrame({"confidence": np.linspace(0, 1, 1000),
                                                          "error": np.zeros(1000)})}, max_points=100)
    assert len(thin.coverage["s"]) == 100 and thin.coverage["s"][-1] == 1.0


def test_budget_recall_info():
    # problem p: speedups 1, 4, 2, failed; q: 3, 1 (s ranks q's best last); r: nothing works (left out)
    df = pd.DataFrame({"problem": ["p"] * 4 + ["q"] * 2 + ["r"],
                       "score": [4, 3, 2, 1, 2, 1, 5], "speedup": [1, 4, 2, np.nan, 1, 3, np.nan]})
    good = df.assign(score=[1, 4, 2, 0, 1, 3, 0])
    info = viz.get_budget_recall_info({"s": df, "good": good}, fractions=[0.25, 0.5, 1.0], within=0.05)
    assert info.problems == 2 and info.fractions == [0.25, 0.5, 1.0]
    # s: k = 1, 2, 4 on p (best 4 found at k=2), k = 1, 1, 2 on q (best 3 at k=2)
    assert info.hit_rate["s"] == [0.0, 0.5, 1.0]
    assert info.mean_ratio["s"] == pytest.approx([(1 / 4 + 1 / 3) / 2, (1 + 1 / 3) / 2, 1.0])
    assert info.hit_rate["good"] == [1.0, 1.0, 1.0]


def test_calibration_plots():
    go = pytest.importorskip("plotly.graph_objects")
    df = pd.DataFrame({"problem": ["p", "p"], "confidence": [0.9, 0.4], "correct": [1, 0], "error": [0, 1],
                       "score": [1, 0], "speedup": [2.0, 1.0]})
    rel = viz.plot_reliability(viz.get_reliability_info({"x": df}))
    assert isinstance(rel, go.Figure) and len(rel.data) == 2 and list(rel.data[1].y) == [0.0, 1.0]
    rc = viz.plot_risk_coverage(viz.get_risk_coverage_info({"x": df}))
    assert list(rc.data[0].y) == [0.0, 0.5]
    br = viz.plot_budget_recall(viz.get_budget_recall_info({"x": df}, fractions=[0.5, 1.0]))
    assert list(br.data[0].y) == [1.0, 1.0] and br.layout.xaxis.type == "log"


def test_calibration_frames_from_predictions():
    from workbench.surrogates.comparison import calibration_frames

    table = pd.DataFrame({"problem": ["p", "p", "q"], "log2_speedup": [1.2, -0.7, np.nan],
                          "failed": [False, False, True]})
    probs = np.zeros((3, 9))
    probs[0, 6] = 0.7  # [1, 2): right
    probs[0, 0] = 0.3
    probs[1, 4] = 0.6  # [0, 0.5) but measured [-1, -0.5): wrong
    probs[1, 3] = 0.4
    probs[2, 8] = 1.0  # fails: right
    pred = pd.DataFrame(probs, columns=[f"p{i}" for i in range(9)]).assign(score=[1.0, 0.0, -5.0])
    f = calibration_frames(table, {"s": pred})["s"]
    assert f["correct"].tolist() == [1.0, 0.0, 1.0] and f["confidence"].tolist() == [0.7, 0.6, 1.0]
    assert f["speedup"].iloc[0] == pytest.approx(2 ** 1.2) and math.isnan(f["speedup"].iloc[2])


# ---------------------------------------------------------------------------------------------- the suite


def test_suite_info_on_the_shipped_dataset():
    from workbench.store.dataset import load

    full, problems = load("full"), load("problems")
    info = viz.get_suite_info(full, problems)
    # the dataset's SUMMARY.md: 31 problems, geo-means 1.503x eager and 0.971x torch.compile, latest timing stands
    assert len(info) == 31 and not info.failed and len(set(info.problems)) == 31
    assert info.geomean_vs_eager == pytest.approx(1.5029, abs=5e-4)
    assert info.geomean_vs_compile == pytest.approx(0.9710, abs=5e-4)
    assert info.speedup_vs_eager == sorted(info.speedup_vs_eager, reverse=True)
    i = info.problems.index("cross_entropy")
    assert info.speedup_vs_eager[i] == pytest.approx(3.2499, abs=1e-4)
    assert info.floor_fraction[i] == pytest.approx(0.494953 / 0.524112, rel=1e-4) and info.bound[i] == "memory"
    cs = info.problems.index("column_sum")  # timed twice: the later timing (0.9612 ms) stands
    assert info.candidate_ms[cs] == pytest.approx(0.9612, abs=1e-4)
    few = viz.get_suite_info(full, problems, only=["rmsnorm", "matmul_fp32"], sort_by="problem")
    assert few.problems == ["matmul_fp32", "rmsnorm"] and "2 problems" in few.text()
    with pytest.raises(ValueError, match="no full timing"):
        viz.get_suite_info(full, problems, only=["no_such"])
    go = pytest.importorskip("plotly.graph_objects")
    bars = viz.plot_suite_speedups(few)
    assert [t.type for t in bars.data] == ["bar", "bar"] and list(bars.data[0].x) == few.problems
    scatter = viz.plot_floor_fraction(few)
    assert len(scatter.data) == 3 and list(scatter.data[0].y) == few.floor_fraction
    assert isinstance(scatter, go.Figure)


# ---------------------------------------------------------------------------------------------- run directories


def _fake_run(root, run_id, params, status, traj=None, report=None, error=None):
    d = root / run_id
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"run_id": run_id, "status": status, "params": params,
                                                 "error": error, "git_sha": "abc", "git_dirty": False,
                                                 "gpu": None, "seconds": 1.0}))
    if traj is not None:
        pd.DataFrame(traj, columns=runs.TRAJECTORY_COLUMNS).to_parquet(d / runs.TRAJECTORY, index=False)
    if report is not None:
        (d / runs.REPORT).write_text(json.dumps(report))
    return d


def test_load_runs(tmp_path):
    root = tmp_path / "sw"
    t = lambda xs: [{"seq": i, "nid": i, "gpu_s": x, "measured": i + 1, "speedup": b, "best": b,  # noqa: E731
                     "status": "measured"} for i, (x, b) in enumerate(xs)]
    base = {"problem": "cross_entropy", "overrides": []}
    _fake_run(root, "a", {**base, "strategy": "greedy", "seed": 0}, "ok", t([(1, 2.0), (2, 3.0)]),
              {"best": {"speedup_vs_eager": 3.0}, "gpu_seconds": 2.0, "candidates": 2, "device": "replay:cuda:X"})
    _fake_run(root, "b", {**base, "strategy": "greedy", "seed": 1}, "ok", t([(1, 1.0)]),
              {"best": {"speedup_vs_eager": 1.0}, "gpu_seconds": 1.0, "candidates": 1, "device": "replay:cuda:X"})
    _fake_run(root, "c", {**base, "strategy": "mcts", "seed": 0}, "failed", error="RuntimeError: boom")
    (root / ".input").mkdir()  # not a run
    sr = runs.load_runs(root)
    assert sr.params == ["strategy", "seed"] and sr.seed == "seed" and sr.config_params == ["strategy"]
    assert list(sr.runs["run_id"]) == ["a", "b", "c"] and list(sr.failed["run_id"]) == ["c"]
    assert sr.runs["overrides"].tolist() == ["[]"] * 3  # lists as JSON text (hashable, groupable)
    assert sr.best_run()["run_id"] == "a" and len(sr.ok_trajectories) == 3
    s = sr.summary()
    assert s["strategy"].tolist() == ["greedy"] and s["runs"].tolist() == ["2/2"]
    assert s["best_median"].tolist() == [2.0] and s["best_max"].tolist() == [3.0]
    env = sr.environment()
    assert env["git_sha"] == "abc" and env["git_dirty"] is False and env["gpu"] is None
    with pytest.raises(FileNotFoundError):
        runs.load_runs(tmp_path / "nothing")


def test_runs_reports_browser_import_no_plotly():
    import subprocess
    import sys

    code = ("import sys, workbench.lab.runs, workbench.lab.report_html, workbench.lab.suite, workbench.lab.browser, "
            "workbench.viz; "
            "assert not any(m.startswith(('plotly', 'ipywidgets')) for m in sys.modules), 'a widget library imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_suite_info_on_the_shipped_benchmark(tmp_path):
    from workbench.lab import suite as reports

    full, problems = reports.suite_benchmark_data()
    info = viz.get_suite_info(full, problems, sort_by="problem")
    # results/suite/table.md: 34 problems (conv_net re-measured with the conv family, the latest row of a problem
    # standing), geo-means 1.524x eager, 1.014x torch.compile, 1.670x max-autotune (conv_net's new row has none)
    assert len(info) == 34 and not info.failed
    assert info.geomean_vs_eager == pytest.approx(1.524, abs=5e-4)
    assert info.geomean_vs_compile == pytest.approx(1.014, abs=5e-4)
    assert info.geomean_vs_max_autotune == pytest.approx(1.670, abs=5e-4)
    assert "vs max-autotune" in info.text() and "speedup_vs_max_autotune" in info.frame().columns
    assert all(b in ("memory", "compute") for b in info.bound)  # floors joined from the dataset's problems
    with pytest.raises(FileNotFoundError, match="no suite benchmark rows"):
        reports.suite_benchmark_data(tmp_path / "none.jsonl")
    dataset = viz.get_suite_info(*reports.suite_data())
    assert dataset.speedup_vs_max_autotune is None and "max-autotune" not in dataset.text()


# ---------------------------------------------------------------------------------------------- the HTML report


def test_sweep_report_failures_best_tree_calibration_and_notebook_links(tmp_path):
    """The report of a sweep with a screened and an unscreened run (real searches on the replay device, saved by
    `save_run`) and a failed one: notebook 03's failures table, the best run's tree, the surrogate's calibration on
    the screened run's forecasts, links to each run's notebook relative to wherever the report is written; plotly.js
    inlined once, before the first figure."""
    pytest.importorskip("plotly")
    from html.parser import HTMLParser

    from workbench.lab.report_html import forecast_rows, sweep_report_html, write_sweep_report
    from workbench.problems import Problem
    from workbench.widgets import open_device, open_search

    root = tmp_path / "sw"
    prob, dev = Problem.load("cross_entropy", []), open_device("replay")
    base = {"problem": "cross_entropy", "seed": 0}
    for surrogate in ("none", "roofline"):
        s = open_search(prob, dev, seed=0, budget_gpu_s=3.0, surrogate=surrogate)
        s.run(steps=50)
        d = _fake_run(root, f"surrogate={surrogate}", {**base, "surrogate": surrogate}, "ok")
        runs.save_run(s, d)
        (d / "notebook.ipynb").write_text("{}")
        if surrogate == "roofline":
            screened = s
    d = _fake_run(root, "surrogate=learned", {**base, "surrogate": "learned"}, "failed",
                  error="RuntimeError: no trained surrogate")
    m = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**m, "traceback": "Traceback ...\nRuntimeError: boom"}))
    (d / "notebook.ipynb").write_text("{}")  # a sweep keeps a failed run's notebook too

    rows = forecast_rows(screened.events)
    by_status = screened.report()["by_status"]
    assert len(rows) == len(screened.tree.nodes) - 1  # every node but the root (never screened) was forecast
    assert sum(r["status"] == "skipped" for r in rows) == by_status["skipped"] > 0
    assert all((r["correct"] is None) == (r["status"] == "skipped") for r in rows)

    out = write_sweep_report(root, tmp_path / "elsewhere" / "report.html")
    text = out.read_text()
    assert text.count("window.PlotlyConfig") == 1 and text.index("window.PlotlyConfig") < text.index("Plotly.newPlot")
    # two curves, the reliability diagram, the best run's tree and, when that run was unscreened, the best screened
    # run's tree (where the skipped nodes are)
    best_unscreened = runs.load_runs(root).best_run()["run_id"] == "surrogate=none"
    assert ("<h2>The best screened run's tree</h2>" in text) == best_unscreened
    assert text.count("Plotly.newPlot") == 4 + best_unscreened
    assert "<h2>Failures</h2>" in text and "RuntimeError: no trained surrogate" in text and "boom" in text
    assert "<h2>The best run's tree</h2>" in text and 'id="best-tree"' in text
    assert "<h2>The surrogate's calibration</h2>" in text and "<td>surrogate=roofline</td>" in text

    class Links(HTMLParser):
        def __init__(self):
            super().__init__()
            self.hrefs, self.srcs = [], []

        def handle_starttag(self, tag, attrs):
            self.hrefs += [v for k, v in attrs if k == "href"]
            self.srcs += [v for k, v in attrs if k == "src"]

    links = Links()
    links.feed(text)
    assert links.srcs == []  # nothing loaded from anywhere
    # one link per run in the runs table, one for the best run (and the best screened one); relative, and each
    # resolves from the report
    assert len(links.hrefs) == 4 + best_unscreened
    assert all(not h.startswith(("/", "file:", "http")) for h in links.hrefs)
    from urllib.parse import unquote

    assert all((out.parent / unquote(h)).resolve().is_file() for h in links.hrefs)
    assert sorted({unquote(h).split("/")[-2] for h in links.hrefs}) == ["surrogate=learned", "surrogate=none",
                                                                        "surrogate=roofline"]
    # written beside the runs, the links are the run folders'
    assert 'href="surrogate=none/notebook.ipynb"' in sweep_report_html(root)
