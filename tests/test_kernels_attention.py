"""Causal attention (the attention family with causal=True) under the Triton interpreter (TRITON_INTERPRET=1, in a
subprocess), judged elementwise by the harness's own tolerance against float64 torch; and non-causal rendering pinned.

The causal_attention problem failed the correctness stage on an H200 for every configuration ("elements outside the
elementwise bound"). Measured there (problem shape [8, 16, 4096, 128], bf16, seed 1234): every kernel configuration
tried (64x64, 128x64, 64x128, 32x128, 128x128) is within the bf16 bound of the float64 answer with no element outside
it, exactly as torch's own flash SDPA is; against the problem's bf16 reference (scores rounded to bf16 before the
softmax) the kernels have 1539-1545 elements outside, torch's SDPA 1545, and the float64 answer itself (rounded to
bf16) 1416, 98% of them in the first 512 query rows, whose few visible keys do not average the reference's score
rounding away. So those failures are the reference's own bf16 error, not the kernel's. These tests keep the kernel
honest where it matters: tile shapes with BLOCK_M != BLOCK_N, ragged sequence lengths, S_q != S_k, the default
configuration, and exact causality (rows never see a later key, bit for bit).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.kernels import attention
from workbench.kernels.base import valid_space

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"

DRIVER = r'''
import importlib.util, json, os, sys
assert os.environ.get("TRITON_INTERPRET") == "1"
import torch
from workbench.harness.child import interpreter_fixes
from workbench.harness import tolerance
interpreter_fixes.apply()
torch.set_num_threads(1)
CLASS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def load(path, fn):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, fn)


def one(case):
    gen = torch.Generator().manual_seed(case["seed"])
    sq, sk = case["seq"]
    d, dt = case["head_dim"], getattr(torch, case["dtype"])
    rand = lambda *shape: torch.randn(*shape, generator=gen).to(dt)
    q = rand(1, sq, 2, d).transpose(1, 2)  # [B, H, S, D] view of a [B, S, H, D] tensor: strides the kernel must use
    k, v = rand(1, 2, sk, d), rand(1, 2, sk, d)
    fn = load(case["path"], case["fn"])
    o = fn(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True,
                                                           scale=case["scale"])
    if o.dtype != dt or o.shape != ref.shape:
        return {"ok": False, "why": f"dtype/shape {o.dtype} {tuple(o.shape)}"}
    ok, why, facts = tolerance.compare(o, ref, tolerance.DEFAULTS[CLASS[case["dtype"]]])
    res = {"ok": ok, "why": why, "rel": facts.get("rel_err"), "outside": facts.get("elements_outside")}
    if ok and min(sq, sk) >= 1:
        # row 0 sees key 0 alone: exactly v[0]
        if not torch.equal(o[:, :, 0], v[:, :, 0]):
            return {"ok": False, "why": "row 0 is not v[0]: it sees a key other than key 0"}
    if ok and sk >= 2:
        # causality, bit for bit: replacing keys and values from t on leaves the rows before t unchanged
        t = min(sq, sk // 2 + 1)
        k2, v2 = k.clone(), v.clone()
        k2[:, :, t:] = rand(1, 2, sk - t, d) * 4
        v2[:, :, t:] = rand(1, 2, sk - t, d) * 100
        o2 = fn(q, k2, v2)
        if not torch.equal(o2[:, :, :t], o[:, :, :t]):
            return {"ok": False, "why": f"rows before {t} changed when only keys/values from {t} on changed"}
    return res


results = {}
for case in json.load(open(sys.argv[1])):
    try:
        results[case["id"]] = one(case)
    except Exception as e:  # reported per case by the test
        results[case["id"]] = {"ok": False, "why": f"{type(e).__name__}: {e}"}
json.dump(results, open(sys.argv[2], "w"))
'''

# The causal_attention problem's spec (workbench/problems/builtin/causal_attention.py as partition.py lowers it)
PROBLEM_SPEC = attention.AttentionSpec(128, "bfloat16", True, 1.0 / math.sqrt(128))
RAGGED = [(1, 1), (37, 37), (130, 130), (100, 64), (37, 100), (5, 200), (200, 5)]


def _first_per_tile(spec):
    """The first valid configuration of each (BLOCK_M, BLOCK_N) in the spec's space: the interpreter runs the same
    program for any num_warps and num_stages."""
    out = {}
    for c in valid_space(attention, spec):
        out.setdefault((c["BLOCK_M"], c["BLOCK_N"]), c)
    return list(out.values())


def _cases(tmp: Path) -> list[dict]:
    plan = [(PROBLEM_SPEC, [attention.default(PROBLEM_SPEC)], RAGGED)]
    bf16 = attention.AttentionSpec(64, "bfloat16", True)
    tiles = _first_per_tile(bf16)
    assert {(c["BLOCK_M"], c["BLOCK_N"]) for c in tiles} >= {(32, 128), (128, 32), (64, 32), (128, 64)}
    plan.append((bf16, tiles, [(130, 130), (100, 64)]))
    fp32 = attention.AttentionSpec(32, "float32", True)  # tf32x3: fp32 in the interpreter
    plan.append((fp32, [attention.default(fp32)] + [c for c in _first_per_tile(fp32)
                                                    if c["BLOCK_M"] != c["BLOCK_N"]][:2], [(100, 100), (5, 70)]))
    fp16 = attention.AttentionSpec(16, "float16", True, scale=0.3)
    plan.append((fp16, [attention.default(fp16)], [(65, 65), (70, 33)]))
    cases = []
    for s, (spec, configs, seqs) in enumerate(plan):
        for c, cfg in enumerate(configs):
            assert attention.check(spec, cfg) is None, (spec, cfg)
            fn = f"causal_{s}_{c}"
            r = attention.render(spec, cfg, fn)
            path = tmp / f"{fn}.py"
            path.write_text(HEADER + r.kernel_src + "\n\n" + r.launcher_src)
            for i, seq in enumerate(seqs):
                cases.append(dict(id=f"{fn} {spec} {cfg} {seq}", path=str(path), fn=fn, seq=seq, seed=100 * s + i,
                                  head_dim=spec.head_dim, dtype=spec.dtype, scale=spec.scale))
    return cases


@pytest.fixture(scope="module")
def causal_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("causal")
    cases = _cases(tmp)
    (tmp / "driver.py").write_text(DRIVER)
    (tmp / "cases.json").write_text(json.dumps(cases))
    env = dict(os.environ, OMP_NUM_THREADS="1", TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(tmp / "driver.py"), str(tmp / "cases.json"), str(tmp / "results.json")],
                          env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp / "results.json").read_text())
    return {c["id"]: results[c["id"]] for c in cases}


def _failures(results, pred):
    return {k: v for k, v in results.items() if pred(k) and not v["ok"]}


def test_causal_default_config_problem_spec(causal_results):
    """The configuration the offline proposer leads with for causal_attention, on ragged and unequal lengths."""
    mine = {k: v for k, v in causal_results.items() if k.startswith("causal_0_")}
    assert len(mine) == len(RAGGED)
    bad = _failures(mine, lambda k: True)
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


def test_causal_block_m_differs_from_block_n(causal_results):
    """Every tile shape of the bf16 space (BLOCK_M < BLOCK_N and BLOCK_M > BLOCK_N included), and fp32 ones."""
    unequal = [k for k in causal_results
               if "'BLOCK_M': 32, 'BLOCK_N': 128" in k or "'BLOCK_M': 128, 'BLOCK_N': 32" in k]
    assert len(unequal) >= 4
    bad = _failures(causal_results, lambda k: k.startswith(("causal_1_", "causal_2_")))
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


def test_causal_fp16_scale(causal_results):
    bad = _failures(causal_results, lambda k: k.startswith("causal_3_"))
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


def test_causal_valid_space_matches_noncausal():
    """Causal masking adds no constraint of its own: every configuration valid without it is valid with it (and
    the interpreter runs above check one per tile shape, ragged lengths included)."""
    for d, dt, prec in [(64, "bfloat16", "tf32x3"), (128, "bfloat16", "tf32x3"), (32, "float32", "tf32x3"),
                        (16, "float16", "tf32x3"), (32, "float32", "ieee")]:
        causal = attention.AttentionSpec(d, dt, True, precision=prec)
        full = attention.AttentionSpec(d, dt, False, precision=prec)
        assert valid_space(attention, causal) == valid_space(attention, full)


# ---------------------------------------------------------------------------------------------------------------
# Non-causal sources are matched to recorded H200 measurements by exact source hash: their rendering must not move.

NONCAUSAL_PINS = [  # (spec, config or None for the default, launcher name, sha256 of kernel + launcher source)
    (attention.AttentionSpec(128, "float16", False, 1.0 / math.sqrt(128)), None, "_g0_attention",
     "274554c46e0d4229d74e0a9d42def6a68ee559a8e3f742894a142b48eac55950"),
    (attention.AttentionSpec(128, "float16", False, 1.0 / math.sqrt(128)),
     dict(BLOCK_M=128, BLOCK_N=32, num_warps=8, num_stages=2), "_g0_attention",
     "83728cd638bf793c93ec4e115cdf79e5bf1f1f343b13d895bafc40c2533942ed"),
    (attention.AttentionSpec(64, "float32", False), None, "attn",
     "2c489987026297143ea366c102b87378d438ae647d5f0e389da12867f4212276"),
]


def _source_hash(spec, cfg, name):
    r = attention.render(spec, attention.default(spec) if cfg is None else cfg, name)
    return hashlib.sha256((r.kernel_src + "\n\n" + r.launcher_src).encode()).hexdigest()


@pytest.mark.parametrize("spec,cfg,name,want", NONCAUSAL_PINS, ids=lambda x: str(x)[:60])
def test_noncausal_render_unchanged(spec, cfg, name, want):
    assert _source_hash(spec, cfg, name) == want


def test_noncausal_recorded_h200_candidates_regenerate():
    """Every non-causal attention candidate measured on the H200 (shipped dataset) still renders to its exact
    source, so its recorded measurement stays matched."""
    from workbench.problems import Problem
    from workbench.proposers.offline import Choice, OfflineProposer
    from workbench.store.dataset import load

    rows = load("candidates")
    rows = rows[(rows["problem"] == "attention") & rows["regenerates"]]
    assert len(rows) >= 30
    prop = OfflineProposer(Problem.load("attention"))
    assert (rows["problem_key"] == prop.problem.key).all()
    for _, r in rows.iterrows():
        assert prop.render(Choice.from_dict(json.loads(r["choice_json"]))).hash == r["candidate"], r["choice_json"]
