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

Each command's arguments are declared by its `_register_*` function, right below its handler.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from .core import paths
from .core.records import STAGES
from .devices.resolve import AUTO, LOCAL, REPLAY, REPLAY_FALLBACK, resolve_name

# a confidence threshold above any probability: no forecast counts as confident, so the screened slots go to the
# most promising forecasts (used where no held-out risk-coverage curve gives a --tau)
NO_CONFIDENT_TAU = 1.01
STORE_HELP = "SQLite store path (default: $WORKBENCH_STORE or ~/.workbench/store.sqlite)"


# ---------------------------------------------------------------------------------------------- shared arguments


def _problem_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("problem", help="a KernelBench-format .py file or a built-in problem name")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="override a module-level size constant (a Python literal); repeatable")
    p.add_argument("--precision", choices=["strict", "tf32"], default=None,
                   help="fp32 accuracy rule (default: the file's WORKBENCH_PRECISION, else strict)")


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, help=STORE_HELP)
    p.add_argument("--no-store", action="store_true", help="neither read nor write the store")


def _load_problem(args):
    from .problems import Problem

    return Problem.load(args.problem, args.overrides, precision=args.precision)


def _open_store(args):
    if args.no_store:
        return None
    from .store import Store

    return Store(args.store)


def llm_client(store=None, model: str | None = None):
    """The `LLMClient` behind --proposer llm and --surrogate llm: the Anthropic SDK, ANTHROPIC_API_KEY read from the
    environment (without it `LLMUnavailable` says so and the command exits 2), each call recorded in the store's
    `llm_calls` table when a store is open. `main(llm_client_factory=...)` replaces it (tests: recorded replies)."""
    from .llm import CallRecorder, LLMClient, LLMConfig

    recorder = CallRecorder(store) if store is not None else None
    return LLMClient(LLMConfig(model=model) if model else LLMConfig(), recorder=recorder)


# ---------------------------------------------------------------------------------------------- problems


def cmd_problems_list(args) -> int:
    from .problems import Problem, builtin_names

    for name in builtin_names():
        p = Problem.load(name)
        doc = next((line.strip("# ").strip() for line in p.source.splitlines() if line.startswith("#")), "")
        print(f"{name:24s} {doc}")
    return 0


def cmd_problems_show(args) -> int:
    from .problems.describe import describe

    r = describe(_load_problem(args))
    if args.json:
        print(json.dumps(r, default=str))
        return 0
    print(f"{r['problem']}  ({r['key']}, precision {r['precision']})\n  {r['path']}")
    print("  constants: " + ", ".join(f"{k}={v}" for k, v in r["constants"].items()))
    for i, x in enumerate(r["inputs"]):
        print(f"  input {i}: {x}")
    for i, x in enumerate(r["outputs"]):
        print(f"  output {i}: {x}")
    print(f"  FLOPs {r['flops']:.4g} ({r['compute_dtype']}), min bytes {r['min_bytes']:.4g}, "
          f"eager bytes {r['eager_bytes']:.4g}, intensity {r['intensity']:.3g} FLOP/B, parameters {r['parameters']}")
    if not r["floors"]:
        print("  floor: no device has measured ceilings (run experiments/measure_ceilings.py on a GPU)")
    for gpu, f in r["floors"].items():
        if "error" in f:
            print(f"  floor on {gpu}: {f['error']}")
        else:
            print(f"  floor on {gpu}: {f['floor_ms']:.4g} ms ({f['bound']}-bound; compute {f['compute_ms']:.4g} ms, "
                  f"memory {f['memory_ms']:.4g} ms)")
    return 0


def _register_problems(sub) -> None:
    probs = sub.add_parser("problems", help="list and inspect problems").add_subparsers(dest="sub", required=True)
    probs.add_parser("list", help="built-in problems").set_defaults(func=cmd_problems_list)
    show = probs.add_parser("show", help="shapes, FLOPs, bytes and roofline floor of a problem")
    _problem_args(show)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_problems_show)


# ---------------------------------------------------------------------------------------------- eval, propose


def cmd_eval(args) -> int:
    from .core.candidate import Candidate
    from .devices import get_device
    from .harness.ladder import Ladder

    problem = _load_problem(args)
    candidate = Candidate.from_file(args.candidate)
    device = get_device(args.device)
    try:
        ladder = Ladder(device, store=_open_store(args), seeds=args.seeds)
        ev = ladder.evaluate(problem, candidate, up_to=args.up_to, force_full=True)
    finally:
        device.close()
    if args.json:
        print(ev.to_json())
        return 0
    verdict = f"OK up to {ev.fidelity}" if ev.ok else f"REJECTED at {ev.stages[-1].name}"
    print(f"{problem.name} / {Path(args.candidate).name} on {ev.device}: {verdict}")
    for s in ev.stages:
        print(f"  {s.name:13s} {s.verdict:12s} {s.cost_s:7.2f}s  {s.reason}")
        for f in s.flags:
            print(f"  {'':13s} {f.get('severity', ''):12s} {'':8s} {f.get('reason', '')}")
    return 0


def _register_eval(sub) -> None:
    ev = sub.add_parser("eval", help="run a candidate up the evaluation ladder")
    _problem_args(ev)
    ev.add_argument("candidate", help="a .py file defining ModelNew")
    ev.add_argument("--device", default=LOCAL, help="local (the GPU if present, else the CPU), cuda, cuda:N, cpu, "
                                                    "replay or ray")
    ev.add_argument("--up-to", default="full_timing", choices=STAGES)
    ev.add_argument("--seeds", type=int, default=5, help="correctness seeds (default 5)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    _store_args(ev)
    ev.set_defaults(func=cmd_eval)


def cmd_propose(args) -> int:
    from .proposers.offline import OfflineProposer

    problem = _load_problem(args)
    proposer = OfflineProposer(problem)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    groups = proposer.groups({p: True for p in proposer.fusion_points})
    print(f"{problem.name}: {len(groups)} group(s) [{', '.join(g.family for g in groups)}], "
          f"fusion points {proposer.fusion_points or 'none'}, space size {proposer.space_size():,}")
    for i, cand in enumerate(proposer.propose(args.n, seed=args.seed)):
        origin = dict(cand.origin)
        path = cand.write(out)
        cfg = json.loads(origin["config"])
        print(f"  {path}  coverage flops {origin['coverage_flops']:.0%} bytes {origin['coverage_bytes']:.0%}  "
              f"fuse {cfg['fuse'] or '-'}  {json.dumps(cfg['configs'], sort_keys=True)}")
    return 0


def _register_propose(sub) -> None:
    prop = sub.add_parser("propose", help="write candidates from the offline proposer")
    _problem_args(prop)
    prop.add_argument("--n", type=int, default=8, help="how many candidates (the default configuration first)")
    prop.add_argument("--seed", type=int, default=0)
    prop.add_argument("--out", required=True, help="directory for the candidate files")
    prop.set_defaults(func=cmd_propose)


# ---------------------------------------------------------------------------------------------- search


def _search_device(args):
    """The device a search runs on; when "auto" falls back to replay it says so."""
    from .devices import get_device

    name = resolve_name(args.device)
    if args.device == AUTO and name == REPLAY:
        print(REPLAY_FALLBACK, file=sys.stderr)
    return get_device(name, dataset=args.dataset, replay_stores=args.replay_data)


def _surrogate_table(data: str | None):
    from .store.dataset import load
    from .surrogates.features import training_table

    return training_table(load("candidates", data), load("problems", data))


def _search_surrogate(args, llm_client=None):
    """(surrogate, selective policy) for --surrogate, or (None, None)."""
    if args.surrogate == "none":
        return None, None
    from .surrogates import SelectivePolicy

    if args.surrogate == "llm":
        from .llm import LLMSurrogate

        if llm_client is None:
            raise ValueError("--surrogate llm needs an LLM client")
        tau = args.tau if args.tau is not None else NO_CONFIDENT_TAU  # no held-out risk-coverage curve for the LLM
        return LLMSurrogate(llm_client, repeats=args.repeats), SelectivePolicy(tau=tau, seed=args.seed)
    if args.surrogate == "roofline":
        from .core import ceilings
        from .core.target import H200
        from .surrogates import RooflineSurrogate

        tau = args.tau if args.tau is not None else NO_CONFIDENT_TAU
        return RooflineSurrogate(ceilings.load(H200.name)), SelectivePolicy(tau=tau, seed=args.seed)
    if args.surrogate == "learned":
        from .surrogates.learned import LearnedSurrogate

        path = Path(args.surrogate_model or paths.surrogate_path())
        if path.exists():
            model = LearnedSurrogate.load(path)
        else:
            print(f"no trained surrogate at {path}: training one on the shipped H200 dataset (`workbench surrogate "
                  "train` does this ahead)", file=sys.stderr)
            model = LearnedSurrogate().fit(_surrogate_table(args.dataset))
            model.save(path)
        tau = args.tau if args.tau is not None else model.tau(args.max_risk)
        return model, SelectivePolicy(tau=tau, seed=args.seed)
    raise ValueError(f"unknown surrogate '{args.surrogate}' (none, roofline, learned, llm)")


def cmd_search(args) -> int:
    from .devices import replay_counts
    from .harness.budget import Budget
    from .search.config import ScreeningConfig
    from .search.search import make_search

    problem = _load_problem(args)
    if args.repeats < 1:
        raise ValueError("--repeats must be at least 1")
    store = _open_store(args)
    # one client for the LLM proposer and the LLM surrogate: one concurrency limit, one cost account; without
    # ANTHROPIC_API_KEY this raises LLMUnavailable (exit 2 with that message) before any device is opened
    llm_client = args.make_llm_client(store, args.llm_model) if "llm" in (args.proposer, args.surrogate) else None
    device = _search_device(args)
    try:
        surrogate, screen = _search_surrogate(args, llm_client)
        search = make_search(problem, device, proposer=args.proposer, strategy=args.strategy,
                             budget=Budget(args.budget_gpu_s, args.budget_wall_s), store=store,
                             seed=args.seed, per_step=args.per_step, search_id=args.search_id,
                             screening=ScreeningConfig(surrogate, screen, surrogate_learns=args.surrogate_learns)
                             if surrogate is not None else None,
                             llm_client=llm_client if args.proposer == "llm" else None, dataset=args.dataset)
        if not args.json:
            print(f"search {problem.name} on {device.name}: strategy {args.strategy}, proposer {args.proposer}, "
                  f"surrogate {args.surrogate}, budget {args.budget_gpu_s:g} GPU-s", flush=True)

        def progress(r):
            if not args.json:
                best = r.best["speedup_vs_eager"] if r.best else None
                spent = min(r.gpu_seconds / args.budget_gpu_s, 1.0) if args.budget_gpu_s else 0.0
                bar = "#" * int(20 * spent) + "." * (20 - int(20 * spent))
                print(f"[{bar}] step {r.step:3d}  evaluated {len(r.nodes)}  GPU-s {r.gpu_seconds:8.2f}  best "
                      f"{'-' if best is None else f'{best:.3g}x eager'}" + (f"  [{r.stopped}]" if r.stopped else ""),
                      flush=True)

        search.run(args.steps, progress=progress)
    finally:
        device.close()
    report = search.report()
    if llm_client is not None:
        report["llm"] = llm_client.summary()  # calls, retries, tokens and cost of this search
    replayed = replay_counts(device)
    if replayed is not None:
        report["replay"] = replayed
    print(json.dumps(report, default=str) if args.json else json.dumps(report, indent=1, default=str))
    return 0


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
    srch.add_argument("--repeats", type=int, default=1, help="LLM surrogate: forecasts per candidate, averaged")
    srch.add_argument("--llm-model", default=None, help="Claude model for --proposer/--surrogate llm "
                                                        "(default: LLMConfig's)")
    srch.add_argument("--surrogate-model", default=None, help="a trained learned surrogate (workbench surrogate "
                                                               "train --out); default: train on the dataset")
    srch.add_argument("--tau", type=float, default=None, help="confidence threshold (default: from the learned "
                                                              "surrogate's held-out risk-coverage curve at --max-risk)")
    srch.add_argument("--max-risk", type=float, default=0.3, help="bin-error rate the confident forecasts may have")
    srch.add_argument("--surrogate-learns", action="store_true",
                      help="feed each measured speedup back to the learned surrogate (what it does to screening: "
                           "results/search/report.md)")
    srch.add_argument("--budget-gpu-s", type=float, default=60.0)
    srch.add_argument("--budget-wall-s", type=float, default=None)
    srch.add_argument("--steps", type=int, default=None, help="stop after this many steps (default: the budget)")
    srch.add_argument("--per-step", type=int, default=4, help="candidates evaluated per step")
    srch.add_argument("--seed", type=int, default=0)
    srch.add_argument("--search-id", default=None, help="name the search to save its events and resume it")
    _store_args(srch)
    srch.add_argument("--json", action="store_true")
    srch.set_defaults(func=cmd_search)


# ---------------------------------------------------------------------------------------------- profile


def cmd_profile(args) -> int:
    """Static reading and roofline verdict always; counters and expert findings where a GPU with ncu is present."""
    from .profiling import format_report, profile_candidate

    name = resolve_name(args.device)
    if name not in ("cuda", "cpu") and not name.startswith("cuda:"):
        raise ValueError(f"profile runs on this machine: --device local, cuda, cuda:N or cpu, not '{args.device}'")
    report = profile_candidate(_load_problem(args), args.candidate, device=args.device, ms=args.ms,
                               counters=not args.no_counters, asm_dir=args.asm_dir)
    print(json.dumps(report, default=str) if args.json else format_report(report))
    return 0


def _register_profile(sub) -> None:
    prof = sub.add_parser("profile", help="static reading, roofline verdict, counters (GPU + ncu) and findings")
    _problem_args(prof)
    prof.add_argument("candidate", help="a .py file defining ModelNew")
    prof.add_argument("--device", default=LOCAL, help="local (counters when a GPU and ncu are present), cuda:N or "
                                                      "cpu")
    prof.add_argument("--ms", type=float, default=None, help="a measured time for the roofline verdict (else the "
                                                              "floor's verdict, unmeasured)")
    prof.add_argument("--no-counters", action="store_true", help="skip Nsight Compute even on a GPU")
    prof.add_argument("--asm-dir", default=None, help="write each kernel's PTX and SASS to this directory")
    prof.add_argument("--json", action="store_true", help="print one JSON object")
    prof.set_defaults(func=cmd_profile)


# ---------------------------------------------------------------------------------------------- sweep, report


def cmd_sweep(args) -> int:
    from .lab.sweep import run_sweep

    print(run_sweep(args.config, jobs=args.jobs, out_root=args.out, only=args.only or None))
    return 0


def _register_sweep(sub) -> None:
    sw = sub.add_parser("sweep", help="run a notebook over a parameter grid with papermill (one process per run)")
    sw.add_argument("config", help="experiments/<name>.yaml: notebook, base parameters, grid")
    sw.add_argument("--jobs", type=int, default=None, help="runs at a time (default: the config's jobs)")
    sw.add_argument("--out", default="results/runs", help="root of the run directories")
    sw.add_argument("--only", action="append", default=[], help="run ids or glob patterns to run (repeatable)")
    sw.set_defaults(func=cmd_sweep)


def cmd_report(args) -> int:
    """A sweep's run directories as one self-contained HTML file (plotly.js inlined)."""
    from .lab.report_html import write_sweep_report

    print(write_sweep_report(args.runs_dir, args.out, title=args.title))
    return 0


def _register_report(sub) -> None:
    rep = sub.add_parser("report", help="render a sweep's run directories to one self-contained HTML file")
    rep.add_argument("runs_dir", help="a sweep's folder, e.g. results/runs/replay")
    rep.add_argument("--out", default=None, help="the HTML file (default: RUNS_DIR/report.html)")
    rep.add_argument("--title", default=None)
    rep.set_defaults(func=cmd_report)


# ---------------------------------------------------------------------------------------------- surrogate


def cmd_surrogate_train(args) -> int:
    """Train the learned surrogate on the measured dataset and save it."""
    from .surrogates.learned import LearnedSurrogate

    s = LearnedSurrogate(n_estimators=args.trees, seed=args.seed).fit(_surrogate_table(args.data))
    path = s.save(args.out or paths.surrogate_path())
    print(f"trained on {s.n_train} candidates of {len(s.train_problems)} problems in {s.fit_seconds:.1f} s: {path}")
    return 0


def cmd_surrogate_eval(args) -> int:
    """Cross-validated metrics of the learned surrogate, the baselines and (--surrogate llm) Claude on one split of
    the dataset; with --limit-pairs every one of them is scored on the same seeded sample of pairs."""
    from .store.dataset import load
    from .surrogates.evaluate import default_surrogates, evaluate, format_table, jsonable, sample_rows
    from .surrogates.features import training_table

    cands, problems = load("candidates", args.data), load("problems", args.data)
    table = training_table(cands, problems)
    factories = default_surrogates(args.seed, args.trees)
    known = sorted(set(factories) | {"llm"})
    unknown = set(args.only) - set(known)
    if unknown:
        raise ValueError(f"unknown surrogate(s) {sorted(unknown)}; choose from {known}")
    want_llm = "llm" in args.surrogate or "llm" in args.only
    if args.only:
        factories = {k: v for k, v in factories.items() if k in args.only}
    if args.repeats < 1:
        raise ValueError("--repeats must be at least 1")
    if want_llm and args.limit_pairs is None:
        raise ValueError(f"the LLM surrogate makes one API call per pair (x --repeats) and the dataset has "
                         f"{len(table)}: pass --limit-pairs N (every surrogate is then scored on the same N pairs)")
    sample = None
    if args.limit_pairs is not None:
        # the sample is drawn from rows whose source regenerates whether or not the LLM takes part, so runs with
        # and without it at one seed score the same pairs
        eligible = cands.loc[table.index, "regenerates"].to_numpy(bool) if "regenerates" in cands.columns else None
        sample = sample_rows(table, args.limit_pairs, args.seed, eligible, args.pairs_per_problem)
    client = None
    if want_llm:
        from .llm import LLMSurrogate
        from .llm.dataset_eval import llm_factory

        client = args.make_llm_client(None, args.llm_model)
        factories["llm"] = llm_factory(LLMSurrogate(client, repeats=args.repeats), cands)
    results = evaluate(table, args.split, factories, k=args.folds, seed=args.seed, sample=sample)
    if client is not None:
        results["llm"]["llm_calls"] = client.summary()
    if args.json:
        print(json.dumps(jsonable(results)))
        return 0
    scored = table if sample is None else table.loc[sample]
    print(f"split {args.split}: {len(table)} candidates, {table['problem_key'].nunique()} problems, "
          f"{next(iter(results.values()))['folds']} folds" +
          ("" if sample is None else f"; scored on a sample of {len(scored)} pairs over "
                                     f"{scored['problem_key'].nunique()} problems (seed {args.seed})"))
    print(format_table(results))
    if client is not None:
        s = results["llm"]["llm_calls"]
        print(f"llm: {s['calls']} calls, {s['retries']} retries, {results['llm']['unparsed']} unreadable forecasts, "
              f"${s['cost_usd']:.4f}")
    return 0


def _register_surrogate(sub) -> None:
    sur = sub.add_parser("surrogate", help="the learned surrogate: train it, evaluate it against baselines")
    sur_sub = sur.add_subparsers(dest="sub", required=True)
    tr = sur_sub.add_parser("train", help="train on the measured dataset and save the model")
    tr.add_argument("--out", default=None, help="model path (default: $WORKBENCH_HOME/surrogates/learned.pkl)")
    tr.add_argument("--data", default=None, help="dataset directory (default: results/dataset)")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--trees", type=int, default=250, help="trees per LightGBM model")
    tr.set_defaults(func=cmd_surrogate_train)
    se = sur_sub.add_parser("eval", help="cross-validated metrics of each surrogate and baseline")
    se.add_argument("--split", default="problem", choices=["random", "problem", "family"],
                    help="rows at random, whole problems held out (default), or whole kernel families held out")
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
    se.set_defaults(func=cmd_surrogate_eval)


# ---------------------------------------------------------------------------------------------- llm


def cmd_llm_export(args) -> int:
    """Measured evaluations of the store as chat-format JSONL (the LLM surrogate's prompt, the measured outcome)."""
    from .llm.rewards import export_pairs
    from .store import Store

    path = Path(args.store).expanduser() if args.store else paths.store_path()
    if not path.exists():  # Store() would create an empty one and the export would silently be empty
        raise ValueError(f"no store at {path} (give --store PATH)")
    store = Store(path)
    try:
        n = export_pairs(store, args.out, anchor=args.anchor)
    finally:
        store.close()
    print(f"{n} pairs -> {args.out}")
    return 0


def cmd_llm_train_rl(args) -> int:
    """GRPO fine-tuning of a local causal LM on exported pairs, rewarded by calibration scores (the [rl] extra)."""
    from .llm.train_rl import train

    summary = train(args.model, args.data, args.out, rewards=args.rewards.split(","), steps=args.steps,
                    num_generations=args.num_generations, batch_size=args.batch_size, learning_rate=args.lr,
                    max_completion_length=args.max_completion_tokens, temperature=args.temperature, beta=args.beta,
                    seed=args.seed)
    print(json.dumps(summary, default=str) if args.json else
          f"trained {summary['steps']} steps on {summary['pairs']} pairs in {summary['seconds']:.1f} s: "
          f"{summary['out']}\n" + "\n".join(f"  {k}: {v:.4g}" for k, v in summary["last"].items()))
    return 0


def _register_llm(sub) -> None:
    llm = sub.add_parser("llm", help="forecaster fine-tuning data and training").add_subparsers(dest="sub",
                                                                                                  required=True)
    ex = llm.add_parser("export", help="the store's measured evaluations as chat-format JSONL (SFT or RL)")
    ex.add_argument("--out", required=True, help="the JSONL file")
    ex.add_argument("--anchor", default="eager", choices=["eager", "compile"])
    ex.add_argument("--store", default=None, help=STORE_HELP)
    ex.set_defaults(func=cmd_llm_export)
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
    rl.set_defaults(func=cmd_llm_train_rl)


# ---------------------------------------------------------------------------------------------- demo


def cmd_demo(args) -> int:
    """The ladder over the shipped example candidates on this machine: what each stage says about each."""
    from .core.candidate import Candidate
    from .devices import get_device
    from .examples import EXAMPLES
    from .harness.ladder import Ladder
    from .problems import Problem

    device = get_device(args.device)
    print(f"device: {device.name}" + ("" if device.kind == "cuda" else
                                      " (no GPU: static, compile and interpreter correctness at small shapes; "
                                      "timing is refused, never faked)"))
    try:
        ladder = Ladder(device, store=_open_store(args))
        for ex in EXAMPLES:
            problem = Problem.load(ex.problem, [] if device.kind == "cuda" else ex.cpu_overrides)
            ev = ladder.evaluate(problem, Candidate.from_file(ex.path))
            last = ev.stages[-1]
            speedup = ev.summary().get("speedup_vs_eager")
            speed = f"  {speedup:.3g}x eager" if speedup is not None else ""
            print(f"{problem.name:18s} {ex.path.name:28s} fidelity={ev.fidelity:12s}{speed}  [{last.name}: "
                  f"{last.verdict}] {last.reason}")
        print(f"GPU budget spent: {ladder.budget.gpu_spent:.2f} s")
    finally:
        device.close()
    return 0


def _register_demo(sub) -> None:
    demo = sub.add_parser("demo", help="the ladder over the shipped example candidates")
    demo.add_argument("--device", default=LOCAL, help="local (the GPU if present, else the CPU), cuda, cuda:N or cpu")
    _store_args(demo)
    demo.set_defaults(func=cmd_demo)


# ---------------------------------------------------------------------------------------------- entry point

COMMANDS = (_register_problems, _register_eval, _register_propose, _register_search, _register_profile,
            _register_sweep, _register_report, _register_surrogate, _register_llm, _register_demo)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="workbench", description="GPU kernel search workbench")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for register in COMMANDS:
        register(sub)
    return ap


def main(argv: list[str] | None = None, *, llm_client_factory: Callable[..., Any] | None = None) -> int:
    """Run one command; 0 when it ran, 2 with the reason on stderr when it could not. `llm_client_factory(store,
    model)` builds the LLM client of --proposer/--surrogate llm (default `llm_client`: the Anthropic SDK)."""
    from .devices.local import NoGPUError
    from .llm.client import LLMUnavailable  # imports no SDK: the anthropic package is optional
    from .problems.loader import ProblemError

    args = build_parser().parse_args(argv)
    args.make_llm_client = llm_client_factory or llm_client
    try:
        return args.func(args)
    except (ProblemError, NoGPUError, LLMUnavailable, ValueError, OSError, ImportError) as e:
        print(f"workbench: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
