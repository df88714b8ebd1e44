"""Correctness of the offline proposer's default candidate on KernelBench development-set files, on a GPU.

For each file whose default candidate has a generated kernel (`results/devset/render_after.jsonl`, from
`experiments/devset_render.py`): load it at its own sizes, render the default candidate, compile it for sm_90 on CPU
workers (all files at once, ahead of the GPU), then climb the ladder to correctness on the GPU (5 seeds, the
harness's bounds). One JSON line per file; it stops taking new files at `--deadline-s`, and says which it skipped.

    PYTHONPATH=. python3 experiments/devset_correctness.py --out $OUT/devset_correctness.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.devices import LocalDevice  # noqa: E402
from workbench.harness.ladder import Ladder  # noqa: E402
from workbench.problems import Problem  # noqa: E402
from workbench.proposers.offline import OfflineProposer  # noqa: E402

TIMEOUTS = {"compile": 120.0, "correctness": 120.0}


def prepare(path: Path):
    problem = Problem.load(str(path))
    proposer = OfflineProposer(problem)
    return problem, proposer.render(proposer.default_choice())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=str(ROOT.parent / "shared" / "kernelbench"))
    ap.add_argument("--render", default=str(ROOT / "results" / "devset" / "render_after.jsonl"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--compile-workers", type=int, default=12)
    ap.add_argument("--deadline-s", type=float, default=420.0)
    ap.add_argument("--device", default="cuda", help="cuda (cpu: a smoke test of the script, interpreter-slow)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N files")
    args = ap.parse_args()
    t0 = time.monotonic()
    rendered = [json.loads(line) for line in Path(args.render).read_text().splitlines()]
    files = [r["file"] for r in rendered if r["status"] == "rendered" and r.get("kernels")][: args.limit]
    root = Path(args.root)
    if not root.is_dir():
        print(f"no KernelBench files under {root}", file=sys.stderr)
        return 2
    out = open(args.out, "w")
    prepared = {}
    for name in files:
        try:
            prepared[name] = prepare(root / name)
        except Exception as e:
            out.write(json.dumps({"file": name, "status": "not prepared", "error": f"{type(e).__name__}: {e}"}) + "\n")
    device = LocalDevice(args.device, timeouts=TIMEOUTS)
    ladder = Ladder(device, seeds=5)
    pool = [LocalDevice("cpu", timeouts=TIMEOUTS) for _ in range(args.compile_workers)]
    try:
        names = list(prepared)
        with ThreadPoolExecutor(len(pool)) as ex:  # every file's compile on the CPU workers, ahead of the GPU
            list(ex.map(lambda i: ladder.precompile(*prepared[names[i]][:1], [prepared[names[i]][1]],
                                                    pool=[pool[i % len(pool)]]), range(len(names))))
        print(f"compiled {len(names)} candidates in {time.monotonic() - t0:.0f} s", flush=True)
        for name in names:
            problem, cand = prepared[name]
            row = {"file": name, "level": name.split("/")[0], "candidate": cand.hash}
            if time.monotonic() - t0 > args.deadline_s:
                row["status"] = "not run (deadline)"
            else:
                try:
                    ev = ladder.evaluate(problem, cand, up_to="correctness")
                    last = ev.stages[-1]
                    row.update(status="correct" if ev.ok and ev.fidelity == "correctness" else "not correct",
                               stage=last.name, verdict=str(last.verdict), reason=last.reason[:400],
                               gpu_s=round(sum(s.gpu_s for s in ev.stages), 2))
                except Exception:
                    row.update(status="error", error=traceback.format_exc()[-600:])
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(row["file"], row["status"], flush=True)
    finally:
        device.close()
        for d in pool:
            d.close()
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
