"""Evaluation throughput through the Ray device with 1 and 2 GPUs, same work, same CPUs (issue 9).

    python experiments/ray_scaling.py PHASE [PHASE ...] [--problems ...] [--per-problem 30] [--out DIR]

Phases (each in its own process, with its own local Ray cluster and its own Triton/inductor caches, so no phase
compiles faster because another ran before it):
- `sweep:G`   a fixed list of offline-proposer candidates (the same for every G) climbs static -> compile ->
              correctness -> quick timing through `RayDevice` with G GPU actors and a fixed pool of CPU compile
              actors; the driver keeps 4 candidates per GPU in flight, and only it writes the store.
- `search:G`  a greedy search (per_step 8) for a fixed wall time: measured candidates per minute when a step's
              measurements spread over G GPUs (`Search` uses the device's `slots`).
- `fault:G`   the sweep on a shorter list with one GPU actor killed mid-run: the killed candidate's record says
              "lost worker", the actor is replaced, and every record is in the store.
- `local:1`   the sweep's list through one `LocalDevice` (no Ray): Ray's overhead on the same work.

Each phase appends one JSON line to <out>/scaling.jsonl and keeps its store (<out>/<phase>.sqlite).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROBLEMS = ["scale_shift_relu", "softmax_rows", "layernorm", "row_sum", "bias_gelu_residual", "matmul_bf16"]
TIMEOUTS = {"compile": 120.0, "correctness": 60.0, "quick_timing": 60.0, "full_timing": 300.0}


def workload(problems: list[str], per_problem: int, seed: int = 0):
    """(problem, candidate) pairs, problem by problem: the same list for every phase."""
    from workbench.problems import Problem
    from workbench.proposers.offline import OfflineProposer

    out = []
    for spec in problems:  # NAME or NAME:k=v,k=v (shape overrides, e.g. small shapes for a CPU smoke run)
        name, _, over = spec.partition(":")
        p = Problem.load(name, over.split(",") if over else None)
        out += [(p, c) for c in OfflineProposer(p).propose(per_problem, seed=seed)]
    return out


def _ray_device(gpus: int, compile_workers: int, kind: str):
    import ray

    from workbench.devices.ray_device import RayDevice

    # exactly `gpus` GPUs and the same CPUs for every phase: only the GPU count changes. Kind "cpu" (a smoke run
    # of this script without a GPU) has `gpus` CPU actors instead, and timing is refused.
    ray.init(address="local", num_gpus=gpus if kind == "cuda" else 0, num_cpus=gpus + compile_workers + 2,
             include_dashboard=False)  # "local": a new cluster, never one already running here
    return RayDevice(kind=kind, timeouts=TIMEOUTS, workers=gpus, compile_workers=compile_workers, grace_s=60)


def _tally(evs, wall_s: float, gpus: int) -> dict:
    from workbench.core.records import PASS

    gpu_s = sum(s.gpu_s for ev in evs for s in ev.stages)
    last = [ev.stages[-1] for ev in evs if ev.stages]
    return {"candidates": len(evs), "wall_s": round(wall_s, 2), "cand_per_min": round(60 * len(evs) / wall_s, 1),
            "gpu_s": round(gpu_s, 1), "gpu_busy": round(gpu_s / (wall_s * gpus), 3),
            "reached_quick_timing": sum(1 for ev in evs if (q := ev.stage("quick_timing")) and q.verdict == PASS),
            "failed": sum(1 for r in last if r.verdict == "fail"),
            "lost_worker": sum(1 for r in last if r.executor_failure == "lost_worker"),
            "timed_out": sum(1 for r in last if "timed out" in (r.reason or ""))}


def run_sweep(device, work, store, threads: int,
              kill_after_s: float | None = None) -> tuple[list, float, float, dict]:
    """(evaluations, wall seconds, the driver's CPU seconds, what the killer did)."""
    from workbench.harness.ladder import Ladder

    ladder = Ladder(device, store=store)
    fault: dict = {}
    if kill_after_s is not None:
        def killer():
            import ray

            time.sleep(kill_after_s)
            for call in device.running():
                if call["method"] == "run_stages":
                    fault.update(cand_path=call["cand_path"], at_s=round(time.perf_counter() - t0, 1))
                    ray.kill(call["actor"])
                    return
        threading.Thread(target=killer, daemon=True).start()
    t0, cpu0 = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(threads) as ex:
        evs = list(ex.map(lambda pc: ladder.evaluate(pc[0], pc[1], up_to="quick_timing"), work))
    # the driver's own CPU (all its threads, Ray's included): what bounds how many GPUs one driver can feed
    return evs, time.perf_counter() - t0, time.process_time() - cpu0, fault


def phase(name: str, args) -> dict:
    from workbench.store import Store

    kind, gpus = name.split(":")[0], int(name.split(":")[1])
    out = Path(args.out)
    store = Store(out / f"{kind}{gpus}.sqlite")
    rec: dict = {"phase": name, "gpus": gpus, "compile_workers": args.compile_workers}
    t0 = time.perf_counter()
    if kind == "local":
        from workbench.devices.local import LocalDevice
        from workbench.harness.ladder import Ladder

        work = workload(args.problems, args.per_problem)
        device = LocalDevice(args.kind, 0, TIMEOUTS)
        device.info  # start the GPU worker before the clock, as the Ray actors do
        rec["startup_s"] = round(time.perf_counter() - t0, 1)
        ladder = Ladder(device, store=store)
        pool = [LocalDevice("cpu") for _ in range(args.compile_workers)]
        t1 = time.perf_counter()
        evs = []
        for name_ in dict.fromkeys(p.key for p, _ in work):  # compile a problem's pool ahead, then measure it
            items = [(p, c) for p, c in work if p.key == name_]
            ladder.precompile(items[0][0], [c for _, c in items], pool=pool)
            evs += [ladder.evaluate(p, c, up_to="quick_timing") for p, c in items]
        rec.update(_tally(evs, time.perf_counter() - t1, 1))
        for d in pool:
            d.close()
        device.close()
    else:
        device = _ray_device(gpus, args.compile_workers, args.kind)
        rec["startup_s"] = round(time.perf_counter() - t0, 1)
        rec["device"] = device.name
        rec["provenance"] = {k: v for k, v in device.provenance().items() if k in ("device", "driver", "torch_version",
                                                                                    "triton_version", "executor")}
        try:
            if kind == "search":
                from workbench.harness.budget import Budget
                from workbench.problems import Problem
                from workbench.search import Search

                evs_all = []
                for pname in args.search_problems:
                    name_, _, over = pname.partition(":")
                    s = Search(Problem.load(name_, over.split(",") if over else None), device, strategy="greedy",
                               per_step=8, seed=0, store=store,
                               budget=Budget(wall_seconds=args.search_wall_s))
                    t1 = time.perf_counter()
                    s.run()
                    wall = time.perf_counter() - t1
                    nodes = [n for n in s.tree.nodes.values() if n.status != "skipped"]
                    best = s.best_summary() or {}
                    rec.setdefault("searches", []).append(
                        {"problem": pname, "evaluated": len(nodes), "wall_s": round(wall, 1),
                         "cand_per_min": round(60 * len(nodes) / wall, 1), "steps": s.steps,
                         "best_speedup_vs_eager": best.get("speedup_vs_eager")})
                    evs_all.append((len(nodes), wall))
                n, w = sum(a for a, _ in evs_all), sum(b for _, b in evs_all)
                rec.update(candidates=n, wall_s=round(w, 1), cand_per_min=round(60 * n / w, 1))
            else:
                work = workload(args.problems, args.per_problem if kind == "sweep" else args.fault_per_problem)
                evs, wall, driver_cpu, fault = run_sweep(device, work, store, threads=4 * gpus,
                                                         kill_after_s=args.kill_after_s if kind == "fault" else None)
                rec.update(_tally(evs, wall, gpus), driver_cpu_s=round(driver_cpu, 2))
                comp = sorted(st.cost_s for ev in evs for st in ev.stages if st.name == "compile")
                if comp:  # compile wall per candidate on its CPU actor: what bounds GPUs per compile core
                    rec["compile_s"] = {"median": round(comp[len(comp) // 2], 3),
                                        "mean": round(sum(comp) / len(comp), 3), "sum": round(sum(comp), 1)}
                if kind == "fault":
                    frame = store.evaluations_frame()
                    killed = [ev for ev in evs if ev.stages and ev.stages[-1].executor_failure]
                    rec["fault"] = {**fault, "records_in_store": len(frame), "evaluations": len(evs),
                                    "every_record_stored": set(frame["candidate_hash"]) >= {ev.candidate_hash
                                                                                           for ev in evs},
                                    "failed_by_executor": [ev.stages[-1].reason for ev in killed],
                                    "actors_replaced": device._pool.replaced,
                                    "passed": sum(1 for ev in evs if ev.stages and ev.stages[-1].verdict == "pass")}
                by_node: dict = {}
                for ev in evs:
                    for st in ev.stages:
                        if st.name == "correctness" and "ray_node" in st.data:
                            by_node[st.data.get("ray_host")] = by_node.get(st.data.get("ray_host"), 0) + 1
                rec["correctness_runs_by_host"] = by_node
        finally:
            device.close()
    store.close()
    rec["total_s"] = round(time.perf_counter() - t0, 1)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("phases", nargs="+", help="sweep:G, search:G, fault:G or local:1")
    ap.add_argument("--problems", nargs="+", default=PROBLEMS)
    ap.add_argument("--per-problem", type=int, default=30)
    ap.add_argument("--fault-per-problem", type=int, default=8)
    ap.add_argument("--kill-after-s", type=float, default=8.0)
    ap.add_argument("--search-problems", nargs="+", default=["softmax_rows", "matmul_bf16"])
    ap.add_argument("--search-wall-s", type=float, default=40.0)
    ap.add_argument("--compile-workers", type=int, default=12)
    ap.add_argument("--out", default="/tmp/ray_scaling")
    ap.add_argument("--kind", default="cuda", choices=["cuda", "cpu"], help="cpu: a smoke run of the plumbing")
    ap.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.in_process:  # one phase, in this process
        rec = phase(args.phases[0], args)
        with (out / "scaling.jsonl").open("a") as f:
            f.write(json.dumps(rec) + "\n")
        print(json.dumps(rec), flush=True)
        return
    for ph in args.phases:
        cache = tempfile.mkdtemp(prefix="cache-", dir=out)
        gpus = int(ph.split(":")[1])
        env = {**os.environ, "TRITON_CACHE_DIR": f"{cache}/triton", "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor",
               "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus)), "RAY_AUTH_MODE": "disabled"}
        argv = [a for a in sys.argv[1:] if a not in args.phases]
        r = subprocess.run([sys.executable, __file__, ph, *argv, "--in-process"], env=env)
        if r.returncode:
            print(json.dumps({"phase": ph, "error": f"exit {r.returncode}"}), flush=True)
            with (out / "scaling.jsonl").open("a") as f:
                f.write(json.dumps({"phase": ph, "error": f"exit {r.returncode}"}) + "\n")


if __name__ == "__main__":
    main()
