"""The convolution family and its recogniser: the configuration space and its checks, rendered kernels under the
Triton interpreter (a subprocess, TRITON_INTERPRET=1) against float64 torch on awkward small cases, a compile for
sm_90 through the compile stage, and convolution problems through the offline proposer and the CPU ladder."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workbench.devices import cuda_gpu_count
from workbench.kernels import conv
from workbench.kernels.base import Epilogue, EpilogueInput, valid_space

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"
KERNELBENCH = Path(__file__).resolve().parents[1] / ".." / "shared" / "kernelbench"
BIAS_RELU = Epilogue("tl.maximum(acc + b, 0.0)", (EpilogueInput("b", "col"),))
ALL_KINDS = Epilogue("(acc + b) * alpha + res", (EpilogueInput("b", "col"), EpilogueInput("alpha", "scalar"),
                                                 EpilogueInput("res", "full")))


def _three(v, dims, fill):
    v = tuple(v) if isinstance(v, (tuple, list)) else (v,) * dims
    return (fill,) * (3 - dims) + v


def make_spec(dims, c_in, c_out, k, stride=1, pad=0, dil=1, groups=1, dtype="float32", epilogue=BIAS_RELU,
              precision="tf32x3", out_dtype=None):
    return conv.ConvSpec(dtype, out_dtype or dtype, dims, c_in, c_out, _three(k, dims, 1), _three(stride, dims, 1),
                         _three(pad, dims, 0), _three(dil, dims, 1), groups, precision, epilogue)


# (dims, C_in, C_out, kernel, stride, padding, dilation, groups, dtype, epilogue, input spatial shape)
CASES = [
    (1, 3, 5, 3, 2, 1, 1, 1, "float32", BIAS_RELU, (11,)),                # 1-D, odd sizes, strided
    (1, 4, 4, 3, 1, 2, 3, 2, "float32", None, (13,)),                     # dilation 3, groups=2, no bias
    (2, 3, 8, 3, 1, 1, 1, 1, "float32", BIAS_RELU, (7, 9)),               # the common 3x3 'same' layer
    (2, 4, 6, 1, 1, 0, 1, 1, "float32", ALL_KINDS, (5, 6)),               # 1x1, every epilogue kind
    (2, 2, 4, 7, 1, 3, 1, 1, "float32", None, (9, 8)),                    # 7x7
    (2, 3, 4, 2, 3, 0, 1, 1, "float32", BIAS_RELU, (8, 7)),               # stride > kernel
    (2, 6, 6, 3, 2, 1, 1, 6, "float32", None, (9, 9)),                    # depthwise, strided
    (2, 4, 8, 3, 1, 1, 1, 4, "float32", BIAS_RELU, (6, 7)),               # depthwise with multiplier 2
    (2, 4, 6, (2, 3), (1, 2), (1, 0), (2, 1), 2, "float32", BIAS_RELU, (7, 9)),  # asymmetric, dilation 2, groups 2
    (2, 40, 16, 3, 1, 1, 1, 1, "float32", BIAS_RELU, (5, 5)),             # channels past one BK slab
    (2, 4, 8, 3, 1, 1, 1, 1, "bfloat16", BIAS_RELU, (6, 7)),              # bf16
    (3, 3, 4, (2, 3, 1), (1, 2, 1), (1, 0, 1), (2, 1, 1), 1, "float32", BIAS_RELU, (5, 6, 4)),  # 3-D asymmetric
    (3, 2, 4, 3, 1, 1, 1, 2, "float16", None, (4, 5, 5)),                 # 3-D, fp16, groups 2
]


def _configs(spec, s: int):
    """The default, then one valid configuration (the smallest tile) of another algorithm, taking turns by case."""
    valid = valid_space(conv, spec)
    out = [conv.default(spec)]
    others = [a for a in conv.ALGOS if a != out[0]["ALGO"] and any(c["ALGO"] == a for c in valid)]
    if others:
        mine = [c for c in valid if c["ALGO"] == others[s % len(others)]]
        out.append(min(mine, key=lambda c: (c["BM"] * c["BN"] * c["BK"], c["num_warps"], c["num_stages"])))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Configuration spaces and checks

TYPICAL = [make_spec(2, 3, 64, 3, pad=1), make_spec(2, 64, 128, 3, dtype="bfloat16"),
           make_spec(2, 64, 64, 3, groups=64, epilogue=None), make_spec(1, 64, 128, 3, precision="tf32"),
           make_spec(3, 3, 64, (3, 3, 1), epilogue=ALL_KINDS), make_spec(2, 64, 128, 1, precision="ieee")]


@pytest.mark.parametrize("spec", TYPICAL, ids=str)
def test_space_deterministic_and_default_valid(spec):
    assert conv.space(spec) == conv.space(spec)
    valid = valid_space(conv, spec)
    assert valid and len(valid) == len({json.dumps(c, sort_keys=True) for c in valid})
    assert conv.default(spec) in conv.space(spec) and conv.check(spec, conv.default(spec)) is None
    assert {c["ALGO"] for c in valid} >= {"gemm", "gemm_tap"}


def test_every_valid_configuration_renders_and_checks_deterministically():
    spec = make_spec(2, 40, 24, 3, stride=2, pad=1, groups=2, epilogue=ALL_KINDS)
    valid = valid_space(conv, spec)
    assert len(valid) > 50 and {c["ALGO"] for c in valid} == {"gemm", "gemm_tap", "gemm_cl", "library"}
    for cfg in valid:
        assert conv.check(spec, cfg) is None and conv.check(spec, dict(cfg)) is None
        r = conv.render(spec, cfg, "cv")
        compile(HEADER + r.kernel_src + "\n\n" + r.launcher_src, "<conv>", "exec")
        if cfg["ALGO"] == "library":  # the conv is torch's (the harness's precision), the epilogue a pointwise kernel
            assert "torch.nn.functional.conv2d(x, w, None, (2, 2), (1, 1), (1, 1), 2)" in r.launcher_src
            assert "tl.dot" not in r.kernel_src
        else:
            assert 'input_precision="tf32x3"' in r.kernel_src
    dw = make_spec(2, 8, 8, 3, pad=1, groups=8)
    assert any(c["ALGO"] == "direct" for c in valid_space(conv, dw)) and conv.default(dw)["ALGO"] == "direct"


def test_check_rejects():
    spec = make_spec(2, 64, 128, 3, dtype="bfloat16")
    ok = dict(ALGO="gemm", BM=128, BN=128, BK=64, GROUP_M=8, num_warps=8, num_stages=3)
    assert conv.check(spec, ok) is None
    assert "at least 16" in conv.check(spec, dict(ok, BN=8))
    assert "powers of two" in conv.check(spec, dict(ok, BM=96))
    assert "accumulator" in conv.check(spec, dict(ok, BM=256, BN=128, num_warps=4))
    assert "direct kernel" in conv.check(spec, dict(ok, ALGO="direct", BN=8, BK=1, num_stages=1))  # 64 channels
    assert "wasted columns" in conv.check(make_spec(2, 3, 16, 3), dict(ok, BN=64))
    assert "wasted products" in conv.check(make_spec(2, 3, 16, 3), dict(ok, BN=16, BK=64))
    assert "tf32x3" in conv.check(make_spec(2, 64, 128, 3), dict(ok, BM=32, BN=128, BK=64, num_warps=4))
    assert "ieee" in conv.check(make_spec(2, 64, 128, 3, precision="ieee"), dict(ok, BM=64, BN=64, num_warps=4))
    assert "groups" in conv.check(make_spec(2, 6, 4, 3, groups=4), ok)
    assert "kind" in conv.check(make_spec(2, 8, 8, 3, epilogue=Epilogue("acc + r", (EpilogueInput("r", "row"),))),
                                ok)
    assert "dtype" in conv.check(make_spec(2, 8, 8, 3, dtype="int8"), ok)


# ---------------------------------------------------------------------------------------------------------------
# Rendered kernels under the interpreter

DRIVER = r'''
import importlib.util, json, os, sys
device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
assert (os.environ.get("TRITON_INTERPRET") == "1") == (device == "cpu")
import torch
if device == "cpu":
    from workbench.harness.child import interpreter_fixes
    interpreter_fixes.apply()
else:  # the library algorithm runs cuDNN under the reference's precision: strict, as the fp32 specs here ask
    torch.backends.cudnn.allow_tf32 = False
torch.set_num_threads(1)
gen = torch.Generator().manual_seed(0)
results = {}
for case in json.load(open(sys.argv[1])):
    try:
        spec = importlib.util.spec_from_file_location(case["fn"], case["path"])
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        dims, dt = case["dims"], getattr(torch, case["dtype"])
        x = torch.randn(2, case["c_in"], *case["shape"], generator=gen).to(dt)
        w = torch.randn(case["c_out"], case["c_in"] // case["groups"], *case["kernel"][3 - dims:], generator=gen).to(dt)
        f = getattr(torch.nn.functional, f"conv{dims}d")
        acc = f(x.double(), w.double(), None, case["stride"][3 - dims:], case["padding"][3 - dims:],
                case["dilation"][3 - dims:], case["groups"])
        env, args = {"torch": torch}, []
        for name, kind in case["inputs"]:
            v = {"col": lambda: torch.randn(case["c_out"], generator=gen), "scalar": lambda: 0.75,
                 "full": lambda: torch.randn(acc.shape[::-1], generator=gen).permute(*range(acc.dim() - 1, -1, -1))
                 }[kind]()
            args.append(v)
            env[name] = v.double() if torch.is_tensor(v) else v
        if case["inputs"] and case["inputs"][0][1] == "col":
            env["b"] = env["b"].view(-1, *([1] * dims))
        ref = eval(case["torch_expr"], env, {"acc": acc}) if case["torch_expr"] else acc
        on = lambda v: v.to(device) if torch.is_tensor(v) else v
        out = getattr(mod, case["fn"])(on(x), on(w), *map(on, args)).cpu()
        assert out.shape == ref.shape and out.dtype == getattr(torch, case["out_dtype"]), (out.shape, ref.shape)
        results[case["id"]] = ((out.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    except Exception as e:  # reported per case by the test
        results[case["id"]] = f"{type(e).__name__}: {e}"
json.dump(results, open(sys.argv[2], "w"))
'''

TORCH_EXPR = {id(BIAS_RELU): "torch.relu(acc + b)", id(ALL_KINDS): "(acc + b) * alpha + res"}


def _run_rendered(tmp_path, device: str, cases_in=CASES):
    """Every case's default and one other algorithm, rendered and run on `device` ("cpu": the interpreter) against
    float64 torch on the CPU: {case id: relative error or the exception's text}, with each case's tolerance."""
    cases = []
    for s, (dims, c_in, c_out, k, stride, pad, dil, groups, dt, ep, shape) in enumerate(cases_in):
        spec = make_spec(dims, c_in, c_out, k, stride, pad, dil, groups, dt, ep)
        for c, cfg in enumerate(_configs(spec, s)):
            fn = f"conv_{s}_{c}"
            r = conv.render(spec, cfg, fn)
            path = tmp_path / f"{fn}.py"
            path.write_text(HEADER + r.kernel_src + "\n\n" + r.launcher_src)
            cases.append(dict(id=f"{fn} {spec} {cfg} {shape}", path=str(path), fn=fn, dims=dims, c_in=c_in,
                              c_out=c_out, kernel=spec.kernel, stride=spec.stride, padding=spec.padding,
                              dilation=spec.dilation, groups=groups, dtype=dt, out_dtype=spec.out_dtype,
                              shape=shape, inputs=[(i.name, i.kind) for i in (ep.inputs if ep else ())],
                              torch_expr=TORCH_EXPR.get(id(ep)), tol=1e-5 if dt == "float32" else 1e-2))
    (tmp_path / "driver.py").write_text(DRIVER)
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TRITON_INTERPRET", None)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "cases.json"),
                           str(tmp_path / "results.json"), device], env=env, capture_output=True, text=True,
                          timeout=480)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    return cases, {c["id"]: (results[c["id"]], c["tol"]) for c in cases}


def _bad(results):
    return {k: v for k, (v, tol) in results.items() if isinstance(v, str) or not v < tol}


def test_rendered_kernels_match_torch(tmp_path):
    cases, results = _run_rendered(tmp_path, "cpu")
    assert len(cases) >= 20 and {c["id"].split("'ALGO': '")[1].split("'")[0] for c in cases} == set(conv.ALGOS)
    bad = _bad(results)
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


# The same cases compiled for sm_90 and run on the GPU (`pytest -m gpu tests/test_kernels_conv.py`), plus layers at
# sizes the interpreter cannot reach: ResNet-like 3x3 and 1x1 layers, a strided 7x7 stem, a wide depthwise layer.
GPU_CASES = CASES + [
    (2, 64, 64, 3, 1, 1, 1, 1, "float32", BIAS_RELU, (56, 56)),
    (2, 3, 64, 7, 2, 3, 1, 1, "float32", None, (112, 112)),
    (2, 256, 64, 1, 1, 0, 1, 1, "bfloat16", ALL_KINDS, (28, 28)),
    (2, 128, 128, 3, 2, 1, 1, 128, "float32", BIAS_RELU, (28, 28)),
    (3, 16, 32, 3, 1, 1, 1, 1, "float16", BIAS_RELU, (8, 16, 16)),
    (1, 64, 128, 5, 1, 4, 2, 1, "float32", None, (500,)),
]


@pytest.mark.gpu
@pytest.mark.skipif(cuda_gpu_count() == 0, reason="needs a CUDA GPU (run on the H200)")
def test_gpu_rendered_kernels_match_torch(tmp_path, gpu_to_itself):
    cases, results = _run_rendered(tmp_path, "cuda", GPU_CASES)
    bad = _bad(results)
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


# ---------------------------------------------------------------------------------------------------------------
# Through the proposer

MODELS = {
    "conv_bias_relu": '''
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3, padding=1)
            def forward(self, x):
                return torch.relu(self.conv(x)) * 2.0
        def get_inputs():
            return [torch.randn(2, 3, 9, 11)]
        def get_init_inputs():
            return []
    ''',
    "depthwise": '''
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(6, 6, 3, stride=2, padding=1, groups=6, bias=False)
            def forward(self, x):
                return self.conv(x)
        def get_inputs():
            return [torch.randn(2, 6, 9, 9)]
        def get_init_inputs():
            return []
    ''',
}


@pytest.fixture(scope="module")
def cpu():
    from workbench.devices.local import LocalDevice

    dev = LocalDevice("cpu", timeouts={"compile": 120, "correctness": 120})
    yield dev
    dev.close()


def _problem(tmp_path, name):
    from workbench.problems import Problem

    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(MODELS[name]))
    return Problem.load(path)


def _ladder_ok(cpu, problem, cand):
    from workbench.harness.ladder import Ladder

    ev = Ladder(cpu).evaluate(problem, cand, up_to="correctness")
    assert ev.ok, [(s.name, s.reason) for s in ev.stages]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_conv_models_get_correct_conv_candidates(cpu, tmp_path, name):
    from workbench.proposers.offline import OfflineProposer

    problem = _problem(tmp_path, name)
    prop = OfflineProposer(problem)
    groups = prop.groups({})
    assert [g.family for g in groups] == ["conv"]
    assert groups[0].fused_epilogue == (name == "conv_bias_relu")
    assert prop.fusion_points == (["convolution"] if name == "conv_bias_relu" else [])
    for cand in prop.propose(2, seed=1):
        assert '"g0:conv' in cand.source
        _ladder_ok(cpu, problem, cand)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_algorithm_moves_switch_the_conv_and_the_library_candidate_is_correct(cpu, tmp_path, name):
    """The "algo:" moves come first from the root; the library one keeps cuDNN's (here torch's) conv and generates
    the epilogue kernel only (none when there is no epilogue: then it is plain torch, and says so by having none)."""
    import random as _random

    from workbench.proposers.offline import OfflineProposer

    problem = _problem(tmp_path, name)
    prop = OfflineProposer(problem)
    root = prop.default_choice()
    moves = prop.plain_moves(root, _random.Random(0), k=8)
    algos = [label for label, _ in moves if label.startswith("algo:")]
    assert algos and algos[0] == "algo:library", [m[0] for m in moves]
    library = dict(moves)["algo:library"]
    cand = prop.render(library)
    assert "torch.nn.functional.conv2d(x, w, None" in cand.source
    assert cand.source.count("@triton.jit") == (2 if name == "conv_bias_relu" else 0)
    _ladder_ok(cpu, problem, cand)


def test_compiles_for_sm90(tmp_path):
    """One configuration per algorithm of a proposer candidate compiles for sm_90 (no GPU) in the compile stage."""
    from workbench.core.records import PASS
    from workbench.devices.local import LocalDevice
    from workbench.proposers.choice import Choice, canonical_json
    from workbench.proposers.offline import OfflineProposer

    problem = _problem(tmp_path, "conv_bias_relu")
    prop = OfflineProposer(problem)
    g = prop.groups({"convolution": True})[0]
    rng = random.Random(0)
    picks = [conv.default(g.spec)] + [rng.choice([c for c in prop.group_space(g) if c["ALGO"] == a])
                                      for a in ("gemm", "gemm_tap", "gemm_cl", "direct", "library")]
    dev = LocalDevice("cpu")
    try:
        for cfg in picks:
            cand = prop.render(Choice((("convolution", True),), ((g.gid, canonical_json(cfg)),)))
            rec = dev.compile(problem, cand.write())
            assert rec.verdict == PASS, (cfg, rec.reason)
    finally:
        dev.close()


def test_transposed_convolutions_go_to_their_own_family(tmp_path):
    """A transposed convolution is not this family's but conv_transpose's; reflect padding stays a pad op in front of a
    padding-free convolution."""
    from workbench.problems import Problem
    from workbench.proposers.offline import OfflineProposer

    path = tmp_path / "tconv.py"
    path.write_text(textwrap.dedent('''
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.up = nn.ConvTranspose2d(4, 4, 2, stride=2)
                self.conv = nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect")
            def forward(self, x):
                return self.conv(self.up(x))
        def get_inputs():
            return [torch.randn(1, 4, 5, 5)]
        def get_init_inputs():
            return []
    '''))
    groups = OfflineProposer(Problem.load(path)).groups({})
    assert [g.family for g in groups] == ["conv_transpose", "conv"] and groups[1].spec.padding == (0, 0, 0)


KERNELBENCH_CASES = {
    "level1/67_conv_standard_1D.py": ["batch_size=2", "in_channels=5", "out_channels=6", "length=37"],
    "level2/4_Conv2d_Mish_Mish.py": ["batch_size=2", "in_channels=3", "out_channels=5", "height=9", "width=9"],
}


@pytest.mark.parametrize("rel", sorted(KERNELBENCH_CASES))
def test_kernelbench_convolutions(cpu, rel):
    from workbench.problems import Problem
    from workbench.proposers.offline import OfflineProposer

    path = KERNELBENCH / rel
    if not path.exists():
        pytest.skip(f"KernelBench development files not found at {KERNELBENCH}")
    problem = Problem.load(path, KERNELBENCH_CASES[rel])
    prop = OfflineProposer(problem)
    assert "conv" in [g.family for g in prop.groups({})]
    for cand in prop.propose(2, seed=3):
        _ladder_ok(cpu, problem, cand)
