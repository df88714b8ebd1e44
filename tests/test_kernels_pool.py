"""The pooling family (workbench/kernels/pool.py) and its recogniser (workbench/proposers/patterns/pool.py).

Kernel cases are rendered into module files and run under the Triton interpreter (TRITON_INTERPRET=1) in one worker
subprocess against torch's own pooling ops (max values and indices exactly, averages within fp32 / 16-bit bounds);
proposer cases go through OfflineProposer and the CPU ladder (static, compile for sm_90, correctness).
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workbench.kernels import pool as P
from workbench.kernels.base import Epilogue, EpilogueInput, valid_space

HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n"
KERNELBENCH = Path(__file__).resolve().parents[1] / ".." / "shared" / "kernelbench"

RUNNER = r'''
import importlib.util, json, os, sys, traceback, warnings
os.environ["TRITON_INTERPRET"] = "1"
warnings.filterwarnings("ignore")
import numpy as np
np.seterr(all="ignore")
import torch
import torch.nn.functional as F
torch.set_num_threads(1)
DT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load(path):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.pk


def reference(s, x, ref_call):
    xd = x.double() if s["op"] == "avg" else x.float()
    return eval(ref_call, {"F": F, "torch": torch, "x": xd})


results = {}
for case in json.load(open(sys.argv[1])):
    try:
        s = case["spec"]
        g = torch.Generator().manual_seed(7)
        x = torch.randn(case["shape"], generator=g)
        if case.get("ties"):
            x = torch.randint(-3, 3, case["shape"], generator=g).float()
        x = x.to(DT[s["dtype"]])
        if case.get("transposed"):  # a non-contiguous input: the kernel takes strides
            x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
        args = [x]
        ref = reference(s, x, case["ref"])
        if s["epilogue"] is not None:  # acc * scale + bias[c], relu
            bias = torch.randn(case["shape"][1], generator=g)
            args += [bias, 0.5]
            ref = torch.relu(ref * 0.5 + bias.view(1, -1, *([1] * (ref.dim() - 2))).to(ref.dtype))
        out = load(case["path"])(*args)
        if s["return_indices"]:
            ok = torch.equal(out[0].float(), ref[0].float()) and torch.equal(out[1], ref[1])
            msg = "" if ok else f"values/indices differ: {(out[0].float() - ref[0].float()).abs().max()}"
        else:
            ok = tuple(out.shape) == tuple(ref.shape) and out.dtype == x.dtype
            err = ((out.double() - ref.double()).norm() / ref.double().norm()).item() if ok else float("inf")
            tol = 1e-6 if s["dtype"] == "float32" else 1e-2
            if s["op"] == "max" and s["dtype"] == "float32":
                tol = 0.0
            ok = ok and err <= tol
            msg = "" if ok else f"shape {tuple(out.shape)} vs {tuple(ref.shape)}, dtype {out.dtype}, err {err}"
    except Exception:
        ok, msg = False, traceback.format_exc(limit=3)[-1500:]
    results[case["id"]] = {"ok": ok, "msg": msg}
json.dump(results, open(sys.argv[2], "w"))
'''


def spec_window(op, dtype, rank, in_size, kernel, stride, padding=0, dilation=1, ceil_mode=False, **kw):
    t = lambda v, fill: (fill,) * (3 - rank) + ((v,) * rank if isinstance(v, int) else tuple(v))  # noqa: E731
    k, s, p, d = t(kernel, 1), t(stride, 1), t(padding, 0), t(dilation, 1)
    size = t(in_size, 1)
    out = tuple(P.window_out_size(*a, ceil_mode) for a in zip(size, k, s, p, d))
    return P.PoolSpec(op, dtype, rank, size, out, kernel=k, stride=s, padding=p, dilation=d, ceil_mode=ceil_mode, **kw)


EP = Epilogue("tl.maximum(acc * scale + bias, 0.0)", (EpilogueInput("bias", "col"), EpilogueInput("scale", "scalar")))

# (id, spec, input shape, torch reference call over x, extra)
CASES = [
    ("max1d_dil", spec_window("max", "float32", 1, 23, 4, 1, 2, 3), [2, 3, 23],
     "F.max_pool1d(x, 4, 1, 2, 3)", {}),
    ("max2d_ceil_idx", spec_window("max", "float32", 2, (11, 13), 3, 2, 1, 2, True, return_indices=True),
     [2, 3, 11, 13], "F.max_pool2d(x, 3, 2, 1, 2, ceil_mode=True, return_indices=True)", {}),
    ("max2d_ties_idx", spec_window("max", "float32", 2, (9, 7), 3, 2, 1, return_indices=True), [1, 5, 9, 7],
     "F.max_pool2d(x, 3, 2, 1, return_indices=True)", {"ties": True}),
    ("max2d_stride_gt_kernel", spec_window("max", "float32", 2, (17, 10), 2, 3), [2, 2, 17, 10],
     "F.max_pool2d(x, 2, 3)", {"transposed": True}),
    ("max3d_idx", spec_window("max", "float32", 3, (5, 6, 7), 3, 2, 1, 2, return_indices=True), [1, 2, 5, 6, 7],
     "F.max_pool3d(x, 3, 2, 1, 2, return_indices=True)", {}),
    ("max2d_bf16_epilogue", spec_window("max", "bfloat16", 2, (10, 10), 3, 1, 1, epilogue=EP), [2, 4, 10, 10],
     "F.max_pool2d(x, 3, 1, 1)", {}),
    ("avg1d", spec_window("avg", "float32", 1, 21, 5, 2, 2), [2, 3, 21], "F.avg_pool1d(x, 5, 2, 2)", {}),
    ("avg2d_ceil_nopad", spec_window("avg", "float32", 2, (11, 12), 3, 2, 1, ceil_mode=True,
                                     count_include_pad=False), [2, 3, 11, 12],
     "F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)", {}),
    ("avg2d_ceil_pad", spec_window("avg", "float32", 2, (11, 12), 3, 2, 1, ceil_mode=True), [2, 3, 11, 12],
     "F.avg_pool2d(x, 3, 2, 1, ceil_mode=True)", {}),
    ("avg2d_divisor", spec_window("avg", "float16", 2, (9, 9), 4, 3, 1, divisor_override=7), [2, 3, 9, 9],
     "F.avg_pool2d(x, 4, 3, 1, divisor_override=7)", {}),
    ("avg3d_bf16", spec_window("avg", "bfloat16", 3, (7, 6, 9), 3, 2, 1), [2, 2, 7, 6, 9],
     "F.avg_pool3d(x, 3, 2, 1)", {}),
    ("avg2d_big_kernel", spec_window("avg", "float32", 2, (30, 31), 12, 12), [1, 2, 30, 31],
     "F.avg_pool2d(x, 12, 12)", {}),  # 144 taps: the loops are not unrolled
    ("adaptive_avg2d", P.PoolSpec("avg", "float32", 2, (1, 11, 13), (1, 4, 5), mode="adaptive"), [2, 3, 11, 13],
     "F.adaptive_avg_pool2d(x, (4, 5))", {}),
    ("adaptive_avg1d_upsample", P.PoolSpec("avg", "float32", 1, (1, 1, 5), (1, 1, 7), mode="adaptive"), [2, 3, 5],
     "F.adaptive_avg_pool1d(x, 7)", {}),
    ("adaptive_max3d_idx", P.PoolSpec("max", "float32", 3, (5, 7, 6), (2, 3, 4), mode="adaptive",
                                      return_indices=True), [1, 3, 5, 7, 6],
     "F.adaptive_max_pool3d(x, (2, 3, 4), return_indices=True)", {}),
    ("global_avg2d", P.PoolSpec("avg", "float32", 2, (1, 9, 11), (1, 1, 1), mode="global"), [3, 5, 9, 11],
     "x.mean((2, 3), keepdim=True)", {"transposed": True}),
    ("global_avg3d_bf16_epilogue", P.PoolSpec("avg", "bfloat16", 3, (3, 4, 5), (1, 1, 1), mode="global",
                                              epilogue=EP), [2, 6, 3, 4, 5], "x.mean((2, 3, 4), keepdim=True)", {}),
    ("global_max2d", P.PoolSpec("max", "float32", 2, (1, 40, 40), (1, 1, 1), mode="global"), [2, 3, 40, 40],
     "F.adaptive_max_pool2d(x, 1)", {}),
]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("pool")
    cases = []
    for cid, spec, shape, ref, extra in CASES:
        configs = [P.default(spec)]
        valid = valid_space(P, spec)
        configs += [c for c in valid[-1:] if c not in configs]  # the widest tile beside the default
        for j, cfg in enumerate(configs):
            r = P.render(spec, cfg, "pk")
            path = d / f"{cid}_{j}.py"
            path.write_text(HEADER + r.kernel_src + "\n\n" + r.launcher_src)
            cases.append({"id": f"{cid}/{j}", "spec": json.loads(json.dumps(dataclasses.asdict(spec))),
                          "shape": shape, "ref": ref, "path": str(path), **extra})
    (d / "cases.json").write_text(json.dumps(cases))
    (d / "runner.py").write_text(RUNNER)
    subprocess.run([sys.executable, str(d / "runner.py"), str(d / "cases.json"), str(d / "out.json")], check=True,
                   timeout=600)
    return json.loads((d / "out.json").read_text())


@pytest.mark.parametrize("cid", [c[0] for c in CASES])
def test_interpreter_matches_torch(results, cid):
    mine = {k: v for k, v in results.items() if k.split("/")[0] == cid}
    assert mine, cid
    bad = {k: v["msg"] for k, v in mine.items() if not v["ok"]}
    assert not bad, bad


def test_space_deterministic_default_valid_and_checks_say_why():
    for _, spec, *_ in CASES:
        assert P.space(spec) == P.space(spec)
        valid = valid_space(P, spec)
        assert valid and P.default(spec) in valid
    spec = CASES[1][1]  # 5x6 output pixels with indices
    assert "lanes past" in P.check(spec, {"BLOCK_NC": 1, "BLOCK_O": 128, "num_warps": 4})
    assert "registers" in P.check(spec, {"BLOCK_NC": 64, "BLOCK_O": 32, "num_warps": 1})
    assert "cover a plane" in P.check(spec, {"BLOCK_NC": 2, "BLOCK_O": 16, "num_warps": 1})
    bad = dataclasses.replace(spec, padding=(0, 2, 2))
    assert "half the kernel" in P.check(bad, P.default(spec))


def _compile(tmp_path, problem, src: str, call: str):
    from workbench.devices.local import LocalDevice

    cand = tmp_path / "cand.py"
    cand.write_text(HEADER + src + textwrap.dedent(f"""\


        class ModelNew(torch.nn.Module):
            def __init__(self, *args):
                super().__init__()

            def forward(self, x):
                return {call}
        """))
    dev = LocalDevice("cpu")
    try:
        return dev.compile(problem, cand)
    finally:
        dev.close()


def _problem(tmp_path, name, src):
    from workbench.problems import Problem

    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(src))
    return Problem.load(path)


MAXPOOL = '''
    import torch
    import torch.nn as nn
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
            self.bias = nn.Parameter(torch.randn(4, 1, 1))
        def forward(self, x):
            return torch.relu(self.pool(x) + self.bias) * 2.0
    def get_inputs():
        return [torch.randn(2, 4, 11, 9)]
    def get_init_inputs():
        return []
'''
GAP = '''
    import torch
    import torch.nn as nn
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(6, 5)
        def forward(self, x):
            return self.fc(torch.flatten(self.pool(x), 1))
    def get_inputs():
        return [torch.randn(3, 6, 7, 5)]
    def get_init_inputs():
        return []
'''


def test_configs_compile_for_sm90(tmp_path):
    from workbench.core.records import PASS

    problem = _problem(tmp_path, "maxpool", MAXPOOL)
    spec = spec_window("max", "float32", 2, (11, 9), 3, 2, 1, ceil_mode=True, return_indices=True)
    valid = valid_space(P, spec)
    src = ""
    calls = []
    for j, cfg in enumerate([P.default(spec), valid[0]]):
        r = P.render(spec, cfg, f"p{j}")
        src += r.kernel_src + "\n\n" + r.launcher_src + "\n\n"
        calls.append(f"p{j}(x)[0]")
    rec = _compile(tmp_path, problem, src, " + ".join(calls))
    assert rec.verdict == PASS, rec.reason
    assert sorted(k["kernel"] for k in rec.data["kernels"]) == ["p0_kernel", "p1_kernel"]


@pytest.fixture(scope="module")
def cpu():
    from workbench.devices.local import LocalDevice

    dev = LocalDevice("cpu", timeouts={"compile": 120, "correctness": 120})
    yield dev
    dev.close()


def _climb(cpu, problem, n=2):
    from workbench.harness.ladder import Ladder
    from workbench.proposers.offline import OfflineProposer

    prop = OfflineProposer(problem)
    groups = prop.groups({})
    cands = prop.propose(n, seed=3)
    for cand in cands:
        ev = Ladder(cpu).evaluate(problem, cand, up_to="correctness")
        assert ev.ok and ev.fidelity == "correctness", [(s.name, s.reason) for s in ev.stages]
        assert "_pool_kernel" in cand.source
    return prop, groups


def test_maxpool_model_fuses_its_chain_and_is_correct(cpu, tmp_path):
    prop, groups = _climb(cpu, _problem(tmp_path, "maxpool", MAXPOOL), n=1)
    assert [g.family for g in groups] == ["pool"] and groups[0].fused_epilogue
    assert [i.kind for i in groups[0].spec.epilogue.inputs] == ["col"]
    assert prop.fusion_points == ["max_pool2d_with_indices"]  # fused and split are both offered


def test_global_average_pool_then_linear_is_correct(cpu, tmp_path):
    _, groups = _climb(cpu, _problem(tmp_path, "gap", GAP), n=1)
    pool = [g for g in groups if g.family == "pool"]
    assert len(pool) == 1 and pool[0].spec.mode == "global"


KB_OVERRIDES = {
    "41_Max_Pooling_1D.py": {"batch_size": 2, "features": 3, "sequence_length": 50},
    "45_Average_Pooling_2D.py": {"batch_size": 1, "channels": 2, "height": 25, "width": 30},
}


@pytest.mark.parametrize("fname", sorted(KB_OVERRIDES))
def test_kernelbench_pooling_files(cpu, fname):
    from workbench.problems import Problem

    path = KERNELBENCH / "level1" / fname
    if not path.exists():
        pytest.skip(f"{path} absent (the KernelBench development files live in ../shared/kernelbench)")
    _, groups = _climb(cpu, Problem.load(path, overrides=KB_OVERRIDES[fname]), n=1)
    assert [g.family for g in groups] == ["pool"]
