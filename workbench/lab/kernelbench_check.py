"""The CPU check over the KernelBench development set, and its committed expectations.

Every file runs at small sizes through the proposer and the CPU ladder (`kernelbench.run_files` on the CPU device, in
parallel processes, compile stage skipped unless asked); what is true today (the files with a correct generated
kernel) is kept in `tests/fixtures/kernelbench_cpu_expected.json`, so the number can only go up: a file in the
expected set that fails is a regression; a file that newly passes is reported (regenerate the file to take it in:
`python experiments/kernelbench_cpu_check.py --write-expected`).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from .kernelbench import FileResult, ProgressBar, RunConfig, discover, run_files

EXPECTED = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "kernelbench_cpu_expected.json"


def run_check(root: Path, out: Path, jobs: int = 2, skip_compile: bool = True, verbose: bool = False,
              timeout_s: float = 120.0, only: list[str] | None = None) -> list[FileResult]:
    """`only`: the files to run (paths relative to `root`, e.g. "level1/19_ReLU.py"); default every file."""
    cfg = RunConfig(device="cpu", jobs=jobs, skip_compile=skip_compile, timeout_s=timeout_s)
    files = discover(root)
    if only is not None:
        wanted = set(only)
        files = [f for f in files if f.relative_to(root).as_posix() in wanted]
        missing = wanted - {f.relative_to(root).as_posix() for f in files}
        if missing:
            raise FileNotFoundError(f"not under {root}: {sorted(missing)}")
    return run_files(files, out, cfg, progress=ProgressBar() if verbose else None)


def smoke_files(rows: list[FileResult], per_family: int = 1, max_seconds: float = 30.0) -> list[str]:
    """A small subset that still touches every kernel family the passing files use: for each family, its fastest
    passing file(s) (on the machine that wrote the expectations), none slower than `max_seconds`. The test suite
    runs these on every change; the whole set is the experiment's (minutes per family file on 2 cores)."""
    ok = sorted((r for r in rows if r.correct and r.generated and r.seconds <= max_seconds),
                key=lambda r: (r.seconds, r.file))
    chosen: list[str] = []
    for fam in sorted({f for r in ok for f in r.families}):
        for r in [r for r in ok if fam in r.families][:per_family]:
            if r.file not in chosen:
                chosen.append(r.file)
    return sorted(chosen)


def load_smoke(path: Path = EXPECTED) -> list[str]:
    return list(json.loads(path.read_text()).get("smoke", [])) if path.exists() else []


def passing(rows: list[FileResult]) -> set[str]:
    return {r.file for r in rows if r.correct and r.generated}


def load_expected(path: Path = EXPECTED) -> set[str]:
    return set(json.loads(path.read_text())["correct_generated"]) if path.exists() else set()


def compare(rows: list[FileResult], path: Path = EXPECTED) -> tuple[list[str], list[str]]:
    """(lost, gained): expected files that no longer pass, and passing files not expected."""
    now, expected = passing(rows), load_expected(path)
    return sorted(expected - now), sorted(now - expected)


def write_expected(rows: list[FileResult], seconds: float, jobs: int, path: Path = EXPECTED) -> None:
    failing = {r.file: (r.status if r.status != "ok" else "torch only" if not r.generated else "not correct")
               for r in rows if not (r.correct and r.generated)}
    path.write_text(json.dumps({
        "about": "KernelBench dev-set files whose default candidate has a correct generated kernel on the CPU "
                 "(small sizes, Triton interpreter); regenerate: python experiments/kernelbench_cpu_check.py "
                 "--write-expected",
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "files": len(rows),
        "seconds": round(seconds), "jobs": jobs,
        "smoke": smoke_files(rows),
        "seconds_per_file": {r.file: round(r.seconds, 1) for r in sorted(rows, key=lambda r: r.file)},
        "correct_generated": sorted(passing(rows)), "not_passing": dict(sorted(failing.items()))}, indent=1) + "\n")
