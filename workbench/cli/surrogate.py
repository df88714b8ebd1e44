"""`workbench surrogate train|eval`: the learned surrogate on the shipped dataset, against baselines."""
from __future__ import annotations

import json

from ..core import paths
from ..llm import LLMSurrogate
from ..llm.dataset_eval import llm_factory
from ..store.dataset import load
from ..surrogates.evaluate import (
    calibration_variants,
    default_surrogates,
    evaluate,
    format_intervals,
    format_table,
    jsonable,
    sample_rows,
    subsample,
)
from ..surrogates.features import training_table
from ..surrogates.learned import CALIBRATIONS, LearnedSurrogate


def surrogate_table(data: str | None):
    return training_table(load("candidates", data), load("problems", data))


def cmd_surrogate_train(args) -> int:
    """Train the learned surrogate on the measured dataset and save it."""
    s = LearnedSurrogate(n_estimators=args.trees, seed=args.seed).fit(surrogate_table(args.data))
    path = s.save(args.out or paths.surrogate_path())
    print(f"trained on {s.n_train} candidates of {len(s.train_problems)} problems in {s.fit_seconds:.1f} s: {path}")
    return 0


def cmd_surrogate_eval(args) -> int:
    """Cross-validated metrics of the learned surrogate, the baselines and (--surrogate llm) Claude on one split of
    the dataset; with --limit-pairs every one of them is scored on the same seeded sample of pairs. --boot N adds
    95 % bootstrap intervals over problems, --calibration all scores the learned surrogate under every calibration
    mode (trained once per fold), --max-per-problem N subsamples each problem's rows (seeded, default row kept)."""
    cands, problems = load("candidates", args.data), load("problems", args.data)
    table = training_table(cands, problems)
    per = getattr(args, "max_per_problem", None)
    if per is not None:
        table = subsample(table, per, args.seed)
    factories = default_surrogates(args.seed, args.trees)
    calibration = getattr(args, "calibration", "gaussian")
    if calibration != "gaussian" and "learned" in factories:
        modes = CALIBRATIONS if calibration == "all" else (calibration,)
        factories["learned"] = calibration_variants(args.seed, args.trees, modes)
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

        client = args.make_llm_client(None, args.llm_model)
        factories["llm"] = llm_factory(LLMSurrogate(client, repeats=args.repeats), cands)
    results = evaluate(table, args.split, factories, k=args.folds, seed=args.seed, sample=sample,
                       n_boot=getattr(args, "boot", 0))
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
    if getattr(args, "boot", 0):
        print(format_intervals(results))
    if client is not None:
        s = results["llm"]["llm_calls"]
        print(f"llm: {s['calls']} calls, {s['retries']} retries, {results['llm']['unparsed']} unreadable forecasts, "
              f"${s['cost_usd']:.4f}")
    return 0
