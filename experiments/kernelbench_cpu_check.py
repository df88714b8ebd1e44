"""The CPU check over the KernelBench development set: every file at small sizes (`workbench.lab.kernelbench_sizes`),
the offline proposer's default candidate, correctness on the Triton interpreter, 2 files at a time; the sm_90 compile
stage is skipped (on 2 cores it costs more than the interpreter: `--compile` runs it).

    python experiments/kernelbench_cpu_check.py                   # compare with the expectations file
    python experiments/kernelbench_cpu_check.py --write-expected  # regenerate that file (after merging new families)
    python experiments/kernelbench_cpu_check.py --write-expected --out results/kernelbench/cpu_devset
                                                                  # ... and keep the run (report.md/json, notebook 05)

The expectations file (tests/fixtures/kernelbench_cpu_expected.json) lists the files whose generated kernel is
correct today, and a smoke subset (per kernel family its fastest passing file) that `tests/test_kernelbench.py` runs on
every change; the whole set runs there with WORKBENCH_DEVSET_CHECK=full, failing when an expected file no longer
passes and reporting files that newly do.
Exit 1 when an expected file fails.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.lab.kernelbench_check import EXPECTED, compare, run_check, write_expected  # noqa: E402
from workbench.lab.kernelbench_report import write_report  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=str(ROOT.parent / "shared" / "kernelbench"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="run the sm_90 compile stage too")
    ap.add_argument("--out", default=None, help="keep the per-file rows here (default: a temporary directory)")
    ap.add_argument("--write-expected", action="store_true", help=f"write {EXPECTED.relative_to(ROOT)}")
    args = ap.parse_args()
    root = Path(args.root)
    if not root.is_dir():
        print(f"no KernelBench files under {root}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        rows = run_check(root, out, jobs=args.jobs, skip_compile=not args.compile, verbose=True)
        seconds = time.monotonic() - t0
        if args.out:
            write_report(out, rows, {"name": out.name, "dir": "../shared/kernelbench (development set)",
                                     "device": "cpu", "skip_compile": not args.compile, "jobs": args.jobs,
                                     "seconds": round(seconds)})
    if args.write_expected:
        write_expected(rows, seconds, jobs=args.jobs)
        print(f"wrote {EXPECTED} ({sum(r.correct and r.generated for r in rows)} files) in {seconds:.0f} s")
        return 0
    lost, gained = compare(rows)
    print(f"{len(rows)} files in {seconds:.0f} s: {sum(r.correct and r.generated for r in rows)} with a correct "
          f"generated kernel; lost {lost or 'none'}; new {gained or 'none'}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
