"""Progress for long notebook calls: one short line per search step instead of a `StepReport` repr, a bar in Lab.

- `step_line(report)`: a step in one line ("step 3/10: +4 nodes (3 measured, 1 skipped); 12 GPU-s; best 2.71x #7").
- `StepProgress(total, interactive)`: the callable `Search.run(progress=...)` takes; interactive (Lab) it draws an
  ipywidgets bar and a line that update in place, headless (papermill, a sweep) it prints `step_line` per step, so
  an executed notebook holds plain text and never a widget it cannot draw.
- `progress_iter(items, interactive, desc)`: any loop with the same two faces (tqdm's notebook bar, or a line per
  item).
- `ItemProgress(total, interactive, desc)`: the callable the long calls that finish items one by one take, with the
  same two faces: `run_sweep(..., progress=...)` (`progress(i, n, run)` as each run ends) and the KernelBench
  benchmark's `run_files(..., progress=...)` (`progress(i, n, row, reused)` as each file ends).
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Any, Iterable, Iterator, TypeVar

T = TypeVar("T")


def _x(v: float | None) -> str:
    return f"{v:.3g}x" if v else "—"


def step_line(report, total: int | None = None, elapsed_s: float | None = None) -> str:
    """One line for a `StepReport`: the step (of `total`), the nodes it added by status, GPU-seconds so far, the best
    so far, why the search stopped (if it did) and the wall time."""
    counts = Counter(str(n.get("status", "?")) for n in report.nodes)
    what = ", ".join(f"{v} {k}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    best = report.best or {}
    best_txt = (f"best {_x(best.get('speedup_vs_eager'))} #{best['nid']}" if best.get("nid") is not None
                else "nothing timed yet")
    step = f"step {report.step}" + (f"/{total}" if total else "")
    return (f"{step}: +{len(report.nodes)} nodes" + (f" ({what})" if what else "")
            + f"; {report.gpu_seconds:.3g} GPU-s; {best_txt}"
            + (f"; {elapsed_s:.1f} s" if elapsed_s is not None else "")
            + (f"; stopped: {report.stopped}" if report.stopped else ""))



def _open_bar(total: int | None, description: str):
    """An ipywidgets bar and its label, displayed; (None, None) without the widgets extra (plain lines then)."""
    try:
        import ipywidgets as W
        from IPython.display import display
    except ImportError:  # pragma: no cover - only without the widgets extra
        return None, None
    bar = W.IntProgress(value=0, min=0, max=max(total or 1, 1), description=description, bar_style="info")
    label = W.HTML(value="starting")
    display(W.HBox([bar, label]))
    return bar, label

class StepProgress:
    """`search.run(steps, progress=StepProgress(steps, interactive))`: a bar (interactive) or a line per step."""

    def __init__(self, total: int | None = None, interactive: bool = False, description: str = "search"):
        self.total, self.interactive, self.description = total, interactive, description
        self.lines: list[str] = []
        self.done = 0
        self._t0 = time.perf_counter()
        self._bar = self._label = None
        if interactive:
            self._bar, self._label = _open_bar(total, description)
            self.interactive = self._bar is not None

    def __call__(self, report) -> None:
        self.done += 1
        line = step_line(report, self.total, time.perf_counter() - self._t0)
        self.lines.append(line)
        if self._bar is not None:
            self._bar.value = min(self.done, self._bar.max)
            self._label.value = line
            if report.stopped or (self.total and self.done >= self.total):
                self._bar.bar_style = "success"
        else:
            print(line, flush=True)


def item_line(item: Any) -> str:
    """What finished, in a few words: a sweep run ("ok surrogate=none_seed=0-1a2b (23 s)"), a KernelBench file
    ("level1/19_ReLU.py: correct, kernel"), else the item itself."""
    if item is None:
        return ""
    if hasattr(item, "run_id"):  # workbench.lab.sweep.RunResult
        secs = getattr(item, "seconds", None)
        err = getattr(item, "error", None)
        return (f"{item.status} {item.run_id}" + (f" ({secs:.0f} s)" if secs else "")
                + (f": {str(err)[:120]}" if err else ""))
    if hasattr(item, "file") and hasattr(item, "correct"):  # workbench.lab.kernelbench.FileResult
        verdict = ("correct" if item.correct else item.status if item.status != "ok" else "not correct")
        return f"{item.file}: {verdict}, {'kernel' if item.generated else 'torch'}"
    return str(item)[:160]


class ItemProgress:
    """`progress(i, n, item, *rest)` for calls that finish items one by one (sweeps, the KernelBench benchmark): an
    ipywidgets bar with the last item's line (interactive), else one printed line per item. `reused` (the
    benchmark's fourth argument) marks an item taken from a previous run."""

    def __init__(self, total: int | None = None, interactive: bool = False, desc: str = ""):
        self.total, self.interactive, self.desc = total, interactive, desc
        self.lines: list[str] = []
        self._t0 = time.perf_counter()
        self._bar = self._label = None
        if interactive:
            self._bar, self._label = _open_bar(total, desc)
            self.interactive = self._bar is not None

    def __call__(self, i: int, n: int, item: Any = None, *rest: Any) -> None:
        n = n or self.total or 0
        reused = bool(rest and rest[0] is True)
        line = (f"{self.desc + ': ' if self.desc else ''}{i}/{n} {item_line(item)}"
                + (" (from a previous run)" if reused else "")
                + f"; {time.perf_counter() - self._t0:.0f} s").replace("  ", " ")
        self.lines.append(line)
        if self._bar is not None:
            self._bar.max = max(n, 1)
            self._bar.value = min(i, self._bar.max)
            self._label.value = line
            if i >= n:
                self._bar.bar_style = "success"
        else:
            print(line, flush=True)


def progress_iter(items: Iterable[T], interactive: bool = False, desc: str = "", total: int | None = None) \
        -> Iterator[T]:
    """`items`, with a tqdm bar in a notebook frontend (`interactive`) or a printed line as each one starts."""
    items = list(items)
    n = total if total is not None else len(items)
    if interactive:
        try:
            from tqdm.notebook import tqdm
        except ImportError:  # pragma: no cover
            interactive = False
        else:
            yield from tqdm(items, total=n, desc=desc)
            return
    t0 = time.perf_counter()
    for i, item in enumerate(items):
        print(f"{desc + ': ' if desc else ''}{i + 1}/{n} {item if isinstance(item, (str, int)) else ''} "
              f"({time.perf_counter() - t0:.0f} s)".rstrip(), flush=True)
        yield item


def run_with_progress(search, steps: int, interactive: bool = False) -> Any:
    """`search.run(steps)` with `StepProgress`; returns the best node."""
    return search.run(steps=steps, progress=StepProgress(steps, interactive))
