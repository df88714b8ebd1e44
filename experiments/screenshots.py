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
(c) `widget_jupyterlab_replay.png`: the live `SearchWidget` in a real JupyterLab: a Jupyter server started here
    (token-protected, on 127.0.0.1, its settings and workspaces in a temporary folder) opens a three-cell notebook
    (the same screened search grown to MIN_NODES nodes on replay, then the widget), the headless Chromium runs it
    with Lab's own *Run All* command over the DevTools protocol (`workbench.lab.browser.DevTools`), waits for the
    widget's buttons and figures, and screenshots the page: ipywidgets controls, tree, budget curve, node panel.
    The figures must span the output area (plotly's own FigureWidget stays at its 700 px default there:
    `workbench.widgets.fit_width`); the drawn widths are printed and a figure narrower than 90 % of it fails.

Needs the `widgets` and `test` extras (JupyterLab and nbconvert are in `test`) and Chromium (`apt-get install
chromium`). `--only a,c` takes some of them. The HTML pages are kept under `--keep` when given (they hold plotly.js:
about 5 MB each).
"""
from __future__ import annotations

import argparse
import os
import secrets
import subprocess
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


LAB_CELLS = [
    "from workbench.problems import Problem\n"
    "from workbench.widgets import SearchWidget, open_device, open_search, setup_figures\n\n"
    "setup_figures()",
    f"search = open_search(Problem.load({PROBLEM!r}, []), open_device('replay'), strategy={STRATEGY!r}, "
    f"seed={SEED}, surrogate={SURROGATE!r})\n"
    f"while len(search.tree.nodes) < {MIN_NODES} and not search.step().stopped:\n"
    "    pass",
    "w = SearchWidget(search)\nw.select(w.tree_info.best)\nw",
]
# the notebook panel, its kernel idle, and the widget drawn: buttons, the tree and budget figures (plotly's svg)
# the notebook panel among the main area's widgets (a headless page has no focus, so `shell.currentWidget` is null)
_PANEL = "Array.from(jupyterapp.shell.widgets('main')).find(w => w.sessionContext)"
_KERNEL = f"({_PANEL}).sessionContext.session.kernel"
_READY = (f"!!(window.jupyterapp && {_PANEL} && ({_PANEL}).sessionContext.session && "
          f"({_KERNEL}).connectionStatus === 'connected' && ({_KERNEL}).status === 'idle')")
_DRAWN = (f"{_READY} && document.querySelectorAll('.jp-OutputArea-output .widget-button').length >= 3 && "
          "document.querySelectorAll('.jp-OutputArea-output .main-svg').length >= 4")

# the widget's output area and each plotly figure's drawn width (its first svg), in CSS pixels
_WIDTHS = ("(() => { const out = document.querySelector('.jp-OutputArea-output .widget-button')"
           ".closest('.jp-OutputArea-output'); return {output_px: Math.round(out.getBoundingClientRect().width), "
           "figure_px: Array.from(out.querySelectorAll('.js-plotly-plot')).map(g => "
           "Math.round(g.querySelector('.main-svg').getBoundingClientRect().width))}; })()")


def _wait_for_server(url: str, server, timeout: float) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Jupyter server did not answer at {url.split('?')[0]}") from None
            time.sleep(0.5)


def lab_shot(out_png: Path, work: Path, port_wait_s: float = 90) -> dict:
    """(c): the widget in a live JupyterLab, driven by the headless Chromium."""
    import nbformat

    from workbench.lab.browser import DevTools, free_port
    from workbench.lab.sweep import KERNEL_NAME, ensure_kernelspec

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in LAB_CELLS])
    nb.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": KERNEL_NAME, "language": "python"}
    nbformat.write(nb, work / "widget.ipynb")
    # no "Jupyter news?" toast over the picture (the page has no network to fetch news anyway)
    news = work / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text('{"fetchNews": "false", "checkForUpdates": false}')
    port, token = free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTER_PATH": str(ensure_kernelspec(work)), "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
           "JUPYTER_CONFIG_DIR": str(work / "config"), "CUDA_VISIBLE_DEVICES": ""}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--ServerApp.port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
         "--LabApp.expose_app_in_browser=True", f"--LabApp.user_settings_dir={work / 'settings'}",
         f"--LabApp.workspaces_dir={work / 'workspaces'}"],
        env=env, stdout=subprocess.DEVNULL, stderr=open(work / "lab.log", "w"))
    try:
        _wait_for_server(f"http://127.0.0.1:{port}/api/status?token={token}", server, port_wait_s)
        with DevTools(width=1500, height=2300) as page:
            page.navigate(f"http://127.0.0.1:{port}/lab/tree/widget.ipynb?token={token}")
            t0 = time.perf_counter()
            try:
                page.wait_for(_READY, timeout=port_wait_s)
            except TimeoutError:
                page.screenshot(work / "not_ready.png")  # what Lab showed instead, for the error below
                raise
            page.evaluate(f"jupyterapp.shell.collapseLeft(); jupyterapp.shell.activateById(({_PANEL}).id); "
                          "jupyterapp.commands.execute('notebook:run-all-cells'); 1")
            page.wait_for(_DRAWN, timeout=300, poll=1.0)
            ran_s = time.perf_counter() - t0
            page.evaluate("document.querySelector('.jp-OutputArea-output .widget-button').closest("
                          "'.jp-Cell').scrollIntoView(); 1")
            time.sleep(2)  # plotly's resize after the scroll
            dom = page.evaluate("document.documentElement.outerHTML")
            widths = page.evaluate(_WIDTHS)
            page.screenshot(out_png)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
    return {"seconds": ran_s, "errors": dom.count("Error displaying widget"), "svg": dom.count('class="main-svg"'),
            "skipped": dom.count(">skipped<"), "buttons": dom.count("widget-button"), **widths}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "results" / "screenshots"))
    ap.add_argument("--keep", default=None, help="a folder for the HTML pages the screenshots were taken of")
    ap.add_argument("--only", default="a,b,c", help="which screenshots: a, b, c (comma-separated)")
    args = ap.parse_args()
    only = {x.strip() for x in args.only.split(",")}
    from workbench.lab.browser import dump_dom, find_chromium, screenshot

    if find_chromium() is None:
        print("no Chromium: nothing drawn (apt-get install chromium, or set WORKBENCH_CHROMIUM)", file=sys.stderr)
        return 2
    out = Path(args.out)
    failed = False
    with tempfile.TemporaryDirectory(prefix="wb-shots-") as tmp:
        pages = Path(args.keep) if args.keep else Path(tmp)
        pages.mkdir(parents=True, exist_ok=True)
        if "a" in only:
            t0 = time.perf_counter()
            facts = widget_page(pages / "widget.html")
            shot = screenshot(pages / "widget.html", out / "widget_screened_search_replay.png", width=1400,
                              height=2600)
            drawn = dump_dom(pages / "widget.html").count('class="main-svg"') // 2
            print(f"(a) {shot}: {facts['nodes']} nodes {facts['by_status']}, best {facts['best']:.3g}x, "
                  f"a {facts['tree']}; {drawn} figures drawn; "
                  f"{time.perf_counter() - t0:.0f} s\n    {facts['summary']}")
        if "b" in only:
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
            failed |= not drawn or bool(errors)
        if "c" in only:
            work = Path(tempfile.mkdtemp(prefix="lab-", dir=tmp))
            shot = out / "widget_jupyterlab_replay.png"
            facts = lab_shot(shot, work)
            print(f"(c) {shot}: the widget in a live JupyterLab, drawn after {facts['seconds']:.0f} s (Run All of a "
                  f"{MIN_NODES}-node screened search); {facts['buttons']} widget buttons, {facts['svg'] // 2} plotly "
                  f"figures, 'skipped' tiles {facts['skipped']}; 'Error displaying widget' {facts['errors']} times; "
                  f"figures drawn {facts['figure_px']} px wide in a {facts['output_px']} px output area")
            failed |= bool(facts["errors"]) or not facts["figure_px"] or \
                min(facts["figure_px"]) < 0.9 * facts["output_px"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
