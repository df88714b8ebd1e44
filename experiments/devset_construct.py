"""Construct/mode probe: the offline proposer's default candidate for KernelBench files, at small sizes, up the CPU
ladder to correctness (Triton interpreter), with the verdict and reason per file.

Sizes: `batch_size` 2, spatial and sequence constants 32 or less, so the interpreter finishes; the verdicts are about
whether the candidate constructs and behaves like the reference (class attributes, helper methods, training mode,
dropout), not about speed.

    python experiments/devset_construct.py --out /tmp/after.jsonl level3/9_ResNet18.py level2/33_Gemm_Scale_BatchNorm.py
"""
from __future__ import annotations

import argparse
import ast
import json
import time
from pathlib import Path

from workbench.devices.local import LocalDevice
from workbench.harness.ladder import Ladder
from workbench.problems import Problem
from workbench.proposers.offline import OfflineProposer

SMALL = {"batch_size": 2, "height": 32, "width": 32, "depth": 8, "seq_len": 16, "sequence_length": 16,
         "input_size": 32, "hidden_size": 32, "image_size": 32, "D": 8, "H": 32, "W": 32, "num_classes": 10,
         "dim": 16, "features": 32, "in_features": 32, "out_features": 32, "length": 64}


def small_overrides(path: Path) -> dict[str, str]:
    """SMALL's values for the module-level integer constants the file binds, where they are larger."""
    out = {}
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.Assign):
            continue
        pairs = []
        for t in node.targets:
            if isinstance(t, ast.Name):
                pairs.append((t.id, node.value))
            elif isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple) and len(t.elts) == len(node.value.elts):
                pairs += [(e.id, v) for e, v in zip(t.elts, node.value.elts) if isinstance(e, ast.Name)]
        for name, v in pairs:
            if name in SMALL and isinstance(v, ast.Constant) and isinstance(v.value, int) and v.value > SMALL[name]:
                out[name] = str(SMALL[name])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="../shared/kernelbench")
    ap.add_argument("--out", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    dev = LocalDevice("cpu", timeouts={"compile": 120, "correctness": 240})
    ladder = Ladder(dev)
    with open(args.out, "w") as f:
        for name in args.files:
            path = Path(args.root) / name
            row: dict = {"file": name, "overrides": small_overrides(path)}
            t0 = time.perf_counter()
            try:
                problem = Problem.load(str(path), overrides=row["overrides"])
                proposer = OfflineProposer(problem)
                cand = proposer.render(proposer.default_choice())
                ev = ladder.evaluate(problem, cand, up_to="correctness")
                last = ev.stages[-1]
                row.update(status="ok" if ev.ok else "failed", stage=last.name, reason=last.reason,
                           verdict=str(getattr(last, "verdict", "")))
            except Exception as e:
                row.update(status="error", reason=f"{type(e).__name__}: {str(e)[:300]}")
            row["seconds"] = round(time.perf_counter() - t0, 1)
            print(json.dumps(row), flush=True)
            f.write(json.dumps(row) + "\n")
    dev.close()


if __name__ == "__main__":
    main()
