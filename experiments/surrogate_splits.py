"""The surrogates on the splits that match use, with 95 % bootstrap intervals over problems; writes
`results/surrogates/splits.json` and `results/surrogates/splits.md` (report.md and metrics.json are
experiments/surrogate_report.py's and are left alone).

    python experiments/surrogate_splits.py [--data results/dataset] [--out results/surrogates] [--boot 1000]
        [--splits problem,family,level] [--max-per-problem N] [--trees 250] [--folds 5] [--seed 0]

Per split (`workbench.surrogates.splits`: held-out problem, held-out kernel family, held-out KernelBench level) the
learned surrogate is trained once per fold and scored under each calibration mode (`learned` = Gaussian sigma per
regime, `learned+conformal`, `learned+conformal_bound`), next to the roofline, prior, random and oracle baselines.
A split the data cannot form (fewer than two groups: the level split on the built-in suite alone) is recorded with
its error, not skipped silently. `--max-per-problem N` subsamples each problem to its default row and a seeded random
N - 1 of the others (`evaluate.subsample`, seed `--seed`), for data too wide to evaluate in ~10 minutes on 2 cores.
The same command runs unchanged on the wider H200 data once it lands in results/dataset.
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

COLUMNS = ("pairwise_accuracy", "ece", "top10_within5", "top10_headroom", "nll", "brier", "top10_within20")
WORDS = {"problem": "held-out problem (grouped k-fold over problems)",
         "family": "held-out kernel family (leave one family out)",
         "level": "held-out KernelBench level (leave one level out; the built-in suite is one group)"}


def fmt(x, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def cell(m: dict, c: str) -> str:
    ci = (m.get("ci") or {}).get(c)
    if not ci or ci[0] is None or (isinstance(ci[0], float) and math.isnan(ci[0])):
        return fmt(m.get(c))
    return f"{fmt(m.get(c))} [{fmt(ci[0])}, {fmt(ci[1])}]"


def md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def choose_calibration(res: dict) -> dict:
    """The calibration mode with the lowest held-out NLL (ECE, then Brier, breaking ties), with the numbers."""
    modes = {n: m for n, m in res.items() if n.startswith("learned")}
    best = min(modes, key=lambda n: (modes[n]["nll"], modes[n]["ece"], modes[n]["brier"]))
    return {"chosen": best, "by": "held-out nll (then ece, brier)",
            "numbers": {n: {k: m[k] for k in ("nll", "ece", "brier", "bin_accuracy")} for n, m in modes.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--out", default=str(ROOT / "results" / "surrogates"))
    ap.add_argument("--splits", default="problem,family,level")
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--trees", type=int, default=250)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-per-problem", type=int, default=None)
    args = ap.parse_args()

    from workbench.store.dataset import load
    from workbench.surrogates.evaluate import calibration_variants, default_surrogates, evaluate, jsonable, subsample
    from workbench.surrogates.features import training_table

    t_all = time.perf_counter()
    table = training_table(load("candidates", args.data), load("problems", args.data))
    full_rows = len(table)
    if args.max_per_problem:
        table = subsample(table, args.max_per_problem, args.seed)
    groups = {"family": table.groupby("problem")["family"].first().value_counts().sort_index().to_dict(),
              "level": table.groupby("problem")["level"].first().value_counts().sort_index().to_dict()}
    out: dict = {"generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "commit": git_sha(), "rows": len(table), "rows_before_subsample": full_rows,
                 "problems": int(table["problem_key"].nunique()), "groups": groups,
                 "settings": {"boot": args.boot, "ci_level": 0.95, "folds": args.folds, "trees": args.trees,
                              "seed": args.seed, "max_per_problem": args.max_per_problem}, "splits": {}}
    for split in [s for s in args.splits.split(",") if s]:
        factories = default_surrogates(args.seed, args.trees)
        factories["learned"] = calibration_variants(args.seed, args.trees)
        t0 = time.perf_counter()
        try:
            res = evaluate(table, split, factories, k=args.folds, seed=args.seed, n_boot=args.boot)
        except ValueError as e:
            out["splits"][split] = {"error": str(e), "seconds": time.perf_counter() - t0}
            print(f"{split}: {e}", flush=True)
            continue
        for m in res.values():  # the curves are report.md's; keep this file to the numbers
            m.pop("reliability", None)
            m.pop("risk_coverage", None)
        out["splits"][split] = {"seconds": time.perf_counter() - t0, "calibration": choose_calibration(res),
                                "results": res}
        print(f"{split}: {time.perf_counter() - t0:.0f} s", flush=True)
    out["seconds"] = time.perf_counter() - t_all
    d = Path(args.out)
    d.mkdir(parents=True, exist_ok=True)
    (d / "splits.json").write_text(json.dumps(jsonable(out), indent=1) + "\n")
    (d / "splits.md").write_text("\n".join(markdown(out)) + "\n")
    print(f"wrote {d / 'splits.json'} and {d / 'splits.md'} in {out['seconds']:.0f} s")
    return 0


def markdown(out: dict) -> list[str]:
    s = out["settings"]
    sub = (f"; subsampled to at most {s['max_per_problem']} rows per problem (default row + seeded sample, seed "
           f"{s['seed']}) from {out['rows_before_subsample']}" if s["max_per_problem"] else "")
    fam = ", ".join(f"{k} {v}" for k, v in out["groups"]["family"].items())
    lev = ", ".join(f"{k} {v}" for k, v in out["groups"]["level"].items())
    lines = ["# Surrogates on held-out problems, families and levels", "",
             f"Generated by `experiments/surrogate_splits.py` at commit {out['commit']} ({out['generated']}): "
             f"{out['rows']} candidates over {out['problems']} problems{sub}; {s['folds']} folds for the problem "
             f"split, {s['trees']} trees per LightGBM model; whole run {out['seconds'] / 60:.1f} min on this "
             "machine's CPU (2 cores).", "",
             f"Problems per family: {fam}. Per level: {lev}. Families and levels are derived from the rows "
             "(`workbench/surrogates/splits.py`).", "",
             f"Each cell: the metric on the held-out predictions, then its {int(100 * s['ci_level'])} % percentile "
             f"bootstrap interval over problems ({s['boot']} replicates drawing whole problems with replacement, "
             f"seed {s['seed']}, the same draws for every surrogate). `top10_headroom` is the share of the pool's "
             "headroom over its default candidate (the first measured: the proposer's default point) that the top "
             "10 % by score captures, in log2, clipped to [0, 1], over problems whose best beats the default by more "
             "than twice the noise; `top10_within5` the share of problems whose top 10 % holds a kernel within 5 % "
             "of the pool's best; pairwise accuracy excludes pairs within twice the noise; ECE over 15 bins.", ""]
    for split, r in out["splits"].items():
        lines += [f"## Split: {WORDS.get(split, split)}", ""]
        if "error" in r:
            lines += [f"Not run: {r['error']}.", ""]
            continue
        res = r["results"]
        first = next(iter(res.values()))
        lines += [f"{first['folds']} folds, {first['n_problems']} problems scored ({first.get('headroom_problems', 0)} "
                  f"with headroom over the default), {r['seconds']:.0f} s.", ""]
        lines += md_table(["surrogate"] + list(COLUMNS), [[n] + [cell(m, c) for c in COLUMNS] for n, m in res.items()])
        lv = res.get("learned", {})
        diffs = [(o, lv.get(f"ci_vs_{o}", {})) for o in ("prior", "roofline", "random")]
        lines += ["", "Learned minus baseline, paired bootstrap interval: " + "; ".join(
            f"vs {o}: " + ", ".join(f"{k} [{fmt(v[0])}, {fmt(v[1])}]" for k, v in d.items()) for o, d in diffs if d)
            + "."]
        c = r["calibration"]
        lines += ["", f"Calibration chosen by {c['by']}: **{c['chosen']}** (" + "; ".join(
            f"{n}: nll {fmt(v['nll'])}, ece {fmt(v['ece'])}" for n, v in c["numbers"].items()) + ")."]
        if "unlike_share" in lv:
            flagged = lv.get("unlike_problems") or []
            lines += ["", f"Novelty check: {lv['unlike_share']:.0%} of held-out problems flagged unlike the training "
                          f"data (the selective policy defers their candidates)" +
                      (f": {', '.join(flagged)}." if flagged else ".")]
        if lv.get("per_group"):
            lines += ["", "Per held-out group (learned):", ""]
            lines += md_table(["group", "problems", "pairwise_accuracy", "top10_within5", "top10_headroom"],
                              [[g, str(v["n_problems"]), fmt(v.get("pairwise_accuracy")), fmt(v.get("top10_within5")),
                                fmt(v.get("top10_headroom"))] for g, v in lv["per_group"].items()])
        lines += [""]
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
