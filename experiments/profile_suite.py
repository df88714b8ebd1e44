"""Profile the suite on the H200: static reading, roofline verdict, Nsight Compute counters and expert findings for
each problem's fastest measured candidate and its default candidate.

    python experiments/profile_suite.py [PROBLEM ...] [--gpu 0] [--deadline-s 400] [--out results/profiles]

Candidates come from the shipped dataset (the fastest regenerating row, timed on the H200, whose median time feeds
the roofline) and from the offline proposer's default configuration. Each profile is the full report of
`workbench.profiling.profile_candidate` (raw counters included); they are appended to <out>/profiles.jsonl as each
finishes (a rerun skips those present), and <out>/fired.md tabulates which expert tools fired on which problem.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def targets(name: str) -> list[tuple[str, object, float | None]]:
    """(label, candidate, measured ms or None) to profile for one problem."""
    from workbench.problems import Problem
    from workbench.proposers.offline import OfflineProposer
    from workbench.proposers.recorded import DatasetSources
    from workbench.store.dataset import load

    problem = Problem.load(name)
    prop = OfflineProposer(problem)
    rows = load("candidates")
    rows = rows[(rows["problem_key"] == problem.key) & rows["regenerates"] & rows["candidate_ms"].notna()]
    out = []
    if len(rows):
        best = rows.nsmallest(1, "candidate_ms").iloc[0]
        out.append(("best", DatasetSources(rows).candidate(problem.key, best["candidate"]),
                    float(best["candidate_ms"])))
    default = prop.render(prop.default_choice())
    if not out or default.hash != out[0][1].hash:
        ms = rows.loc[rows["candidate"] == default.hash, "candidate_ms"]
        out.append(("default", default, float(ms.iloc[0]) if len(ms) else None))
    return out


def fired_table(profiles: list[dict]) -> str:
    tools = sorted({f["tool"] for p in profiles for f in p.get("findings", [])})
    by = collections.defaultdict(collections.Counter)
    verdict = {}
    for p in profiles:
        key = (p["problem"], p["label"])
        verdict[key] = (p.get("roofline") or {}).get("bound", "-")
        for f in p.get("findings", []):
            by[key][f["tool"]] += 1
    lines = ["| problem | candidate | roofline | counters | " + " | ".join(tools) + " |",
             "|---|---|---|---|" + "---|" * len(tools)]
    for p in sorted(profiles, key=lambda p: (p["problem"], p["label"])):
        key = (p["problem"], p["label"])
        lines.append(f"| {p['problem']} | {p['label']} | {verdict[key]} | "
                     f"{'yes' if p['counters']['available'] else 'no'} | "
                     + " | ".join(str(by[key][t] or "") for t in tools) + " |")
    total = collections.Counter(f["tool"] for p in profiles for f in p.get("findings", []))
    lines += ["", "Findings per tool over all profiles: " + ", ".join(f"{t} {n}" for t, n in total.most_common())]
    return "\n".join(lines) + "\n"


def main() -> None:
    from workbench.problems import Problem, builtin_names
    from workbench.profiling import profile_candidate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problems", nargs="*")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--deadline-s", type=float, default=400.0)
    ap.add_argument("--out", default=str(ROOT / "results" / "profiles"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "profiles.jsonl"
    done = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    seen = {(p["problem"], p["label"]) for p in done}
    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.problems or builtin_names():
            for label, cand, ms in targets(name):
                if (name, label) in seen:
                    continue
                if time.time() - t_start > args.deadline_s:
                    print("deadline reached", flush=True)
                    break
                f = Path(tmp) / f"{name}_{label}.py"
                f.write_text(cand.source)
                t0 = time.time()
                try:
                    r = profile_candidate(Problem.load(name), f, device=f"cuda:{args.gpu}", ms=ms)
                except Exception as e:  # one problem's failure is a row, not the end of the run
                    r = {"problem": name, "error": f"{type(e).__name__}: {e}", "findings": [],
                         "counters": {"available": False, "reason": "error"}}
                r.update(label=label, candidate_hash=cand.hash, measured_ms=ms, wall_s=time.time() - t0)
                with path.open("a") as fh:
                    fh.write(json.dumps(r, default=str) + "\n")
                done.append(r)
                print(json.dumps({"problem": name, "label": label, "counters": r["counters"]["available"],
                                  "findings": [x["tool"] for x in r["findings"]], "wall_s": round(r["wall_s"], 1),
                                  "reason": r["counters"]["reason"][:200]}), flush=True)
    (out / "fired.md").write_text(fired_table(done))
    print(fired_table(done))


if __name__ == "__main__":
    main()
