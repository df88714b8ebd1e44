"""Suite benchmark (H200): the offline proposer's best candidate per problem against eager, torch.compile and
torch.compile(mode="max-autotune").

    python experiments/bench_suite.py [PROBLEM ...] [--candidates 8] [--from-dataset 3] [--gpu-minutes 10]
                                      [--compile-modes default,max-autotune] [--out results/suite]

For each problem (default: every built-in; any KernelBench-format file may be given) the pool is:
- with `--from-dataset K`, the K fastest candidates the offline proposer's earlier search found for it in the shipped
  H200 dataset (results/dataset: a seeded sample of up to 250 points of its space, every one measured; rows whose
  choice no longer regenerates its exact source are left out), and
- `--candidates` fresh points of its space (the default configuration first, then a seeded sample).
All are compiled on CPU workers first; each climbs the ladder to quick timing under a GPU budget of `--gpu-minutes`,
and the best by quick time goes through full timing, where eager and torch.compile in every `--compile-modes` mode
are timed call by call against it in the same worker run (each compile, max-autotune's tuning included, happens
before the timed calls). Rows go to <out>/rows.jsonl as each problem finishes (a rerun skips finished problems), and
the table to <out>/table.md: speedups vs eager, torch.compile and max-autotune, percent of the roofline floor,
coverage, the GPU time spent finding the candidate, and geo-means.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.devices import get_device  # noqa: E402
from workbench.harness.budget import Budget  # noqa: E402
from workbench.harness.ladder import Ladder, PromotionPolicy  # noqa: E402
from workbench.problems import Problem, builtin_names  # noqa: E402
from workbench.proposers.offline import OfflineProposer  # noqa: E402


def floor_bound(problem) -> str | None:
    """Which term of the roofline floor dominates on the H200's measured ceilings ("memory" or "compute")."""
    from workbench.core import ceilings
    from workbench.problems.analysis import count, roofline_floor

    c = ceilings.load("NVIDIA H200")
    if c is None:
        return None
    return roofline_floor(count(problem), c).bound


def dataset_pool(problem, k: int) -> tuple[list, float]:
    """The k fastest regenerating candidates of the problem in the shipped dataset, and the GPU-seconds the dataset
    spent measuring all of the problem's candidates (the search that found them)."""
    from workbench.proposers.recorded import DatasetSources
    from workbench.store.dataset import DatasetMissing, load

    try:
        df = load("candidates")
    except DatasetMissing:
        return [], 0.0
    rows = df[df["problem_key"] == problem.key]
    spent = float(rows["gpu_s"].fillna(0).sum())
    top = rows[rows["regenerates"] & rows["candidate_ms"].notna()].nsmallest(k, "candidate_ms")
    sources = DatasetSources(top)
    return [sources.candidate(problem.key, h) for h in top["candidate"]], spent


def bench_problem(device, name: str, n: int, gpu_minutes: float, seed: int, compile_workers: int,
                  from_dataset: int = 0, compile_modes: tuple[str, ...] = ("default",), pool=None) -> dict:
    t0 = time.perf_counter()
    problem = Problem.load(name)
    row: dict = {"problem": problem.name, "key": problem.key}
    proposer = OfflineProposer(problem)
    seeded, dataset_gpu_s = dataset_pool(problem, from_dataset) if from_dataset else ([], 0.0)
    fresh = proposer.propose(n, seed=seed)
    known = {c.hash for c in seeded}
    cands = seeded + [c for c in fresh if c.hash not in known]
    row.update(space_size=proposer.space_size(), candidates=len(cands), from_dataset=len(seeded),
               dataset_gpu_s=dataset_gpu_s,
               groups=[g.family for g in proposer.groups({p: True for p in proposer.fusion_points})])
    ladder = Ladder(device, budget=Budget(gpu_seconds=60 * gpu_minutes), policy=PromotionPolicy(full_within=0.1),
                    compile_modes=compile_modes)
    ladder.precompile(problem, cands, workers=compile_workers, pool=pool)
    evs = [(c, ladder.evaluate(problem, c, up_to="quick_timing")) for c in cands]
    quick = [(ev.stage("quick_timing").data["candidate_ms"], c, ev) for c, ev in evs
             if ev.stage("quick_timing") is not None and ev.stage("quick_timing").ok]
    row["failed"] = {ev.stages[-1].name: 0 for _, ev in evs if not ev.ok}
    for _, ev in evs:
        if not ev.ok:
            row["failed"][ev.stages[-1].name] += 1
    row["first_failure"] = next((f"{ev.stages[-1].name}: {ev.stages[-1].reason[:300]}" for _, ev in evs
                                 if not ev.ok), None)
    if not quick:
        row["status"] = "no candidate reached quick timing"
        row["wall_s"] = time.perf_counter() - t0
        return row
    quick.sort(key=lambda x: x[0])
    best_ms, best, _ = quick[0]
    full = ladder.evaluate(problem, best, force_full=True)
    ft = full.stage("full_timing")
    if ft is None or not ft.ok:
        row["status"] = f"best candidate failed full timing: {full.stages[-1].reason[:300]}"
        return row
    d = ft.data
    origin = dict(best.origin)
    row["bound"] = floor_bound(problem)
    row.update(status="ok", candidate_ms=d["candidate_ms"], eager_ms=d["eager_ms"], compile_ms=d.get("compile_ms"),
               speedup_vs_eager=d["speedup_vs_eager"], speedup_vs_compile=d.get("speedup_vs_compile"),
               max_autotune_ms=d.get("compile_max_autotune_ms"),
               speedup_vs_max_autotune=d.get("speedup_vs_max_autotune"),
               max_autotune_no_cg_ms=d.get("compile_max_autotune_no_cudagraphs_ms"),
               speedup_vs_max_autotune_no_cg=d.get("speedup_vs_max_autotune_no_cudagraphs"),
               compile_info={k: v for k, v in d.items() if k.startswith(("compile_error", "compile_wall_s",
                                                                         "tampered_before_compile"))},
               floor_ms=d.get("floor_ms"), spread=d["spread"], reps=d["reps"],
               pct_of_floor=(d["floor_ms"] / d["candidate_ms"] if d.get("floor_ms") else None),
               coverage_flops=origin["coverage_flops"], coverage_bytes=origin["coverage_bytes"],
               config=json.loads(origin["config"]), best_source=best.source, gpu_s=ladder.budget.gpu_spent,
               by_stage=ladder.budget.report()["by_stage"], wall_s=time.perf_counter() - t0)
    return row


def table(rows: list[dict]) -> str:
    fmt = lambda v, f: (f % v) if isinstance(v, (int, float)) else "-"  # noqa: E731
    no_cg = any(r.get("max_autotune_no_cg_ms") for r in rows)  # the column only when that mode was timed
    head = ["problem", "best ms", "eager ms", "compile ms", "max-autotune ms"] + (["max-autotune no-CG ms"] if no_cg
                                                                                 else []) + \
        ["vs eager", "vs compile", "vs max-autotune"] + (["vs max-autotune no-CG"] if no_cg else []) + \
        ["% of floor", "bound", "coverage (bytes)", "search GPU-min", "status"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(rows, key=lambda r: r["problem"]):
        search_min = ((r.get("dataset_gpu_s") or 0) + (r.get("gpu_s") or 0)) / 60 if r.get("gpu_s") else None
        cells = [r["problem"], fmt(r.get("candidate_ms"), "%.4g"), fmt(r.get("eager_ms"), "%.4g"),
                 fmt(r.get("compile_ms"), "%.4g"), fmt(r.get("max_autotune_ms"), "%.4g")]
        cells += [fmt(r.get("max_autotune_no_cg_ms"), "%.4g")] if no_cg else []
        cells += [fmt(r.get("speedup_vs_eager"), "%.2fx"), fmt(r.get("speedup_vs_compile"), "%.2fx"),
                  fmt(r.get("speedup_vs_max_autotune"), "%.2fx")]
        cells += [fmt(r.get("speedup_vs_max_autotune_no_cg"), "%.2fx")] if no_cg else []
        cells += [fmt(100 * r["pct_of_floor"] if r.get("pct_of_floor") else None, "%.0f%%"), r.get("bound") or "-",
                  fmt(100 * r["coverage_bytes"] if "coverage_bytes" in r else None, "%.0f%%"),
                  fmt(search_min, "%.1f"), r.get("status", "")[:80]]
        out.append("| " + " | ".join(cells) + " |")
    ok = [r for r in rows if r.get("status") == "ok"]

    def geo(key):
        vals = [r[key] for r in ok if r.get(key)]
        return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")

    out.append("")
    out.append(f"{len(ok)} of {len(rows)} problems measured; geo-mean speedup vs eager {geo('speedup_vs_eager'):.3f}x, "
               f"vs torch.compile {geo('speedup_vs_compile'):.3f}x, vs max-autotune "
               f"{geo('speedup_vs_max_autotune'):.3f}x" + (f", vs max-autotune without CUDA graphs "
                                                            f"{geo('speedup_vs_max_autotune_no_cg'):.3f}x" if
                                                            any(r.get("max_autotune_no_cg_ms") for r in ok) else "")
               + ".")
    mem = [r for r in ok if r.get("pct_of_floor") and r.get("bound") == "memory"]
    if mem:
        reached = sorted(r["pct_of_floor"] for r in mem)
        out.append(f"Memory-bound problems: {sum(p >= 0.8 for p in reached)} of {len(mem)} reach >= 80 % of the "
                   f"roofline floor (median {reached[len(reached) // 2]:.0%}).")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("problems", nargs="*")
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--gpu-minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile-workers", type=int, default=8)
    ap.add_argument("--from-dataset", type=int, default=0, help="seed each pool with the K fastest candidates the "
                                                                 "shipped H200 dataset holds for the problem")
    ap.add_argument("--compile-modes", default="default,max-autotune",
                    help="torch.compile modes timed against the best candidate (comma-separated)")
    ap.add_argument("--gpu", type=int, default=0, help="which GPU (cuda device index)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", default=str(ROOT / "results" / "suite"))
    ap.add_argument("--table-only", action="store_true", help="rewrite table.md from rows.jsonl and stop")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"
    done = {}
    if rows_path.exists():
        for line in rows_path.read_text().splitlines():
            r = json.loads(line)
            if "superseded" in r and not args.table_only:  # its space changed since: benchmark it again
                continue
            done[r["problem"]] = r
    if args.table_only:
        (out / "table.md").write_text(table(list(done.values())))
        print(table(list(done.values())))
        return
    if args.device == "cuda":
        from workbench.devices.local import LocalDevice
        device = LocalDevice("cuda", gpu_index=args.gpu)
    else:
        device = get_device(args.device)
    modes = tuple(m.strip() for m in args.compile_modes.split(",") if m.strip())
    from workbench.devices.local import LocalDevice
    pool = [LocalDevice("cpu") for _ in range(args.compile_workers)]  # started once, not per problem
    try:
        for name in args.problems or builtin_names():
            if Path(name).stem in done:
                continue
            try:
                row = bench_problem(device, name, args.candidates, args.gpu_minutes, args.seed, args.compile_workers,
                                    args.from_dataset, modes, pool)
            except Exception as e:
                row = {"problem": Path(name).stem, "status": f"error: {type(e).__name__}: {e}",
                       "traceback": traceback.format_exc()[-2000:]}
            row["device"] = device.name
            with rows_path.open("a") as f:
                f.write(json.dumps(row, default=str) + "\n")
            done[row["problem"]] = row
            print(json.dumps({k: v for k, v in row.items() if k not in ("best_source", "traceback", "config")},
                             default=str), flush=True)
    finally:
        device.close()
        for d in pool:
            d.close()
    (out / "table.md").write_text(table(list(done.values())))
    print(table(list(done.values())))


if __name__ == "__main__":
    main()
