"""`workbench sweep` and `workbench report`: papermill sweeps and their HTML report."""
from __future__ import annotations

from ..lab.report_html import write_sweep_report
from ..lab.sweep import run_sweep


def cmd_sweep(args) -> int:
    print(run_sweep(args.config, jobs=args.jobs, out_root=args.out, only=args.only or None))
    return 0


def cmd_report(args) -> int:
    """A sweep's run directories as one self-contained HTML file (plotly.js inlined)."""
    print(write_sweep_report(args.runs_dir, args.out, title=args.title))
    return 0
