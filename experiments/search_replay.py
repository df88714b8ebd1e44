"""Search experiments on replayed H200 measurements (issue 5): screening, the ladder, strategies.

    python experiments/search_replay.py [--problems P ...] [--seeds 5] [--budget-gpu-s 30] [--folds 5]
                                        [--device replay|cuda] [--out results/search]

Every search walks the measured part of a problem's space (`RecordedProposer`) on the replay device, so every GPU
answer is a real H200 measurement and every GPU-second charged is one that was spent there.

(a) screened vs unscreened, equal GPU budget: the same strategy (greedy) with and without surrogate screening
    (the proposer over-generates 3x, the learned surrogate forecasts, the selective policy measures the promising,
    the unsure and a few random ones). The surrogate never saw the problem: problems are split into `--folds` groups
    and each group's searches use a surrogate trained on the other groups (held-out problem). Reported: best speedup
    against GPU-seconds and against GPU measurements, and how many measurements the screened search needed to reach
    the unscreened search's final best (goal: <= 25 %).
(b) the ladder vs full fidelity for every candidate: the unscreened searches' trajectories costed two ways from
    measured stage costs: the ladder (correctness + quick timing for all, full timing for the promoted) and full
    fidelity (correctness + full timing for every candidate). Full timing's cost per candidate is the measured timed
    wall time of that problem's full-timed candidate (timing is sized by time, not by repetitions, so it varies
    little between candidates of one problem; the one-off torch.compile of the reference is left out, which favours
    full fidelity). Reported: GPU time to reach the search's final best, and the saving (goal: >= 60 %).
(c) greedy vs beam vs evolutionary vs MCTS at equal budget, unscreened: final best as a fraction of the pool's best.

Writes <out>/runs.jsonl (one row per search), <out>/summary.json and <out>/report.md.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STRATEGIES = ("greedy", "beam", "evolutionary", "mcts")


def trajectory(search) -> list[dict]:
    """After each evaluated node: GPU-seconds, GPU measurements so far, best speedup so far (the node `Tree.best`
    would pick so far, as the search's report and the sweep's curves count it: `workbench.core.events.trajectory`)."""
    from workbench.core.events import trajectory as event_trajectory

    return [{k: t[k] for k in ("gpu_s", "measured", "best", "candidate")} for t in event_trajectory(search.events)]


def searched(problem, device, proposer, strategy: str, seed: int, budget_s: float, wall_s: float | None = None,
             compile_pool=None, **search_kwargs):
    """A search with the experiments' common settings (4 evaluations per step, promotion within 5 %), run to its
    budget: (the Search, its wall seconds). `search_kwargs` go to `Search` (screening, findings)."""
    from workbench.harness.budget import Budget
    from workbench.harness.ladder import PromotionPolicy
    from workbench.search.search import Search

    s = Search(problem, device, strategy=strategy, proposer=proposer, budget=Budget(budget_s, wall_s), seed=seed,
               per_step=4, promotion=PromotionPolicy(full_within=0.05), **search_kwargs)
    s.ladder.compile_pool = compile_pool  # a live GPU run compiles screened proposals on these CPU workers
    t0 = time.perf_counter()
    s.run(steps=400)
    return s, time.perf_counter() - t0


def run_search(problem, device, proposer, strategy: str, seed: int, budget_s: float, surrogate=None, screen=None,
               compile_pool=None, wall_s: float | None = None, surrogate_learns: bool = False):
    from workbench.search.config import ScreeningConfig

    screening = (ScreeningConfig(surrogate, screen, surrogate_learns=surrogate_learns) if surrogate is not None
                 else None)
    s, wall = searched(problem, device, proposer, strategy, seed, budget_s, wall_s, compile_pool, screening=screening)
    rep = s.report()
    return {"stopped": s.budget.exhausted(), "strategy": strategy, "seed": seed, "screened": surrogate is not None,
            "best": rep["best"]["speedup_vs_eager"] if rep["best"] else None, "gpu_seconds": rep["gpu_seconds"],
            "evaluations": rep["evaluations"], "skipped": rep["skipped_by_surrogate"],
            "candidates": rep["candidates"], "trajectory": trajectory(s), "wall_s": wall}


def measurements_to_reach(traj: list[dict], target: float) -> int | None:
    for t in traj:
        if t["best"] is not None and t["best"] >= target * (1 - 1e-9):
            return t["measured"]
    return None


def ladder_vs_full(traj_run: dict, costs: dict[str, dict], full_cost: float, promote_within: float = 0.05) -> dict:
    """Cost the unscreened trajectory with the ladder and with full fidelity for every candidate, to its final best."""
    ladder = full = screen_only = 0.0
    best_quick = None
    final = traj_run["best"]
    out = {"ladder_s": None, "full_s": None, "ladder_confirm_end_s": None}
    for t in traj_run["trajectory"]:
        c = costs.get(t["candidate"])
        if c is None:
            continue
        # a full timing costs what this candidate's quick timing cost, with the quick timed loop replaced by the
        # full one (same warm-up and overheads; more and longer timed calls, and torch.compile's reference timed too)
        fc = c["quick"] - c["quick_wall"] + full_cost
        ladder += c["correctness"] + c["quick"]
        screen_only += c["correctness"] + c["quick"]
        full += c["correctness"] + (fc if c["timed"] else 0.0)
        if c["timed"] and c["ms"] is not None:
            if best_quick is None or c["ms"] <= best_quick * (1 + promote_within):
                ladder += fc  # promoted: the ladder times it at full fidelity too
            best_quick = c["ms"] if best_quick is None else min(best_quick, c["ms"])
        if final is not None and t["best"] is not None and t["best"] >= final * (1 - 1e-9):
            # second ladder policy: quick timing only during the search, one full timing of the best at the end
            out.update(ladder_s=ladder, full_s=full, ladder_confirm_end_s=screen_only + fc)
            break
    return out


def stage_costs(df, problem_key: str) -> dict[str, dict]:
    out = {}
    for _, r in df[df["problem_key"] == problem_key].iterrows():
        ev = json.loads(r["evaluation_json"])
        g = {s["name"]: s.get("gpu_s", 0.0) for s in ev["stages"]}
        q = next((s for s in ev["stages"] if s["name"] == "quick_timing"), {})
        out[r["candidate"]] = {"correctness": g.get("correctness", 0.0), "quick": g.get("quick_timing", 0.0),
                               "quick_wall": q.get("data", {}).get("timed_wall_s") or 0.0,
                               "timed": r["outcome"] == "ok", "ms": r["candidate_ms"]}
    return out


def full_timing_cost(df, problem_key: str) -> float | None:
    for js in df.loc[(df["problem_key"] == problem_key) & df["full_timed"], "evaluation_json"]:
        for s in json.loads(js)["stages"]:
            if s["name"] == "full_timing" and s["verdict"] == "pass":
                return s["data"].get("timed_wall_s")
    return None


def replayed_speedup(evaluation_json: str) -> float | None:
    """The speedup a search reads for a recorded candidate (`Evaluation.summary`: full timing if any, else quick)."""
    from workbench.store.dataset import evaluation_from_summary

    return evaluation_from_summary(json.loads(evaluation_json)).summary().get("speedup_vs_eager")


def geo(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main() -> None:
    from workbench.devices.replay import ReplayDevice
    from workbench.problems import Problem
    from workbench.proposers.recorded import RecordedProposer
    from workbench.store.dataset import load

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", nargs="*", default=None)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--budget-gpu-s", type=float, default=None, help="a fixed budget per search (default: a fraction "
                                                                     "of what measuring the whole pool cost)")
    ap.add_argument("--budget-fraction", type=float, default=0.15,
                    help="budget = this fraction of the recorded GPU-seconds of the problem's whole measured pool")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--min-points", type=int, default=40, help="skip problems with fewer measured points")
    ap.add_argument("--surrogate", default="learned", choices=["learned", "roofline"])
    ap.add_argument("--parts", default="abc")
    ap.add_argument("--surrogate-learns", action="store_true",
                    help="part (a): the screened search feeds its measurements back to the learned surrogate")
    ap.add_argument("--max-risk", type=float, default=0.3,
                    help="the selective policy's tau: the lowest confidence whose accepted held-out forecasts have "
                         "at most this bin-error rate")
    ap.add_argument("--out", default=str(ROOT / "results" / "search"))
    ap.add_argument("--summarize-only", action="store_true", help="rewrite summary and report from runs.jsonl")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df = load("candidates")
    df = df[df["regenerates"]]
    if args.summarize_only:
        rows = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
        summary = summarize(rows, df, args)
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        (out / "report.md").write_text(report(summary, args))
        print(report(summary, args))
        return
    counts = df.groupby("problem")["candidate"].count()
    timed = df[df["outcome"] == "ok"].groupby("problem")["candidate"].count()
    names = args.problems or sorted(p for p in counts.index if counts[p] >= args.min_points and timed.get(p, 0) >= 2)
    folds = {p: i % args.folds for i, p in enumerate(sorted(names))}
    device = ReplayDevice.from_dataset(problems=names)
    rows = []
    surrogates: dict[int, tuple] = {}

    def learned_models():
        """One surrogate per fold of problems, trained without them; each fold's tau from the risk-coverage curve of
        the other folds' held-out forecasts (their bin errors by confidence), at --max-risk."""
        from workbench.metrics import threshold_for_risk, to_bin
        from workbench.surrogates.features import training_table
        from workbench.surrogates.learned import LearnedSurrogate

        table = training_table(load("candidates"), load("problems"))
        fold_of = table["problem"].map(folds)
        models, preds = {}, []
        for k in sorted(set(folds.values())):
            train = table[fold_of != k]
            models[k] = LearnedSurrogate(seed=0).fit(train)
            test = table[fold_of == k]
            if len(test):
                pr = models[k].predict_frame(test)
                pr["fold"] = k
                pr["wrong"] = pr[[f"p{i}" for i in range(9)]].to_numpy().argmax(1) != to_bin(
                    test["log2_speedup"].to_numpy(), test["failed"].to_numpy())
                preds.append(pr)
        oof = __import__("pandas").concat(preds)
        for k, m in models.items():
            other = oof[oof["fold"] != k]
            surrogates[k] = (m, threshold_for_risk(other["confidence"].to_numpy(), other["wrong"].to_numpy(float),
                                                   args.max_risk))
        return oof

    def surrogate_for(problem_name: str):
        from workbench.surrogates import SelectivePolicy

        if args.surrogate == "roofline":
            from workbench.core import ceilings
            from workbench.surrogates import RooflineSurrogate

            return RooflineSurrogate(ceilings.load("NVIDIA H200")), SelectivePolicy(tau=1.01, seed=0)
        if not surrogates:
            learned_models()
        model, tau = surrogates[folds[problem_name]]
        return model, SelectivePolicy(tau=tau, seed=0)

    try:
        for name in names:
            problem = Problem.load(name)
            sub = df[df["problem"] == name]
            pool_best = max((replayed_speedup(js) or 0.0) for js in sub["evaluation_json"])
            budget = args.budget_gpu_s or args.budget_fraction * float(sub["gpu_s"].sum())
            for seed in range(args.seeds):
                runs = {}
                if "a" in args.parts or "b" in args.parts or "c" in args.parts:
                    runs["greedy"] = run_search(problem, device, RecordedProposer.from_dataset(problem), "greedy",
                                                seed, budget)
                if "c" in args.parts:
                    for strat in STRATEGIES[1:]:
                        runs[strat] = run_search(problem, device, RecordedProposer.from_dataset(problem), strat,
                                                 seed, budget)
                if "a" in args.parts:
                    sur, pol = surrogate_for(name)
                    runs["greedy+screen"] = run_search(problem, device, RecordedProposer.from_dataset(problem),
                                                       "greedy", seed, budget, surrogate=sur, screen=pol,
                                                       surrogate_learns=args.surrogate_learns)
                    if args.surrogate_learns and hasattr(sur, "forget"):
                        sur.forget()  # the fold's model is shared by the fold's problems and seeds
                for label, r in runs.items():
                    if label == "greedy+screen" and args.surrogate == "learned":
                        r["tau"] = surrogates[folds[name]][1]
                    r.update(problem=name, label=label, pool_best=pool_best, fold=folds[name], budget_s=budget,
                             pool_size=len(sub), pool_gpu_s=float(sub["gpu_s"].sum()))
                    rows.append(r)
                print(json.dumps({"problem": name, "seed": seed, **{k: round(v["best"] or 0, 3)
                                                                    for k, v in runs.items()}}), flush=True)
    finally:
        device.close()
    with (out / "runs.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r, default=str) + "\n")
    summary = summarize(rows, df, args)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    (out / "report.md").write_text(report(summary, args))
    print(report(summary, args))


def summarize(rows: list[dict], df, args) -> dict:
    by = {}
    for r in rows:
        # on replay every evaluated node of the recorded walk reached the GPU stages: count them by position (runs
        # written before `trajectory` counted nodes whose unrecorded full timing was refused as unmeasured)
        for i, t in enumerate(r["trajectory"]):
            t["measured"] = i + 1
        by.setdefault((r["problem"], r["seed"]), {})[r["label"]] = r
    out: dict = {"budget": f"{args.budget_gpu_s:g} GPU-s" if args.budget_gpu_s else
                 f"{args.budget_fraction:.0%} of the GPU-seconds spent measuring the whole pool", "seeds": args.seeds,
                 "problems": sorted({r["problem"] for r in rows}),
                 "surrogate": args.surrogate}
    # (a)
    ratios, reached, final_ratio = [], 0, []
    for (p, s), runs in by.items():
        if "greedy+screen" not in runs:
            continue
        u, sc = runs["greedy"], runs["greedy+screen"]
        final_ratio.append((sc["best"] or 0) / u["best"] if u["best"] else float("nan"))
        n_s = measurements_to_reach(sc["trajectory"], u["best"]) if u["best"] else None
        total_u = u["trajectory"][-1]["measured"] if u["trajectory"] else 0
        if n_s is not None and total_u:
            reached += 1
            ratios.append(n_s / total_u)
    if final_ratio:
        out["a"] = {"pairs": len(final_ratio), "screened_reached_unscreened_best": reached,
                    "median_measurement_fraction_to_reach": statistics.median(ratios) if ratios else None,
                    "share_within_25pct_of_measurements": (sum(x <= 0.25 for x in ratios) / len(final_ratio)),
                    "geo_mean_final_best_ratio_screened_over_unscreened": geo(final_ratio)}
    # (b)
    savings, per_problem, savings_end = [], {}, []
    for (p, s), runs in by.items():
        u = runs.get("greedy")
        if u is None:
            continue
        key = df.loc[df["problem"] == p, "problem_key"].iloc[0]
        fc = full_timing_cost(df, key)
        if fc is None:
            continue
        c = ladder_vs_full(u, stage_costs(df, key), fc)
        if c["ladder_s"] and c["full_s"]:
            savings.append(1 - c["ladder_s"] / c["full_s"])
            savings_end.append(1 - c["ladder_confirm_end_s"] / c["full_s"])
            per_problem.setdefault(p, []).append(1 - c["ladder_s"] / c["full_s"])
    if savings:
        out["b"] = {"runs": len(savings), "median_saving": statistics.median(savings),
                    "mean_saving": statistics.mean(savings),
                    "median_saving_confirm_at_end": statistics.median(savings_end),
                    "per_problem_median": {p: statistics.median(v) for p, v in sorted(per_problem.items())}}
    # (c)
    frac = {}
    for (p, s), runs in by.items():
        for label in STRATEGIES:
            if label in runs and runs[label]["best"]:
                frac.setdefault(label, []).append(runs[label]["best"] / runs[label]["pool_best"])
    if len(frac) > 1:
        out["c"] = {label: {"geo_mean_fraction_of_pool_best": geo(v), "runs": len(v),
                            "share_reaching_pool_best": sum(x >= 0.999 for x in v) / len(v)}
                    for label, v in frac.items()}
    return out


def report(s: dict, args) -> str:
    lines = ["# Search experiments on replayed H200 measurements", "",
             f"Problems ({len(s['problems'])}): {', '.join(s['problems'])}. Seeds: {s['seeds']}. Budget: "
             f"{s['budget']} per search (recorded H200 GPU-seconds). Surrogate: {s['surrogate']} "
             "(held-out problems).", ""]
    if "a" in s:
        a = s["a"]
        lines += ["## (a) Screened vs unscreened greedy search, equal GPU budget", "",
                  f"- runs compared: {a['pairs']}; the screened search reached the unscreened search's final best in "
                  f"{a['screened_reached_unscreened_best']} of them",
                  f"- median fraction of the unscreened search's GPU measurements the screened one needed to get "
                  f"there: {a['median_measurement_fraction_to_reach']}",
                  f"- share of runs reaching it within 25 % of the measurements (goal): "
                  f"{a['share_within_25pct_of_measurements']:.2f}",
                  f"- geo-mean final best, screened / unscreened: "
                  f"{a['geo_mean_final_best_ratio_screened_over_unscreened']:.3f}", ""]
    if "b" in s:
        b = s["b"]
        lines += ["## (b) The ladder vs full fidelity for every candidate", "",
                  f"- GPU time to the search's final best saved by the ladder: median {b['median_saving']:.1%}, "
                  f"mean {b['mean_saving']:.1%} over {b['runs']} searches (goal >= 60 %), promoting to full timing "
                  "during the search every candidate within 5 % of the best quick time so far",
                  f"- with quick timing only during the search and one full timing of the best at the end: median "
                  f"{b['median_saving_confirm_at_end']:.1%}", "",
                  "| problem | median saving |", "|---|---|"]
        lines += [f"| {p} | {v:.1%} |" for p, v in b["per_problem_median"].items()]
        lines.append("")
    if "c" in s:
        lines += ["## (c) Strategies at equal budget (unscreened)", "",
                  "| strategy | geo-mean best / pool best | share reaching the pool best | runs |", "|---|---|---|---|"]
        for label, v in s["c"].items():
            lines.append(f"| {label} | {v['geo_mean_fraction_of_pool_best']:.3f} | "
                         f"{v['share_reaching_pool_best']:.2f} | {v['runs']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
