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
    measured stage costs: the ladder (the cheap correctness rung + quick timing for all; the remaining correctness
    seeds + full timing for the candidates the search's ladder promoted) and full fidelity (all correctness seeds +
    full timing for every candidate). A rung's correctness cost is its share of the recorded seeds' cost. Full
    timing's cost per candidate is the measured timed wall time of that problem's full-timed candidate (timing is
    sized by time, not by repetitions, so it varies little between candidates of one problem; the one-off
    torch.compile of the reference is left out, which favours full fidelity). Reported: GPU time to reach the
    search's final best, and the saving (goal: >= 50 %). Runs written before the ladder had two rungs (no
    `promoted` in their trajectories) are costed as that ladder was: all seeds first, promotion within 5 %.
    (b') the promotion policy tuned: the same trajectories re-decided by each policy of a grid, with every quick
    speedup drawn around its recording by the quick-vs-full disagreement measured on the problems' full-timed
    candidates (`--quick-noise`), so a policy that promotes too few loses the final best (`policy_sweep`).
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
    would pick so far, as the search's report and the sweep's curves count it: `workbench.core.events.trajectory`),
    whether the ladder promoted it to full timing and which correctness rung it passed."""
    from workbench.core.events import trajectory as event_trajectory

    out = []
    for t in event_trajectory(search.events):
        prov = (search.events[t["seq"]].get("summary") or {}).get("provenance") or {}
        out.append({**{k: t[k] for k in ("gpu_s", "measured", "best", "candidate")},
                    "promoted": prov.get("promotion") in ("promoted", "forced") or bool(prov.get("quick_skipped")),
                    "straight": bool(prov.get("quick_skipped")),
                    "rung": prov.get("correctness_rung")})
    return out


# The ladder the searches run with (main sets them from the command line): the promotion policy, and the cheap
# correctness rung's seeds (None: the ladder's default; 0: no cheap rung, every seed before quick timing).
LADDER: dict = {"promotion": None, "cheap_seeds": None}


def searched(problem, device, proposer, strategy: str, seed: int, budget_s: float, wall_s: float | None = None,
             compile_pool=None, **search_kwargs):
    """A search with the experiments' common settings (4 evaluations per step, the ladder of `LADDER`: by default
    its tuned promotion policy and two correctness rungs), run to its budget: (the Search, its wall seconds).
    `search_kwargs` go to `Search` (screening, findings)."""
    from workbench.harness.budget import Budget
    from workbench.harness.ladder import PromotionPolicy
    from workbench.search.search import Search

    s = Search(problem, device, strategy=strategy, proposer=proposer, budget=Budget(budget_s, wall_s), seed=seed,
               per_step=4, promotion=LADDER["promotion"] or PromotionPolicy(), **search_kwargs)
    if LADDER["cheap_seeds"] is not None:
        s.ladder.cheap_seeds = LADDER["cheap_seeds"] or s.ladder.seeds
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


def cheap_share(c: dict, cheap_seeds: int) -> float:
    """The cheap rung's share of a candidate's recorded correctness cost (the replay device charges it so)."""
    recorded = c.get("seeds") or cheap_seeds
    return min(cheap_seeds, recorded) / recorded if recorded else 1.0


def ladder_vs_full(traj_run: dict, costs: dict[str, dict], full_cost: float, promote_within: float = 0.05,
                   cheap_seeds: int = 1) -> dict:
    """Cost the unscreened trajectory with the ladder and with full fidelity for every candidate, to its final best.
    Trajectories that say which nodes the search's ladder promoted (`promoted`) are costed with two correctness
    rungs; older ones as the one-rung ladder that promoted within `promote_within` of the best quick time."""
    ladder = full = screen_only = 0.0
    best_quick = None
    final = traj_run["best"]
    two_rungs = any("promoted" in t for t in traj_run["trajectory"])
    out = {"ladder_s": None, "full_s": None, "ladder_confirm_end_s": None, "promoted": 0, "timed": 0}
    for t in traj_run["trajectory"]:
        c = costs.get(t["candidate"])
        if c is None:
            continue
        # a full timing costs what this candidate's quick timing cost, with the quick timed loop replaced by the
        # full one (same warm-up and overheads; more and longer timed calls, and torch.compile's reference timed too)
        fc = c["quick"] - c["quick_wall"] + full_cost
        cheap = c["correctness"] * (cheap_share(c, cheap_seeds) if two_rungs and c["timed"] else 1.0)
        ladder += (c["correctness"] + fc) if t.get("straight") else (cheap + c["quick"])
        screen_only += cheap + c["quick"]
        full += c["correctness"] + (fc if c["timed"] else 0.0)
        out["timed"] += bool(c["timed"])
        if two_rungs:
            if t.get("straight"):
                out["promoted"] += 1
            elif t.get("promoted"):
                ladder += c["correctness"] - cheap + fc  # the remaining seeds, then full timing
                out["promoted"] += 1
        elif c["timed"] and c["ms"] is not None:
            if best_quick is None or c["ms"] <= best_quick * (1 + promote_within):
                ladder += fc  # promoted: the ladder times it at full fidelity too
                out["promoted"] += 1
            best_quick = c["ms"] if best_quick is None else min(best_quick, c["ms"])
        if final is not None and t["best"] is not None and t["best"] >= final * (1 - 1e-9):
            # second ladder policy: quick timing only during the search, one full timing of the best at the end
            # (the best confirmed at the end also runs its remaining seeds)
            out.update(ladder_s=ladder, full_s=full,
                       ladder_confirm_end_s=screen_only + fc + (c["correctness"] - cheap if two_rungs else 0.0))
            break
    return out


def stage_costs(df, problem_key: str) -> dict[str, dict]:
    out = {}
    for _, r in df[df["problem_key"] == problem_key].iterrows():
        ev = json.loads(r["evaluation_json"])
        g = {s["name"]: s.get("gpu_s", 0.0) for s in ev["stages"]}
        q = next((s for s in ev["stages"] if s["name"] == "quick_timing"), {})
        corr = next((s for s in ev["stages"] if s["name"] == "correctness"), {})
        qd = q.get("data", {}) if q.get("verdict") == "pass" else {}
        out[r["candidate"]] = {"correctness": g.get("correctness", 0.0), "quick": g.get("quick_timing", 0.0),
                               "quick_wall": qd.get("timed_wall_s") or 0.0, "seeds": corr.get("data", {}).get("seeds"),
                               "timed": r["outcome"] == "ok", "ms": r["candidate_ms"],
                               "speedup": qd.get("speedup_vs_eager"), "noise": _quick_noise(qd)}
    return out


def _quick_noise(data: dict) -> float | None:
    from workbench.core.records import StageRecord
    from workbench.harness.ladder import quick_noise

    return quick_noise(StageRecord("quick_timing", "pass", data=data)) if data else None


def quick_vs_full_noise(df) -> dict:
    """How far a quick speedup lies from the full one of the same candidate (log ratio), over the recorded
    candidates timed at both fidelities: the run-to-run noise (and rung gap) the within-run spread does not show."""
    xs = []
    for js in df.loc[df["full_timed"], "evaluation_json"]:
        st = {s["name"]: s for s in json.loads(js)["stages"]}
        q = st.get("quick_timing", {}).get("data", {}).get("speedup_vs_eager")
        f = st.get("full_timing", {}).get("data", {}).get("speedup_vs_eager")
        if q and f:
            xs.append(math.log(q / f))
    return {"n": len(xs), "mean_log_ratio": statistics.mean(xs), "sd_log_ratio": statistics.stdev(xs)}


def full_timing_cost(df, problem_key: str) -> float | None:
    for js in df.loc[(df["problem_key"] == problem_key) & df["full_timed"], "evaluation_json"]:
        for s in json.loads(js)["stages"]:
            if s["name"] == "full_timing" and s["verdict"] == "pass":
                return s["data"].get("timed_wall_s")
    return None


# The policies part (b') compares: (label, cheap-rung seeds (None: all seeds before quick timing), policy kwargs).
# "legacy": the ladder before (quick timing for the first candidate too, compared with the best quick time only).
SWEEP = [("the ladder before: one rung, within 5 % of the best quick", None,
          {"full_within": 0.05, "first_straight_to_full": False, "legacy": True}),
         ("two rungs, within 5 % of the best quick", 1,
          {"full_within": 0.05, "first_straight_to_full": False, "legacy": True}),
         ("two rungs, first straight to full, within 5 %", 1, {"full_within": 0.05}),
         ("two rungs, first straight to full, strict improvements", 1, {"full_within": 0.0})]
SWEEP += [(f"two rungs, first straight to full, noise z={z:g}, min margin {m:.0%}", 1,
           {"noise_z": z, "min_margin": m}) for z in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0) for m in (0.0, 0.02, 0.04, 0.06)]


def simulate_policy(order: list[str], costs: dict[str, dict], full_cost: float, policy, cheap_seeds: int | None,
                    sigma: float, rng, legacy: bool = False) -> dict | None:
    """One trajectory re-decided by `policy`, each quick speedup drawn around its recording with relative noise
    `sigma` (the recording taken as the truth, which full timing measures). Returns the GPU time the ladder took to
    its final best (the best promoted candidate), full fidelity's to its own (the best of all), and the ratio of
    the two bests (1: nothing lost)."""
    from workbench.core.records import StageRecord
    from workbench.harness.ladder import QuickBest

    ladder = full = 0.0
    best = QuickBest()
    lad_best = lad_at = full_best = full_at = None
    for h in order:
        c = costs.get(h)
        if c is None:
            continue
        fc = c["quick"] - c["quick_wall"] + full_cost
        if not c["timed"] or not c["speedup"]:
            ladder += c["correctness"]
            full += c["correctness"]
            continue
        full += c["correctness"] + fc
        truth = c["speedup"]
        if policy.straight_to_full(best):  # every seed and full timing, no quick timing
            ladder += c["correctness"] + fc
            promote = True
        else:
            cheap = c["correctness"] * (cheap_share(c, cheap_seeds) if cheap_seeds else 1.0)
            ladder += cheap + c["quick"]
            quick = truth * math.exp(sigma * rng.gauss(0.0, 1.0))
            seen = QuickBest(speedup=best.speedup, noises=best.noises) if legacy else best
            promote, _ = policy.promote(StageRecord("quick_timing", "pass", data={"speedup_vs_eager": quick}),
                                        seen if seen.bar is not None else None)
            if promote:
                ladder += c["correctness"] - cheap + fc
                best.pairs.append(math.log(quick / truth))  # full timing measures the recording
            if c["noise"] is not None:
                best.noises.append(c["noise"])
            best.speedup = quick if best.speedup is None else max(best.speedup, quick)
        if promote:
            best.full = truth if best.full is None else max(best.full, truth)
            if lad_best is None or truth > lad_best:
                lad_best, lad_at = truth, ladder
        if full_best is None or truth > full_best:
            full_best, full_at, first = truth, full, full_best is None
    if lad_best is None or not full_at:
        return None
    return {"ladder_s": lad_at, "full_s": full_at, "quality": lad_best / full_best, "best_first": first}


def policy_sweep(rows: list[dict], df, sigma: float, draws: int = 20) -> list[dict]:
    """Part (b'): every policy of `SWEEP` on the unscreened greedy trajectories, `draws` noise draws each."""
    import random

    from workbench.harness.ladder import PromotionPolicy

    runs = []
    for r in rows:
        if r.get("label") != "greedy":
            continue
        keys = df.loc[df["problem"] == r["problem"], "problem_key"]
        if keys.empty:  # its recordings no longer regenerate (a template changed since): nothing to cost
            continue
        key = keys.iloc[0]
        fc = full_timing_cost(df, key)
        if fc is not None:
            runs.append(([t["candidate"] for t in r["trajectory"]], stage_costs(df, key), fc))
    out = []
    for label, cheap, kw in SWEEP:
        kw = dict(kw)
        legacy = kw.pop("legacy", False)
        policy, rng = PromotionPolicy(**kw), random.Random(0)
        savings, quality, later = [], [], []
        for order, costs, fc in runs:
            for _ in range(draws):
                sim = simulate_policy(order, costs, fc, policy, cheap, sigma, rng, legacy)
                if sim is not None:
                    savings.append(1 - sim["ladder_s"] / sim["full_s"])
                    quality.append(sim["quality"])
                    if not sim["best_first"]:
                        later.append(savings[-1])
        out.append({"policy": label, "cheap_seeds": cheap, **kw, "legacy": legacy, "runs": len(savings),
                    "median_saving": statistics.median(savings), "mean_saving": statistics.mean(savings),
                    "median_saving_best_not_first": statistics.median(later) if later else None,
                    "share_best_first": 1 - len(later) / len(savings),
                    "geo_mean_quality": geo(quality),
                    "share_best_kept": sum(q >= 0.999 for q in quality) / len(quality)})
    return out


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
    ap.add_argument("--promotion-z", type=float, default=None, help="the promotion policy's noise_z (default: the "
                                                                    "ladder's)")
    ap.add_argument("--promotion-min-margin", type=float, default=None,
                    help="the promotion policy's min_margin (default: the ladder's)")
    ap.add_argument("--full-within", type=float, default=None, help="a fixed promotion margin instead (the ladder "
                                                                    "before: 0.05)")
    ap.add_argument("--cheap-seeds", type=int, default=None,
                    help="correctness seeds before quick timing (default: the ladder's; 0: all, one rung)")
    ap.add_argument("--quick-noise", type=float, default=None,
                    help="part (b'): relative noise of a quick speedup (default: measured, quick vs full)")
    ap.add_argument("--sweep-draws", type=int, default=20, help="part (b'): noise draws per trajectory and policy")
    ap.add_argument("--before", default=None, help="an earlier runs.jsonl to compare part (b) and final bests with")
    args = ap.parse_args()
    from workbench.harness.ladder import PromotionPolicy

    kw = {k: v for k, v in (("noise_z", args.promotion_z), ("min_margin", args.promotion_min_margin),
                            ("full_within", args.full_within)) if v is not None}
    LADDER.update(promotion=PromotionPolicy(**kw) if kw else None, cheap_seeds=args.cheap_seeds)
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
    savings, per_problem, savings_end, promoted, timed = [], {}, [], [], []
    for (p, s), runs in by.items():
        u = runs.get("greedy")
        if u is None:
            continue
        keys = df.loc[df["problem"] == p, "problem_key"]
        if keys.empty:  # its recordings no longer regenerate (a template changed since): nothing to cost
            continue
        key = keys.iloc[0]
        fc = full_timing_cost(df, key)
        if fc is None:
            continue
        c = ladder_vs_full(u, stage_costs(df, key), fc)
        if c["ladder_s"] and c["full_s"]:
            promoted.append(c["promoted"])
            timed.append(c["timed"])
            savings.append(1 - c["ladder_s"] / c["full_s"])
            savings_end.append(1 - c["ladder_confirm_end_s"] / c["full_s"])
            per_problem.setdefault(p, []).append(1 - c["ladder_s"] / c["full_s"])
    if savings:
        out["b"] = {"runs": len(savings), "median_saving": statistics.median(savings),
                    "mean_saving": statistics.mean(savings),
                    "median_saving_confirm_at_end": statistics.median(savings_end),
                    "promoted_to_final_best": sum(promoted), "timed_to_final_best": sum(timed),
                    "ladder": ladder_setting(rows),
                    "per_problem_median": {p: statistics.median(v) for p, v in sorted(per_problem.items())}}
    if savings and getattr(args, "sweep_draws", 20) > 0:
        noise = quick_vs_full_noise(df)
        sigma = getattr(args, "quick_noise", None) or noise["sd_log_ratio"]
        out["b_sweep"] = {"quick_noise": sigma, "measured": noise, "draws": getattr(args, "sweep_draws", 20),
                          "policies": policy_sweep(rows, df, sigma, getattr(args, "sweep_draws", 20))}
    before = getattr(args, "before", None)
    if before and Path(before).exists():
        out["b_before"] = compare_before(rows, [json.loads(x) for x in Path(before).read_text().splitlines()], df)
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


def ladder_setting(rows: list[dict]) -> str:
    """How the runs' ladder promoted, as their trajectories say."""
    if any("promoted" in t for r in rows for t in r.get("trajectory", [])):
        from workbench.harness.ladder import PromotionPolicy

        p = LADDER["promotion"] or PromotionPolicy()
        cheap = LADDER["cheap_seeds"]
        return (f"two correctness rungs ({cheap or 1} seed before quick timing), the first timed candidate straight to "
                f"full timing, then promotion when the quick speedup could beat the best (noise z {p.noise_z:g}, "
                f"min margin {p.min_margin:.0%})" if p.full_within is None else f"fixed margin {p.full_within:.0%}")
    return "one correctness rung, promotion within 5 % of the best quick time (the ladder before)"


def compare_before(rows: list[dict], before: list[dict], df) -> dict:
    """The greedy runs against an earlier run file's: (b) recomputed on its rows, and the final bests side by side
    for the same problem and seed (equal budget)."""
    import argparse

    old = summarize(before, df, argparse.Namespace(budget_gpu_s=None, budget_fraction=0.15, seeds=None,
                                                   surrogate=None, sweep_draws=0)).get("b", {})
    mine = {(r["problem"], r["seed"]): r["best"] for r in rows if r.get("label") == "greedy"}
    theirs = {(r["problem"], r["seed"]): r["best"] for r in before if r.get("label") == "greedy"}
    both = [k for k in mine if k in theirs and mine[k] and theirs[k]]
    ratios = [mine[k] / theirs[k] for k in both]
    return {"median_saving": old.get("median_saving"), "mean_saving": old.get("mean_saving"),
            "median_saving_confirm_at_end": old.get("median_saving_confirm_at_end"), "runs": old.get("runs"),
            "final_best_pairs": len(both), "geo_mean_final_best_after_over_before": geo(ratios),
            "final_best_lower": sum(x < 1 - 1e-9 for x in ratios),
            "final_best_higher": sum(x > 1 + 1e-9 for x in ratios)}


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
                  f"mean {b['mean_saving']:.1%} over {b['runs']} searches (goal >= 50 %); the ladder: "
                  f"{b.get('ladder', ladder_setting([]))}; {b.get('promoted_to_final_best', '?')} of "
                  f"{b.get('timed_to_final_best', '?')} timed candidates promoted on the way to the final bests",
                  f"- with quick timing only during the search and one full timing of the best at the end: median "
                  f"{b['median_saving_confirm_at_end']:.1%}", "",
                  "| problem | median saving |", "|---|---|"]
        lines += [f"| {p} | {v:.1%} |" for p, v in b["per_problem_median"].items()]
        lines.append("")
    if "b_before" in s:
        o = s["b_before"]
        lines += ["### Before and after, same costing", "",
                  f"- before (`--before` runs, costed by the same code): median {o['median_saving']:.1%}, mean "
                  f"{o['mean_saving']:.1%} over {o['runs']} searches; after: median {s['b']['median_saving']:.1%}, "
                  f"mean {s['b']['mean_saving']:.1%}",
                  "- final best at equal budget, after / before: geo-mean "
                  f"{o['geo_mean_final_best_after_over_before']:.4f} "
                  f"over {o['final_best_pairs']} searches ({o['final_best_lower']} lower, {o['final_best_higher']} "
                  "higher)", ""]
    if "b_sweep" in s:
        w = s["b_sweep"]
        lines += ["## (b') The promotion policy tuned", "",
                  f"Every greedy trajectory above re-decided by each policy, {w['draws']} draws each, every quick "
                  f"speedup drawn around its recording with relative noise {w['quick_noise']:.2%} (the sd of "
                  f"log(quick / full speedup) over the {w['measured']['n']} recorded candidates timed at both; mean "
                  f"{w['measured']['mean_log_ratio']:+.2%}); full timing measures the recording. Saving: GPU time "
                  "to the ladder's final best against full fidelity's to its own; quality: the ratio of the two "
                  "bests (1: nothing lost).", "",
                  "| policy | median saving | mean saving | median saving, best not the first | geo-mean quality | "
                  "best kept |", "|---|---|---|---|---|---|"]
        for p in w["policies"]:
            later = p["median_saving_best_not_first"]
            lines.append(f"| {p['policy']} | {p['median_saving']:.1%} | {p['mean_saving']:.1%} | "
                         f"{later:.1%} | {p['geo_mean_quality']:.4f} | {p['share_best_kept']:.2f} |"
                         if later is not None else f"| {p['policy']} | {p['median_saving']:.1%} | "
                         f"{p['mean_saving']:.1%} | - | {p['geo_mean_quality']:.4f} | {p['share_best_kept']:.2f} |")
        share = w["policies"][0]["share_best_first"] if w["policies"] else 0.0
        lines += ["", f"In {share:.0%} of the runs the first candidate (the default configuration) is the best of the "
                      "whole trajectory: no ladder can save time to it, so the median over all runs stays low.", ""]
    if "c" in s:
        lines += ["## (c) Strategies at equal budget (unscreened)", "",
                  "| strategy | geo-mean best / pool best | share reaching the pool best | runs |", "|---|---|---|---|"]
        for label, v in s["c"].items():
            lines.append(f"| {label} | {v['geo_mean_fraction_of_pool_best']:.3f} | "
                         f"{v['share_reaching_pool_best']:.2f} | {v['runs']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
