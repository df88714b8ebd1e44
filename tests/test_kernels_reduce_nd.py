"""Reductions over any dims and scans along any dim (workbench/kernels/reduce_nd.py) and the recognisers that lower
to them (workbench/proposers/patterns/reduce.py, loss.py).

Kernel cases run under the Triton interpreter on CPU tensors in one worker subprocess (TRITON_INTERPRET must be set
before triton is imported) and are compared with torch in float64; the proposer cases render KernelBench level-1
files at small sizes and run them through the CPU ladder (the compile stage builds every kernel for sm_90).
"""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.kernels import FAMILIES
from workbench.kernels.base import EpilogueInput as EI
from workbench.kernels.base import valid_space
from workbench.kernels.reduce_nd import REDUCE_ND, SCAN_ND, SOFTMAX_ND, ReduceNDSpec, ScanNDSpec, SoftmaxNDSpec

HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n"
KB = Path(__file__).resolve().parents[1] / ".." / "shared" / "kernelbench" / "level1"
X = (EI("x", "full"),)

RUNNER = r'''
import importlib.util, json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
torch.set_num_threads(1)
DT = {"float32": torch.float32, "bfloat16": torch.bfloat16}
results = {}
for case in json.load(open(sys.argv[1])):
    spec_ = importlib.util.spec_from_file_location(case["id"], case["path"])
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    g = torch.Generator().manual_seed(7)
    shape, dt = case["shape"], DT[case["dtype"]]
    if case["ties"]:
        x = torch.randint(0, 3, shape, generator=g).to(dt)
    else:
        x = (torch.rand(shape, generator=g) * 2 - 1 + (1.0 if case["positive"] else 0.0)).to(dt)
    args = [x]
    if case["mask"]:
        args.append(torch.rand(shape, generator=g) > 0.5)
    if case["y"]:
        args.append(torch.rand(shape, generator=g).to(dt))
    out = getattr(mod, "k")(*args)
    ref = eval(case["ref"], {"torch": torch, "x": x.double(), "m": args[1] if case["mask"] else None,
                             "y": args[-1].double()})
    if tuple(out.shape) != tuple(ref.shape):
        results[case["id"]] = f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
        continue
    if out.dtype == torch.int64:
        ok = torch.equal(out, ref)
        results[case["id"]] = None if ok else f"indices differ: {out.flatten()[:8]} vs {ref.flatten()[:8]}"
        continue
    err = ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()
    tol = 1e-5 if case["dtype"] == "float32" else 2e-2
    results[case["id"]] = None if err < tol else f"relative error {err:.3g} > {tol}"
print(json.dumps(results))
'''


def _red(op, shape, dims, keep=False, dtype="float32", expr="x", inputs=X, correction=1):
    outer = R = inner = 1
    for d, n in enumerate(shape):
        if d < dims[0]:
            outer *= n
        elif d <= dims[-1]:
            R *= n
        else:
            inner *= n
    out_shape = tuple(1 if d in dims else n for d, n in enumerate(shape)) if keep else \
        tuple(n for d, n in enumerate(shape) if d not in dims)
    odt = "int64" if op.startswith("arg") else dtype
    return ReduceNDSpec(op, outer, R, inner, tuple(shape), out_shape, odt, expr, inputs, (), correction)


def _scan(op, shape, dim, dtype="float32", reverse=False, exclusive=False, expr="x", inputs=X, bools=()):
    outer = inner = 1
    for d, n in enumerate(shape):
        outer *= n if d < dim else 1
        inner *= n if d > dim else 1
    return ScanNDSpec(op, outer, shape[dim], inner, tuple(shape), dtype, expr, inputs, bools, reverse, exclusive)


def _softmax(op, shape, dim, dtype="float32", expr="x", inputs=X):
    outer = inner = 1
    for d, n in enumerate(shape):
        outer *= n if d < dim else 1
        inner *= n if d > dim else 1
    return SoftmaxNDSpec(op, outer, shape[dim], inner, tuple(shape), dtype, expr, inputs)


def _cases():
    """(id, family, spec, config or None for default, reference expression over x/m/y, flags)."""
    c = []
    red_ref = {"sum": "x.sum({d}, keepdim={k})", "mean": "x.mean({d}, keepdim={k})",
               "max": "x.amax({d}, keepdim={k})", "min": "x.amin({d}, keepdim={k})",
               "prod": "x.prod({d0}, keepdim={k})", "argmax": "x.argmax({d0}, keepdim={k})",
               "argmin": "x.argmin({d0}, keepdim={k})", "logsumexp": "x.logsumexp({d}, keepdim={k})",
               "var": "x.var({d}, keepdim={k})", "std": "x.std({d}, keepdim={k}, correction=0)",
               "norm2": "x.norm(dim={d}, keepdim={k})"}
    split = {"BLOCK_R": 4, "BLOCK_I": 16, "SPLIT": 4, "num_warps": 1}
    row_split = {"BLOCK_R": 8, "BLOCK_I": 1, "SPLIT": 4, "num_warps": 1}
    for op, shape, dims, keep in [("sum", (5, 37, 3), [1], False), ("mean", (37, 6), [0], True),
                                  ("max", (4, 5, 33), [2], False), ("min", (3, 7, 6, 5), [1, 2], False),
                                  ("prod", (3, 9, 5), [1], False), ("argmax", (3, 41, 5), [1], False),
                                  ("argmin", (41, 3), [0], True), ("logsumexp", (2, 39, 3), [1], True),
                                  ("var", (3, 6, 7, 2), [1, 2], False), ("std", (45, 4), [0], False),
                                  ("norm2", (4, 33), [1], False)]:
        spec = _red(op, shape, dims, keep, correction=0 if op == "std" else 1)
        ref = red_ref[op].format(d=tuple(dims), d0=dims[0], k=keep)
        ties = op in ("argmax", "argmin")
        for tag, cfg in (("default", None), ("split", split if spec.inner > 1 else row_split)):
            if cfg is not None and REDUCE_ND.check(spec, cfg):
                cfg = {**cfg, "SPLIT": 2}
            c.append((f"{op}-{tag}", "reduce_nd", spec, cfg, ref, dict(ties=ties, positive=op == "prod")))
    c.append(("sum-bf16", "reduce_nd", _red("sum", (6, 50, 3), [1], dtype="bfloat16"), None, "x.sum(1)", {}))
    c.append(("argmax-all", "reduce_nd", _red("argmax", (7, 9), [0, 1], keep=False), None, "x.argmax()",
              dict(ties=True)))
    mse = _red("mean", (6, 13), [0, 1], expr="(x - y) * (x - y)", inputs=(EI("x", "full"), EI("y", "full")))
    c.append(("mse-split", "reduce_nd", mse, {"BLOCK_R": 8, "BLOCK_I": 1, "SPLIT": 8, "num_warps": 1},
              "((x - y) ** 2).mean()", dict(y=True)))
    for op, shape, dim, rev, exc in [("cumsum", (5, 37, 3), 1, False, False), ("cumsum", (37, 4), 0, True, False),
                                     ("cumsum", (4, 35), 1, False, True), ("cumsum", (3, 33, 2), 1, True, True),
                                     ("cumprod", (3, 21, 4), 1, False, False), ("cumprod", (4, 19), 1, True, False)]:
        x = "x.flip({0})".format(dim) if rev else "x"
        if exc:
            x = f"torch.cat([torch.zeros_like({x}.narrow({dim}, 0, 1)), {x}.narrow({dim}, 0, {shape[dim] - 1})], {dim})"
        ref = f"torch.{op}({x}, {dim})" + (f".flip({dim})" if rev else "")
        spec = _scan(op, shape, dim, reverse=rev, exclusive=exc)
        cfg = {"BLOCK_L": 8, "BLOCK_I": 16 if spec.inner > 1 else 1, "num_warps": 1}
        c.append((f"{op}-d{dim}-r{int(rev)}-e{int(exc)}", "scan_nd", spec, cfg, ref,
                  dict(positive=op == "cumprod")))
    masked = _scan("cumsum", (4, 40), 1, expr="x * m", inputs=(EI("x", "full"), EI("m", "full")), bools=("m",))
    c.append(("masked-cumsum", "scan_nd", masked, None, "torch.cumsum(x * m, 1)", dict(mask=True)))
    c.append(("cumsum-bf16", "scan_nd", _scan("cumsum", (30, 5), 0, dtype="bfloat16"), None,
              "torch.cumsum(x, 0)", {}))
    # softmax along a dim that is not the last: one pass (R in one chunk) and two (chunks of R), odd sizes
    for op, shape, dim in [("softmax", (3, 37, 5, 4), 1), ("log_softmax", (41, 6), 0), ("softmax", (2, 7, 3, 5, 6), 1),
                           ("log_softmax", (4, 3, 19, 7), 2)]:
        spec = _softmax(op, shape, dim)
        ref = f"torch.{op}(x, {dim})"
        c.append((f"{op}-r{len(shape)}d{dim}-onepass", "softmax_nd", spec, None, ref, {}))
        chunks = {"BLOCK_R": 4, "BLOCK_I": 16, "num_warps": 1}
        c.append((f"{op}-r{len(shape)}d{dim}-chunks", "softmax_nd", spec, chunks, ref, {}))
    shifted = _softmax("softmax", (2, 9, 13), 1, expr="x * 2.0 + y", inputs=(EI("x", "full"), EI("y", "full")))
    c.append(("softmax-prologue", "softmax_nd", shifted, None, "torch.softmax(x * 2.0 + y, 1)", dict(y=True)))
    c.append(("softmax-bf16", "softmax_nd", _softmax("softmax", (4, 24, 9), 1, dtype="bfloat16"), None,
              "torch.softmax(x, 1)", {}))
    return c


CASES = _cases()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reduce_nd")
    cases = []
    for cid, fam, spec, cfg, ref, flags in CASES:
        family = FAMILIES[fam]
        cfg = cfg or family.default(spec)
        assert family.check(spec, cfg) is None, (cid, family.check(spec, cfg))
        r = family.render(spec, cfg, "k")
        path = tmp / f"{cid.replace('-', '_')}.py"
        path.write_text(HEADER + r.kernel_src + "\n" + r.launcher_src)
        shape = list(spec.in_shape if fam == "reduce_nd" else spec.shape)  # scan_nd, softmax_nd: the shape
        dtype = "bfloat16" if cid.endswith("bf16") else "float32"
        cases.append({"id": cid, "path": str(path), "shape": shape, "dtype": dtype, "ref": ref,
                      "ties": flags.get("ties", False), "positive": flags.get("positive", False),
                      "mask": flags.get("mask", False), "y": flags.get("y", False)})
    spec_file = tmp / "cases.json"
    spec_file.write_text(json.dumps(cases))
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(spec_file)], capture_output=True, text=True,
                          timeout=600, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_interpreter_matches_torch(results, cid):
    assert results[cid] is None, results[cid]


def test_check_rules():
    spec = _red("sum", (4, 37, 3), [1])
    ok = {"BLOCK_R": 16, "BLOCK_I": 16, "SPLIT": 1, "num_warps": 1}
    assert REDUCE_ND.check(spec, ok) is None
    assert "power of two" in REDUCE_ND.check(spec, {**ok, "BLOCK_R": 12})
    assert "longer than R" in REDUCE_ND.check(spec, {**ok, "BLOCK_R": 128})
    assert "empty slices" in REDUCE_ND.check(spec, {**ok, "SPLIT": 8})
    row = _red("sum", (4, 37), [1])
    assert "BLOCK_I must be 1" in REDUCE_ND.check(row, {**ok, "BLOCK_I": 16})
    big = _red("sum", (4, 4096, 256), [1])
    assert "spills" in REDUCE_ND.check(big, {"BLOCK_R": 4096, "BLOCK_I": 256, "SPLIT": 1, "num_warps": 1})
    assert "idle" in REDUCE_ND.check(spec, {**ok, "BLOCK_R": 1, "num_warps": 16})
    assert "out_dtype" in REDUCE_ND.check(dataclasses.replace(_red("argmax", (4, 5), [1]), out_dtype="float32"), ok)
    assert "unknown op" in REDUCE_ND.check(_red("median", (4, 5), [1]), ok)
    assert "not usable" in REDUCE_ND.check(_red("sum", (4, 5), [1], inputs=(EI("acc", "full"),), expr="acc"), ok)
    scan = _scan("cumsum", (4, 37, 3), 1)
    assert SCAN_ND.check(scan, {"BLOCK_L": 16, "BLOCK_I": 16, "num_warps": 1}) is None
    assert "unknown scan op" in SCAN_ND.check(_scan("cummax", (4, 5), 1), {"BLOCK_L": 4, "BLOCK_I": 1,
                                                                          "num_warps": 1})
    # every default is valid, and the space holds valid configs in a fixed order
    for s, fam in ((spec, REDUCE_ND), (row, REDUCE_ND), (big, REDUCE_ND), (scan, SCAN_ND)):
        assert fam.check(s, fam.default(s)) is None
        assert valid_space(fam, s) == valid_space(fam, s) and valid_space(fam, s)
    soft = _softmax("softmax", (4, 37, 3), 1)
    assert SOFTMAX_ND.check(soft, {"BLOCK_R": 64, "BLOCK_I": 16, "num_warps": 1}) is None
    assert "longer than R" in SOFTMAX_ND.check(soft, {"BLOCK_R": 128, "BLOCK_I": 16, "num_warps": 1})
    assert "unknown op" in SOFTMAX_ND.check(_softmax("softmin", (4, 5), 0), {"BLOCK_R": 4, "BLOCK_I": 1,
                                                                           "num_warps": 1})
    wide = _softmax("softmax", (2, 8192, 64), 1)  # R too long for one tile: chunks of it
    assert SOFTMAX_ND.default(wide)["BLOCK_R"] < 8192 and SOFTMAX_ND.default(soft)["BLOCK_R"] >= 37
    for s in (soft, wide):
        assert SOFTMAX_ND.check(s, SOFTMAX_ND.default(s)) is None and valid_space(SOFTMAX_ND, s)
    # a long full reduction is split over many programs
    assert REDUCE_ND.default(_red("mean", (1 << 22,), [0]))["SPLIT"] >= 64


# ---------------------------------------------------------------- proposer: KernelBench level 1 at small sizes

SMALL = dict(batch_size=4, M=16, N=24, K=20, input_shape=(40,), dim1=12, dim2=10, dim=1, b=2, i=3, j=4, l=5, k=6)
# file number -> the families the candidate must use
EXPECTED = {14: {"gemm"}, 47: {"reduce_nd"}, 49: {"reduce_nd"}, 52: {"reduce_nd"}, 53: {"reduce_nd"}, 90: {"scan_nd"},
            91: {"scan_nd"}, 92: {"scan_nd"}, 93: {"scan_nd"}, 94: {"reduce_nd"}, 96: {"reduce_nd"},
            98: {"reduce_nd", "elementwise"}, 99: {"reduce_nd"}, 100: {"reduce_nd"}}


@pytest.fixture(scope="module")
def cpu():
    from workbench.devices.local import LocalDevice
    dev = LocalDevice("cpu", timeouts={"compile": 120, "correctness": 120})
    yield dev
    dev.close()


@pytest.mark.parametrize("num", sorted(EXPECTED))
def test_kernelbench_level1_gets_a_generated_correct_candidate(cpu, num):
    if not KB.is_dir():
        pytest.skip(f"KernelBench files not found at {KB}")
    from workbench.harness.ladder import Ladder
    from workbench.problems import Problem
    from workbench.proposers.offline import OfflineProposer
    files = [f for f in KB.glob(f"{num}_*.py")]
    if not files:
        pytest.skip(f"level1/{num}_* is not among the KernelBench files here")
    src = files[0].read_text()
    overrides = {k: v for k, v in SMALL.items() if re.search(rf"^{k}\s*=", src, re.M)}
    if num == 100:
        overrides["input_shape"] = (overrides["batch_size"],)  # targets (batch,) broadcast along the last dim
    problem = Problem.load(str(files[0]), overrides=overrides)
    cand = OfflineProposer(problem).propose(1)[0]
    groups = json.loads(re.search(r'"groups": (\[.*?\])', cand.source, re.S).group(1))
    assert {g.split(":")[1].split("+")[0] for g in groups} == EXPECTED[num], groups
    if num == 14:
        assert "tri_row" in cand.source and "aten.triu" not in cand.source  # the mask is the gemm's epilogue
    ev = Ladder(cpu).evaluate(problem, cand, up_to="correctness")
    assert ev.ok, [(s.name, s.reason) for s in ev.stages]
    assert any(s.name == "compile" and s.ok for s in ev.stages), [(s.name, s.reason) for s in ev.stages]


def test_channel_softmax_after_a_convolution_is_one_generated_kernel(cpu, tmp_path):
    """softmax(dim=1) of a convolution's NCHW output (KernelBench level 2: Conv*_Softmax_*) with the pointwise
    chain before it fused: one softmax_nd kernel, no torch softmax left, correct, and built for sm_90."""
    from workbench.harness.ladder import Ladder
    from workbench.problems import Problem
    from workbench.proposers.offline import OfflineProposer
    path = tmp_path / "conv_softmax.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.conv = nn.Conv2d(3, 12, 3)\n"
        "        self.bias = nn.Parameter(torch.randn(12, 1, 1))\n\n"
        "    def forward(self, x):\n        y = torch.softmax(self.conv(x) * 0.5 + self.bias, dim=1)\n"
        "        return torch.log_softmax(y.transpose(1, 3).contiguous(), dim=2)\n\n"
        "def get_inputs():\n    return [torch.randn(2, 3, 9, 11)]\n\ndef get_init_inputs():\n    return []\n")
    problem = Problem.load(path)
    proposer = OfflineProposer(problem)
    groups = proposer.groups(dict(proposer.default_choice().fuse))
    assert sum(g.family == "softmax_nd" for g in groups) == 2, [g.family for g in groups]
    covered = {n for g in groups for n in g.nodes}
    assert not [n for n in proposer.captured.nodes if "softmax" in str(n.target) and n not in covered]
    ev = Ladder(cpu).evaluate(problem, proposer.propose(1)[0], up_to="correctness")
    assert ev.ok, [(s.name, s.reason) for s in ev.stages]
    assert any(s.name == "compile" and s.ok for s in ev.stages), [(s.name, s.reason) for s in ev.stages]
