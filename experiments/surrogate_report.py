"""Evaluate the learned surrogate and its baselines on the three splits of the measured dataset; write the report.

    python experiments/surrogate_report.py [--data results/dataset] [--out results/surrogates] [--folds 5]

Writes `metrics.json` (every metric of every surrogate on every split, per-problem rows of the learned surrogate,
the training time of the full model) and `report.md` (the tables, the goals on the held-out-problem split, and where
and why the surrogate falls short). CPU only; a few minutes on two cores.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ABLATION = "learned+iso_new"  # the learned surrogate with top-label isotonic calibration for new problems too
GOALS = {"top10_within5": (">=", 0.90), "pairwise_accuracy": (">=", 0.90), "ece": ("<=", 0.03)}
SPLIT_WORDS = {"problem": "held-out problem (grouped k-fold over problems; the headline)",
               "family": "held-out kernel family (leave one family out)",
               "random": "random rows (k-fold; a test problem's other candidates were seen)"}
COLUMNS = ("pairwise_accuracy", "spearman", "kendall", "bin_accuracy", "within_one_bin", "median_abs_log2_error",
           "ece", "ece_mass", "brier", "nll", "aurc", "top1_score", "top5_score")


def fmt(x, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def split_section(split: str, res: dict, per: "pd.DataFrame") -> list[str]:  # noqa: F821
    lines = [f"## Split: {SPLIT_WORDS[split]}", "",
             f"{res['learned']['folds']} folds; {res['learned']['n_rows']} candidates, "
             f"{res['learned']['n_problems']} problems ({res['learned'].get('budget_problems', 0)} with a timed "
             "candidate count in the budget columns). Means over problems for the ranking and budget metrics; over "
             "candidates for the rest.", ""]
    lines += md_table(["surrogate"] + list(COLUMNS),
                      [[name] + [fmt(m.get(c)) for c in COLUMNS] for name, m in res.items()])
    lines += ["", "Fraction of problems where measuring the top B % by score finds a kernel within 5 % / 20 % of the "
                  "pool's best:", ""]
    head = ["surrogate"] + [f"B={b}%" for b in (2, 5, 10, 25)]
    lines += md_table(head, [[name] + [f"{fmt(m.get(f'top{b}_within5'), 2)} / {fmt(m.get(f'top{b}_within20'), 2)}"
                                       for b in (2, 5, 10, 25)] for name, m in res.items()])
    rel = [r for r in res["learned"]["reliability"] if r["count"]]
    lines += ["", "Reliability of the learned surrogate (15 equal-width bins of the top probability):", ""]
    lines += md_table(["confidence bin", "candidates", "mean confidence", "accuracy"],
                      [[f"[{r['lo']:.2f}, {r['hi']:.2f})", str(r["count"]), fmt(r["confidence"]),
                        fmt(r["accuracy"])] for r in rel])
    rc = res["learned"]["risk_coverage"]
    picks = [min(rc, key=lambda r: abs(r["coverage"] - c)) for c in (0.1, 0.25, 0.5, 0.75, 1.0)]
    lines += ["", "Risk (argmax error rate) of the learned surrogate's most confident candidates: " +
              ", ".join(f"{r['risk']:.2f} at coverage {r['coverage']:.2f}" for r in picks) + ".", ""]
    if per is not None:
        worst = per.sort_values("pairwise_accuracy").head(6)
        lines += ["Problems the learned surrogate orders worst on this split: " +
                  ", ".join(f"{r.problem} ({r.family}, {fmt(r.pairwise_accuracy, 2)}, top-10 % ratio "
                            f"{fmt(r.top10_ratio, 2)})" for r in worst.itertuples()) + ".", ""]
    return lines


def diagnostics(table, pred) -> dict:
    """What the learned surrogate's held-out errors are made of: the share of the residual variance that is one
    offset per problem, and how many rows its OOD check flagged (ood > 1)."""
    import numpy as np

    ok = ~table["failed"].to_numpy(bool)
    res = (table["log2_speedup"] - pred["mu"])[ok]
    offset = res.groupby(table["problem_key"][ok]).transform("mean")
    return {"offset_share": float(np.var(offset) / np.var(res)) if np.var(res) > 0 else float("nan"),
            "ood_share": float((pred["ood"] > 1).mean()), "mean_sigma": float(pred["sigma"].mean())}


def goals_section(results: dict, per, families: dict, extra: dict) -> list[str]:
    res = results["problem"]
    train = {s: results[s]["learned"] for s in results}
    m = res["learned"]
    single = sorted(f for f, n in families.items() if n == 1)
    ablation = res.get(ABLATION, {})
    lines = ["## Goals (held-out-problem split)", ""]
    rows = []
    for key, (op, target) in GOALS.items():
        v = m.get(key)
        ok = v is not None and not math.isnan(v) and (v >= target if op == ">=" else v <= target)
        rows.append([key, f"{op} {target}", fmt(v), "met" if ok else "**not met**"])
    lines += md_table(["metric", "goal", "learned", ""], rows)
    missed = per[per["top10_ratio"] < 0.95]
    lines += ["", "Where it falls short, and why (read from the numbers above and `metrics.json`):", "",
              f"- Top-10 % within 5 %: missed on {len(missed)} of {per['top10_ratio'].notna().sum()} problems"
              + (": " + ", ".join(f"{r.problem} (best of the top 10 % at {r.top10_ratio:.2f} of the pool's best)"
                                  for r in missed.itertuples()) if len(missed) else "") + ".",
              f"- Pairwise accuracy {fmt(m['pairwise_accuracy'])} on new problems against "
              f"{fmt(train['random']['pairwise_accuracy'])} when the problem's other candidates were seen (random "
              "split): the configuration-to-speed map is partly problem-specific (shapes, the op inside a row "
              "kernel, eager's own quality)" + (f", and {', '.join(single)} "
                                                 + ("has" if len(single) == 1 else "have") + " one problem per "
                                                 "family, so holding it out leaves no sibling to learn from"
                                                 if single else "")
              + f"; the family split ({fmt(train['family']['pairwise_accuracy'])}), where the whole family is "
              "unseen, is the lower bound.",
              f"- ECE {fmt(m['ece'])} on new problems against {fmt(train['random']['ece'])} on known ones: "
              f"{extra['problem']['offset_share']:.0%} of the variance of the log2 error on a new problem is one "
              "offset shared by all its candidates (how fast eager is relative to the generated kernels; "
              f"{extra['random']['offset_share']:.0%} on the random split), so the calibration set holds only as "
              "many independent errors as training problems. The sigma of new problems is fitted on held-out "
              "training problems; a finer "
              "top-label isotonic map fitted the same way did not transfer (the ablation "
              f"`{ABLATION}` that adds it for new problems: ECE {fmt(ablation.get('ece'))}), so it is used only "
              "for known problems.",
              f"- A wholly new kernel family (family split) is where the learned order is least useful: top-10 % "
              f"within 5 % on {fmt(train['family'].get('top10_within5'), 2)} of problems against "
              f"{fmt(results['family']['prior'].get('top10_within5'), 2)} for the proposer's own order (prior). "
              "The OOD check "
              f"flagged {extra['family']['ood_share']:.0%} of those rows (ood > 1: forecasts pulled towards the "
              f"training frequencies, so a selective policy defers them to the GPU), "
              f"{extra['problem']['ood_share']:.0%} on the problem split and {extra['random']['ood_share']:.0%} "
              "on the random split; the score itself is not changed by it.",
              "- ECE alone flatters a constant forecast (the prior's is small by construction: it always states "
              "the training frequency of the commonest outcome); read it next to Brier, NLL and AURC.",
              "- More problems per family is the lever for all of this: the report is rerun as the dataset grows.",
              ""]
    return lines


SHOTS = (0, 1, 3, 5, 10)
FEW_SHOT_COLUMNS = ("pairwise_accuracy", "bin_accuracy", "within_one_bin", "median_abs_log2_error", "ece", "ece_mass",
                    "brier", "nll", "aurc", "mean_confidence")


def few_shot_section(shots: dict) -> list[str]:
    n_rows = next(iter(shots.values()))["n_rows"]
    lines = ["## After a few measurements of the new problem (held-out problems)", "",
             "What a search gives the surrogate: each candidate it measures goes back to it "
             "(`LearnedSurrogate.observe`). On a problem it never saw, most of its error is one offset shared by the "
             "problem's candidates; after n measured candidates, its forecasts for the rest move by their mean "
             "residual (shrunk by how much offsets vary between training problems) and take the \"observed\" "
             "regime's width and top-label calibration, both fitted by simulating the same thing on held-out "
             "training problems. Same folds as the held-out-problem split; per problem a seeded random order of its "
             f"timed candidates, the first n observed; every row below is scored on the same {n_rows} candidates (all "
             f"but the first {max(shots)} of each problem), so n = 0 is the zero-shot surrogate on those rows. "
             "Ranking is not changed by an offset, so pairwise accuracy stays put.", ""]
    lines += md_table(["n measured"] + list(FEW_SHOT_COLUMNS),
                      [[str(n)] + [fmt(m.get(c)) for c in FEW_SHOT_COLUMNS] for n, m in sorted(shots.items())])
    z, k = shots[min(shots)], max(shots)
    last = shots[k]
    lines += ["", f"Read: after {k} measurements Brier goes {fmt(z['brier'])} -> {fmt(last['brier'])}, NLL "
              f"{fmt(z['nll'])} -> {fmt(last['nll'])}, the median |log2 error| {fmt(z['median_abs_log2_error'])} -> "
              f"{fmt(last['median_abs_log2_error'])}; ECE {fmt(z['ece'])} -> {fmt(last['ece'])} "
              f"(best {fmt(min(m['ece'] for m in shots.values()))}), still above the 0.03 goal: the observed "
              f"forecasts are {'under' if last['mean_confidence'] < last['bin_accuracy'] else 'over'}confident "
              f"(mean confidence {fmt(last['mean_confidence'])} against bin accuracy {fmt(last['bin_accuracy'])}), "
              "their calibration being simulated on inner held-out training problems, whose models saw fewer "
              "problems than the final one."]
    return lines + [""]


def main() -> None:
    import pandas as pd

    from workbench.store.dataset import load
    from workbench.surrogates.evaluate import default_surrogates, evaluate, few_shot, jsonable, per_problem
    from workbench.surrogates.features import feature_columns, training_table
    from workbench.surrogates.learned import LearnedSurrogate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None, help="dataset directory (default: results/dataset)")
    ap.add_argument("--out", default=str(ROOT / "results" / "surrogates"))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    cands, probs = load("candidates", args.data), load("problems", args.data)
    table = training_table(cands, probs)
    full = LearnedSurrogate(seed=args.seed).fit(table)
    results, per, extra = {}, {}, {}
    for split in ("problem", "family", "random"):
        preds: dict[str, pd.DataFrame] = {}
        factories = default_surrogates(args.seed)
        if split == "problem":
            factories[ABLATION] = lambda: LearnedSurrogate(isotonic_new=True, seed=args.seed)
        results[split] = evaluate(table, split, factories, k=args.folds, seed=args.seed, predictions=preds)
        per[split] = per_problem(table, preds["learned"])
        extra[split] = diagnostics(table, preds["learned"])
        print(f"{split}: done at {time.perf_counter() - t0:.0f} s", flush=True)
    shots = few_shot(table, SHOTS, k=args.folds, seed=args.seed)
    print(f"few-shot: done at {time.perf_counter() - t0:.0f} s", flush=True)
    meta = {"generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "git": git_sha(), "rows": len(table), "problems": int(table["problem_key"].nunique()),
            "failed": int(table["failed"].sum()), "features": len(feature_columns(table)),
            "families": table.groupby("family")["problem_key"].nunique().to_dict(),
            "train_seconds_full": full.fit_seconds, "sigma": full.sigma_ab, "wall_seconds": time.perf_counter() - t0}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(jsonable(
        {"meta": meta, "splits": results, "diagnostics": extra, "few_shot": shots,
         "per_problem": {k: v.to_dict("records") for k, v in per.items()}}),
        indent=1))
    lines = ["# Learned surrogate: evaluation on the H200 dataset", "",
             f"Generated by `experiments/surrogate_report.py` at commit {meta['git']} ({meta['generated']}): "
             f"{meta['rows']} candidates over {meta['problems']} problems ({meta['failed']} failed), "
             f"{meta['features']} features; problems per family: "
             + ", ".join(f"{k} {v}" for k, v in sorted(meta["families"].items())) + ".",
             f"Training the full model took {meta['train_seconds_full']:.1f} s on this machine's CPU (2 cores); the "
             f"whole report {meta['wall_seconds'] / 60:.1f} min.", "",
             "Surrogates: `learned` (LightGBM: within-problem ranking, a bagged regressor of log2 speedup with "
             "calibrated sigma, a failure classifier, an OOD check; see workbench/surrogates/learned.py), "
             "`roofline` (the analytic roofline forecast on dataset rows), `prior` (the training outcome frequencies "
             "for every candidate, one score for all, so budgets measure in the proposer's sample order: its default "
             "configuration first), `random` (a random order), `oracle` (the measurements: the ceiling).", "",
             "Ranking metrics exclude pairs whose measured log2 speedups differ by at most twice the problem's "
             "measured noise sd (floored at 0.01); a failed candidate ranks below every timed one and counts as "
             "outcome \"fails\" for the calibration metrics. TenSet's top-k score is the best speedup among the k "
             "best-scored over the pool's best.", ""]
    lines += goals_section(results, per["problem"], meta["families"], extra)
    for split in ("problem", "family", "random"):
        lines += split_section(split, results[split], per[split])
    lines += few_shot_section(shots)
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print((out / "report.md").read_text())


if __name__ == "__main__":
    main()
