"""The GEMM and attention kernel families: their configuration spaces and checks, and rendered kernels run under
the Triton interpreter (TRITON_INTERPRET=1, in subprocesses) on awkward shapes against float64 torch."""
from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workbench.harness.static import check_static
from workbench.kernels import attention, gemm
from workbench.kernels.base import Epilogue, EpilogueInput, valid_space

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"
RANDOM_SEED = 1234

EPILOGUES = {  # name: (Triton expression, torch expression for the reference, inputs)
    "bias_relu": ("tl.maximum(acc + bias, 0.0)", "torch.relu(acc + bias)", (EpilogueInput("bias", "col"),)),
    "residual": ("acc + res", "acc + res", (EpilogueInput("res", "full"),)),
    "scale_row": ("acc * alpha + r", "acc * alpha + r[..., :, None]",
                  (EpilogueInput("alpha", "scalar"), EpilogueInput("r", "row"))),
    "all": ("tl.where(acc * alpha + res > 0, acc * alpha + res, 0.1 * (acc + bias))",
            "torch.where(acc * alpha + res > 0, acc * alpha + res, 0.1 * (acc + bias))",
            (EpilogueInput("bias", "col"), EpilogueInput("res", "full"), EpilogueInput("alpha", "scalar"))),
}

# (in dtype, out dtype, precision, batched, epilogue, layout of a and b, shapes (M, N, K))
GEMM_SPECS = [
    ("float32", "float32", "ieee", False, "bias_relu", "nt", [(1, 17, 33), (100, 64, 17), (64, 100, 100)]),
    ("float32", "float32", "tf32", False, "residual", "tn", [(17, 1, 64), (33, 100, 128)]),
    ("bfloat16", "bfloat16", "ieee", False, "scale_row", "nn", [(100, 33, 17), (64, 64, 100)]),
    ("float16", "float32", "ieee", False, None, "nt", [(1, 1, 1), (100, 17, 64)]),
    ("bfloat16", "float32", "ieee", True, "all", "nn", [(17, 33, 64), (64, 100, 33)]),
    ("float32", "float32", "ieee", True, None, "tt", [(33, 17, 100)]),
    ("float32", "bfloat16", "tf32x3", False, "bias_relu", "tt", [(40, 50, 70)]),
]
GPU_GEMM_SHAPES = {False: [(300, 517, 1000), (1, 2048, 1024), (1024, 1024, 1024)], True: [(257, 129, 300)]}

# (head_dim, dtype, causal, scale, precision (fp32), sequence lengths (S_q, S_k))
ATTENTION_SPECS = [
    (16, "bfloat16", True, None, "tf32x3", [(1, 1), (5, 5), (64, 64), (100, 100)]),
    (16, "float32", False, 0.3, "ieee", [(1, 5), (5, 1), (64, 100), (100, 64)]),
    (64, "float16", True, None, "tf32x3", [(1, 1), (5, 5), (100, 100)]),
    (64, "float32", True, None, "tf32x3", [(64, 64), (100, 100)]),
    (64, "bfloat16", False, None, "tf32x3", [(5, 5), (100, 37)]),
]
GPU_ATTENTION_SEQS = {False: [(1000, 1000), (333, 1024)], True: [(1000, 1000), (1024, 1024)]}


def gemm_spec(in_dt, out_dt, prec, batched, ep):
    epilogue = None if ep is None else Epilogue(EPILOGUES[ep][0], EPILOGUES[ep][2])
    return gemm.GemmSpec(in_dt, out_dt, batched=batched, precision=prec, epilogue=epilogue)


def pick_configs(family, spec, size_key, extra=()):
    """Default, smallest and largest valid, three seeded random valid ones, then `extra` (filtered to valid)."""
    valid = valid_space(family, spec)
    rng = random.Random(RANDOM_SEED)
    picks = [family.default(spec), min(valid, key=size_key), max(valid, key=size_key), *rng.sample(valid, 3)]
    for want in extra:
        picks.append(rng.choice([c for c in valid if all(c[k] == v for k, v in want.items())]))
    out = []
    for c in picks:
        if c not in out:
            out.append(c)
    return out


def gemm_size(c):
    return (c["BM"] * c["BN"] * c["BK"], c["num_stages"], c["num_warps"], c["SPLIT_K"], c["GROUP_M"],
            c["PERSISTENT"])


def attention_size(c):
    return c["BLOCK_M"] * c["BLOCK_N"], c["num_stages"], c["num_warps"]


# ---------------------------------------------------------------------------------------------------------------
# Configuration spaces and checks

TYPICAL_GEMM = [gemm.GemmSpec("bfloat16", "bfloat16"), gemm.GemmSpec("float32", "float32"),
                gemm.GemmSpec("float32", "float32", precision="tf32"), gemm.GemmSpec("float16", "float32", True),
                gemm_spec("bfloat16", "bfloat16", "ieee", False, "all")]
TYPICAL_ATTENTION = [attention.AttentionSpec(d, dt, c) for d in (16, 64, 128, 256) for dt in ("bfloat16", "float16")
                     for c in (False, True)] + [attention.AttentionSpec(d, "float32", c) for d in (16, 32, 64)
                                                for c in (False, True)] + \
    [attention.AttentionSpec(128, "float32", False, precision="tf32"), attention.AttentionSpec(32, "float32", True,
                                                                                               precision="ieee")]


@pytest.mark.parametrize("spec", TYPICAL_GEMM, ids=str)
def test_gemm_space_deterministic_and_default_valid(spec):
    assert gemm.space(spec) == gemm.space(spec)
    valid = valid_space(gemm, spec)
    assert valid and len(valid) == len({json.dumps(c, sort_keys=True) for c in valid})
    assert gemm.default(spec) in gemm.space(spec) and gemm.check(spec, gemm.default(spec)) is None
    assert any(c["SPLIT_K"] > 1 for c in valid) and any(c["PERSISTENT"] for c in valid)


@pytest.mark.parametrize("spec", TYPICAL_ATTENTION, ids=str)
def test_attention_space_deterministic_and_default_valid(spec):
    assert attention.space(spec) == attention.space(spec)
    assert valid_space(attention, spec)
    assert attention.default(spec) in attention.space(spec) and attention.check(spec, attention.default(spec)) is None


def test_gemm_check_rejects():
    bf16 = gemm.GemmSpec("bfloat16", "bfloat16")
    base = gemm.default(bf16)
    ok = dict(base, BM=128, BN=256, BK=64, num_warps=8, num_stages=3)
    assert gemm.check(bf16, ok) is None
    assert "shared memory" in gemm.check(bf16, dict(ok, BK=128, num_stages=5))
    assert "accumulator" in gemm.check(bf16, dict(ok, BM=256, BN=128, num_warps=4))
    assert "shared memory" in gemm.check(bf16, dict(ok, BM=256, BN=256, BK=32, num_stages=2, num_warps=16))
    assert "multiple of 16" in gemm.check(bf16, dict(ok, BM=24))
    assert "persistent" in gemm.check(bf16, dict(ok, SPLIT_K=2, PERSISTENT=True))
    assert gemm.check(bf16, dict(ok, SPLIT_K=2)) is None and gemm.check(bf16, dict(ok, PERSISTENT=True)) is None
    tf32 = gemm.GemmSpec("float32", "float32", precision="tf32")
    assert "BK > 64" in gemm.check(tf32, dict(ok, BM=32, BN=32, BK=128, num_warps=4, num_stages=4))
    assert gemm.check(tf32, dict(ok, BM=64, BN=64, BK=128, num_warps=4, num_stages=3)) is None
    ieee = gemm.GemmSpec("float32", "float32")
    assert "ieee" in gemm.check(ieee, dict(ok, BM=64, BN=64, BK=64, num_warps=4, num_stages=3))
    x3 = gemm.GemmSpec("float32", "float32", precision="tf32x3")
    assert "tf32x3" in gemm.check(x3, dict(ok, BM=64, BN=64, BK=128, num_warps=4, num_stages=2))
    assert "tf32x3" in gemm.check(x3, dict(ok, BM=32, BN=64, BK=64, num_warps=4, num_stages=2))
    assert "tf32x3" in gemm.check(x3, dict(ok, BM=128, BN=128, BK=32, num_warps=4, num_stages=2))
    assert gemm.check(x3, dict(ok, BM=128, BN=64, BK=32, num_warps=4, num_stages=3)) is None
    # operand tiles of 128+ elements per thread spill at unaligned shapes (results/kernels/spills.md)
    assert "operand tile" in gemm.check(bf16, dict(ok, BM=128, BN=32, BK=128, num_warps=4, num_stages=3))
    assert "operand tile" in gemm.check(tf32, dict(ok, BM=32, BN=256, BK=64, num_warps=4, num_stages=2))
    assert "dtype" in gemm.check(gemm.GemmSpec("int8", "int32"), ok)
    assert "precision" in gemm.check(gemm.GemmSpec("float32", "float32", precision="fast"), ok)
    bad_name = gemm.GemmSpec("bfloat16", "bfloat16", epilogue=Epilogue("acc", (EpilogueInput("acc", "col"),)))
    assert "name" in gemm.check(bad_name, ok)
    bad_kind = gemm.GemmSpec("bfloat16", "bfloat16", epilogue=Epilogue("acc + x", (EpilogueInput("x", "diag"),)))
    assert "kind" in gemm.check(bad_kind, ok)
    bad_expr = gemm.GemmSpec("bfloat16", "bfloat16", epilogue=Epilogue("acc +", ()))
    assert "parse" in gemm.check(bad_expr, ok)


def test_attention_check_rejects():
    ok = dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)
    assert attention.check(attention.AttentionSpec(128, "bfloat16", True), ok) is None
    for d in (8, 48, 96, 512):
        assert "power of two" in attention.check(attention.AttentionSpec(d, "bfloat16", False), ok)
    big = attention.AttentionSpec(256, "float32", False, precision="tf32")
    assert "shared memory" in attention.check(big, dict(ok, BLOCK_N=128, num_stages=4))
    assert "ieee" in attention.check(attention.AttentionSpec(64, "float32", False, precision="ieee"), ok)
    assert "tf32x3" in attention.check(attention.AttentionSpec(128, "float32", False), ok)
    assert "tf32x3" in attention.check(attention.AttentionSpec(64, "float32", False), dict(ok, BLOCK_N=128))
    assert attention.check(attention.AttentionSpec(64, "float32", False), dict(ok, BLOCK_M=64)) is None
    x3_spills = dict(BLOCK_M=128, BLOCK_N=32, num_warps=4, num_stages=2)  # spills on sm_90 (results/kernels)
    assert "tf32x3 split" in attention.check(attention.AttentionSpec(64, "float32", False), x3_spills)
    assert attention.check(attention.AttentionSpec(64, "bfloat16", False), x3_spills) is None
    nothing = attention.AttentionSpec(128, "float32", False, precision="ieee")
    assert not valid_space(attention, nothing) and attention.check(nothing, attention.default(nothing))
    assert "register" in attention.check(attention.AttentionSpec(128, "bfloat16", False),
                                         dict(ok, BLOCK_N=128, num_warps=4, num_stages=1))
    assert "dtype" in attention.check(attention.AttentionSpec(64, "int8", False), ok)


def test_rendered_precision_and_static_stage():
    """fp32 ieee asks tl.dot for ieee, tf32 for tf32; a rendered candidate passes the static stage with no error."""
    for spec, want in [(gemm.GemmSpec("float32", "float32"), 'input_precision="ieee"'),
                       (gemm.GemmSpec("float32", "float32", precision="tf32"), 'input_precision="tf32"')]:
        for cfg in (gemm.default(spec), dict(gemm.default(spec), SPLIT_K=2), dict(gemm.default(spec), PERSISTENT=True)):
            r = gemm.render(spec, cfg, "mm")
            assert want in r.kernel_src and ".contiguous()" not in r.launcher_src
    spec = gemm_spec("bfloat16", "bfloat16", "ieee", False, "all")
    r = gemm.render(spec, dict(gemm.default(spec), SPLIT_K=4), "fused_mm")
    a = attention.render(attention.AttentionSpec(64, "bfloat16", True), attention.default(
        attention.AttentionSpec(64, "bfloat16", True)), "attn")
    model = textwrap.dedent("""\


        class ModelNew(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.randn(64, 64))
                self.b = torch.nn.Parameter(torch.randn(64))

            def forward(self, x, q, k, v):
                return fused_mm(x, self.w.t(), self.b, x, 0.5), attn(q, k, v)
        """)
    src = HEADER + r.kernel_src + "\n\n" + r.launcher_src + "\n\n" + a.kernel_src + "\n\n" + a.launcher_src + model
    rec = check_static(src, "import torch\n# bfloat16\n", "strict")
    assert not [f for f in rec.flags if f["severity"] == "error"], rec.flags


def _compile_stage(tmp_path, problem, kernel_and_launcher: str, call: str):
    from workbench.devices.local import LocalDevice

    model = textwrap.dedent(f"""\


        class ModelNew(torch.nn.Module):
            def forward(self, A, B):
                return {call}
        """)
    cand = tmp_path / "cand.py"
    cand.write_text(HEADER + kernel_and_launcher + model)
    dev = LocalDevice("cpu")
    try:
        return dev.compile(problem, cand)
    finally:
        dev.close()


@pytest.mark.parametrize("shape", [(1, 100, 64), (100, 1, 64)])
def test_split_k_compiles_for_sm90_with_unit_dims(tmp_path, shape):
    """Triton passes an int argument equal to 1 as a constexpr, so M = 1 or N = 1 reach the split-K kernels as plain
    ints; the compile stage (sm_90, no GPU) must still compile both. The interpreter does not specialise: only a
    compile for the real target shows this."""
    from workbench.core.records import PASS
    from workbench.problems import Problem

    M, N, K = shape
    spec = gemm.GemmSpec("float16", "float32")
    r = gemm.render(spec, dict(gemm.default(spec), SPLIT_K=2), "mm")
    rec = _compile_stage(tmp_path, Problem.load("matmul_fp16", [f"M={M}", f"N={N}", f"K={K}"]),
                         r.kernel_src + "\n\n" + r.launcher_src, "mm(A, B).to(torch.float16)")
    assert rec.verdict == PASS, rec.reason
    assert sorted(k["kernel"] for k in rec.data["kernels"]) == ["mm_kernel", "mm_reduce"], rec.data["kernels"]


def test_split_k_refused_on_a_one_element_output(tmp_path):
    """With one output element the workspace plane is 1 and the reduce kernel does not compile (found on the H200):
    the spec says so, split-K leaves the space, and what the proposer offers for such a problem compiles."""
    from workbench.core.records import PASS
    from workbench.problems import Problem
    from workbench.proposers.offline import OfflineProposer

    one = gemm.GemmSpec("float16", "float32", single_output=True)
    assert "one-element output" in gemm.check(one, dict(gemm.default(one), SPLIT_K=2))
    assert all(c["SPLIT_K"] == 1 for c in valid_space(gemm, one))
    r = gemm.render(gemm.GemmSpec("float16", "float32"), dict(gemm.default(one), SPLIT_K=2), "mm")
    problem = Problem.load("matmul_fp16", ["M=1", "N=1", "K=64"])
    rec = _compile_stage(tmp_path, problem, r.kernel_src + "\n\n" + r.launcher_src, "mm(A, B).to(torch.float16)")
    assert rec.verdict != PASS and "mm_reduce" in rec.reason  # the reason the rule exists
    prop = OfflineProposer(problem)
    specs = [g.spec for g in prop.groups({}) if g.family == "gemm"]
    assert specs and all(s.single_output for s in specs)
    from workbench.devices.local import LocalDevice

    dev = LocalDevice("cpu")
    try:
        for cand in prop.propose(3, seed=0):
            rec = dev.compile(problem, cand.write())
            assert rec.verdict == PASS, rec.reason
    finally:
        dev.close()


# ---------------------------------------------------------------------------------------------------------------
# Rendered kernels under the interpreter

DRIVER = r'''
import importlib.util, json, math, os, sys
DEVICE = sys.argv[3]
assert (os.environ.get("TRITON_INTERPRET") == "1") == (DEVICE == "cpu")
import torch
import triton
if DEVICE == "cpu":
    from workbench.harness.child import interpreter_fixes
    interpreter_fixes.apply()
torch.set_num_threads(1)

cases = json.load(open(sys.argv[1]))
results = {}
gen = torch.Generator().manual_seed(0)


def rand(*shape, dtype="float32"):
    return torch.randn(*shape, generator=gen).to(device=DEVICE, dtype=getattr(torch, dtype))


def load(path):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def matrix(rows, cols, transposed, dtype, batch=None):
    """A [.., rows, cols] operand, as a transposed view when asked (column-major strides)."""
    lead = () if batch is None else (batch,)
    if transposed:
        return rand(*lead, cols, rows, dtype=dtype).transpose(-1, -2)
    return rand(*lead, rows, cols, dtype=dtype)


def run_gemm(case, fn):
    M, N, K = case["shape"]
    dt, B = case["in_dtype"], (3 if case["batched"] else None)
    a = matrix(M, K, case["layout"][0] == "t", dt, B)
    if case["batched"]:  # b broadcast over the batch: batch stride 0
        b = matrix(K, N, case["layout"][1] == "t", dt).expand(B, K, N)
    else:
        b = matrix(K, N, case["layout"][1] == "t", dt)
    lead = (B,) if case["batched"] else ()
    args, env = [], {"torch": torch}
    for nm, kind in case["inputs"]:
        if kind == "col":
            x = rand(N)
        elif kind == "row":
            x = rand(*lead, M)
        elif kind == "full":
            x = rand(*lead, N, M).transpose(-1, -2)  # residual with column-major strides
        else:
            x = 0.75
        args.append(x)
        env[nm] = x.double() if torch.is_tensor(x) else x
    c = fn(a, b, *args)
    acc = a.double() @ b.double()
    ref = eval(case["torch_expr"], env, {"acc": acc}) if case["torch_expr"] else acc
    assert c.dtype == getattr(torch, case["out_dtype"]) and c.shape == ref.shape, (c.dtype, c.shape, ref.shape)
    return c.double(), ref


def run_attention(case, fn):
    sq, sk = case["seq"]
    d, dt = case["head_dim"], case["dtype"]
    q = rand(2, sq, 2, d, dtype=dt).transpose(1, 2)  # [B, H, S, D] view of a [B, S, H, D] tensor
    k = rand(2, 2, sk, d, dtype=dt)
    v = rand(2, sk, 2, d, dtype=dt).transpose(1, 2)
    o = fn(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(),
                                                           is_causal=case["causal"], scale=case["scale"])
    assert o.dtype == q.dtype and o.shape == ref.shape, (o.dtype, o.shape, ref.shape)
    return o.double(), ref


for case in cases:
    try:
        fn = getattr(load(case["path"]), case["fn"])
        out, ref = (run_gemm if case["family"] == "gemm" else run_attention)(case, fn)
        if not torch.isfinite(out).all():
            results[case["id"]] = "non-finite output"
        else:
            results[case["id"]] = ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    except Exception as e:  # reported per case by the test
        results[case["id"]] = f"{type(e).__name__}: {e}"
json.dump(results, open(sys.argv[2], "w"))
'''


def _write_module(tmp: Path, fn: str, rendered) -> str:
    path = tmp / f"{fn}.py"
    path.write_text(HEADER + rendered.kernel_src + "\n\n" + rendered.launcher_src)
    return str(path)


def _gemm_tol(in_dt, out_dt, prec, device):
    if in_dt != "float32" or out_dt != "float32":
        return 1e-2
    return 5e-3 if prec == "tf32" and device == "cuda" else 2e-5 if prec == "tf32x3" else 1e-5


def _gemm_cases(tmp: Path, device: str = "cpu") -> list[dict]:
    cases = []
    for s, (in_dt, out_dt, prec, batched, ep, layout, shapes) in enumerate(GEMM_SPECS):
        shapes = shapes + (GPU_GEMM_SHAPES[batched] if device == "cuda" else [])
        spec = gemm_spec(in_dt, out_dt, prec, batched, ep)
        configs = pick_configs(gemm, spec, gemm_size, extra=[{"SPLIT_K": 2}, {"SPLIT_K": 4, "GROUP_M": 1},
                                                             {"PERSISTENT": True, "GROUP_M": 8}])
        one = dataclasses.replace(spec, single_output=True)
        for c, cfg in enumerate(configs):
            fn = f"gemm_{s}_{c}"
            path = _write_module(tmp, fn, gemm.render(spec, cfg, fn))
            for shape in shapes:
                if not batched and shape[0] * shape[1] == 1 and gemm.check(one, cfg):
                    continue  # split-K is not offered for a one-element output (test_split_k_refused_...)
                cases.append(dict(id=f"{fn} {spec} {cfg} {shape}", family="gemm", path=path, fn=fn, shape=shape,
                                  in_dtype=in_dt, out_dtype=out_dt, batched=batched, layout=layout,
                                  inputs=[(i.name, i.kind) for i in (spec.epilogue.inputs if spec.epilogue else ())],
                                  torch_expr=EPILOGUES[ep][1] if ep else None,
                                  tol=_gemm_tol(in_dt, out_dt, prec, device)))
    return cases


def _attention_cases(tmp: Path, device: str = "cpu") -> list[dict]:
    cases = []
    for s, (d, dt, causal, scale, prec, seqs) in enumerate(ATTENTION_SPECS):
        seqs = seqs + (GPU_ATTENTION_SEQS[causal] if device == "cuda" else [])
        spec = attention.AttentionSpec(d, dt, causal, scale, prec)
        for c, cfg in enumerate(pick_configs(attention, spec, attention_size)):
            fn = f"attn_{s}_{c}"
            path = _write_module(tmp, fn, attention.render(spec, cfg, fn))
            for seq in seqs:
                cases.append(dict(id=f"{fn} {spec} {cfg} {seq}", family="attention", path=path, fn=fn, seq=seq,
                                  head_dim=d, dtype=dt, causal=causal, scale=scale,
                                  tol=(5e-3 if prec == "tf32" and device == "cuda" else 1e-5)
                                  if dt == "float32" else 1e-2))
    return cases


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    """Both families' cases, run in two concurrent interpreter subprocesses: {case id: (relative error, tol)}."""
    return _run_cases(tmp_path_factory.mktemp("kernels"), "cpu")


def _run_cases(tmp: Path, device: str) -> dict:
    (tmp / "driver.py").write_text(DRIVER)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    runs = []
    for fam, cases in (("gemm", _gemm_cases(tmp, device)), ("attention", _attention_cases(tmp, device))):
        (tmp / f"{fam}_cases.json").write_text(json.dumps(cases))
        proc = subprocess.Popen([sys.executable, str(tmp / "driver.py"), str(tmp / f"{fam}_cases.json"),
                                 str(tmp / f"{fam}_results.json"), device], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        runs.append((fam, cases, proc))
    out = {}
    for fam, cases, proc in runs:
        log, _ = proc.communicate(timeout=480)
        assert proc.returncode == 0, log
        results = json.loads((tmp / f"{fam}_results.json").read_text())
        out[fam] = {c["id"]: (results[c["id"]], c["tol"]) for c in cases}
    return out


@pytest.mark.parametrize("family", ["gemm", "attention"])
def test_rendered_kernels_match_torch(interpreted, family):
    results = interpreted[family]
    assert len(results) >= (40 if family == "gemm" else 30)
    bad = {k: v for k, (v, tol) in results.items() if isinstance(v, str) or not v < tol}
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


# ---------------------------------------------------------------------------------------------------------------
# On the H200 (`pytest -m gpu tests/test_kernels_gemm.py -s`): the same cases compiled for sm_90 with larger shapes,
# and speed against torch (printed; asserted only loosely).

def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


@pytest.mark.parametrize("family", ["gemm", "attention"])
@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA GPU (run on the H200)")
def test_gpu_rendered_kernels_match_torch(tmp_path_factory, family, gpu_to_itself):
    results = _run_cases(tmp_path_factory.mktemp(f"gpu_{family}"), "cuda")[family]
    bad = {k: v for k, (v, tol) in results.items() if isinstance(v, str) or not v < tol}
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


def _load(tmp: Path, fn: str, rendered):
    import importlib.util
    spec = importlib.util.spec_from_file_location(fn, _write_module(tmp, fn, rendered))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _compiled(jit_fn) -> str:
    """Registers, spills and shared memory of a JIT function's compiled variants (best effort)."""
    try:
        ks = [k for cache in jit_fn.device_caches.values() for k in cache[0].values()]
        return " ".join(f"regs={k.n_regs} spills={k.n_spills} smem={k.metadata.shared}" for k in ks)
    except Exception as e:  # introspection only
        return f"? ({e})"


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA GPU (run on the H200)")
def test_gpu_speed(tmp_path, gpu_to_itself):
    import torch
    from triton.testing import do_bench
    torch.manual_seed(0)
    m = n = k = 4096
    lines = []
    for in_dt, prec in (("bfloat16", "ieee"), ("float32", "tf32"), ("float32", "tf32x3"), ("float32", "ieee")):
        dt = getattr(torch, in_dt)
        a, w = torch.randn(m, k, device="cuda", dtype=dt), torch.randn(n, k, device="cuda", dtype=dt)
        spec = gemm.GemmSpec(in_dt, in_dt, precision=prec)
        torch.backends.cuda.matmul.allow_tf32 = prec != "ieee"
        t_ref = do_bench(lambda: a @ w.t())
        lines.append(f"{in_dt} {prec} 4096^3 torch: {2 * m * n * k / t_ref / 1e9:.0f} TFLOP/s")
        configs = [gemm.default(spec)]
        if in_dt == "bfloat16":
            configs += [dict(BM=128, BN=256, BK=64, GROUP_M=8, num_warps=8, num_stages=3, SPLIT_K=1, PERSISTENT=False),
                        dict(BM=128, BN=256, BK=64, GROUP_M=8, num_warps=8, num_stages=4, SPLIT_K=1, PERSISTENT=True),
                        dict(BM=128, BN=128, BK=64, GROUP_M=8, num_warps=4, num_stages=4, SPLIT_K=1, PERSISTENT=False),
                        dict(BM=128, BN=128, BK=64, GROUP_M=8, num_warps=8, num_stages=4, SPLIT_K=1, PERSISTENT=True),
                        dict(BM=64, BN=256, BK=64, GROUP_M=8, num_warps=4, num_stages=4, SPLIT_K=1, PERSISTENT=False),
                        dict(BM=128, BN=128, BK=64, GROUP_M=8, num_warps=8, num_stages=3, SPLIT_K=2, PERSISTENT=False)]
        best = 0.0
        for i, cfg in enumerate(configs):
            fn = f"speed_{in_dt}_{prec}_{i}"
            mod = _load(tmp_path, fn, gemm.render(spec, cfg, fn))
            out = getattr(mod, fn)(a, w.t())
            err = ((out.double() - (a.double() @ w.double().t())).norm() / (a.double() @ w.double().t()).norm()).item()
            t = do_bench(lambda: getattr(mod, fn)(a, w.t()))
            best = max(best, t_ref / t)
            lines.append(f"  {cfg}: {2 * m * n * k / t / 1e9:.0f} TFLOP/s ({t_ref / t:.2f}x torch) err={err:.1e} "
                         f"{_compiled(getattr(mod, fn + '_kernel'))}")
        if in_dt == "bfloat16":
            assert best > 0.5, lines
    torch.backends.cuda.matmul.allow_tf32 = False
    for d, causal in ((64, False), (64, True), (128, True)):
        q, kk, v = (torch.randn(4, 16, 4096, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        spec = attention.AttentionSpec(d, "bfloat16", causal)
        t_ref = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=causal))
        lines.append(f"attention bf16 D={d} causal={causal} S=4096 torch sdpa: {t_ref:.3f} ms")
        for i, cfg in enumerate([attention.default(spec), dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
                                 dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)]):
            if attention.check(spec, cfg):
                continue
            fn = f"speed_attn_{d}_{causal}_{i}"
            mod = _load(tmp_path, fn, attention.render(spec, cfg, fn))
            t = do_bench(lambda: getattr(mod, fn)(q, kk, v))
            lines.append(f"  {cfg}: {t:.3f} ms ({t_ref / t:.2f}x sdpa) {_compiled(getattr(mod, fn + '_kernel'))}")
    print("\n".join(lines))


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA GPU (run on the H200)")
def test_gpu_valid_configs_compile_without_spills(tmp_path, gpu_to_itself):
    """A seeded sample of each valid space compiles for sm_90 and runs; spills are printed and must stay rare."""
    import torch
    rng = random.Random(RANDOM_SEED)
    lines, spilled, total = [], 0, 0
    for spec in (gemm_spec("bfloat16", "bfloat16", "ieee", False, "all"), gemm.GemmSpec("float32", "float32"),
                 gemm.GemmSpec("float32", "float32", precision="tf32")):
        dt = getattr(torch, spec.in_dtype)
        a, b = torch.randn(300, 200, device="cuda", dtype=dt), torch.randn(200, 260, device="cuda", dtype=dt)
        extra = (torch.randn(260, device="cuda"), torch.randn(300, 260, device="cuda"), 0.5) if spec.epilogue else ()
        for i, cfg in enumerate(rng.sample(valid_space(gemm, spec), 16)):
            fn = f"scan_{spec.in_dtype}_{spec.precision}_{i}"
            mod = _load(tmp_path, fn, gemm.render(spec, cfg, fn))
            getattr(mod, fn)(a, b, *extra)
            info = _compiled(getattr(mod, fn + "_kernel"))
            total += 1
            spilled += "spills=0" not in info
            lines.append(f"{spec.in_dtype} {spec.precision} {cfg}: {info}")
    for spec in (attention.AttentionSpec(64, "bfloat16", True), attention.AttentionSpec(128, "float16", False),
                 attention.AttentionSpec(64, "float32", False)):
        dt = getattr(torch, spec.dtype)
        q = torch.randn(1, 2, 300, spec.head_dim, device="cuda", dtype=dt)
        for i, cfg in enumerate(rng.sample(valid_space(attention, spec), 10)):
            fn = f"scan_attn_{spec.head_dim}_{spec.dtype}_{i}"
            mod = _load(tmp_path, fn, attention.render(spec, cfg, fn))
            getattr(mod, fn)(q, q, q)
            info = _compiled(getattr(mod, fn + "_kernel"))
            total += 1
            spilled += "spills=0" not in info
            lines.append(f"attention {spec.head_dim} {spec.dtype} {cfg}: {info}")
    torch.cuda.synchronize()
    print("\n".join(lines))
    assert spilled <= total // 5, lines


def test_split_k_hint_follows_the_shape():
    """A few output tiles over a long K (KernelBench's 256x256 output, K = 524288: 4 CTAs on 132 SMs) split K in the
    default and widen the space; an output that fills the machine, a short K or a one-element output do not."""
    from workbench.problems import Problem
    from workbench.proposers.offline import OfflineProposer

    def hint(shape):
        prop = OfflineProposer(Problem.load("matmul_fp32", [f"M={shape[0]}", f"N={shape[1]}", f"K={shape[2]}"]))
        (g,) = [g for g in prop.groups({}) if g.family == "gemm"]
        return g.spec, prop

    spec, prop = hint((256, 256, 524288))
    assert spec.split_k_hint == 64  # 4 tiles x 64 = 256 CTAs, under two waves; 16384 slabs / 64 >= 32 each
    assert gemm.default(spec)["SPLIT_K"] == 64 and gemm.check(spec, gemm.default(spec)) is None
    assert {32, 64} <= {c["SPLIT_K"] for c in prop.group_space(prop.groups({})[0])}
    assert "SPLIT_K=64" in prop.render(prop.default_choice()).source
    assert hint((4096, 4096, 4096))[0].split_k_hint == 1  # 1024 tiles fill the SMs
    assert hint((256, 256, 1024))[0].split_k_hint == 1  # 32 slabs: too short to split
    one = gemm.GemmSpec("float32", "float32", single_output=True)
    assert gemm.split_k_for(one, 1, 1, 1, 1 << 20) == 1
    # ieee fp32 tiles are 64x64: 64 tiles, split 4 brings them to 256 CTAs (not 512: over two waves)
    assert gemm.split_k_for(gemm.GemmSpec("float32", "float32"), 1, 512, 512, 1 << 22) == 4
    assert gemm.split_k_for(gemm.GemmSpec("bfloat16", "bfloat16", batched=True), 8, 128, 128, 1 << 20) == 32


BAND_SCRIPT = textwrap.dedent("""\
    import dataclasses, importlib.util, json, sys
    import torch
    from workbench.kernels import gemm
    from workbench.kernels.base import Epilogue, EpilogueInput
    tmp = sys.argv[1]
    out = []
    torch.manual_seed(0)
    for side, d in (("upper", 0), ("upper", 5), ("upper", 15), ("lower", -3), ("lower", 0), ("lower", 1)):
        keep = f"(tri_col - tri_row) {'>=' if side == 'upper' else '<='} {float(d)}"
        ep = Epilogue(f"tl.where({keep}, acc, 0.0)", (EpilogueInput("tri_row", "row"), EpilogueInput("tri_col", "col")))
        spec = gemm.GemmSpec("float32", "float32", False, "ieee", ep, band=(side, d))
        # 16x16 tiles put a band edge exactly on a tile corner; 16x32 ones cut through tiles
        for split, persistent, bn in ((1, False, 16), (2, False, 32), (1, True, 32), (1, False, 32)):
            cfg = dict(gemm.default(spec), BM=16, BN=bn, BK=32, num_warps=1, num_stages=2, SPLIT_K=split,
                       PERSISTENT=persistent, NUM_SMS=3)
            assert gemm.check(spec, cfg) is None, gemm.check(spec, cfg)
            r = gemm.render(spec, cfg, "_g")
            assert "k_end = 0" in r.kernel_src
            path = f"{tmp}/band_{side}_{d + 10}_{split}_{persistent}_{bn}.py"
            open(path, "w").write("import torch\\nimport triton\\nimport triton.language as tl\\n"
                                  + r.kernel_src + "\\n\\n" + r.launcher_src)
            s = importlib.util.spec_from_file_location("m", path)
            m = importlib.util.module_from_spec(s)
            s.loader.exec_module(m)
            for M, N, K in ((48, 80, 40), (80, 48, 33)):
                a, b = torch.randn(M, K), torch.randn(K, N)
                c = m._g(a, b, torch.arange(M, dtype=torch.float32), torch.arange(N, dtype=torch.float32))
                prod = a.double() @ b.double()
                ref = torch.triu(prod, d) if side == "upper" else torch.tril(prod, d)
                out.append([side, d, split, persistent, M, float((c.double() - ref).abs().max())])
    print(json.dumps(out))
""")


def test_a_banded_gemm_skips_tiles_outside_the_band_and_stays_exact(tmp_path):
    """triu/tril of a product (`GemmSpec.band`): a tile wholly outside the kept band skips its K loop; every
    variant (plain, split-K, persistent) still equals torch.triu/tril of the float64 product, on shapes whose
    band cuts through tiles."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    res = subprocess.run([sys.executable, "-c", BAND_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(rows) == 48
    bad = [r for r in rows if r[-1] > 1e-4]
    assert not bad, bad


def test_a_band_needs_its_masking_epilogue():
    spec = gemm.GemmSpec("float32", "float32", band=("upper", 0))
    assert "band" in gemm.check(spec, gemm.default(spec))
    spec = dataclasses.replace(spec, band=("diagonal", 0), epilogue=Epilogue("acc", ()))
    assert "band" in gemm.check(spec, gemm.default(spec))
