"""Cut the small dataset the learned-surrogate tests train on from the shipped one.

    python experiments/make_surrogate_fixture.py [--data results/dataset] [--out tests/fixtures/dataset_small]

A few problems of different families (GEMMs, one with failed candidates, row reductions, a permute copy), up to
`--per-problem` rows each drawn with a fixed seed (failures kept first), without the bulky evaluation JSON. The
problems rows carry their tensor shapes (`features.with_shapes`), so the tests need not count problems.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROBLEMS = ("matmul_bf16", "matmul_small_k_bf16", "linear_gelu", "layernorm", "log_softmax_rows", "permute_copy_4d",
            "cross_entropy")


def main() -> None:
    import pandas as pd

    from workbench.store.dataset import load
    from workbench.surrogates.features import with_shapes

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "dataset_small"))
    ap.add_argument("--per-problem", type=int, default=50)
    args = ap.parse_args()
    cands, probs = load("candidates", args.data), load("problems", args.data)
    missing = set(PROBLEMS) - set(cands["problem"])
    if missing:
        raise SystemExit(f"the dataset lacks {sorted(missing)}")
    parts = []
    for name in PROBLEMS:
        g = cands[cands["problem"] == name]
        fails = g[g["outcome"] == "fails"].head(args.per_problem // 4)
        ok = g[g["outcome"] == "ok"]
        parts.append(pd.concat([fails, ok.sample(min(len(ok), args.per_problem - len(fails)), random_state=0)]))
    small = pd.concat(parts).drop(columns=["evaluation_json"]).reset_index(drop=True)
    small["fail_reason"] = small["fail_reason"].str.slice(0, 120)
    keys = set(small["problem_key"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    small.to_parquet(out / "candidates.parquet", compression="zstd", index=False)
    with_shapes(probs[probs["problem_key"].isin(keys)]).to_parquet(out / "problems.parquet", compression="zstd",
                                                                   index=False)
    print(f"{len(small)} rows over {len(keys)} problems ({int((small['outcome'] == 'fails').sum())} failed) -> {out}")


if __name__ == "__main__":
    main()
