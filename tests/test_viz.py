"""Views of a search (workbench.viz), the notebook widget (workbench.widgets) and notebook 01 run headless.

The viz and widget tests drive a small Search over `RecordingGPU` (tests/test_search.py): softmax_rows at 8x100,
greedy, seed 0, three proposals a step, three steps: 7 nodes, node #3 the best, node #6 failing correctness. The
notebook runs on the CPU device through papermill, with a kernelspec written for this interpreter."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from test_search import STAGE_GPU_S, RecordingGPU

from workbench.problems import Problem
from workbench.profiling.findings import Finding
from workbench.search import Search

go = pytest.importorskip("plotly.graph_objects")
from workbench import viz  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@pytest.fixture(scope="module")
def problem():
    return Problem.load("softmax_rows", ["batch_size=8", "dim=100"])


def _search(problem, steps=3):
    s = Search(problem, RecordingGPU(), per_step=3, seed=0)
    s.run(steps=steps)
    return s


@pytest.fixture(scope="module")
def search(problem):
    return _search(problem)


def test_search_tree_info(search):
    info = viz.get_search_tree_info(search)
    assert info.ids == list(range(7)) and info.parents == [None, 0, 0, 0, 3, 3, 3]
    assert info.labels[0].startswith("#0 g0:BLOCK=128,ROWS_PER_PROGRAM=8,") and info.labels[0].endswith("…")
    assert info.labels[1] == "#1 g0:ROWS_PER_PROGRAM=1"  # only what changed against the parent
    assert info.labels[3] == "#3 g0:ROWS_PER_PROGRAM=32,num_warps=8"
    assert info.status == ["measured"] * 6 + ["failed"]
    assert info.fidelity[:4] == ["full_timing"] * 4 and info.fidelity[4:6] == ["quick_timing"] * 2
    assert info.speedup[6] is None and "output mismatch" in info.reason[6] and info.stage[6] == "correctness"
    assert info.best == search.best.nid == 3
    assert info.speedup[3] == pytest.approx(1 / 0.804) and info.log2_speedup[3] == pytest.approx(math.log2(1 / 0.804))
    # the same picture from the events alone (e.g. read back from a store)
    assert viz.get_search_tree_info(list(search.events)) == info


def test_budget_curve_info(search):
    info = viz.get_budget_curve_info(search)
    # root and the three children climb three device stages (0.5 GPU-s each); #4, #5 stop at quick timing
    # (not promoted), #6 fails correctness
    assert info.gpu_seconds == pytest.approx([x * STAGE_GPU_S for x in (3, 6, 9, 12, 14, 16, 17)])
    assert info.best_nid == [0, 0, 2, 3, 3, 3, 3]
    assert info.best[0] == pytest.approx(search.tree.nodes[0].speedup) and info.final == pytest.approx(1 / 0.804)
    assert info.gpu_seconds[-1] == search.budget.gpu_spent


def test_node_detail_info(search):
    info = viz.get_node_detail_info(search, 2)
    assert info.parent == 0 and info.move == "config:g0" and info.status == "measured"
    assert info.parent_speedup == search.tree.nodes[0].speedup
    assert "-    grid = (triton.cdiv(n_rows, 8),)" in info.diff
    assert "+    grid = (triton.cdiv(n_rows, 16),)" in info.diff
    assert info.last_stage.name == "full_timing" and info.last_stage.data["speedup_vs_eager"] == info.speedup
    failed = viz.get_node_detail_info(search, 6)
    assert failed.last_stage.verdict == "fail" and failed.speedup is None
    root = viz.get_node_detail_info(search, 0)
    assert root.parent_source is None and root.diff == "" and "class ModelNew" in root.source
    assert viz.get_node_detail_info(search).nid == 3  # default: the best node
    text = viz.render_node_detail(failed)
    assert "status: failed at correctness: output mismatch" in text and "```diff" in text
    assert "```python" in viz.render_node_detail(root)
    with pytest.raises(KeyError):
        viz.get_node_detail_info(search, 99)


def test_plots_return_figures(search):
    tree = viz.plot_search_tree(viz.get_search_tree_info(search))
    assert isinstance(tree, go.Figure) and len(tree.data) == 1 and tree.data[0].type == "icicle"
    assert len(tree.data[0].ids) == 7 and tree.data[0].parents[0] == ""
    assert tree.data[0].marker.colors[6] == viz.search_tree.FAILED_COLOUR
    assert viz.plot_search_tree(viz.get_search_tree_info(search), kind="treemap").data[0].type == "treemap"
    curve = viz.get_budget_curve_info(search)
    fig = viz.plot_budget_curve({"seed 0": curve, "again": curve})
    assert len(fig.data) == 2 and len(fig.data[0].x) == 7 and fig.data[0].line.shape == "hv"
    findings = [Finding("t", "DRAM at 91% of peak", "info", {}, "nothing to gain from bandwidth"),
                Finding("t", "low occupancy", "critical", {"occupancy": 0.1}, "fewer registers", "reduce_registers")]
    info = viz.get_findings_info(findings)
    assert info.severity == ["critical", "info"] and info.move == ["reduce_registers", ""]
    table = viz.plot_findings(findings)
    assert len(table.data) == 1 and table.data[0].type == "table" and len(table.data[0].cells.values[0]) == 2


def test_viz_info_imports_no_plotly():
    import subprocess

    code = ("import sys, workbench.viz as v, workbench.search; "
            "assert not any(m.startswith('plotly') for m in sys.modules), 'plotly imported'; "
            "assert 'workbench.widgets' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_widget_steps_the_search(problem):
    pytest.importorskip("ipywidgets")
    pytest.importorskip("anywidget")
    from workbench.widgets import SearchWidget, display_static

    search = _search(problem, steps=1)
    w = SearchWidget(search)
    assert w.step_button.description.startswith("Step") and len(w.figure.data[0].ids) == 1
    assert len(w.node_selector.options) == 1 and "node #0" in w.detail.value  # the best (root) is shown
    w.on_step()  # what the button's click calls
    assert search.steps == 2 and len(w.figure.data[0].ids) == len(search.tree.nodes) == 4
    assert len(w.node_selector.options) == 4 and "step 2" in w.summary.value
    search.step()  # a step from code reaches the widget through the listeners
    assert len(w.figure.data[0].ids) == len(search.tree.nodes) == 7
    w.node_selector.value = 6
    assert "failed at correctness" in w.detail.value
    w.close()
    assert w.on_event not in search.listeners
    static = display_static(search)
    assert isinstance(static.tree, go.Figure) and isinstance(static.budget, go.Figure)
    assert "node #3" in static.detail and "<div" in static.html and "step 3" in static.summary


def _kernelspec(root: Path) -> str:
    """A kernelspec for this interpreter (the one with workbench installed), found through JUPYTER_PATH."""
    d = root / "kernels" / "workbench-test"
    d.mkdir(parents=True)
    (d / "kernel.json").write_text(json.dumps({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f",
                                                        "{connection_file}"],
                                               "display_name": "workbench test", "language": "python"}))
    return "workbench-test"


@pytest.mark.timeout(120)
def test_notebook_01_runs_headless(tmp_path, monkeypatch):
    jupytext = pytest.importorskip("jupytext")
    papermill = pytest.importorskip("papermill")
    pytest.importorskip("ipykernel")
    nbformat = pytest.importorskip("nbformat")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    kernel = _kernelspec(tmp_path / "jupyter")
    src = tmp_path / "01.ipynb"
    jupytext.write(jupytext.read(NOTEBOOKS / "01_explore_search.py"), src)
    out = tmp_path / "01_out.ipynb"
    papermill.execute_notebook(str(src), str(out), kernel_name=kernel, cwd=str(tmp_path), progress_bar=False,
                               parameters={"problem": "softmax_rows", "overrides": ["batch_size=8", "dim=100"],
                                           "steps": 2, "device": "cpu", "interactive": False})
    nb = nbformat.read(out, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "'problem': 'softmax_rows@" in text and "'by_status'" in text and "'steps': 2" in text  # the report
    assert "refuses the timing stages" in text  # the CPU note
    assert any("text/html" in o.get("data", {}) and "plotly" in o["data"]["text/html"] for o in outputs)
