"""The offline proposer's default candidate for every file of the KernelBench development set, rendered on the CPU.

For each file: load it at its own sizes, capture and partition the reference on meta tensors, render the proposer's
default point, and record whether a Triton kernel was generated (and its FLOP/byte coverage) or why not, with the
rendered source's hash. Run it on two checkouts to see what a change did to the proposer's output on files it was not
written for (identical hashes: identical candidates).

    python experiments/devset_render.py --out results/devset/render.jsonl [--root ../shared/kernelbench]
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import traceback
from pathlib import Path

from workbench.problems import Problem
from workbench.proposers.offline import OfflineProposer


class TooSlow(Exception):
    pass


def _too_slow(signum, frame):
    raise TooSlow()


def one(path: Path, timeout_s: int) -> dict:
    row: dict = {"file": f"{path.parent.name}/{path.name}", "level": path.parent.name}
    t0 = time.perf_counter()
    signal.signal(signal.SIGALRM, _too_slow)
    signal.alarm(timeout_s)  # a graph that unrolls thousands of nodes (an LSTM at its own sizes) must not stall the run
    try:
        problem = Problem.load(str(path))
        proposer = OfflineProposer(problem)
        cand = proposer.render(proposer.default_choice())
        origin = dict(cand.origin)
        row.update(status="rendered", hash=cand.hash, kernels=cand.source.count("@triton.jit"),
                   coverage_flops=origin.get("coverage_flops"), coverage_bytes=origin.get("coverage_bytes"))
    except TooSlow:
        row.update(status="timeout", error=f"not rendered within {timeout_s} s")
    except Exception as e:  # a file the proposer cannot handle is a finding, not a crash of the sweep
        row.update(status="error", error=f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}",
                   where=traceback.format_exc().strip().splitlines()[-3][:200])
    finally:
        signal.alarm(0)
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[2] / "shared" / "kernelbench"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=int, default=90, help="seconds per file")
    ap.add_argument("--resume", action="store_true", help="skip files already in --out")
    args = ap.parse_args()
    root = Path(args.root)
    files = sorted(root.glob("level*/*.py"))
    if not files:
        print(f"no KernelBench files under {root}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if args.resume and out.exists():
        done = {json.loads(line)["file"] for line in out.read_text().splitlines()}
    with open(out, "a" if args.resume else "w") as f:
        for path in files:
            if f"{path.parent.name}/{path.name}" in done:
                continue
            row = one(path, args.timeout)
            f.write(json.dumps(row) + "\n")
            f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
