"""`workbench search`: a kernel search under a GPU budget, screened by a surrogate when asked."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..core import ceilings, paths
from ..core.target import H200
from ..devices import get_device, replay_counts
from ..devices.resolve import AUTO, REPLAY, REPLAY_FALLBACK, resolve_name
from ..harness.budget import Budget
from ..harness.ladder import PROBLEM_ERROR_PREFIX
from ..llm import LLMSurrogate
from ..problems import ProblemError
from ..search.config import ScreeningConfig
from ..search.search import make_search
from ..surrogates import RooflineSurrogate, SelectivePolicy
from ..surrogates.learned import LearnedSurrogate
from .common import load_problem, open_store, problem_error_text
from .parser import NO_CONFIDENT_TAU
from .surrogate import surrogate_table


def _search_device(args):
    """The device a search runs on; when "auto" falls back to replay it says so."""
    name = resolve_name(args.device)
    if args.device == AUTO and name == REPLAY:
        print(REPLAY_FALLBACK, file=sys.stderr)
    timeouts = dict(getattr(args, "timeouts", None) or [])
    if timeouts and name == REPLAY:
        raise ValueError("--timeout: the replay device answers from recordings; it has no worker timeouts")
    return get_device(name, dataset=args.dataset, replay_stores=args.replay_data,
                      **({"timeouts": timeouts} if timeouts else {}))


def _search_surrogate(args, llm_client=None):
    """(surrogate, selective policy) for --surrogate, or (None, None)."""
    if args.surrogate == "none":
        return None, None

    if args.surrogate == "llm":

        if llm_client is None:
            raise ValueError("--surrogate llm needs an LLM client")
        tau = args.tau if args.tau is not None else NO_CONFIDENT_TAU  # no held-out risk-coverage curve for the LLM
        return LLMSurrogate(llm_client, repeats=args.repeats), SelectivePolicy(tau=tau, seed=args.seed)
    if args.surrogate == "roofline":

        tau = args.tau if args.tau is not None else NO_CONFIDENT_TAU
        return RooflineSurrogate(ceilings.load(H200.name)), SelectivePolicy(tau=tau, seed=args.seed)
    if args.surrogate == "learned":

        path = Path(args.surrogate_model or paths.surrogate_path())
        if path.exists():
            model = LearnedSurrogate.load(path)
        else:
            print(f"no trained surrogate at {path}: training one on the shipped H200 dataset (`workbench surrogate "
                  "train` does this ahead)", file=sys.stderr)
            model = LearnedSurrogate().fit(surrogate_table(args.dataset))
            model.save(path)
        tau = args.tau if args.tau is not None else model.tau(args.max_risk)
        return model, SelectivePolicy(tau=tau, seed=args.seed)
    raise ValueError(f"unknown surrogate '{args.surrogate}' (none, roofline, learned, llm)")


def cmd_search(args) -> int:
    problem = load_problem(args)
    if args.repeats < 1:
        raise ValueError("--repeats must be at least 1")
    if args.search_id and args.no_store:
        raise ValueError("--search-id needs the store (its events are kept there): drop --no-store")
    store = open_store(args)  # a damaged, read-only or locked store fails here, before any work
    # one client for the LLM proposer and the LLM surrogate: one concurrency limit, one cost account; without
    # ANTHROPIC_API_KEY this raises LLMUnavailable (exit 2 with that message) before any device is opened
    llm_client = args.make_llm_client(store, args.llm_model) if "llm" in (args.proposer, args.surrogate) else None
    device = _search_device(args)
    search = None
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
            if search.events:
                print(f"resuming search {args.search_id!r}: {search.steps} step(s), {len(search.events)} event(s) "
                      "from the store", flush=True)

        def progress(r):
            blamed = next((n for n in search.tree.nodes.values() if n.nid in search.summaries and
                           (search.summaries[n.nid].get("provenance") or {}).get("problem_error")), None)
            if blamed is not None:  # met in a worker (real tensors): no candidate can be judged on this problem
                why = search.summaries[blamed.nid]["provenance"]["problem_error"]
                raise ProblemError(problem_error_text(problem, why.removeprefix(PROBLEM_ERROR_PREFIX).lstrip(": "),
                                                      blamed.stage))
            if not args.json:
                best = r.best["speedup_vs_eager"] if r.best else None
                spent = min(r.gpu_seconds / args.budget_gpu_s, 1.0) if args.budget_gpu_s else 0.0
                bar = "#" * int(20 * spent) + "." * (20 - int(20 * spent))
                print(f"[{bar}] step {r.step:3d}  evaluated {len(r.nodes)}  GPU-s {r.gpu_seconds:8.2f}  best "
                      f"{'-' if best is None else f'{best:.3g}x eager'}" + (f"  [{r.stopped}]" if r.stopped else ""),
                      flush=True)

        search.run(args.steps, progress=progress)
    finally:
        if search is not None:
            search.close()  # the search id is free for the next run
        device.close()
    report = search.report()
    if llm_client is not None:
        report["llm"] = llm_client.summary()  # calls, retries, tokens and cost of this search
    replayed = replay_counts(device)
    if replayed is not None:
        report["replay"] = replayed
    print(json.dumps(report, default=str) if args.json else json.dumps(report, indent=1, default=str))
    if llm_client is not None and llm_client.failed:  # failed calls are visible even when the search went on
        print(f"workbench: warning: {llm_client.failed} LLM call(s) failed; last: {llm_client.last_error}",
              file=sys.stderr)
    failure = search.llm_failure()
    if failure:  # --proposer llm produced nothing: the run did not do what was asked
        print(f"workbench: error: {failure}", file=sys.stderr)
        return 1
    return 0
