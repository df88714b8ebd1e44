"""The command line's arguments, one `_register_*` per command, kept apart from the handlers so that parsing (and
`--help`) loads nothing heavy: each handler module imports what its command needs, and only the module of the command
being run is imported (`workbench.cli.main`)."""
from __future__ import annotations

import argparse
import math

from ..core.records import STAGES
from ..devices.local import DEFAULT_TIMEOUTS
from ..devices.resolve import AUTO, LOCAL
from ..problems.problem import PRECISIONS

# a confidence threshold above any probability: no forecast counts as confident, so the screened slots go to the
# most promising forecasts (used where no held-out risk-coverage curve gives a --tau)
NO_CONFIDENT_TAU = 1.01
STORE_HELP = "SQLite store path (default: $WORKBENCH_STORE or ~/.workbench/store.sqlite)"


# ---- argument types: a bad value is refused by argparse, which names the option (exit 2)

def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def seconds(text: str) -> float:
    """A finite, non-negative number of seconds (nan, inf and negatives are refused)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got '{text}'") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got '{text}'")
    return v


def finite(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, got '{text}'")
    return v


def positive_seconds(text: str) -> float:
    v = seconds(text)
    if v == 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return v


WORKER_STAGES = [s for s in STAGES if s != "static"]  # the stages that run in a worker with a timeout
# the watchdog's windows inside a stage (harness.child.watchdog), by their names in devices.local.DEFAULT_TIMEOUTS;
# "compile" is both the compile stage and each kernel compile's window
WATCHDOG_WINDOWS = ["trace", "call"]


def stage_timeout(text: str) -> tuple[str, float]:
    stage, sep, value = text.partition("=")
    if not sep or stage not in WORKER_STAGES + WATCHDOG_WINDOWS:
        raise argparse.ArgumentTypeError(f"expected STAGE=SECONDS with STAGE one of {', '.join(WORKER_STAGES)} or a "
                                         f"watchdog window ({', '.join(WATCHDOG_WINDOWS)}), got '{text}'")
    return stage, positive_seconds(value)


def _problem_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("problem", help="a KernelBench-format .py file or a built-in problem name")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="override a module-level size constant with a literal or constant arithmetic (64, 2**20, "
                        "[64,64], torch.float16; never a call or a name); repeatable")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="fp32 accuracy rule: torch = PyTorch's defaults (fp32 matmuls strict, cuDNN's convolutions "
                        "tf32), strict = all fp32, tf32 = tf32 everywhere (default: the file's WORKBENCH_PRECISION, "
                        "else torch)")
    p.add_argument("--problem-timeout-s", type=positive_seconds, default=None, metavar="S",
                   help="limit for loading and checking the problem file in its own process (default 60)")


def _timeout_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", dest="timeouts", action="append", type=stage_timeout, default=[],
                   metavar="STAGE=S", help="seconds a worker stage, or a watchdog window inside one, may take; "
                                           "repeatable; default: the device's. Stages: compile (tracing on meta "
                                           "tensors and compiling; also the window of each kernel compile), "
                                           "correctness, quick_timing, full_timing. Windows: trace (importing, "
                                           "constructing and tracing a candidate; a local device's default "
                                           f"{DEFAULT_TIMEOUTS['trace']:g}), call (the floor of one call of its "
                                           "forward, raised to a multiple of the reference's measured time; "
                                           f"default {DEFAULT_TIMEOUTS['call']:g}). E.g. --timeout compile=600 "
                                           "--timeout trace=60")


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, help=STORE_HELP)
    p.add_argument("--no-store", action="store_true", help="neither read nor write the store")


def _register_problems(sub) -> None:
    probs = sub.add_parser("problems", help="list and inspect problems").add_subparsers(dest="sub", required=True)
    probs.add_parser("list", help="built-in problems").set_defaults(func="problems:cmd_problems_list")
    show = probs.add_parser("show", help="shapes, FLOPs, bytes and roofline floor of a problem")
    _problem_args(show)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func="problems:cmd_problems_show")


def _register_eval(sub) -> None:
    ev = sub.add_parser("eval", help="run a candidate up the evaluation ladder")
    _problem_args(ev)
    ev.add_argument("candidate", help="a .py file defining ModelNew")
    ev.add_argument("--device", default=LOCAL, help="local (the GPU if present, else the CPU), cuda, cuda:N, cpu, "
                                                    "replay or ray")
    ev.add_argument("--up-to", default="full_timing", choices=STAGES)
    ev.add_argument("--seeds", type=positive_int, default=5, help="correctness seeds (default 5)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    _timeout_args(ev)
    _store_args(ev)
    ev.set_defaults(func="evaluate:cmd_eval")


def _register_propose(sub) -> None:
    prop = sub.add_parser("propose", help="write candidates from the offline proposer")
    _problem_args(prop)
    prop.add_argument("--n", type=positive_int, default=8, help="how many candidates (the default configuration first)")
    prop.add_argument("--seed", type=int, default=0)
    prop.add_argument("--out", required=True, help="directory for the candidate files")
    prop.set_defaults(func="evaluate:cmd_propose")


def _register_search(sub) -> None:
    srch = sub.add_parser("search", help="search a problem's kernel space under a GPU budget")
    _problem_args(srch)
    srch.add_argument("--strategy", default="greedy", choices=["greedy", "beam", "evolutionary", "mcts"])
    srch.add_argument("--proposer", default="offline", choices=["offline", "llm"],
                      help="who writes children: the offline proposer, or Claude via the anthropic SDK "
                           "(needs ANTHROPIC_API_KEY)")
    srch.add_argument("--device", default=AUTO,
                      help="auto (the GPU if visible, else replay), cuda, cuda:N, cpu, local, ray or replay")
    srch.add_argument("--dataset", default=None, help="replay dataset directory (default: the shipped results/dataset)")
    srch.add_argument("--replay-data", action="append", default=[],
                      help="extra store(s) of recorded GPU measurements for replay")
    srch.add_argument("--surrogate", default="none", choices=["none", "roofline", "learned", "llm"],
                      help="screen over-generated proposals with a surrogate and a selective policy (llm: Claude "
                           "forecasts each, needs ANTHROPIC_API_KEY)")
    srch.add_argument("--repeats", type=positive_int, default=1,
                      help="LLM surrogate: forecasts per candidate, averaged")
    srch.add_argument("--llm-model", default=None, help="Claude model for --proposer/--surrogate llm "
                                                        "(default: LLMConfig's)")
    srch.add_argument("--surrogate-model", default=None, help="a trained learned surrogate (workbench surrogate "
                                                               "train --out); default: train on the dataset")
    srch.add_argument("--tau", type=finite, default=None, help="confidence threshold (default: from the learned "
                                                              "surrogate's held-out risk-coverage curve at --max-risk)")
    srch.add_argument("--max-risk", type=finite, default=0.3, help="bin-error rate the confident forecasts may have")
    srch.add_argument("--surrogate-learns", action="store_true",
                      help="feed each measured speedup back to the learned surrogate (what it does to screening: "
                           "results/search/report.md)")
    srch.add_argument("--budget-gpu-s", type=seconds, default=60.0,
                      help="GPU-seconds the search may spend (default 60); 0 allows none: the search stops before "
                           "its first GPU stage (0 is not 'no limit')")
    srch.add_argument("--budget-wall-s", type=seconds, default=None,
                      help="wall-clock seconds the search may run (default: no limit); 0 allows none")
    srch.add_argument("--steps", type=positive_int, default=None,
                      help="stop after this many steps (default: the budget)")
    srch.add_argument("--per-step", type=positive_int, default=4, help="candidates evaluated per step")
    srch.add_argument("--seed", type=int, default=0)
    srch.add_argument("--search-id", default=None, help="name the search to save its events and resume it")
    _store_args(srch)
    srch.add_argument("--json", action="store_true")
    _timeout_args(srch)
    srch.set_defaults(func="search:cmd_search")


def _register_profile(sub) -> None:
    prof = sub.add_parser("profile", help="static reading, roofline verdict, counters (GPU + ncu) and findings")
    _problem_args(prof)
    prof.add_argument("candidate", help="a .py file defining ModelNew")
    prof.add_argument("--device", default=LOCAL, help="local (counters when a GPU and ncu are present), cuda:N or "
                                                      "cpu")
    prof.add_argument("--ms", type=finite, default=None,
                      help="a measured time in ms for the roofline verdict (else the floor's verdict, unmeasured)")
    prof.add_argument("--no-counters", action="store_true", help="skip Nsight Compute even on a GPU")
    prof.add_argument("--asm-dir", default=None, help="write each kernel's PTX and SASS to this directory")
    prof.add_argument("--json", action="store_true", help="print one JSON object")
    prof.set_defaults(func="evaluate:cmd_profile")


def _register_sweep(sub) -> None:
    sw = sub.add_parser("sweep", help="run a notebook over a parameter grid with papermill (one process per run)")
    sw.add_argument("config", help="experiments/<name>.yaml: notebook, base parameters, grid")
    sw.add_argument("--jobs", type=positive_int, default=None, help="runs at a time (default: the config's jobs)")
    sw.add_argument("--out", default="results/runs", help="root of the run directories")
    sw.add_argument("--only", action="append", default=[], help="run ids or glob patterns to run (repeatable)")
    sw.set_defaults(func="lab:cmd_sweep")


def _register_report(sub) -> None:
    rep = sub.add_parser("report", help="render a sweep's run directories to one self-contained HTML file")
    rep.add_argument("runs_dir", help="a sweep's folder, e.g. results/runs/replay")
    rep.add_argument("--out", default=None, help="the HTML file (default: RUNS_DIR/report.html)")
    rep.add_argument("--title", default=None)
    rep.set_defaults(func="lab:cmd_report")


def _register_surrogate(sub) -> None:
    sur = sub.add_parser("surrogate", help="the learned surrogate: train it, evaluate it against baselines")
    sur_sub = sur.add_subparsers(dest="sub", required=True)
    tr = sur_sub.add_parser("train", help="train on the measured dataset and save the model")
    tr.add_argument("--out", default=None, help="model path (default: $WORKBENCH_HOME/surrogates/learned.pkl)")
    tr.add_argument("--data", default=None, help="dataset directory (default: results/dataset)")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--trees", type=int, default=250, help="trees per LightGBM model")
    tr.set_defaults(func="surrogate:cmd_surrogate_train")
    se = sur_sub.add_parser("eval", help="cross-validated metrics of each surrogate and baseline")
    se.add_argument("--split", default="problem", choices=["random", "problem", "family", "level"],
                    help="rows at random, whole problems held out (default), whole kernel families held out, or "
                         "whole KernelBench levels held out (the built-in suite one more group)")
    se.add_argument("--boot", type=int, default=0, metavar="N",
                    help="add 95%% bootstrap intervals over problems from N seeded replicates (e.g. 1000)")
    se.add_argument("--calibration", default="gaussian",
                    choices=["gaussian", "conformal", "conformal_bound", "all"],
                    help="the learned surrogate's calibration; all: every mode, trained once per fold")
    se.add_argument("--max-per-problem", type=int, default=None, metavar="N",
                    help="keep at most N rows per problem (the default row and a seeded sample of the rest)")
    se.add_argument("--folds", type=int, default=5, help="folds for the random and problem splits")
    se.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="evaluate only this surrogate (learned, roofline, prior, random, oracle, llm); repeatable")
    se.add_argument("--surrogate", action="append", default=[], choices=["llm"],
                    help="add a surrogate outside the default set: llm (Claude; ANTHROPIC_API_KEY; one call per "
                         "pair, so with --limit-pairs)")
    se.add_argument("--limit-pairs", type=int, default=None, metavar="N",
                    help="score every surrogate on the same seeded sample of N pairs (rows whose source regenerates)")
    se.add_argument("--pairs-per-problem", type=int, default=8, help="sample: pairs taken from each problem drawn")
    se.add_argument("--repeats", type=int, default=1, help="LLM surrogate: forecasts per pair, averaged")
    se.add_argument("--llm-model", default=None, help="Claude model of the LLM surrogate (default: LLMConfig's)")
    se.add_argument("--data", default=None, help="dataset directory (default: results/dataset)")
    se.add_argument("--seed", type=int, default=0)
    se.add_argument("--trees", type=int, default=250, help="trees per LightGBM model of the learned surrogate")
    se.add_argument("--json", action="store_true", help="print one JSON object keyed by surrogate name")
    se.set_defaults(func="surrogate:cmd_surrogate_eval")


def _register_llm(sub) -> None:
    llm = sub.add_parser("llm", help="forecaster fine-tuning data and training").add_subparsers(dest="sub",
                                                                                                  required=True)
    ex = llm.add_parser("export", help="the store's measured evaluations as chat-format JSONL (SFT or RL)")
    ex.add_argument("--out", required=True, help="the JSONL file")
    ex.add_argument("--anchor", default="eager", choices=["eager", "compile"])
    ex.add_argument("--store", default=None, help=STORE_HELP)
    ex.set_defaults(func="llm:cmd_llm_export")
    rl = llm.add_parser("train-rl", help="GRPO fine-tuning of a local model on exported pairs (needs the [rl] extra)")
    rl.add_argument("--model", required=True, help="a local model directory (transformers format, with tokenizer)")
    rl.add_argument("--data", required=True, help="pairs.jsonl from `workbench llm export`")
    rl.add_argument("--out", required=True, help="where the fine-tuned model and tokenizer are saved")
    rl.add_argument("--rewards", default="brier,rps,correctness",
                    help="comma-separated reward functions: brier, rps, log, correctness")
    rl.add_argument("--steps", type=int, default=100)
    rl.add_argument("--num-generations", type=int, default=4, help="completions per prompt (GRPO's group)")
    rl.add_argument("--batch-size", type=int, default=4, help="completions per device step (a multiple of the group)")
    rl.add_argument("--lr", type=float, default=1e-6)
    rl.add_argument("--max-completion-tokens", type=int, default=256)
    rl.add_argument("--temperature", type=float, default=1.0)
    rl.add_argument("--beta", type=float, default=0.0, help="KL coefficient to the starting model (0: none)")
    rl.add_argument("--seed", type=int, default=0)
    rl.add_argument("--json", action="store_true")
    rl.set_defaults(func="llm:cmd_llm_train_rl")


def _register_demo(sub) -> None:
    demo = sub.add_parser("demo", help="the ladder over the shipped example candidates")
    demo.add_argument("--device", default=LOCAL, help="local (the GPU if present, else the CPU), cuda, cuda:N or cpu")
    _timeout_args(demo)
    _store_args(demo)
    demo.set_defaults(func="evaluate:cmd_demo")


def _register_kernelbench(sub) -> None:
    kb = sub.add_parser("kernelbench", help="search and time every KernelBench file of a directory; KernelBench's "
                                            "metrics (correctness, fast_p, geo-mean vs eager and torch.compile)")
    kb.add_argument("dir", help="a KernelBench directory (its level*/ folders) or a folder of KernelBench files")
    kb.add_argument("--levels", default=None, help="comma-separated levels to run, e.g. 1,2 (default: all)")
    kb.add_argument("--only", default=None, help="comma-separated file names or glob patterns (e.g. '19_ReLU,*Conv*')")
    kb.add_argument("--sample", default=None, help="a sample file (results/kernelbench/sample.json) naming the files")
    kb.add_argument("--budget-gpu-s", type=seconds, default=30.0,
                    help="GPU-seconds of search per problem (default 30; 0 allows none)")
    kb.add_argument("--device", default=AUTO, help="cuda, cuda:N, ray, replay or cpu (no timing: correctness at "
                                                   "small sizes); auto: the GPU if visible, else replay")
    kb.add_argument("--strategy", default="greedy", choices=["greedy", "beam", "evolutionary", "mcts"])
    kb.add_argument("--jobs", type=positive_int, default=1, help="CPU device: files checked at once (one process each)")
    kb.add_argument("--skip-compile", action="store_true",
                    help="CPU device: skip the sm_90 compile stage (correctness on the interpreter only)")
    kb.add_argument("--precision", choices=PRECISIONS, default=None,
                    help="fp32 accuracy rule for every file: torch = PyTorch's defaults, as KernelBench runs them "
                         "(fp32 matmuls strict, cuDNN's convolutions tf32), strict = all fp32 (the rule before "
                         "session 44), tf32 = tf32 everywhere (default: each file's WORKBENCH_PRECISION, else torch)")
    kb.add_argument("--size-caps", default=None, metavar="CAPS",
                    help="CPU device: the caps the automatic small sizes try, small to large (default 8,16,32,64; "
                         "e.g. 16,32,64 checks every file at other shapes)")
    kb.add_argument("--out", default=None, help="the run's directory (default: results/kernelbench/<run>); a rerun "
                                                "with the same directory skips files already done")
    kb.add_argument("--run", default=None, help="the run's name (default: from the device and the budget)")
    kb.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                    help="override a module-level constant in every file that has it; repeatable (CPU: replaces "
                         "the automatic small sizes of those files)")
    kb.add_argument("--file-timeout-s", type=positive_seconds, default=120.0, metavar="S",
                    help="CPU device: seconds per file for loading and tracing it (default 120)")
    _timeout_args(kb)
    _store_args(kb)
    kb.add_argument("--json", action="store_true", help="print the report as one JSON object")
    kb.set_defaults(func="kernelbench:cmd_kernelbench")


def build_parser() -> argparse.ArgumentParser:
    """Every command's arguments; each names its handler as "module:function" of this package."""
    ap = argparse.ArgumentParser(prog="workbench", description="GPU kernel search workbench")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for register in (_register_problems, _register_eval, _register_propose, _register_search, _register_profile,
                     _register_sweep, _register_report, _register_surrogate, _register_llm, _register_demo,
                     _register_kernelbench):
        register(sub)
    return ap
