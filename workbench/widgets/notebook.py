"""Small helpers the notebooks call so that they hold no logic of their own: the device, the search (screened by a
surrogate, reading profiler findings), a screened search's unscreened twin, and which view to show."""
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from .. import viz
from ..core import ceilings, paths
from ..core.contracts import Device, is_replay
from ..core.target import H200
from ..devices import ReplayDevice, get_device, replays_dataset
from ..harness.budget import Budget
from ..llm import LLMClient, LLMSurrogate
from ..search.config import FindingsConfig, ScreeningConfig
from ..search.search import Search, make_search
from ..store.dataset import load
from ..surrogates import RooflineSurrogate, SelectivePolicy, evaluate
from ..surrogates.comparison import SurrogateComparison
from ..surrogates.features import training_table
from ..surrogates.learned import LearnedSurrogate
from .figures import show_figure
from .progress import ItemProgress, StepProgress
from .search_widget import SearchWidget, display_static

SURROGATES = ("none", "roofline", "learned", "llm")
# tau for a surrogate with no held-out risk-coverage curve (roofline, llm): above any confidence, so every forecast
# counts as unsure, the GPU's slots go to the most promising forecasts and the rest are skipped (the value
# `workbench search` uses, cli/parser.py NO_CONFIDENT_TAU)
UNSURE_TAU = 1.01
MAX_RISK = 0.3  # the learned surrogate's tau: the lowest confidence whose held-out bin-error rate is at most this

CPU_NOTE = ("This machine has no GPU: the device is the CPU (Triton's interpreter), which refuses the timing stages. "
            "The search records correctness only: nodes are 'refused' (correct, not timed) or 'failed', there are no "
            "speedups, so the tree is pale/grey and the budget curve empty.")
REPLAY_NOTE = ("No GPU here: the device replays real measurements recorded on an {gpu} ({what}). Every speedup and "
               "GPU-second is one measured there; a candidate never measured is answered 'not measured', never "
               "estimated, so the search walks the measured part of the space.")


def open_device(device: str = "auto", replay_data: str | list[str] = "") -> Device:
    """The device a notebook's parameters name: `replay_data` (a store file, or several separated by commas) replays
    those measurements alone; else `device` by the one rule of `workbench.devices.resolve` ("auto": the GPU when one
    is visible, else replay of the shipped H200 dataset)."""
    if replay_data:
        paths = replay_data.split(",") if isinstance(replay_data, str) else list(replay_data)
        return ReplayDevice.from_paths([p.strip() for p in paths if p.strip()])
    return get_device(device)


def device_note(device: Device) -> str:
    """One line on what the device can measure (the CPU note where timing is refused, the replay note)."""
    if device.kind == "cpu":
        return CPU_NOTE
    if is_replay(device):
        what = "the shipped dataset, results/dataset" if replays_dataset(device) else "the given store files"
        return REPLAY_NOTE.format(gpu=device.gpu_name, what=what)
    return f"device: {device.name} (timing stages run)"


def open_screening(surrogate: str = "none", tau: float = -1.0, seed: int = 0, trees: int = 250,
                   llm_client=None) -> ScreeningConfig | None:
    """The screening a notebook's `surrogate` / `tau` parameters name (None for "none"):

    - "roofline": the analytic roofline surrogate on the H200's measured ceilings;
    - "learned": the LightGBM surrogate saved by `workbench surrogate train` (`workbench.core.paths.surrogate_path`),
      else one trained here on the shipped dataset with `trees` trees per model (about a minute at 250 on 2 cores)
      and saved there;
    - "llm": Claude as the forecaster (`llm_client`, else one from ANTHROPIC_API_KEY).

    `tau` < 0 takes the surrogate's own threshold: the learned one's from its held-out risk-coverage curve (at most
    `MAX_RISK` error among the accepted), `UNSURE_TAU` for the others."""

    name = (surrogate or "none").lower()
    if name == "none":
        return None
    if name == "roofline":
        model, own_tau = RooflineSurrogate(ceilings.load(H200.name)), UNSURE_TAU
    elif name == "learned":

        path = paths.surrogate_path()
        if path.exists():
            model = LearnedSurrogate.load(path)
        else:
            print(f"no trained surrogate at {path}: training one on the shipped H200 dataset ({trees} trees; "
                  "`workbench surrogate train` does this ahead)", file=sys.stderr)
            model = LearnedSurrogate(n_estimators=trees, seed=seed).fit(training_table(load("candidates"),
                                                                                      load("problems")))
            model.save(path)
        own_tau = model.tau(MAX_RISK)
    elif name == "llm":

        model, own_tau = LLMSurrogate(llm_client if llm_client is not None else LLMClient()), UNSURE_TAU
    else:
        raise ValueError(f"unknown surrogate {surrogate!r}: choose from {', '.join(SURROGATES)}")
    return ScreeningConfig(model, SelectivePolicy(tau=tau if tau is not None and tau >= 0 else own_tau, seed=seed))


def open_findings(findings: str = "none") -> FindingsConfig | None:
    """The profiler findings a notebook's `findings` parameter names: "none", "static" (the expert tools on each
    node's compile record and roofline verdict, no GPU time) or "ncu" (Nsight Compute counters too, on a GPU)."""
    return None if (findings or "none").lower() == "none" else FindingsConfig(mode=findings)


def open_search(problem, device, strategy: str = "greedy", seed: int = 0, budget_gpu_s: float | None = None,
                surrogate: str = "none", tau: float = -1.0, findings: str = "none", **kw) -> Search:
    """A `Search` for a notebook (`make_search`: on a replay of the shipped dataset the proposer walks its measured
    points); `budget_gpu_s` None means no GPU-seconds limit, 0 allows no GPU work (as `--budget-gpu-s 0` in the
    CLI); `surrogate` / `tau` screen it (`open_screening`),
    `findings` reads profiler findings on every node (`open_findings`). `kw` go to `make_search`."""
    if budget_gpu_s is not None and not budget_gpu_s >= 0:
        raise ValueError(f"budget_gpu_s must be None (no limit) or >= 0 GPU-seconds, got {budget_gpu_s!r}")
    budget = Budget(budget_gpu_s)
    if "screening" not in kw:
        kw["screening"] = open_screening(surrogate, tau, seed)
    if "findings" not in kw:
        kw["findings"] = open_findings(findings)
    return make_search(problem, device, strategy=strategy, seed=seed, budget=budget, **kw)


def unscreened_twin(search: Search, interactive: bool = False, max_steps: int = 1000) -> Search | None:
    """The same search without screening (same problem, device, strategy, seed, findings), run on the GPU-seconds
    the screened one spent (or its limit, if it has one), so the two compare at equal budget; None when `search`
    is not screened or spent nothing (a CPU device times nothing)."""
    if search.screening is None:
        return None
    limit = search.budget.gpu_seconds or search.budget.gpu_spent
    if not limit:
        return None
    twin = make_search(search.problem, search.device, strategy=search.strategy.name, seed=search.seed,
                       budget=Budget(limit), findings=search.findings, per_step=search.per_step)
    twin.run(steps=max_steps, progress=StepProgress(None, interactive, "unscreened"))
    return twin


def show(search, interactive: bool = True, **kw):
    """A `SearchWidget` when `interactive` (JupyterLab), else `display_static` (papermill and other headless runs)."""
    return SearchWidget(search, **kw) if interactive else display_static(search, **kw)


def compare_surrogates(surrogates=("learned", "roofline", "prior", "random"), split: str = "problem",
                       folds: int = 5, seed: int = 0, trees: int = 250, data: str = "", interactive: bool = False):
    """`workbench.surrogates.comparison.surrogate_comparison`, one surrogate at a time with a progress bar that moves
    once per fold trained and scored (or a line per fold, headless): the same folds and the same numbers, and a long
    cell that says where it is (the learned surrogate takes tens of seconds a fold)."""

    factories = evaluate.default_surrogates(seed, trees)
    unknown = [s for s in surrogates if s not in factories]
    if unknown or not surrogates:
        raise ValueError(f"unknown surrogate(s) {unknown}; choose from {sorted(factories)}")
    table = training_table(load("candidates", data or None), load("problems", data or None))
    fold_of = evaluate.split_folds(table, split, folds, seed)  # as evaluate splits: cheap, and the bar's length
    n_folds = len(np.unique(fold_of[fold_of >= 0]))
    bar = ItemProgress(len(surrogates) * n_folds, interactive, desc=f"{split} split, {n_folds} folds")
    ticker = _FoldTicker(bar, n_folds)
    preds: dict = {}
    results: dict = {}
    for name in surrogates:
        results.update(evaluate.evaluate(table, split, {name: ticker.counting(name, factories[name])}, k=folds,
                                         seed=seed, predictions=preds))
        ticker.finish()
    return SurrogateComparison(split, next(iter(results.values()))["folds"], table, preds, results)


class _FoldTicker:
    """Ticks `bar` once per fold: `evaluate` builds a fresh surrogate for each fold (the factory is called as a fold
    starts), so a call means the fold before it is done, and `finish` closes the surrogate's last fold."""

    def __init__(self, bar: ItemProgress, n_folds: int):
        self.bar, self.n_folds, self.done = bar, n_folds, 0
        self.name, self.started = "", 0

    def counting(self, name: str, factory):
        self.name, self.started = name, 0

        def make():
            if self.started:
                self._tick()
            self.started += 1
            return factory()

        return make

    def finish(self) -> None:
        if self.started:
            self._tick()
        self.started = 0

    def _tick(self) -> None:
        self.done += 1
        self.bar(self.done, self.bar.total, f"{self.name}, fold {self.started} of {self.n_folds}")


def all_findings(search) -> list[dict]:
    """Every profiler finding of the search's nodes, each with its node id (`nid`)."""
    return [{**f, "nid": n.nid} for n in search.tree.nodes.values() for f in (n.findings or [])]


class ScreeningComparison:
    """A screened search beside its unscreened twin at equal GPU budget (`compare_screening`): `figure` (both
    budget curves, the skipped nodes as ticks), `table` (best speedup, GPU-seconds, measured and skipped nodes, and
    how often the surrogate's most likely outcome was the measured one). `note` says why there is nothing to
    compare (an unscreened search, a device that times nothing)."""

    def __init__(self, figure=None, table=None, note: str = ""):
        self.figure, self.table, self.note = figure, table, note

    def _ipython_display_(self) -> None:
        from IPython.display import Markdown, display

        if self.note:
            display(Markdown(self.note))
            return

        show_figure(self.figure)
        display(self.table)

    def __repr__(self) -> str:
        return f"ScreeningComparison({self.note or 'screened vs unscreened'})"


def _screening_row(search) -> dict:

    r = search.report()
    nodes = list(search.tree.nodes.values())
    hits = [h for h in (viz.get_forecast_info(viz.get_node_detail_info(search, n.nid)).hit
                        for n in nodes if n.forecast and str(n.status) in ("measured", "failed")) if h is not None]
    best = r["best"] or {}
    return {"best speedup vs eager": round(best["speedup_vs_eager"], 3) if best.get("speedup_vs_eager") else None,
            "best node": best.get("nid"), "GPU-seconds": round(r["gpu_seconds"], 2),
            "nodes measured or failed": sum(str(n.status) != "skipped" for n in nodes),
            "skipped by the surrogate": r.get("skipped_by_surrogate", 0),
            "forecast top outcome right": f"{sum(hits)}/{len(hits)}" if hits else "—"}


def compare_screening(search, twin) -> ScreeningComparison:
    """The screened `search` against `twin` (`unscreened_twin(search)`, None when there is none)."""
    if search.screening is None:
        return ScreeningComparison(note="This search is not screened (`surrogate = \"none\"`): set `surrogate` to "
                                        "`roofline` or `learned` to forecast every proposal and measure only what "
                                        "the selective policy picks.")
    if twin is None:
        return ScreeningComparison(note="Nothing to compare: the screened search spent no GPU-seconds (a device "
                                        "that times nothing), so an unscreened twin has no budget to match.")
    fig = viz.plot_budget_curve({"screened": viz.get_budget_curve_info(search),
                                 "unscreened": viz.get_budget_curve_info(twin)},
                                title=f"screened ({type(search.screening.surrogate).__name__}) vs unscreened at "
                                      f"{twin.budget.gpu_seconds:.3g} GPU-s")
    table = pd.DataFrame({"screened": _screening_row(search), "unscreened": _screening_row(twin)})
    return ScreeningComparison(fig, table)
