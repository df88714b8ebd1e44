"""KernelBench's own metrics over a benchmark run's rows, and the report (JSON + Markdown).

- correctness rate: correct files / files.
- fast_p (p = 0, 1, 1.5, 2), against eager and against torch.compile: the fraction of files that are correct AND
  whose measured speedup is above p (a correct file without a measured time counts as not fast).
- geo-mean speedup: over every file, a file with no correct timed candidate counting as 1.0x (KernelBench's rule: a
  failure is no speedup, not an infinite slowdown).
Per level and overall. A run with no timing (the CPU device) reports fast_p and geo-means as not measured (None).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable

from .kernelbench import FileResult, load_done

P_VALUES = (0.0, 1.0, 1.5, 2.0)
BASELINES = (("eager", "speedup_vs_eager"), ("compile", "speedup_vs_compile"))


def _speedup(row: FileResult, key: str) -> float | None:
    s = getattr(row, key)
    return s if row.correct and row.timed and s is not None and s > 0 else None


def fast_p(rows: list[FileResult], key: str, p: float) -> float | None:
    """Fraction of rows correct with speedup (`key`) above p; None when no row was timed."""
    if not rows or not any(r.timed for r in rows):
        return None
    return sum(1 for r in rows if (_speedup(r, key) or 0.0) > p) / len(rows)


def geomean_speedup(rows: list[FileResult], key: str) -> float | None:
    """Geometric mean of the speedups, a row with no correct timed candidate counting as 1.0x; None untimed."""
    if not rows or not any(r.timed for r in rows):
        return None
    return math.exp(sum(math.log(_speedup(r, key) or 1.0) for r in rows) / len(rows))


def metrics(rows: list[FileResult]) -> dict[str, Any]:
    n = len(rows)
    out: dict[str, Any] = {
        "files": n, "correct": sum(r.correct for r in rows),
        "correct_rate": sum(r.correct for r in rows) / n if n else None,
        "generated": sum(r.generated for r in rows),
        "correct_generated": sum(r.correct and r.generated for r in rows),
        "correct_generated_rate": sum(r.correct and r.generated for r in rows) / n if n else None,
        "timed": sum(r.timed for r in rows),
        "failed_to_run": sum(r.status != "ok" for r in rows),
    }
    for base, key in BASELINES:
        out[f"fast_p_vs_{base}"] = {f"{p:g}": fast_p(rows, key, p) for p in P_VALUES}
        out[f"geomean_vs_{base}"] = geomean_speedup(rows, key)
    return out


def by_level(rows: list[FileResult]) -> dict[str, dict[str, Any]]:
    """Metrics per level (in level order), then "overall"."""
    levels = sorted({r.level for r in rows}, key=lambda lv: (lv == "", lv))
    out = {lv or "(no level)": metrics([r for r in rows if r.level == lv]) for lv in levels}
    out["overall"] = metrics(rows)
    return out


def build_report(rows: list[FileResult], run: dict[str, Any]) -> dict[str, Any]:
    timed = any(r.timed for r in rows)
    return {"run": run, "timing": "measured" if timed else
            ("not measured (the CPU device does not time kernels" if run.get("device") == "cpu" else
             "not measured (no file's best candidate was timed") + ": fast_p and geo-means are not reported)",
            "metrics": by_level(rows), "files": [r.to_dict() for r in rows]}


def _fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    if pct:
        return f"{v:.0%}"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def to_markdown(report: dict[str, Any]) -> str:
    run = report["run"]
    lines = [f"# KernelBench run {run.get('name', '')}", "",
             f"device {run.get('device')}, strategy {run.get('strategy')}, budget {run.get('budget_gpu_s')} GPU-s "
             f"per problem, {len(report['files'])} files; timing {report['timing']}", "",
             "| level | files | correct | correct + generated | " + " | ".join(
                 f"fast_{p:g} {b}" for b, _ in BASELINES for p in P_VALUES) + " | geo-mean eager | geo-mean compile |",
             "|---" * (6 + 2 * len(P_VALUES)) + "|"]
    for level, m in report["metrics"].items():
        fast = [_fmt(m[f"fast_p_vs_{b}"][f"{p:g}"], pct=True) for b, _ in BASELINES for p in P_VALUES]
        lines.append(f"| {level} | {m['files']} | {_fmt(m['correct_rate'], True)} | "
                     f"{_fmt(m['correct_generated_rate'], True)} | " + " | ".join(fast) +
                     f" | {_fmt(m['geomean_vs_eager'])} | {_fmt(m['geomean_vs_compile'])} |")
    judged = sorted({r.get("precision") or "strict" for r in report["files"] if r.get("status") == "ok"})
    lines += ["", "Geo-means count a file with no correct timed candidate as 1.0x; fast_p counts files correct and "
              "faster than p times the baseline. Precision (eager and torch.compile run under it too): "
              f"{', '.join(judged) or '-'} (cudnn_tf32: PyTorch's defaults for a reference that calls cuDNN, its "
              "convolutions tf32 and its matmuls fp32; strict: all fp32).", "",
              "| level | file | correct | kernel | families | FLOP cov | byte cov | vs eager | vs compile | "
              "why it fell short |", "|---" * 10 + "|"]
    for r in report["files"]:
        lines.append(f"| {r['level']} | {r['file'].split('/')[-1]} | {'yes' if r['correct'] else 'no'} | "
                     f"{'generated' if r['generated'] else 'plain torch'}"
                     f"{' (CUDA graph)' if r.get('launch') == 'cuda_graph' else ''} | "
                     f"{', '.join(r['families']) or '-'} | "
                     f"{_fmt(r['coverage_flops'], True)} | {_fmt(r['coverage_bytes'], True)} | "
                     f"{_fmt(r['speedup_vs_eager'])} | {_fmt(r['speedup_vs_compile'])} | "
                     f"{(r['reason'] or '').replace('|', '/').replace(chr(10), ' ')[:200]} |")
    return "\n".join(lines) + "\n"


def write_report(out: Path, rows: list[FileResult], run: dict[str, Any]) -> dict[str, Any]:
    report = build_report(rows, run)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "report.md").write_text(to_markdown(report))
    return report


def load_report(path: str | Path) -> dict[str, Any]:
    """A run's report.json (a results dir or the file); built from its per-file rows when the report is missing."""
    p = Path(path)
    if p.is_dir():
        if (p / "report.json").exists():
            return json.loads((p / "report.json").read_text())
        rows = list(load_done(p).values())
        if not rows:
            raise FileNotFoundError(f"no KernelBench run under {p} (no report.json, no files/*.json)")
        return build_report(rows, {"name": p.name})
    return json.loads(p.read_text())


def rows_of(report: dict[str, Any]) -> list[FileResult]:
    return [FileResult.from_dict(d) for d in report["files"]]


def summary_lines(report: dict[str, Any]) -> Iterable[str]:
    """The printed summary: one line per level."""
    for level, m in report["metrics"].items():
        fast = "  ".join(f"fast_{p:g} {_fmt(m['fast_p_vs_eager'][f'{p:g}'], True)}/"
                         f"{_fmt(m['fast_p_vs_compile'][f'{p:g}'], True)}" for p in P_VALUES)
        yield (f"{level:10s} {m['files']:4d} files  correct {_fmt(m['correct_rate'], True):>4s}  "
               f"correct+kernel {_fmt(m['correct_generated_rate'], True):>4s}  {fast}  geo-mean "
               f"{_fmt(m['geomean_vs_eager'])}/{_fmt(m['geomean_vs_compile'])} (eager/compile)")
