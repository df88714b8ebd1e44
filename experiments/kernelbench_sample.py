"""A fixed stratified sample of the KernelBench development set: 20 files per level (60 in all).

The rule, written into the sample file: within each level, sort the file names by sha256 of "SEED:LEVEL:NAME" (hex)
and take the first 20. The sample stores file names only (never file contents), so it can be committed; run the
benchmark on it with `workbench kernelbench ../shared/kernelbench --sample results/kernelbench/sample.json`.

    python experiments/kernelbench_sample.py [--root ../shared/kernelbench] [--seed 0] [--per-level 20]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULE = "within each level, file names sorted by sha256(f'{seed}:{level}:{name}').hexdigest(), the first per_level"


def sample(root: Path, seed: int, per_level: int) -> dict:
    levels = sorted(d.name for d in root.glob("level*") if d.is_dir())
    files: list[str] = []
    for level in levels:
        names = sorted(p.name for p in (root / level).glob("*.py"))
        ranked = sorted(names, key=lambda n: hashlib.sha256(f"{seed}:{level}:{n}".encode()).hexdigest())
        files += [f"{level}/{n}" for n in sorted(ranked[:per_level])]
    return {"rule": RULE, "seed": seed, "per_level": per_level, "levels": levels,
            "population": {lv: len(list((root / lv).glob("*.py"))) for lv in levels}, "files": files}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=str(ROOT.parent / "shared" / "kernelbench"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-level", type=int, default=20)
    ap.add_argument("--out", default=str(ROOT / "results" / "kernelbench" / "sample.json"))
    args = ap.parse_args()
    root = Path(args.root)
    if not root.is_dir():
        print(f"no KernelBench files under {root}", file=sys.stderr)
        return 2
    s = sample(root, args.seed, args.per_level)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(s, indent=1) + "\n")
    population = ", ".join(f"{lv} {n}" for lv, n in s["population"].items())
    print(f"wrote {args.out}: {len(s['files'])} files (population: {population})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
