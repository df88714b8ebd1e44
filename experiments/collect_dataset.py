"""Dataset collection (H200): many offline-proposer candidates per problem through the ladder, every outcome kept.

    python experiments/collect_dataset.py [PROBLEM ...] [--per-problem 250] [--gpus 2] [--deadline-s 540]
                                          [--out results/dataset/raw]

For each problem (default: every built-in; any KernelBench-format file may be given) the offline proposer samples
`--per-problem` points of its space (the default configuration first, then a seeded sample that mixes fusion choices
and configurations, good and bad alike). Every candidate climbs static -> compile -> correctness -> quick timing; a
failure at any rung is a row too (the surrogates' "fails" outcome). Then, per problem:
- the default candidate's quick timing is repeated `--noise-repeats` times: the problem's run-to-run noise;
- the best candidate by quick time goes through full timing, where eager and torch.compile are timed call by call
  against it (the suite benchmark's numbers, from the same run).

One process per GPU (`--gpus`), each with its own GPU worker and a pool of CPU compile workers that compiles the next
problem while the GPU measures the current one. Rows are appended to <out>/rows-gpu<i>.jsonl as each candidate
finishes; a rerun skips every (problem key, candidate) already there, so collection resumes where it stopped (device
time comes in slices). `--deadline-s` stops taking new work after that many seconds. Candidate sources are not
stored: each row's origin holds the choice, which `OfflineProposer.render` turns back into the source, and the
candidate's identity (families, template versions, specs: `workbench.kernels.identity`), which the export checks so
that a cosmetic template edit keeps the row and a version bump retires it. Then `experiments/export_dataset.py` turns
the rows into the shipped parquet.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import re
import sys
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench import HARNESS_VERSION  # noqa: E402
from workbench.devices.local import LocalDevice  # noqa: E402
from workbench.harness.ladder import Ladder  # noqa: E402
from workbench.problems import PRECISIONS, Problem, builtin_names  # noqa: E402
from workbench.proposers.offline import OfflineProposer  # noqa: E402


def iter_rows(out: Path):
    """Every collected row of every GPU's file, in file order; a line cut by a kill is skipped (that candidate is
    measured again)."""
    for path in sorted(out.glob("rows-gpu*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


# A failure the machine may have caused, not the candidate (the harness's own memory once held four copies of a
# 16 GiB input and ran the card out of memory: 45_Average_Pooling_2D under HARNESS_VERSION 9)
MACHINE_FAULT = re.compile(r"out of memory|OutOfMemoryError|worker (died|crashed|could not start)|lost worker", re.I)


def superseded(r: dict) -> bool:
    """A failed row that a newer harness should measure again: its failing stage reads as the machine's fault and it
    was judged under another HARNESS_VERSION (under the current one it stands: the same rules, the same verdict)."""
    ev = r.get("evaluation") or {}
    if ev.get("ok", True) or str((ev.get("provenance") or {}).get("harness_version")) == HARNESS_VERSION:
        return False
    failed = [st for st in ev.get("stages") or [] if not st.get("ok", True)]
    return bool(failed) and bool(MACHINE_FAULT.search(str(failed[-1].get("reason", ""))))


def done_keys(out: Path) -> set[tuple[str, str, str]]:
    """(problem key, candidate hash, kind) of every row already collected (`superseded` rows excepted)."""
    return {(r["problem_key"], r["candidate"], r["kind"]) for r in iter_rows(out) if not superseded(r)}


def prepare(name: str, per_problem: int, seed: int, precision: str | None = None):
    problem = Problem.load(name, precision=precision)
    proposer = OfflineProposer(problem)
    return problem, proposer.propose(per_problem, seed=seed), proposer.space_size()


def problem_source(name: str) -> dict:
    """Where a problem given as a file came from, for the export to load it again: a KernelBench file as
    "level<N>/<file>" (its level directory and name; a checkout's root differs between machines), any other file by
    its path; a built-in name needs nothing."""
    path = Path(name)
    if path.suffix != ".py":
        return {}
    m = re.fullmatch(r"level(\d+)", path.parent.name)
    if m:
        return {"source": f"{path.parent.name}/{path.name}", "level": f"level{int(m.group(1))}"}
    return {"source": str(path)}


def gpu_main(gpu: int, names: "mp.Queue", args: dict, done: set, t_start: float) -> None:
    out = Path(args["out"])
    rows = (out / f"rows-gpu{gpu}.jsonl").open("a")
    timeouts = {"correctness": args["timeout_s"], "quick_timing": args["timeout_s"], "full_timing": 300.0}
    device = LocalDevice(args["device"], gpu_index=gpu, timeouts=timeouts)
    pool = [LocalDevice("cpu") for _ in range(args["compile_workers"])]
    ladder = Ladder(device, seeds=args["seeds"])
    provenance = device.provenance()
    deadline = t_start + args["deadline_s"]
    stats = {"gpu": gpu, "candidates": 0, "gpu_s": 0.0, "problems": []}

    def write(row: dict) -> None:
        rows.write(json.dumps({**row, "gpu": gpu, "device": provenance, "t": time.time()}, default=str) + "\n")
        rows.flush()

    def next_prepared():
        """Take the next problem, sample and compile its candidates (on the CPU pool); None when none is left."""
        while True:
            try:
                name = names.get_nowait()
            except queue.Empty:
                return None
            try:
                problem, cands, size = prepare(name, args["per_problem"], args["seed"], args.get("precision"))
            except Exception as e:
                write({"kind": "problem_error", "problem": Path(name).stem, "problem_key": name, "candidate": "",
                       "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]})
                continue
            todo = [c for c in cands if (problem.key, c.hash, "candidate") not in done]
            if time.time() < deadline:
                ladder.precompile(problem, todo, pool=pool)
            # the precision each row was judged under (the problem key hashes it too)
            return problem, cands, todo, size, {**problem_source(name), "precision": problem.effective_precision}

    try:
        nxt = next_prepared()
        while nxt is not None and time.time() < deadline:
            problem, cands, todo, size, source = nxt
            holder: dict = {}
            th = threading.Thread(target=lambda: holder.update(v=next_prepared()), daemon=True)
            th.start()  # compile the next problem while this one is measured
            t0 = time.time()
            for c in todo:
                if time.time() >= deadline:
                    break
                ev = ladder.evaluate(problem, c, up_to="quick_timing")
                stats["candidates"] += 1
                stats["gpu_s"] += sum(s.gpu_s for s in ev.stages)
                write({"kind": "candidate", "problem": problem.name, "problem_key": problem.key, **source,
                       "candidate": c.hash, "origin": dict(c.origin), "space_size": size,
                       "evaluation": ev.summary()})
            # the best by quick time among everything measured for this problem, in this run and earlier ones
            quick = sorted(((ms, c) for c, ms in _quick_times(out, problem.key, cands).items()), key=lambda x: x[0])
            if quick and time.time() < deadline and (problem.key, "noise", "noise") not in done:
                default = cands[0]
                reps = []
                for _ in range(args["noise_repeats"]):
                    ev = ladder.evaluate(problem, default, up_to="quick_timing")
                    q = ev.stage("quick_timing")
                    if q is not None and q.ok:
                        reps.append({k: q.data.get(k) for k in ("candidate_ms", "eager_ms", "speedup_vs_eager",
                                                                  "spread", "reps")})
                write({"kind": "noise", "problem": problem.name, "problem_key": problem.key, **source,
                       "candidate": "noise",
                       "default_candidate": default.hash, "repeats": reps})
            if quick and args["full_best"] and time.time() < deadline and \
                    (problem.key, quick[0][1].hash, "full") not in done:
                best = quick[0][1]
                ev = ladder.evaluate(problem, best, force_full=True)
                write({"kind": "full", "problem": problem.name, "problem_key": problem.key, **source,
                       "candidate": best.hash,
                       "origin": dict(best.origin), "evaluation": ev.summary()})
            stats["problems"].append({"problem": problem.name, "measured": len(todo), "wall_s": time.time() - t0})
            print(json.dumps({"gpu": gpu, "problem": problem.name, "measured": len(todo),
                              "wall_s": round(time.time() - t0, 1), "elapsed_s": round(time.time() - t_start)}),
                  flush=True)
            th.join()
            nxt = holder.get("v")
    finally:
        stats["wall_s"] = time.time() - t_start
        (out / f"stats-gpu{gpu}.json").write_text(json.dumps(stats, indent=1))
        rows.close()
        device.close()
        for d in pool:
            d.close()


def _quick_times(out: Path, problem_key: str, cands) -> dict:
    """Candidate -> quick-timing ms, from every row file (this run's and earlier runs')."""
    by_hash = {c.hash: c for c in cands}
    times = {}
    for r in iter_rows(out):
        if r.get("kind") != "candidate" or r["problem_key"] != problem_key or r["candidate"] not in by_hash:
            continue
        for st in r["evaluation"]["stages"]:
            if st["name"] == "quick_timing" and st["verdict"] == "pass":
                times[by_hash[r["candidate"]]] = st["data"]["candidate_ms"]
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problems", nargs="*")
    ap.add_argument("--per-problem", type=int, default=250)
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3, help="correctness seeds per candidate")
    ap.add_argument("--compile-workers", type=int, default=max((os.cpu_count() or 2) // 2 - 1, 1))
    ap.add_argument("--noise-repeats", type=int, default=5)
    ap.add_argument("--full-best", type=int, default=1, help="full-time the best candidate per problem (0: no)")
    ap.add_argument("--timeout-s", type=float, default=60.0, help="per correctness or quick-timing run")
    ap.add_argument("--deadline-s", type=float, default=540.0)
    ap.add_argument("--precision", choices=PRECISIONS, default=None,
                    help="the problems' precision (default: each file's WORKBENCH_PRECISION, else torch)")
    ap.add_argument("--out", default=str(ROOT / "results" / "dataset" / "raw"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    done = done_keys(out)
    names = args.problems or builtin_names()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    for n in names:
        q.put(n)
    t_start = time.time()
    cfg = {**vars(args), "compile_workers": max(args.compile_workers // max(args.gpus, 1), 1)}
    procs = [ctx.Process(target=gpu_main, args=(i, q, cfg, done, t_start)) for i in range(args.gpus)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    total = {"gpus": args.gpus, "wall_s": time.time() - t_start, "per_gpu": []}
    for i in range(args.gpus):
        f = out / f"stats-gpu{i}.json"
        if f.exists():
            total["per_gpu"].append(json.loads(f.read_text()))
    n = sum(s["candidates"] for s in total["per_gpu"])
    total["candidates"] = n
    total["candidates_per_minute"] = 60 * n / total["wall_s"] if total["wall_s"] else None
    with (out / "runs.jsonl").open("a") as f:
        f.write(json.dumps({**total, "args": vars(args), "started": t_start}) + "\n")
    print(json.dumps({k: v for k, v in total.items() if k != "per_gpu"}))


if __name__ == "__main__":
    main()
