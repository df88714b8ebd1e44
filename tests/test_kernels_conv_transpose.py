"""The transposed-convolution family: its configuration space and checks, rendered kernels run under the Triton
interpreter (TRITON_INTERPRET=1, in a subprocess) against float64 torch, a compile for sm_90 through the compile
stage, and the recogniser through the offline proposer and the CPU ladder."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workbench.devices import cuda_gpu_count
from workbench.kernels import FAMILIES
from workbench.kernels import conv_transpose as ct
from workbench.kernels.base import Epilogue, EpilogueInput, valid_space

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"
KERNELBENCH = Path(__file__).resolve().parents[1] / ".." / "shared" / "kernelbench"

EPILOGUES = {  # name: (Triton expression, torch expression, inputs)
    "bias": ("acc + bias", "acc + bias", (EpilogueInput("bias", "col"),)),
    "bias_relu_res": ("tl.maximum(acc + bias, 0.0) * alpha + res", "torch.relu(acc + bias) * alpha + res",
                      (EpilogueInput("bias", "col"), EpilogueInput("alpha", "scalar"), EpilogueInput("res", "full"))),
}

# (id, rank, N, C_in, C_out, input size, kernel size, stride, padding, output_padding, dilation, groups, dtype,
#  epilogue, configs: the default plus these overrides)
CASES = [
    ("1d_s2_op1", 1, 2, 5, 6, (7,), (3,), (2,), (1,), (1,), (1,), 1, "float32", "bias", [{"PHASED": False}]),
    ("1d_s3_dil2_g2", 1, 1, 4, 6, (5,), (4,), (3,), (2,), (0,), (2,), 2, "float32", None, [{"PHASED": False}]),
    ("2d_s1_pad", 2, 2, 3, 5, (5, 6), (3, 3), (1, 1), (1, 1), (0, 0), (1, 1), 1, "float32", "bias_relu_res", []),
    ("2d_s2_dw", 2, 1, 4, 4, (4, 5), (3, 2), (2, 1), (0, 1), (1, 0), (1, 2), 4, "float32", "bias",
     [{"PHASED": False}]),
    ("2d_s2_bf16", 2, 2, 20, 18, (3, 4), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), 1, "bfloat16", "bias",
     [{"BK": 16, "BN": 16}]),
    ("3d_s2_g2", 3, 1, 4, 6, (3, 2, 3), (3, 2, 3), (2, 2, 1), (1, 0, 1), (1, 1, 0), (1, 1, 2), 2, "float32", None,
     [{"PHASED": False}]),
]


def _spec(case, precision="ieee"):
    _, rank, _, cin, cout, _, _, stride, pad, opad, dil, groups, dt, ep, _ = case
    epilogue = None if ep is None else Epilogue(EPILOGUES[ep][0], EPILOGUES[ep][2])
    return ct.ConvTransposeSpec(rank, stride, pad, opad, dil, groups, cin, cout, dt, dt, precision, epilogue)


DRIVER = r'''
import importlib.util, json, os, sys
import torch
device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
if device == "cpu":
    from workbench.harness.child import interpreter_fixes
    interpreter_fixes.apply()  # the interpreter's bf16 tl.dot multiplies raw bits (interpreter_fixes says so)
torch.set_num_threads(1)
gen = torch.Generator().manual_seed(0)
F = torch.nn.functional
results = {}
for case in json.load(open(sys.argv[1])):
    try:
        spec = importlib.util.spec_from_file_location(case["fn"], case["path"])
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        dt = getattr(torch, case["dtype"])
        g, rank = case["groups"], case["rank"]
        x = torch.randn(case["n"], case["cin"], *case["size"], generator=gen).to(dt)
        w = torch.randn(case["cin"], case["cout"] // g, *case["kernel"], generator=gen).to(dt)
        conv = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[rank]
        acc = conv(x.double(), w.double(), None, case["stride"], case["pad"], case["opad"], g, case["dil"])
        env, args = {"torch": torch, "acc": acc}, []
        for nm, kind in case["inputs"]:
            if kind == "col":
                v = torch.randn(case["cout"], generator=gen)
                env[nm] = v.double().view(-1, *([1] * rank))
            elif kind == "scalar":
                v = env[nm] = 0.5
            else:  # an output-shaped residual with transposed strides
                v = torch.randn(acc.shape[::-1], generator=gen).permute(*range(acc.dim() - 1, -1, -1))
                env[nm] = v.double()
            args.append(v)
        ref = eval(case["expr"], env) if case["expr"] else acc
        on = lambda v: v.to(device) if torch.is_tensor(v) else v
        y = getattr(mod, case["fn"])(on(x), on(w), *map(on, args)).cpu()
        assert y.shape == ref.shape and y.dtype == dt, (y.shape, ref.shape, y.dtype)
        results[case["id"]] = ((y.double() - ref).norm() / ref.norm()).item()
    except Exception as e:
        results[case["id"]] = f"{type(e).__name__}: {e}"
json.dump(results, open(sys.argv[2], "w"))
'''


def _configs(spec, overrides):
    base = ct.default(spec)
    out = [base]
    for o in overrides:
        c = {**base, **o}
        if ct.check(spec, c) is None and c not in out:
            out.append(c)
    return out


def _run_cases(tmp, device, case_list):
    """Each case's configurations rendered and run on `device` ("cpu": the interpreter) against float64 torch on the
    CPU: {id: (relative error or the exception's text, tolerance)}."""
    cases = []
    for case in case_list:
        spec = _spec(case)
        for j, cfg in enumerate(_configs(spec, case[-1])):
            fn = f"ct_{case[0]}_{j}"
            r = ct.render(spec, cfg, fn)
            path = tmp / f"{fn}.py"
            path.write_text(HEADER + r.kernel_src + "\n\n" + r.launcher_src)
            _, rank, n, cin, cout, size, kernel, stride, pad, opad, dil, groups, dt, ep, _ = case
            cases.append(dict(id=f"{case[0]} {cfg}", fn=fn, path=str(path), rank=rank, n=n, cin=cin, cout=cout,
                              size=size, kernel=kernel, stride=stride, pad=pad, opad=opad, dil=dil, groups=groups,
                              dtype=dt, inputs=[(i.name, i.kind) for i in _inputs(spec)],
                              expr=EPILOGUES[ep][1] if ep else None, tol=2e-2 if dt != "float32" else 1e-5))
    (tmp / "driver.py").write_text(DRIVER)
    (tmp / "cases.json").write_text(json.dumps(cases))
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]))
    env.pop("TRITON_INTERPRET", None)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, str(tmp / "driver.py"), str(tmp / "cases.json"), str(tmp / "out.json"),
                           device], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp / "out.json").read_text())
    return {c["id"]: (results[c["id"]], c["tol"]) for c in cases}


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    return _run_cases(tmp_path_factory.mktemp("convt"), "cpu", CASES)


def _inputs(spec):
    return spec.epilogue.inputs if spec.epilogue else ()


def _bad(results):
    return {k: v for k, v in results.items() if isinstance(v[0], str) or not v[0] <= v[1]}


def test_interpreter_matches_float64_torch(interpreted):
    bad = _bad(interpreted)
    assert not bad, bad
    assert len(interpreted) >= len(CASES) + 4  # PHASED and plain variants both ran


# The same cases compiled for sm_90 on the GPU (`pytest -m gpu tests/test_kernels_conv_transpose.py`), plus layers at
# KernelBench-like sizes the interpreter cannot reach (a U-Net up-sampling layer, a strided 3-D layer with output
# padding and groups, a dilated 1-D layer).
GPU_CASES = CASES + [
    ("2d_up_64", 2, 4, 64, 32, (32, 32), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 1, "float32", "bias",
     [{"PHASED": False}]),
    ("2d_k3_bf16", 2, 2, 128, 64, (28, 28), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1, "bfloat16", "bias_relu_res", []),
    ("3d_g4_op1", 3, 2, 32, 32, (6, 12, 24), (3, 5, 7), (2, 2, 2), (1, 2, 3), (1, 1, 1), (1, 1, 1), 4, "float32", None,
     [{"PHASED": False}]),
    ("1d_dil3", 1, 4, 32, 64, (257,), (5,), (1,), (2,), (0,), (3,), 1, "float32", "bias", []),
]


@pytest.mark.gpu
@pytest.mark.skipif(cuda_gpu_count() == 0, reason="needs a CUDA GPU (run on the H200)")
def test_gpu_matches_float64_torch(tmp_path, gpu_to_itself):
    bad = _bad(_run_cases(tmp_path, "cuda", GPU_CASES))
    assert not bad, bad


def test_space_deterministic_default_valid_and_registered():
    assert FAMILIES["conv_transpose"] is ct
    for case in CASES:
        spec = _spec(case, "tf32x3" if case[12] == "float32" else "tf32")
        assert ct.space(spec) == ct.space(spec)
        assert ct.check(spec, ct.default(spec)) is None, (spec, ct.default(spec), ct.check(spec, ct.default(spec)))
        assert valid_space(ct, spec)
    # KernelBench-sized channels: the space keeps both variants and wide tiles
    big = ct.ConvTransposeSpec(2, (2, 2), (1, 1), (1, 1), (1, 1), 1, 64, 64, "float32", "float32", "tf32x3")
    valid = valid_space(ct, big)
    assert {c["PHASED"] for c in valid} == {False, True} and max(c["BM"] for c in valid) >= 128


def test_check_rules_say_why():
    spec = ct.ConvTransposeSpec(2, (2, 2), (0, 0), (0, 0), (1, 1), 1, 128, 128, "bfloat16", "bfloat16")
    ok = dict(BM=128, BN=64, BK=64, num_warps=4, num_stages=3, PHASED=True)
    assert ct.check(spec, ok) is None
    assert "multiple" in ct.check(spec, {**ok, "BK": 8}) or "at least 16" in ct.check(spec, {**ok, "BK": 8})
    assert "shared memory" in ct.check(spec, {**ok, "BM": 256, "BN": 128, "num_stages": 5, "num_warps": 8})
    assert "accumulator" in ct.check(spec, {**ok, "BM": 256, "BN": 128})
    assert "padding" in ct.check(dataclasses.replace(spec, c_out=8, c_in=8), ok)
    assert "stride 1" in ct.check(dataclasses.replace(spec, stride=(1, 1)), ok)
    assert "groups" in ct.check(dataclasses.replace(spec, groups=3), ok)
    bad = dataclasses.replace(spec, epilogue=Epilogue("acc + tl", (EpilogueInput("tl", "col"),)))
    assert "usable identifier" in ct.check(bad, ok)
    assert "kind" in ct.check(dataclasses.replace(spec, epilogue=Epilogue("acc + r", (EpilogueInput("r", "row"),))),
                              ok)


def test_rendered_configs_compile_for_sm90(tmp_path):
    """The compile stage (sm_90, no GPU) compiles both variants, fp32 strict and bf16, with an epilogue."""
    from workbench.core.records import PASS
    from workbench.devices.local import LocalDevice
    from workbench.problems import Problem

    path = tmp_path / "ct_problem.py"
    path.write_text(textwrap.dedent("""\
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
            def forward(self, x, w, b):
                return torch.relu(nn.functional.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1))
        def get_inputs():
            return [torch.randn(2, 32, 9, 9), torch.randn(32, 48, 3, 3), torch.randn(48)]
        def get_init_inputs():
            return []
        """))
    problem = Problem.load(path)
    calls, kernels = [], []
    for j, (dt, cfg) in enumerate([("float32", {"PHASED": True}), ("float32", {"PHASED": False, "BM": 64}),
                                   ("bfloat16", {"PHASED": True, "num_warps": 8})]):
        spec = ct.ConvTransposeSpec(2, (2, 2), (1, 1), (1, 1), (1, 1), 1, 32, 48, dt, dt, "tf32x3",
                                    Epilogue("tl.maximum(acc + b, 0.0)", (EpilogueInput("b", "col"),)))
        cfg = {**ct.default(spec), **cfg}
        assert ct.check(spec, cfg) is None, ct.check(spec, cfg)
        r = ct.render(spec, cfg, f"ct{j}")
        kernels.append(r.kernel_src + "\n\n" + r.launcher_src)
        cast = "" if dt == "float32" else ".to(torch.bfloat16)"
        calls.append(f"ct{j}(x{cast}, w{cast}, b).float()")
    model = ("\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x, w, b):\n"
             f"        return ({calls[0]} + {calls[1]} + {calls[2]}) / 3\n")
    cand = tmp_path / "cand.py"
    cand.write_text(HEADER + "\n\n".join(kernels) + model)
    dev = LocalDevice("cpu")
    try:
        rec = dev.compile(problem, cand)
    finally:
        dev.close()
    assert rec.verdict == PASS, rec.reason
    assert sorted(k["kernel"] for k in rec.data["kernels"]) == ["ct0_kernel", "ct1_kernel", "ct2_kernel"]


# ---------------------------------------------------------------------------------------------------------------
# The recogniser, through the offline proposer and the CPU ladder

SMALL_MODEL = """\
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cout, 3, stride=2, padding=1, output_padding=1)
        self.shift = nn.Parameter(torch.randn(cout, 1, 1))
    def forward(self, x):
        return torch.relu(self.up(x) + self.shift) * 0.5
def get_inputs():
    return [torch.randn(2, 6, 5, 7)]
def get_init_inputs():
    return [6, 10]
"""


@pytest.fixture(scope="module")
def cpu():
    from workbench.devices.local import LocalDevice

    dev = LocalDevice("cpu", timeouts={"compile": 120, "correctness": 120})
    yield dev
    dev.close()


def _climb(cpu, problem, n=2):
    from workbench.harness.ladder import Ladder
    from workbench.proposers.offline import OfflineProposer

    proposer = OfflineProposer(problem)
    cands = proposer.propose(n, seed=3)
    for cand in cands:
        ev = Ladder(cpu).evaluate(problem, cand, up_to="correctness")
        assert ev.ok, ([(s.name, s.reason) for s in ev.stages], cand.source)
    return proposer, cands


def test_small_model_fuses_bias_and_activation_and_is_correct(cpu, tmp_path):
    from workbench.problems import Problem
    from workbench.proposers.offline import OfflineProposer
    from workbench.proposers.partition import partition

    path = tmp_path / "convt_small.py"
    path.write_text(SMALL_MODEL)
    problem = Problem.load(path)
    proposer, cands = _climb(cpu, problem, n=1)
    groups = proposer.groups({})
    assert [g.family for g in groups] == ["conv_transpose"] and groups[0].fused_epilogue
    spec = groups[0].spec
    # PyTorch's default precision: cuDNN's transposed convolution runs tf32, so the kernel may too
    assert problem.effective_precision == "cudnn_tf32"
    assert spec.precision == "tf32" and spec.stride == (2, 2) and spec.output_padding == (1, 1)
    strict = OfflineProposer(Problem.load(path, precision="strict")).groups({})
    assert strict[0].spec.precision == "tf32x3"  # fp32-accurate where the problem asks for strict fp32
    assert [i.kind for i in spec.epilogue.inputs] == ["col", "col"]  # the conv's bias and the (C, 1, 1) shift
    assert "conv_transpose" in cands[0].source and proposer.fusion_points == [groups[0].nodes[0].name]
    split = partition(proposer.captured, proposer.precision, {groups[0].nodes[0].name: False})
    assert [g.family for g in split] == ["conv_transpose", "elementwise"] and not split[0].fused_epilogue


@pytest.mark.parametrize("name, overrides", [
    ("level1/57_conv_transposed_2D__square_input__square_kernel.py",
     {"batch_size": "2", "in_channels": "8", "out_channels": "8", "height": "9", "width": "7"}),
    ("level1/64_conv_transposed_1D.py", {"batch_size": "2", "in_channels": "6", "out_channels": "5", "length": "9"}),
])
def test_kernelbench_files_get_correct_candidates(cpu, name, overrides):
    from workbench.problems import Problem

    path = KERNELBENCH / name
    if not path.exists():
        pytest.skip(f"KernelBench development files not found at {KERNELBENCH}")
    proposer, _ = _climb(cpu, Problem.load(path, overrides=overrides), n=1)
    assert [g.family for g in proposer.groups({})] == ["conv_transpose"]
