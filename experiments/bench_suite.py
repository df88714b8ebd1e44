"""Suite benchmark (H200): the offline proposer's best candidate per problem against eager and torch.compile.

    python experiments/bench_suite.py [PROBLEM ...] [--candidates 8] [--gpu-minutes 10] [--out results/suite]

For each problem (default: every built-in; any KernelBench-format file may be given): the proposer samples
`--candidates` points of its space (the default configuration first, then a seeded sample); all are compiled on CPU
workers first; each climbs the ladder to quick timing under a GPU budget of `--gpu-minutes`; competitive ones are
promoted to full timing, and the best by quick time is always taken through full timing, where eager and
torch.compile (default mode) are timed call by call against it in the same worker run. Rows go to
<out>/rows.jsonl as each problem finishes (a rerun skips finished problems: collection resumes), and the table to
<out>/table.md: speedup vs eager and vs torch.compile, percent of the roofline floor, coverage, and geo-means.
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


def bench_problem(device, name: str, n: int, gpu_minutes: float, seed: int, compile_workers: int) -> dict:
    t0 = time.perf_counter()
    problem = Problem.load(name)
    row: dict = {"problem": problem.name, "key": problem.key}
    proposer = OfflineProposer(problem)
    cands = proposer.propose(n, seed=seed)
    row.update(space_size=proposer.space_size(), candidates=len(cands),
               groups=[g.family for g in proposer.groups({p: True for p in proposer.fusion_points})])
    ladder = Ladder(device, budget=Budget(gpu_seconds=60 * gpu_minutes), policy=PromotionPolicy(full_within=0.1))
    ladder.precompile(problem, cands, workers=compile_workers)
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
    row.update(status="ok", candidate_ms=d["candidate_ms"], eager_ms=d["eager_ms"], compile_ms=d.get("compile_ms"),
               speedup_vs_eager=d["speedup_vs_eager"], speedup_vs_compile=d.get("speedup_vs_compile"),
               floor_ms=d.get("floor_ms"), spread=d["spread"], reps=d["reps"],
               pct_of_floor=(d["floor_ms"] / d["candidate_ms"] if d.get("floor_ms") else None),
               coverage_flops=origin["coverage_flops"], coverage_bytes=origin["coverage_bytes"],
               config=json.loads(origin["config"]), best_source=best.source, gpu_s=ladder.budget.gpu_spent,
               by_stage=ladder.budget.report()["by_stage"], wall_s=time.perf_counter() - t0)
    return row


def table(rows: list[dict]) -> str:
    out = ["| problem | best ms | eager ms | compile ms | vs eager | vs compile | % of floor | coverage (bytes) | "
           "status |", "|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v, f: (f % v) if isinstance(v, (int, float)) else "-"  # noqa: E731
    for r in rows:
        out.append(f"| {r['problem']} | {fmt(r.get('candidate_ms'), '%.4g')} | {fmt(r.get('eager_ms'), '%.4g')} | "
                   f"{fmt(r.get('compile_ms'), '%.4g')} | {fmt(r.get('speedup_vs_eager'), '%.2fx')} | "
                   f"{fmt(r.get('speedup_vs_compile'), '%.2fx')} | "
                   f"{fmt(100 * r['pct_of_floor'] if r.get('pct_of_floor') else None, '%.0f%%')} | "
                   f"{fmt(100 * r['coverage_bytes'] if 'coverage_bytes' in r else None, '%.0f%%')} | "
                   f"{r.get('status', '')[:80]} |")
    ok = [r for r in rows if r.get("status") == "ok"]

    def geo(key):
        vals = [r[key] for r in ok if r.get(key)]
        return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")

    out.append("")
    out.append(f"{len(ok)} of {len(rows)} problems measured; geo-mean speedup vs eager {geo('speedup_vs_eager'):.3f}x, "
               f"vs torch.compile {geo('speedup_vs_compile'):.3f}x.")
    mem = [r for r in ok if r.get("pct_of_floor") and r.get("floor_ms") is not None]
    if mem:
        out.append(f"Median fraction of the roofline floor reached: "
                   f"{sorted(r['pct_of_floor'] for r in mem)[len(mem) // 2]:.0%}.")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("problems", nargs="*")
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--gpu-minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile-workers", type=int, default=8)
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
            done[r["problem"]] = r
    if args.table_only:
        (out / "table.md").write_text(table(list(done.values())))
        print(table(list(done.values())))
        return
    device = get_device(args.device)
    try:
        for name in args.problems or builtin_names():
            if Path(name).stem in done:
                continue
            try:
                row = bench_problem(device, name, args.candidates, args.gpu_minutes, args.seed, args.compile_workers)
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
    (out / "table.md").write_text(table(list(done.values())))
    print(table(list(done.values())))


if __name__ == "__main__":
    main()
