"""The screening headline on the real H200 (issue 5): unscreened and screened greedy searches of a problem the
surrogate never saw, equal GPU budgets, side by side on two GPUs of one machine (or one after the other on one).

    python experiments/search_h200.py PROBLEM --surrogate-model PATH [--train] [--budget-gpu-s 10] [--seed 0]
                                      [--gpus 2] [--out results/search/h200]

The surrogate must not have seen PROBLEM: with `--train` (and no model at PATH yet) it is trained here on the shipped
dataset without PROBLEM's rows and saved to PATH; a model trained on PROBLEM is refused. Each search uses the offline
proposer's whole space and the local CUDA device; the screened one compiles its over-generated proposals on CPU
workers first (the surrogate reads their compile facts), then the selective policy picks what the GPU measures.
Writes <out>/<problem>-<label>.json with the search report and its trajectory (GPU-seconds, GPU measurements, best so
far).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one(label: str, problem_name: str, gpu: int, budget: float, seed: int, model_path: str | None, out: str,
        compile_workers: int = 6, wall_s: float | None = None) -> None:
    from search_replay import run_search

    from workbench.devices.local import LocalDevice
    from workbench.problems import Problem
    from workbench.proposers.offline import OfflineProposer

    problem = Problem.load(problem_name)
    device = LocalDevice("cuda", gpu_index=gpu)
    surrogate = screen = None
    if label == "screened":
        from workbench.surrogates import SelectivePolicy
        from workbench.surrogates.learned import LearnedSurrogate

        surrogate = LearnedSurrogate.load(model_path)
        if problem.key in getattr(surrogate, "train_problems", []):
            raise SystemExit(f"the surrogate at {model_path} was trained on {problem.name}: not a held-out test")
        screen = SelectivePolicy(tau=surrogate.tau(), seed=seed)
    pool = [LocalDevice("cpu") for _ in range(compile_workers)] if surrogate is not None else None
    try:
        r = run_search(problem, device, OfflineProposer(problem), "greedy", seed, budget, surrogate, screen, pool,
                       wall_s)
    finally:
        device.close()
        for d in pool or []:
            d.close()
    r.update(problem=problem.name, label=label, gpu=gpu, device=device.provenance())
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"{problem.name}-{label}.json").write_text(json.dumps(r, indent=1, default=str))
    print(json.dumps({k: r[k] for k in ("label", "best", "gpu_seconds", "skipped", "candidates", "wall_s",
                                        "stopped")}),
          flush=True)


def train_without(problem_name: str, path: str) -> None:
    """Fit the learned surrogate on every shipped row except PROBLEM's, and save it."""
    import time

    from workbench.problems import Problem
    from workbench.store.dataset import load
    from workbench.surrogates.features import training_table
    from workbench.surrogates.learned import LearnedSurrogate

    key = Problem.load(problem_name).key
    cands = load("candidates")
    t0 = time.perf_counter()
    model = LearnedSurrogate().fit(training_table(cands[cands["problem_key"] != key], load("problems")))
    model.save(path)
    print(json.dumps({"trained_without": problem_name, "rows": model.n_train, "problems": len(model.train_problems),
                      "tau": model.tau(), "fit_s": round(time.perf_counter() - t0, 1)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem")
    ap.add_argument("--surrogate-model", required=True)
    ap.add_argument("--budget-gpu-s", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "results" / "search" / "h200"))
    ap.add_argument("--wall-s", type=float, default=None, help="wall-clock limit of each search")
    ap.add_argument("--compile-workers", type=int, default=6, help="CPU compile workers of the screened search")
    ap.add_argument("--train", action="store_true", help="train the surrogate without PROBLEM when PATH is missing")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "experiments"))
    if args.train and not Path(args.surrogate_model).exists():
        train_without(args.problem, args.surrogate_model)
    ctx = mp.get_context("spawn")
    jobs = [("unscreened", 0), ("screened", 1 if args.gpus > 1 else 0)]
    if args.gpus > 1:
        procs = [ctx.Process(target=one, args=(label, args.problem, gpu, args.budget_gpu_s, args.seed,
                                               args.surrogate_model, args.out, args.compile_workers, args.wall_s))
                 for label, gpu in jobs]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    else:
        for label, gpu in jobs:
            one(label, args.problem, gpu, args.budget_gpu_s, args.seed, args.surrogate_model, args.out,
                args.compile_workers, args.wall_s)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
