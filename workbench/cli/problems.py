"""`workbench problems list|show`."""
from __future__ import annotations

import json

from ..problems import Problem, builtin_names
from ..problems.describe import describe
from .common import load_problem


def cmd_problems_list(args) -> int:
    for name in builtin_names():
        p = Problem.load(name)
        doc = next((line.strip("# ").strip() for line in p.source.splitlines() if line.startswith("#")), "")
        print(f"{name:24s} {doc}")
    return 0


def cmd_problems_show(args) -> int:
    r = describe(load_problem(args))
    if args.json:
        print(json.dumps(r, default=str))
        return 0
    print(f"{r['problem']}  ({r['key']}, precision {r['precision']})\n  {r['path']}")
    print("  constants: " + ", ".join(f"{k}={v}" for k, v in r["constants"].items()))
    for i, x in enumerate(r["inputs"]):
        print(f"  input {i}: {x}")
    for i, x in enumerate(r["outputs"]):
        print(f"  output {i}: {x}")
    print(f"  FLOPs {r['flops']:.4g} ({r['compute_dtype']}), min bytes {r['min_bytes']:.4g}, "
          f"eager bytes {r['eager_bytes']:.4g}, intensity {r['intensity']:.3g} FLOP/B, parameters {r['parameters']}")
    if not r["floors"]:
        print("  floor: no device has measured ceilings (run experiments/measure_ceilings.py on a GPU)")
    for gpu, f in r["floors"].items():
        if "error" in f:
            print(f"  floor on {gpu}: {f['error']}")
        else:
            print(f"  floor on {gpu}: {f['floor_ms']:.4g} ms ({f['bound']}-bound; compute {f['compute_ms']:.4g} ms, "
                  f"memory {f['memory_ms']:.4g} ms)")
    return 0
