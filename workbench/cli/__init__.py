"""The `workbench` command line.

    workbench problems list
    workbench problems show PROBLEM [--set NAME=VALUE ...] [--json]
    workbench eval PROBLEM CANDIDATE [--device local|cuda|cpu|replay|...] [--set ...] [--up-to STAGE] [--json]
    workbench propose PROBLEM [--set ...] [--n K] [--seed S] --out DIR
    workbench search PROBLEM [--strategy greedy|beam|evolutionary|mcts] [--proposer offline|llm]
                     [--surrogate none|roofline|learned|llm] [--repeats K] [--device auto|cuda|cpu|replay|...]
                     [--budget-gpu-s N] [--steps N] [--seed N] [--search-id ID] [--json]
    workbench profile PROBLEM CANDIDATE [--device local|cuda:N|cpu] [--ms MS] [--no-counters] [--json]
    workbench sweep experiments/X.yaml [--jobs N] [--only RUN_ID]
    workbench report RUNS_DIR [--out report.html]
    workbench surrogate train [--out PATH] [--data DIR] [--trees N]
    workbench surrogate eval [--split random|problem|family] [--json] [--data DIR] [--folds K] [--only NAME]
                             [--surrogate llm] [--limit-pairs N] [--pairs-per-problem K] [--repeats K]
    workbench llm export --out pairs.jsonl [--anchor eager|compile] [--store PATH]
    workbench llm train-rl --model PATH --data pairs.jsonl --out DIR [--steps N] [--rewards brier,rps,...]
    workbench demo [--device local|cuda|cpu]

PROBLEM is a KernelBench-format file or a built-in name. Device names follow one rule (`workbench.devices.resolve`):
"auto" is the GPU when one is visible, else replay of the recorded H200 measurements (searches); "local" is the GPU,
else the CPU (evaluating a candidate here). `eval` exits 0 whenever it ran, whatever the verdict; a command that could
not run (bad problem file, no GPU where one was asked for) exits 2 with the reason.

Arguments live in `parser.py` (light: `--help` loads nothing heavy); each command's handler lives in the module
named in its `set_defaults(func="module:function")`, which imports what the command needs and is loaded only when
that command runs.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable

from ..devices.local import NoGPUError
from ..llm.client import LLMUnavailable  # imports no SDK: the anthropic package is optional
from ..problems.loader import ProblemError
from .common import llm_client
from .parser import build_parser


def main(argv: list[str] | None = None, *, llm_client_factory: Callable[..., Any] | None = None) -> int:
    """Run one command; 0 when it ran, 2 with the reason on stderr when it could not. `llm_client_factory(store,
    model)` builds the LLM client of --proposer/--surrogate llm (default `llm_client`: the Anthropic SDK)."""
    args = build_parser().parse_args(argv)
    args.make_llm_client = llm_client_factory or llm_client
    module, function = args.func.split(":")
    try:
        handler = getattr(importlib.import_module(f"{__name__}.{module}"), function)
        return handler(args)
    except (ProblemError, NoGPUError, LLMUnavailable, ValueError, OSError, ImportError) as e:
        print(f"workbench: error: {e}", file=sys.stderr)
        return 2


__all__ = ["build_parser", "llm_client", "main"]
