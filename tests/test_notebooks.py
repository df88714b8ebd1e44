"""Notebooks 02-05 executed under papermill, the replay sweep of notebook 01 (experiments/replay_sweep.yaml) with no
GPU, the HTML report of that sweep and of the main job's screening sweep, and those reports and the executed
notebooks (exported by nbconvert, as `jupyter nbconvert --to html` writes them) opened in a real headless Chromium
with no network: figures drawn, no "Error displaying widget", skipped nodes labelled as skipped.

One sweep (2 strategies x 3 seeds on cross_entropy, 15 GPU-s each, replaying the shipped H200 measurements) is run
once for the module; notebook 03, the report and the browser read its run directories. The kernel is this
interpreter's (`workbench.lab.sweep.ensure_kernelspec`), so nothing beyond `pip install -e '.[test]'` is needed, and
Chromium (`apt-get install chromium`; `WORKBENCH_BROWSER=1 bash scripts/setup_env.sh` installs it). In CI a missing
Chromium is a failure, not a skip."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

from workbench.lab.sweep import KERNEL_NAME, ensure_kernelspec, run_sweep
from workbench.lab.sweep_config import load_sweep

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
REPLAY = ROOT / "experiments" / "replay_sweep.yaml"
SCREENING = ROOT / "experiments" / "screening_sweep.yaml"  # the main job's (scripts/main.sh)


def _needs_papermill():
    for m in ("papermill", "jupytext", "ipykernel", "nbformat", "plotly"):
        pytest.importorskip(m)


@pytest.fixture(scope="module")
def replay_sweep(tmp_path_factory):
    _needs_papermill()
    out = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDA_VISIBLE_DEVICES", "")  # device auto must mean replay here, GPU or not
        return run_sweep(REPLAY, out_root=out)


def _execute(name: str, tmp_path: Path, params: dict, monkeypatch) -> dict:
    import jupytext
    import nbformat
    import papermill

    kernels = ensure_kernelspec(tmp_path / "kernel")
    monkeypatch.setenv("JUPYTER_PATH", str(kernels))
    src = tmp_path / f"{name}.ipynb"
    jupytext.write(jupytext.read(NOTEBOOKS / f"{name}.py"), src)
    out = tmp_path / f"{name}_out.ipynb"
    papermill.execute_notebook(str(src), str(out), kernel_name=KERNEL_NAME, cwd=str(ROOT), progress_bar=False,
                               parameters=params)
    nb = nbformat.read(out, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    # figures that survive: each plotly figure also as inline HTML, plotly.js inlined once and loaded from nowhere
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert sum("window.PlotlyConfig" in h for h in html) == 1 and not any("<script src=" in h for h in html)
    assert all("Plotly.newPlot" in o["data"].get("text/html", "") for o in outputs
               if "application/vnd.plotly.v1+json" in o.get("data", {}))
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    return {"outputs": outputs, "path": out,
            "text": "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs),
            "figures": [json.loads(o["data"]["application/vnd.plotly.v1+json"])
                        if isinstance(o["data"]["application/vnd.plotly.v1+json"], str)
                        else o["data"]["application/vnd.plotly.v1+json"]
                        for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]}


# ---------------------------------------------------------------------------------------------- the sweep on replay


@pytest.mark.timeout(300)
def test_replay_sweep_runs_without_a_gpu(replay_sweep):
    s = replay_sweep
    cfg = load_sweep(REPLAY)
    assert len(s.runs) == 6 and len(s.ok) == 6, s.text()
    assert [r.params["strategy"] for r in s.runs] == ["greedy"] * 3 + ["mcts"] * 3
    for r in s.runs:
        m = json.loads((r.dir / "manifest.json").read_text())
        assert m["status"] == "ok" and m["sweep"] == "replay" and m["params"] == r.params
        assert m["git_sha"] and isinstance(m["git_dirty"], bool) and m["torch"] and m["numpy"] and "gpu" in m
        rep = json.loads((r.dir / "report.json").read_text())
        assert rep["device"] == "replay:cuda:NVIDIA H200" and rep["problem"].startswith("cross_entropy@")
        assert rep["replay"]["answered"] > 0
        assert 15.0 <= rep["gpu_seconds"] < 17.0  # stopped at the 15 GPU-s budget (the last step overshoots)
        assert rep["best"]["speedup_vs_eager"] > 2.5  # cross_entropy's measured pool holds 2.6x-3.2x kernels
        events = [json.loads(x) for x in (r.dir / "events.jsonl").read_text().splitlines()]
        assert sum(e["type"] == "node" for e in events) == rep["candidates"]
        assert (r.dir / "nodes.parquet").is_file() and (r.dir / "trajectory.parquet").is_file()
    assert load_sweep(s.root / "sweep.yaml") == cfg  # the resolved config beside the runs
    again = run_sweep(REPLAY, out_root=s.root.parent)  # resume: everything finished, nothing re-runs
    assert [r.status for r in again.runs] == ["skipped"] * 6


# ---------------------------------------------------------------------------------------------- notebooks


@pytest.mark.timeout(300)
def test_notebook_02_surrogate_calibration(tmp_path, monkeypatch):
    _needs_papermill()
    pytest.importorskip("lightgbm")
    # smoke sizes: two folds, 10 trees per LightGBM model of the learned surrogate (about 15 s on 2 cores)
    r = _execute("02_surrogate_calibration", tmp_path,
                 {"surrogates": ["learned", "roofline", "prior", "oracle"], "folds": 2, "trees": 10,
                  "interactive": False}, monkeypatch)
    assert "ece" in r["text"] and "aurc" in r["text"]  # the metrics table
    # a progress line per fold of each surrogate (a bar in Lab), in order
    assert "problem split, 2 folds: 1/8 learned, fold 1 of 2" in r["text"]
    assert "problem split, 2 folds: 8/8 oracle, fold 2 of 2" in r["text"]
    titles = [f["layout"]["title"]["text"] for f in r["figures"]]
    assert len(titles) == 3 and titles[0].startswith("reliability") and titles[1].startswith("risk-coverage")
    assert titles[2].startswith("budget recall over 33 problems")
    rel = r["figures"][0]
    assert [t["name"].split(" ")[0] for t in rel["data"]] == ["calibrated", "learned", "roofline", "prior", "oracle"]
    assert rel["data"][4]["name"] == "oracle (ECE 0.000)"  # the measurements themselves are calibrated
    recall = {t["name"]: t["y"] for t in r["figures"][2]["data"]}
    assert recall["oracle"][0] == 1.0 and recall["prior"][0] < 1.0  # the oracle finds the best with one measurement
    assert "pairwise_accuracy" in r["text"]  # the per-problem table of the learned surrogate
    _drawn_offline(r, tmp_path, figures=3)


@pytest.mark.timeout(300)
def test_notebook_03_sweep_report(replay_sweep, tmp_path, monkeypatch):
    r = _execute("03_sweep_report", tmp_path, {"runs_dir": str(replay_sweep.root)}, monkeypatch)
    curves, tree = r["figures"]
    medians = [t for t in curves["data"] if t.get("name", "").startswith("strategy=")]
    assert [t["name"] for t in medians] == ["strategy=greedy (3 runs)", "strategy=mcts (3 runs)"]
    assert all(len(t["x"]) > 5 and max(t["y"]) > 2.5 for t in medians)
    assert tree["data"][0]["type"] in ("icicle", "treemap")  # a treemap past 24 leaves
    assert "best_speedup" in r["text"] and "git_sha" in r["text"]  # the runs and environment tables
    assert "best_median" in r["text"] and "replay" in r["text"]
    _drawn_offline(r, tmp_path, figures=2)


@pytest.mark.timeout(300)
def test_notebook_03_runs_a_sweep_with_a_progress_bar(tmp_path, monkeypatch):
    """With `sweep_config`, notebook 03 runs the sweep first (here one replayed search of notebook 01), its progress
    a line per run headless (`ItemProgress`; a bar in Lab), then reads that sweep's runs."""
    _needs_papermill()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # device auto: replay, in the nested run too
    cfg = tmp_path / "one.yaml"
    cfg.write_text(f"name: one\nnotebook: {NOTEBOOKS / '01_explore_search.py'}\n"
                   "base: {problem: cross_entropy, overrides: [], strategy: greedy, steps: 100, budget_gpu_s: 3.0, "
                   "compare: false, device: auto, interactive: false}\ngrid: {seed: [0]}\njobs: 1\n")
    r = _execute("03_sweep_report", tmp_path, {"sweep_config": str(cfg), "sweep_out": str(tmp_path / "runs"),
                                                "interactive": False}, monkeypatch)
    [line] = [x for x in r["text"].splitlines() if x.startswith("sweep: ")]
    assert line.startswith("sweep: 1/1 ok seed=0"), line
    run_dir = next((tmp_path / "runs" / "one").glob("seed=0*"))
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "ok"
    curves, tree = r["figures"]
    median = curves["data"][0]
    assert len(median["x"]) > 1 and max(median["y"]) > 2.5  # cross_entropy's replayed pool holds 2.6x-3.2x kernels
    assert tree["layout"]["title"]["text"].startswith("search tree:")
    assert run_dir.name in r["text"]  # the runs table is the new sweep's
    _drawn_offline(r, tmp_path, figures=2)


@pytest.mark.timeout(300)
def test_notebook_04_suite_benchmark(tmp_path, monkeypatch):
    _needs_papermill()
    r = _execute("04_suite_benchmark", tmp_path, {"sort_by": "problem"}, monkeypatch)
    # results/suite/table.md: 34 problems, geo-means 1.524x eager, 1.014x torch.compile, 1.670x max-autotune
    assert "34 problems with a full timing" in r["text"] and "1.52x vs eager" in r["text"]
    assert "1.01x vs torch.compile" in r["text"] and "1.67x vs max-autotune" in r["text"]
    bars, scatter = r["figures"]
    assert [t["type"] for t in bars["data"]] == ["bar", "bar", "bar"] and len(bars["data"][0]["x"]) == 34
    assert bars["data"][0]["x"][:2] == ["attention", "bias_gelu_residual"]  # sorted by problem
    assert [t["name"] for t in scatter["data"]] == ["best candidate", "torch.compile", "eager"]
    _drawn_offline(r, tmp_path, figures=2)


@pytest.mark.timeout(300)
def test_notebook_05_checks_files_with_a_progress_bar(tmp_path, monkeypatch):
    """With `kernelbench_dir`, notebook 05 checks the files on the CPU first (`run_files` with `ItemProgress`: a
    line per file headless, a bar in Lab) and shows their report."""
    _needs_papermill()
    from test_kernelbench import RELU

    (tmp_path / "kb" / "level1").mkdir(parents=True)
    (tmp_path / "kb" / "level1" / "1_relu.py").write_text(RELU)
    out = tmp_path / "out"
    r = _execute("05_kernelbench", tmp_path, {"kernelbench_dir": str(tmp_path / "kb"), "results_dir": str(out),
                                              "interactive": False}, monkeypatch)
    [line] = [x for x in r["text"].splitlines() if x.startswith("kernelbench: ")]
    assert line.startswith("kernelbench: 1/1 level1/1_relu.py: correct, kernel"), line
    report = json.loads((out / "report.json").read_text())
    assert [f["file"] for f in report["files"]] == ["level1/1_relu.py"] and report["run"]["device"] == "cpu"
    assert "1 files, 1 correct" in r["text"] and report["timing"].startswith("not measured")
    assert len(r["figures"]) == 2  # fast_p and the per-file bars, empty on the CPU and saying so
    _drawn_offline(r, tmp_path, figures=2)


# ---------------------------------------------------------------------------------------------- the HTML report


@pytest.fixture(scope="module")
def report(replay_sweep, tmp_path_factory):
    from workbench.cli import main

    out = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["report", str(replay_sweep.root), "--out", str(out)]) == 0
    return out


def test_report_is_self_contained(report, replay_sweep):
    from html.parser import HTMLParser

    class Refs(HTMLParser):
        refs: list = []

        def handle_starttag(self, tag, attrs):
            self.refs += [(tag, k, v) for k, v in attrs if k in ("src", "href")]

    text = report.read_text()
    parser = Refs()
    parser.feed(text)
    # no script, stylesheet or image loaded from anywhere (plotly.js is inlined); the only references are links to
    # the runs' executed notebooks (six in the runs table, the best run's once more), relative to the report
    links = [v for tag, k, v in parser.refs if tag == "a" and k == "href"]
    assert len(parser.refs) == len(links) == 7
    assert all((report.parent / unquote(h)).resolve() == r.dir.resolve() / "notebook.ipynb"
               for h, r in zip(links, replay_sweep.runs))
    assert all((report.parent / unquote(h)).is_file() for h in links)
    assert text.count("<script") >= 4 and len(text) > 3_000_000  # plotly.js itself (~4.7 MB) and three figures
    assert text.count("window.PlotlyConfig") == 1  # plotly.js once
    # curves against GPU-seconds and against measurements, the best run's tree (no run screened: no calibration)
    assert text.count("Plotly.newPlot") == 3 and "The surrogate's calibration" not in text
    assert "<h2>Failures</h2>" in text and "None: all 6 runs finished ok." in text
    best = replay_sweep_best(replay_sweep)
    assert "<h2>The best run's tree</h2>" in text and f"<th>run</th><td>{best}</td>" in text
    assert "6 of 6 runs finished ok" in text and "replay:cuda:NVIDIA H200" in text
    for r in replay_sweep.runs:
        assert r.run_id in text


def replay_sweep_best(sweep) -> str:
    from workbench.lab.runs import load_runs

    return load_runs(sweep.root).best_run()["run_id"]


@pytest.fixture(scope="module")
def screening_sweep(tmp_path_factory):
    _needs_papermill()
    out = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDA_VISIBLE_DEVICES", "")
        return run_sweep(SCREENING, out_root=out)


@pytest.mark.timeout(400)
def test_main_job_screened_against_unscreened(screening_sweep, tmp_path):
    """The main job's sweep (scripts/main.sh): the roofline surrogate against none, 3 seeds each, at the same
    GPU-seconds limit on replay; its report holds both curves and the surrogate's calibration."""
    from workbench.cli import main

    s = screening_sweep
    assert len(s.runs) == 6 and len(s.ok) == 6, s.text()
    assert [r.params["surrogate"] for r in s.runs] == ["none"] * 3 + ["roofline"] * 3
    for r in s.runs:
        rep = json.loads((r.dir / "report.json").read_text())
        assert rep["device"] == "replay:cuda:NVIDIA H200" and rep["problem"].startswith("cross_entropy@")
        assert rep["gpu_seconds"] < 17.0 and rep["best"]["speedup_vs_eager"] > 2.5  # the same 15 GPU-s limit
        if r.params["surrogate"] == "roofline":
            assert rep["surrogate"] == "RooflineSurrogate" and rep["skipped_by_surrogate"] > 0
        else:
            assert rep["surrogate"] is None and rep["skipped_by_surrogate"] == 0 and rep["gpu_seconds"] >= 15.0
    out = tmp_path / "report.html"
    assert main(["report", str(s.root), "--out", str(out)]) == 0
    text = out.read_text()
    assert "surrogate=none" in text and "surrogate=roofline" in text
    assert "<h2>The surrogate's calibration</h2>" in text and 'id="calibration"' in text
    # two curves, the calibration, the best run's tree and, when that run was unscreened, the best screened one's
    best_unscreened = json.loads((Path(replay_sweep_best_dir(s)) / "report.json").read_text())["surrogate"] is None
    assert ("<h2>The best screened run's tree</h2>" in text) == best_unscreened
    assert text.count("Plotly.newPlot") == 4 + best_unscreened and text.count("window.PlotlyConfig") == 1


@pytest.mark.timeout(120)
def test_main_job_report_in_a_real_browser(screening_sweep, tmp_path):
    """The main job's report (scripts/main.sh) opened in the headless Chromium with no network: every figure drawn,
    the screened tree's skipped nodes labelled "skipped" on their tiles and in the legend, deferred ones marked."""
    from workbench.cli import main
    from workbench.lab.browser import dump_dom
    from workbench.viz.search_tree import DEFERRED_MARK, STATUS_KEY, TILE_SIZE_NOTE

    _chromium_or_fail()
    out = tmp_path / "report.html"
    assert main(["report", str(screening_sweep.root), "--out", str(out)]) == 0
    figures = out.read_text().count("Plotly.newPlot")
    dom = dump_dom(out)
    assert dom.count('class="main-svg"') >= 2 * figures  # each figure drawn (two svg layers each)
    assert "Error displaying widget" not in dom
    tree = dom[dom.rindex('id="best-'):]  # the last tree: the best screened run's (the best run's when screened)
    tiles = re.findall(r'<text[^>]*class="slicetext"[^>]*data-unformatted="([^"]*)"', tree)
    from workbench.lab.runs import load_runs

    sr = load_runs(screening_sweep.root)
    screened = sr.ok[sr.ok["surrogate"] == "roofline"]
    run = screened.loc[screened["best_speedup"].astype(float).idxmax(), "run_id"]
    skipped = sum(bool(e.get("skipped")) for e in sr.events(run) if e.get("type") == "node")
    # every skipped node's tile says so (text too small to read is hidden, still in the DOM), none says "failed"
    assert skipped >= 10 and sum(t.startswith("&lt;b&gt;skipped&lt;/b&gt;") for t in tiles) == skipped
    assert any(f"x {DEFERRED_MARK}&lt;/b&gt;" in t for t in tiles)  # roofline: every measured node was deferred
    legend = re.findall(r'class="legendtext"[^>]*>([^<]*)<', tree)
    assert STATUS_KEY["skipped"][0] in legend and STATUS_KEY["deferred"][0] in legend
    assert TILE_SIZE_NOTE in tree


def replay_sweep_best_dir(sweep) -> str:
    from workbench.lab.runs import load_runs

    return load_runs(sweep.root).best_run()["dir"]


def test_main_job_runs_the_screening_sweep():
    script = (ROOT / "scripts" / "main.sh").read_text()
    assert "experiments/screening_sweep.yaml" in script
    cfg = load_sweep(SCREENING)
    assert cfg.grid == {"surrogate": ["none", "roofline"], "seed": [0, 1, 2]}
    assert cfg.base["budget_gpu_s"] == 15.0 and cfg.base["device"] == "auto" and cfg.base["interactive"] is False
    r = subprocess.run(["bash", "-n", str(ROOT / "scripts" / "main.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_report_command_errors(tmp_path, capsys):
    from workbench.cli import main

    assert main(["report", str(tmp_path / "none")]) == 2
    assert "no sweep directory" in capsys.readouterr().err


def _chromium_or_fail():
    from workbench.lab.browser import find_chromium

    exe = find_chromium()
    if exe is None:
        msg = ("no Chromium: the browser test needs it (apt-get install chromium, or WORKBENCH_BROWSER=1 bash "
               "scripts/setup_env.sh, which installs it where apt is available)")
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return exe


def _drawn_offline(executed: dict, tmp_path: Path, figures: int) -> None:
    """An executed notebook (`_execute`'s result) exported to HTML by nbconvert and opened in the headless Chromium
    with every host unresolvable: each figure drawn by the plotly.js the notebook inlined, no widget error."""
    _chromium_or_fail()
    import nbformat
    from nbconvert import HTMLExporter

    from workbench.lab.browser import dump_dom

    body, _ = HTMLExporter().from_notebook_node(nbformat.read(executed["path"], as_version=4))
    page = tmp_path / (executed["path"].stem + ".html")
    page.write_text(body, encoding="utf-8")
    dom = dump_dom(page)
    assert "Error displaying widget" not in dom
    assert dom.count('class="main-svg"') >= 2 * figures, "a figure was not drawn"  # two svg layers per figure
    assert "Plotly is not defined" not in dom


# plotly's plot background and the first two trace colours (greedy, mcts) as drawn
PLOT_BG, GREEDY, MCTS = (229, 236, 246), (31, 119, 180), (214, 39, 40)


def _pixels(png: Path, colour: tuple[int, int, int], tol: int = 8) -> int:
    import numpy as np
    from PIL import Image

    a = np.asarray(Image.open(png).convert("RGB")).astype(int)
    return int((np.abs(a - np.array(colour)).max(axis=2) <= tol).sum())


@pytest.mark.timeout(300)
def test_report_in_a_real_browser(report, tmp_path):
    _chromium_or_fail()
    pytest.importorskip("PIL")
    import numpy as np
    from PIL import Image

    from workbench.lab.browser import dump_dom, screenshot

    shot = screenshot(report, tmp_path / "report.png", width=1280, height=1600)
    empty = tmp_path / "blank.html"
    empty.write_text("<!DOCTYPE html><html><body></body></html>")
    blank = screenshot(empty, tmp_path / "blank.png", width=1280, height=1600)
    a = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    b = np.asarray(Image.open(blank).convert("RGB")).astype(int)
    assert a.shape == b.shape == (1600, 1280, 3)
    assert (b == 255).all()  # the blank page is blank
    changed = (np.abs(a - b).max(axis=2) > 16).mean()
    assert changed > 0.2, f"only {changed:.1%} of the screenshot differs from a blank page"
    # the two plot areas are painted and the median lines of both strategies drawn in them
    assert _pixels(shot, PLOT_BG) > 200_000
    assert _pixels(shot, GREEDY) > 300 and _pixels(shot, MCTS) > 300
    dom = dump_dom(report)
    assert dom.count('class="main-svg"') >= 4  # plotly renders two svg layers per figure
    assert dom.count("js-line") >= 4  # the median traces as SVG paths


def test_report_script_parses():
    """scripts/sweep_report.sh (the README's main job) is the sweep and report commands tested above, in a script:
    bash must at least parse it."""
    r = subprocess.run(["bash", "-n", str(ROOT / "scripts" / "sweep_report.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
