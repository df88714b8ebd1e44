"""Screenshots for README and issue 20, taken in headless Chromium with no network (`workbench.lab.browser`).

    python experiments/screenshots.py [--out results/screenshots] [--keep DIR]

(a) `widget_screened_search_replay.png`: what `SearchWidget` draws for a screened search of at least 100 nodes on the
    replay device (cross_entropy, greedy, the roofline surrogate, seed 0; every number measured on the H200 and
    replayed): the summary line, the widget's own tree and budget-curve figures (`w.figure`, `w.budget_figure`) and
    its node panel (`w.detail`, the best node), put on one self-contained page. The ipywidgets around them (buttons,
    boxes) need a running Jupyter server to draw and are not in the picture.
(b) `notebook_01_offline.png`: notebook 01 executed headless by papermill (the same search, screened, with static
    findings and the unscreened comparison, `interactive=False`), exported by nbconvert's HTML exporter (what
    `jupyter nbconvert --to html` writes) and opened with every host unresolvable: the figures are drawn by the
    plotly.js the notebook inlined once. The DOM is checked for drawn figures and for "Error displaying widget".

Needs the `widgets` and `test` extras, Chromium (`apt-get install chromium`) and, for (b), nbconvert
(`pip install nbconvert`). The HTML pages are kept under `--keep` when given (they hold plotly.js: about 5 MB each).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROBLEM, STRATEGY, SURROGATE, SEED, MIN_NODES = "cross_entropy", "greedy", "roofline", 0, 100


def widget_page(path: Path) -> dict:
    """(a)'s page: a screened search grown to MIN_NODES nodes, shown through a real `SearchWidget`."""
    import html

    import plotly.graph_objects as go

    from workbench.problems import Problem
    from workbench.viz.export import figure_html
    from workbench.widgets import SearchWidget, open_device, open_search

    search = open_search(Problem.load(PROBLEM, []), open_device("replay"), strategy=STRATEGY, seed=SEED,
                         surrogate=SURROGATE)
    while len(search.tree.nodes) < MIN_NODES and not search.step().stopped:
        pass
    w = SearchWidget(search, background=False)
    w.select(w.tree_info.best)
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><style>body{font-family:system-ui,sans-serif;"
            "margin:12px;font-size:13px}</style></head><body>"
            f"<p>{w.summary.value}</p>"
            + figure_html(go.Figure(w.figure), include_plotlyjs=True, full_html=False)
            + figure_html(go.Figure(w.budget_figure), include_plotlyjs=False, full_html=False)
            + w.detail.value + "</body></html>")
    path.write_text(page, encoding="utf-8")
    r = search.report()
    return {"nodes": r["candidates"], "by_status": r["by_status"], "best": (r["best"] or {}).get("speedup_vs_eager"),
            "summary": html.unescape(w.summary.value), "tree": w.figure.data[0].type}


def notebook_page(path: Path, work: Path) -> dict:
    """(b)'s page: notebook 01 executed by papermill, exported by nbconvert."""
    import jupytext
    import nbformat
    import papermill
    from nbconvert import HTMLExporter

    from workbench.lab.sweep import KERNEL_NAME, ensure_kernelspec

    os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(ensure_kernelspec(work)),
                                                             os.environ.get("JUPYTER_PATH", "")) if p)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # device auto: the replay of the shipped H200 measurements
    src, out = work / "01.ipynb", work / "01_out.ipynb"
    jupytext.write(jupytext.read(ROOT / "notebooks" / "01_explore_search.py"), src)
    papermill.execute_notebook(str(src), str(out), kernel_name=KERNEL_NAME, cwd=str(ROOT), progress_bar=False,
                               parameters={"problem": PROBLEM, "strategy": STRATEGY, "seed": SEED, "steps": 12,
                                           "surrogate": SURROGATE, "findings": "static", "compare": True,
                                           "interactive": False})
    body, _ = HTMLExporter().from_notebook_node(nbformat.read(out, as_version=4))
    path.write_text(body, encoding="utf-8")
    return {"cells": len(nbformat.read(out, as_version=4).cells), "html_bytes": len(body)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "results" / "screenshots"))
    ap.add_argument("--keep", default=None, help="a folder for the HTML pages the screenshots were taken of")
    args = ap.parse_args()
    from workbench.lab.browser import dump_dom, find_chromium, screenshot

    if find_chromium() is None:
        print("no Chromium: nothing drawn (apt-get install chromium, or set WORKBENCH_CHROMIUM)", file=sys.stderr)
        return 2
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="wb-shots-") as tmp:
        pages = Path(args.keep) if args.keep else Path(tmp)
        pages.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        facts = widget_page(pages / "widget.html")
        shot = screenshot(pages / "widget.html", out / "widget_screened_search_replay.png", width=1400,
                          height=2600)
        drawn = dump_dom(pages / "widget.html").count('class="main-svg"') // 2
        print(f"(a) {shot}: {facts['nodes']} nodes {facts['by_status']}, best {facts['best']:.3g}x, "
              f"a {facts['tree']}; {drawn} figures drawn; "
              f"{time.perf_counter() - t0:.0f} s\n    {facts['summary']}")
        try:
            import nbconvert  # noqa: F401
        except ImportError:
            print("(b) skipped: nbconvert is not installed (pip install nbconvert)", file=sys.stderr)
            return 1
        t0 = time.perf_counter()
        facts = notebook_page(pages / "notebook_01.html", Path(tmp))
        shot = screenshot(pages / "notebook_01.html", out / "notebook_01_offline.png", width=1280, height=9000,
                          wait_ms=20000)
        dom = dump_dom(pages / "notebook_01.html", wait_ms=20000)
        drawn = dom.count('class="main-svg"') // 2
        errors = dom.count("Error displaying widget")
        print(f"(b) {shot}: {facts['cells']} cells, {facts['html_bytes'] / 1e6:.1f} MB of HTML; {drawn} figures "
              f"drawn offline; 'Error displaying widget' {errors} times; 'skipped' in the page: "
              f"{'skipped' in dom}; {time.perf_counter() - t0:.0f} s")
        if not drawn or errors:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
