"""Register spills of the GEMM and attention families' valid configurations, compiled for sm_90 on this CPU.

Each configuration is rendered, imported and launched on meta tensors under the compile stage's stand-in sm_90
driver (workbench/harness/compile.py); every launch is compiled with Triton's own binder (`warmup=True`), so the cubin
is the one an H200 launch at that shape builds. Registers and spills come from `cuobjdump -res-usage`: spills =
(STACK + LOCAL) / 4, which is what Triton's `n_spills` reports on a GPU (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES / 4).

Sets (each row records its set):
- repro: the H200-measured configurations of the GPU test (tests/test_kernels_gemm.py::
  test_gpu_valid_configs_compile_without_spills), to confirm the CPU compile gives the same spills;
- study: seeded samples (seed 0) of the test's specs at the test's shapes (GEMM 300x200 @ 200x260; attention q
  1x2x300xD), 200 per GEMM spec and every attention configuration;
- heldout: disjoint seeded samples (seed 1, 120 each) of the same GEMM specs, 80 each of other GEMM specs
  (fp16 -> fp32, tf32x3, batched)
  and other attention specs;
- large: part of the study sample again (50 per GEMM spec, every third attention config) at 4096^3 (GEMM) and
  S = 4096 (attention): does the shape matter?
- gputest: the GPU test's own sampling (seed 1234) from the valid space as it is now (after any pruning rule).

Configurations are sampled from the space *before* the spill rule (`check` passing, or failing only on the register
estimate), so the study can be re-run after the rule is in place.

    .venv/bin/python experiments/spill_study.py [--sets repro,study,heldout,large,gputest] [--jobs 2]
    .venv/bin/python experiments/spill_study.py --sets none --report
writes results/kernels/spills.jsonl (rows appended per set, older rows of the same set replaced) and prints a
summary; `--report` scores the families' spill rules (the checks whose reason starts with SPILL_RULE_PREFIX) as
classifiers of "spills > 0" per set, and their impact on the shipped dataset (results/dataset: H200-measured
candidates at the problems' real shapes): how many candidates' GEMM/attention configs the rules prune, whether any
problem's fastest candidate is among them, and the pruned candidates' time relative to their problem's best; it
writes results/kernels/spill_rules.json. results/kernels/spills.md summarises both.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.kernels import attention, gemm  # noqa: E402
from workbench.kernels.base import Epilogue, EpilogueInput, valid_space  # noqa: E402

OUT = ROOT / "results" / "kernels" / "spills.jsonl"
ALL_EPILOGUE = Epilogue("tl.where(acc * alpha + res > 0, acc * alpha + res, 0.1 * (acc + bias))",
                        (EpilogueInput("bias", "col"), EpilogueInput("res", "full"), EpilogueInput("alpha", "scalar")))

# the GPU test's specs, in its order
TEST_GEMM = [gemm.GemmSpec("bfloat16", "bfloat16", epilogue=ALL_EPILOGUE), gemm.GemmSpec("float32", "float32"),
             gemm.GemmSpec("float32", "float32", precision="tf32")]
TEST_ATTN = [attention.AttentionSpec(64, "bfloat16", True), attention.AttentionSpec(128, "float16", False),
             attention.AttentionSpec(64, "float32", False)]
OTHER_GEMM = [gemm.GemmSpec("float16", "float32"), gemm.GemmSpec("float32", "float32", precision="tf32x3"),
              gemm.GemmSpec("bfloat16", "float32", batched=True)]
OTHER_ATTN = [attention.AttentionSpec(128, "bfloat16", True), attention.AttentionSpec(64, "float16", False),
              attention.AttentionSpec(32, "float32", True), attention.AttentionSpec(16, "bfloat16", False),
              attention.AttentionSpec(256, "bfloat16", False)]
SMALL_GEMM, LARGE_GEMM = (300, 260, 200), (4096, 4096, 4096)
SMALL_SEQ, LARGE_SEQ = 300, 4096

# H200 measurements (spills; regs 255 unless given) from the GPU test, for the repro set
H200 = [
    ("bf16", dict(BM=256, BN=128, BK=64, num_warps=8, num_stages=3, SPLIT_K=4), 178, 255),
    ("bf16", dict(BM=64, BN=256, BK=32, num_warps=8, num_stages=5, PERSISTENT=True), 6, 255),
    ("bf16", dict(BM=256, BN=16, BK=64, num_warps=4, num_stages=5, SPLIT_K=2), 210, 255),
    ("bf16", dict(BM=256, BN=32, BK=32, num_warps=4, num_stages=3, SPLIT_K=2), 66, 255),
    ("bf16", dict(BM=256, BN=128, BK=32, num_warps=8, num_stages=2, SPLIT_K=4), 26, 255),
    ("bf16", dict(BM=64, BN=64, BK=64, num_warps=4, num_stages=5), 6, 255),
    ("bf16", dict(BM=32, BN=256, BK=32, num_warps=4, num_stages=4, PERSISTENT=True), 72, 255),
    ("bf16", dict(BM=16, BN=64, BK=128, num_warps=4, num_stages=3, SPLIT_K=4), 10, 255),
    ("fp32", dict(BM=32, BN=32, BK=32, num_warps=4, num_stages=3, SPLIT_K=2), 2, 96),
    ("tf32", dict(BM=128, BN=128, BK=32, num_warps=4, num_stages=2, PERSISTENT=True), 46, 255),
    ("tf32", dict(BM=256, BN=32, BK=32, num_warps=4, num_stages=2, PERSISTENT=True), 24, 255),
    ("a64bf16", dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3), 2, 255),
    ("a128fp16", dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=1), 12, 255),
    ("a128fp16", dict(BLOCK_M=32, BLOCK_N=128, num_warps=8, num_stages=1), 2, 128),
    ("a64fp32", dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3), 2, 255),
    ("a64fp32", dict(BLOCK_M=128, BLOCK_N=32, num_warps=4, num_stages=2), 26, 255),
    ("a64fp32", dict(BLOCK_M=128, BLOCK_N=32, num_warps=4, num_stages=1), 42, 255),
]
H200_SPECS = {"bf16": TEST_GEMM[0], "fp32": TEST_GEMM[1], "tf32": TEST_GEMM[2], "a64bf16": TEST_ATTN[0],
              "a128fp16": TEST_ATTN[1], "a64fp32": TEST_ATTN[2]}


def spec_dict(spec) -> dict:
    d = {k: v for k, v in vars(spec).items() if k != "epilogue"}
    if isinstance(spec, gemm.GemmSpec):
        d["epilogue"] = None if spec.epilogue is None else spec.epilogue.expr
    return d


def spec_from(family: str, d: dict):
    if family == "attention":
        return attention.AttentionSpec(**d)
    d = dict(d)
    d["epilogue"] = ALL_EPILOGUE if d.get("epilogue") else None
    return gemm.GemmSpec(**d)


def pre_rule_space(fam, spec) -> list[dict]:
    """The valid space without the register-pressure rule (configs that fail only on it count as valid)."""
    out = []
    for c in fam.space(spec):
        why = fam.check(spec, c)
        if why is None or why.startswith(getattr(fam, "SPILL_RULE_PREFIX", "\0")):
            out.append(c)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Worker: compile one (family, spec, config, shape) for sm_90 on meta tensors

_caught: list = []


def _init_worker(cache_dir: str):
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    from workbench.harness.child.compile_probe import _StandInDriver

    driver.set_active(_StandInDriver(90))
    orig = JITFunction.run

    def run(self, *args, grid=None, warmup=False, **kwargs):
        _caught.append((self.__name__, orig(self, *args, grid=grid, warmup=True, **kwargs)))

    JITFunction.run = run


def compile_job(job: dict) -> dict:
    import importlib.util

    import torch

    from workbench.harness.child.compile_probe import ptx_facts, resource_usage

    fam = gemm if job["family"] == "gemm" else attention
    spec = spec_from(job["family"], job["spec"])
    cfg = job["config"]
    name = "k_" + format(abs(hash(json.dumps([job["spec"], cfg], sort_keys=True))) % 10**12, "d")
    r = fam.render(spec, cfg, name)
    path = Path(tempfile.gettempdir()) / f"spill_{os.getpid()}" / f"{name}.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text("import torch\nimport triton\nimport triton.language as tl\n" + r.kernel_src + "\n\n"
                    + r.launcher_src)
    s = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    _caught.clear()
    t0 = time.perf_counter()
    row = dict(job)
    try:
        with torch.device("meta"):
            if job["family"] == "gemm":
                M, N, K = job["shape"]
                dt = getattr(torch, spec.in_dtype)
                lead = (2,) if spec.batched else ()
                a, b = torch.empty(*lead, M, K, dtype=dt), torch.empty(*lead, K, N, dtype=dt)
                # as the GPU test: fp32 epilogue inputs
                extra = (torch.empty(N), torch.empty(*lead, M, N), 0.5) if spec.epilogue else ()
                getattr(mod, name)(a, b, *extra)
            else:
                S = job["shape"][0]
                q = torch.empty(1, 2, S, spec.head_dim, dtype=getattr(torch, spec.dtype))
                getattr(mod, name)(q, q, q)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
        return row
    row["compile_s"] = round(time.perf_counter() - t0, 2)
    for kname, k in _caught:
        ru = resource_usage(k.asm["cubin"])
        facts = ptx_facts(k.asm.get("ptx", ""))
        info = dict(regs=ru.get("reg"), spills=(ru.get("stack", 0) + ru.get("local", 0)) // 4,
                    shared=k.metadata.shared, wgmma=facts["wgmma"], mma=facts["mma"])
        if kname.endswith("_kernel"):
            row.update(info)
        else:
            row["reduce"] = info
    return row


# ---------------------------------------------------------------------------------------------------------------
# Job lists

def _job(set_name, family, spec, cfg, shape, **extra):
    return dict(set=set_name, family=family, spec=spec_dict(spec), config=cfg, shape=list(shape), **extra)


def _gemm_cfg(partial: dict) -> dict:
    return dict(dict(GROUP_M=8, SPLIT_K=1, PERSISTENT=False), **partial)


def repro_jobs() -> list[dict]:
    """Each H200 spilling config with GROUP_M 8 and 1 (the test's lines did not keep GROUP_M)."""
    jobs = []
    for key, cfg, spills, regs in H200:
        spec = H200_SPECS[key]
        if isinstance(spec, gemm.GemmSpec):
            for g in (8, 1):
                jobs.append(_job("repro", "gemm", spec, dict(_gemm_cfg(cfg), GROUP_M=g), SMALL_GEMM,
                                 h200_spills=spills, h200_regs=regs))
        else:
            jobs.append(_job("repro", "attention", spec, cfg, (SMALL_SEQ,), h200_spills=spills, h200_regs=regs))
    return jobs


def study_jobs(n_gemm: int = 200) -> list[dict]:
    jobs = []
    for spec in TEST_GEMM:
        for c in random.Random(0).sample(pre_rule_space(gemm, spec), n_gemm):
            jobs.append(_job("study", "gemm", spec, c, SMALL_GEMM))
    for spec in TEST_ATTN:
        for c in pre_rule_space(attention, spec):
            jobs.append(_job("study", "attention", spec, c, (SMALL_SEQ,)))
    return jobs


def heldout_jobs(n_same: int = 120, n_other: int = 80) -> list[dict]:
    jobs = []
    for spec in TEST_GEMM:
        space = pre_rule_space(gemm, spec)
        seen = {json.dumps(c, sort_keys=True) for c in random.Random(0).sample(space, 200)}
        rest = [c for c in space if json.dumps(c, sort_keys=True) not in seen]
        for c in random.Random(1).sample(rest, n_same):
            jobs.append(_job("heldout", "gemm", spec, c, SMALL_GEMM))
    for spec in OTHER_GEMM:
        for c in random.Random(1).sample(pre_rule_space(gemm, spec), n_other):
            jobs.append(_job("heldout", "gemm", spec, c, SMALL_GEMM))
    for spec in OTHER_ATTN:
        for c in pre_rule_space(attention, spec):
            jobs.append(_job("heldout", "attention", spec, c, (SMALL_SEQ,)))
    return jobs


def large_jobs(n: int = 50) -> list[dict]:
    jobs = []
    for spec in TEST_GEMM:
        for c in random.Random(0).sample(pre_rule_space(gemm, spec), 200)[:n]:
            jobs.append(_job("large", "gemm", spec, c, LARGE_GEMM))
    for spec in TEST_ATTN:
        for c in pre_rule_space(attention, spec)[::3]:
            jobs.append(_job("large", "attention", spec, c, (LARGE_SEQ,)))
    return jobs


def gputest_jobs() -> list[dict]:
    """The GPU test's sampling, exactly: one Random(1234) through the three GEMM then three attention specs."""
    rng = random.Random(1234)
    jobs = []
    for spec in TEST_GEMM:
        for c in rng.sample(valid_space(gemm, spec), 16):
            jobs.append(_job("gputest", "gemm", spec, c, SMALL_GEMM))
    for spec in TEST_ATTN:
        for c in rng.sample(valid_space(attention, spec), 10):
            jobs.append(_job("gputest", "attention", spec, c, (SMALL_SEQ,)))
    return jobs


SETS = {"repro": repro_jobs, "study": study_jobs, "heldout": heldout_jobs, "large": large_jobs,
        "gputest": gputest_jobs}


def rule_fires(fam, spec, cfg) -> bool:
    why = fam.check(spec, cfg)
    return bool(why) and why.startswith(fam.SPILL_RULE_PREFIX)


def score_rules() -> dict:
    """Precision and recall of the spill rules on each compiled set (rows with spills > 0 are positives)."""
    rows = [json.loads(x) for x in OUT.read_text().splitlines()]
    out = {}
    for r in rows:
        if "error" in r:
            continue
        fam = gemm if r["family"] == "gemm" else attention
        kind = "gemm " + ("16-bit" if r["spec"].get("in_dtype", "float32") != "float32" else
                          "fp32 " + r["spec"]["precision"]) if fam is gemm else "attention " + r["spec"]["dtype"]
        fired, spilled = rule_fires(fam, spec_from(r["family"], r["spec"]), r["config"]), r["spills"] > 0
        for key in (f"{r['set']} {r['family']}", f"{r['set']} {kind}"):
            c = out.setdefault(key, dict(n=0, spilled=0, tp=0, fp=0, fn=0))
            c["n"] += 1
            c["spilled"] += spilled
            c["tp"] += fired and spilled
            c["fp"] += fired and not spilled
            c["fn"] += spilled and not fired
    for c in out.values():
        c["precision"] = round(c["tp"] / (c["tp"] + c["fp"]), 3) if c["tp"] + c["fp"] else None
        c["recall"] = round(c["tp"] / c["spilled"], 3) if c["spilled"] else None
    return dict(sorted(out.items()))


def dataset_impact() -> dict:
    """The spill rules against the shipped dataset's candidates (H200, real shapes)."""
    import pandas as pd

    from workbench.problems import Problem
    from workbench.proposers.offline import OfflineProposer
    from workbench.store.dataset import load

    d = load("candidates")
    ok = d[d.outcome == "ok"]
    best_ms = ok.groupby("problem_key").candidate_ms.min()
    best = set(ok.loc[ok.groupby("problem_key").candidate_ms.idxmin(), "candidate"])
    groups = []
    for key, rows in d.groupby("problem_key"):
        p = Problem.load(rows.problem.iloc[0])
        if p.key != key:
            continue
        op = OfflineProposer(p)
        for _, r in rows.iterrows():
            choice = json.loads(r.choice_json)
            kernels = {k["kernel"]: k for k in json.loads(r.compile_json).get("kernels", [])} \
                if isinstance(r.compile_json, str) else {}
            for g in op.groups(choice["fuse"]):
                if g.family not in ("gemm", "attention"):
                    continue
                fam = gemm if g.family == "gemm" else attention
                cfg = choice["configs"].get(g.gid) or fam.default(g.spec)
                k = kernels.get(f"_{g.gid}_{g.family}_kernel", {})
                groups.append(dict(problem_key=key, candidate=r.candidate, family=g.family, outcome=r.outcome,
                                   rel=r.candidate_ms / best_ms.get(key, float("nan")), is_best=r.candidate in best,
                                   fired=rule_fires(fam, g.spec, cfg),
                                   spilled=bool(k.get("stack", 0) + k.get("local", 0))))
    t = pd.DataFrame(groups)
    cands = t.groupby(["problem_key", "candidate"]).agg(
        fired=("fired", "any"), spilled=("spilled", "any"), rel=("rel", "first"), is_best=("is_best", "first"),
        outcome=("outcome", "first")).reset_index()
    pruned = cands[cands.fired]
    rel = pruned.rel.dropna()
    per_problem = {k: dict(candidates=int(len(v)), pruned=int(v.fired.sum()),
                           best_pruned_rel=None if not v.fired.any() else round(float(v[v.fired].rel.min()), 3))
                   for k, v in cands.groupby("problem_key")}
    return dict(
        candidates_with_gemm_or_attention=int(len(cands)), problems=int(cands.problem_key.nunique()),
        pruned=int(len(pruned)), pruned_that_spilled_on_h200=int(pruned.spilled.sum()),
        spilled_on_h200=int(cands.spilled.sum()), fastest_of_a_problem_pruned=int(pruned.is_best.sum()),
        pruned_rel_to_best=dict(min=round(float(rel.min()), 3), median=round(float(rel.median()), 3),
                                share_within_10pct=round(float((rel < 1.1).mean()), 3),
                                share_within_25pct=round(float((rel < 1.25).mean()), 3)) if len(rel) else None,
        group_configs=dict(n=int(len(t)), fired=int(t.fired.sum()), fired_spilled=int((t.fired & t.spilled).sum()),
                           spilled=int(t.spilled.sum())),
        per_problem=per_problem)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sets", default="repro,study,heldout,large,gputest")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "spill_study_triton_cache"))
    args = ap.parse_args()
    names = [n for n in args.sets.split(",") if n in SETS]
    if not names:
        return report() if args.report else None
    rows = [json.loads(x) for x in OUT.read_text().splitlines()] if OUT.exists() else []
    rows = [r for r in rows if r["set"] not in names]
    ctx = mp.get_context("spawn")
    with ctx.Pool(args.jobs, initializer=_init_worker, initargs=(args.cache,)) as pool:
        for set_name in names:
            jobs = SETS[set_name]()
            t0 = time.time()
            new = pool.map(compile_job, jobs, chunksize=1)
            rows += new
            OUT.parent.mkdir(parents=True, exist_ok=True)
            OUT.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
            errs = [r for r in new if "error" in r]
            spilled = [r for r in new if r.get("spills")]
            print(f"{set_name}: {len(new)} compiled in {time.time() - t0:.0f}s, {len(spilled)} spill, "
                  f"{len(errs)} errors", flush=True)
            for r in errs[:5]:
                print("  error:", r["spec"], r["config"], r["error"])
            if set_name == "repro":
                for r in new:
                    dtype = r['spec'].get('in_dtype', r['spec'].get('dtype'))
                    print(f"  {dtype} {r['config']}: cpu regs={r.get('regs')} "
                          f"spills={r.get('spills')} | h200 regs={r['h200_regs']} spills={r['h200_spills']}")
            if set_name == "gputest":
                print(f"  GPU test prediction: {len(spilled)} of {len(new)} spill (limit {len(new) // 5})")
                for r in spilled:
                    print(f"  {r['spec']} {r['config']}: regs={r['regs']} spills={r['spills']}")
    if args.report:
        report()


def report():
    res = dict(rules=score_rules(), dataset=dataset_impact())
    (OUT.parent / "spill_rules.json").write_text(json.dumps(res, indent=1) + "\n")
    for k, c in res["rules"].items():
        print(f"{k:32s} n={c['n']:4d} spilled={c['spilled']:4d} rule tp={c['tp']:3d} fp={c['fp']:3d} "
              f"fn={c['fn']:3d} precision={c['precision']} recall={c['recall']}")
    print(json.dumps({k: v for k, v in res["dataset"].items() if k != "per_problem"}, indent=1))


if __name__ == "__main__":
    main()
