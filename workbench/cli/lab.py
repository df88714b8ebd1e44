"""`workbench sweep` and `workbench report`: papermill sweeps and their HTML report."""
from __future__ import annotations

import sys

from ..lab.report_html import write_sweep_report
from ..lab.sweep import SweepInterrupted, run_sweep


def _run_ended(i: int, n: int, run) -> None:
    """A line on stderr as each run of a sweep ends (the summary on stdout comes at the end)."""
    secs = f" ({run.seconds:.0f} s)" if run.seconds else ""
    print(f"sweep: {i}/{n} {run.status} {run.run_id}{secs}", file=sys.stderr, flush=True)


def cmd_sweep(args) -> int:
    """0 when every run finished ok (or was already), 1 when any failed, 128 + N when signal N stopped it."""
    try:
        summary = run_sweep(args.config, jobs=args.jobs, out_root=args.out, only=args.only or None,
                            progress=_run_ended)
    except SweepInterrupted as e:
        print(e.summary)
        print(f"workbench: error: {e}", file=sys.stderr)
        return 128 + e.signum
    print(summary)
    if summary.failed:
        print(f"workbench: error: {len(summary.failed)} of {len(summary.runs)} run(s) failed; their manifest.json "
              "and papermill.log say why", file=sys.stderr)
        return 1
    return 0


def cmd_report(args) -> int:
    """A sweep's run directories as one self-contained HTML file (plotly.js inlined)."""
    print(write_sweep_report(args.runs_dir, args.out, title=args.title))
    return 0
