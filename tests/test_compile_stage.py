"""The compile stage on the CPU: candidates traced on meta tensors, every Triton kernel compiled for sm_90, judged.

One CPU device for the module; its compile worker gets a fresh Triton cache so every kernel here is really compiled
(a warm cache would hide compiler behaviour and the worker restart after a crash).
"""
from __future__ import annotations

import textwrap

import pytest

from workbench.core.records import FAIL, INCONCLUSIVE, PASS
from workbench.devices.local import LocalDevice
from workbench.examples import EXAMPLES
from workbench.harness import compile as compile_stage
from workbench.harness.child import compile_probe
from workbench.problems import Problem

HEAD = "import torch\nimport triton\nimport triton.language as tl\n\n\n"

ELEMENTWISE = '''
@triton.jit
def _ssr(x_ptr, out_ptr, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x * scale + shift, 0.0), mask=mask)
'''

LAUNCH = "_ssr[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), self.scale, self.shift, BLOCK=1024)"


def ssr_candidate(forward: str, kernels: str = ELEMENTWISE, head: str = HEAD) -> str:
    """A candidate for scale_shift_relu (ModelNew(scale, shift)) whose forward body is `forward`."""
    body = textwrap.indent(textwrap.dedent(forward), " " * 8)
    return (head + textwrap.dedent(kernels) + "\n\nclass ModelNew(torch.nn.Module):\n"
            "    def __init__(self, scale, shift):\n        super().__init__()\n"
            "        self.scale = scale\n        self.shift = shift\n\n"
            f"    def forward(self, x):\n{body}\n")


MATMUL = '''
@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, IEEE: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a, mask=(rm[:, None] < M) & (rk[None, :] < K - k), other=0.0)
        y = tl.load(b, mask=(rk[:, None] < K - k) & (rn[None, :] < N), other=0.0)
        if IEEE:
            acc = tl.dot(x, y, acc, input_precision="ieee")
        else:
            acc = tl.dot(x, y, acc)
        a += BK * sak
        b += BK * sbk
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        grid = (triton.cdiv(M, {bm}), triton.cdiv(N, {bn}))
        _mm[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1),
                  BM={bm}, BN={bn}, BK={bk}, IEEE={ieee}, num_warps={warps}, num_stages={stages})
        return C
'''


def matmul_candidate(bm, bn, bk, warps, stages, ieee):
    return HEAD + MATMUL.format(bm=bm, bn=bn, bk=bk, warps=warps, stages=stages, ieee=ieee)


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    dev = LocalDevice("cpu")
    dev.compile_worker.env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton_cache"))
    yield dev
    dev.close()
    assert not dev.compile_worker.alive()


@pytest.fixture
def compile_source(device, tmp_path):
    """compile_source(problem, source) -> the compile stage's record for a candidate file with that source."""
    counter = iter(range(1000))

    def run(problem, source: str):
        path = tmp_path / f"cand_{next(counter)}.py"
        path.write_text(source)
        return device.compile(problem if isinstance(problem, Problem) else Problem.load(problem), path)

    return run


# ---------------------------------------------------------------- the shipped examples, full size

@pytest.mark.parametrize("ex", EXAMPLES, ids=lambda e: e.problem)
def test_examples_compile_at_full_size(device, ex):
    rec = device.compile(Problem.load(ex.problem), ex.path)
    assert rec.name == "compile" and rec.verdict == PASS, rec.reason
    assert rec.data["target"] == "sm_90" and rec.data["trace_error"] is None
    assert rec.data["n_kernels"] == len(rec.data["kernels"]) == 1
    k = rec.data["kernels"][0]
    assert k["reg"] > 0 and k["stack"] == 0 and k["local"] == 0
    assert rec.flags == []  # no spills
    assert rec.reason == f"1 kernel build(s) for sm_90: {k['kernel']}"
    assert rec.cost_s > 0
    if ex.problem == "matmul_bf16":
        assert k["kernel"] == "_matmul"
        assert k["wgmma"] is True  # Hopper matrix units for a bf16 tl.dot on sm_90
        assert (k["num_warps"], k["num_stages"]) == (8, 3)
        assert k["constexprs"]["BM"] == 128 and k["constexprs"]["BN"] == 256 and k["constexprs"]["BK"] == 64
        assert 0 < k["shared_bytes"] <= compile_stage.MAX_SHARED_PER_BLOCK
    else:
        assert k["wgmma"] is False and k["mma"] is False  # elementwise and row kernels use no matrix units
    if ex.problem == "softmax_rows":
        assert k["constexprs"]["BLOCK"] == 8192 and k["num_warps"] == 8  # dim 8192 at full size


# ---------------------------------------------------------------- resources: spills and shared memory

def test_fp32_matmul_big_tile_spills(compile_source):
    # 256x128 fp32 accumulator over 128 threads = 256 floats per thread before any operand: ptxas must spill.
    # (The 256x256x64 tile spills too, but costs ptxas ~90 s on 2 cores; this one ~2 s.)
    rec = compile_source("matmul_fp32", matmul_candidate(256, 128, 16, warps=4, stages=1, ieee=True))
    assert rec.verdict == PASS, rec.reason  # spills are slow, not wrong: a warning, not a failure
    k = rec.data["kernels"][0]
    assert k["kernel"] == "_mm" and k["num_warps"] == 4
    assert k["reg"] == 255 or k["stack"] > 0
    assert k["stack"] > 0
    assert k["wgmma"] is False  # ieee fp32 dot: no tensor cores
    spills = [f for f in rec.flags if f["check"] == "spills"]
    assert len(spills) == 1 and spills[0]["severity"] == "warning"
    assert f"_mm: {k['stack']} B stack" in spills[0]["reason"]


def test_too_much_shared_memory_cannot_launch(compile_source):
    # bf16 256x256x128 tiles, 4 stages: (256*128 + 128*256) * 2 B * 4 stages = 512 KiB of shared memory.
    rec = compile_source("matmul_bf16", matmul_candidate(256, 256, 128, warps=8, stages=4, ieee=False))
    assert rec.verdict == FAIL
    # Triton 3.6 compiles it (the out-of-resources check happens only when a real GPU loads the kernel); the
    # stage's own sm_90 limits reject it.
    k = rec.data["kernels"][0]
    assert k["shared_bytes"] > compile_stage.MAX_SHARED_PER_BLOCK == 227 * 1024
    assert rec.reason.startswith("cannot launch on sm_90: ")
    assert f"_mm: {k['shared_bytes']} B shared memory > 232448 B" in rec.reason


# ---------------------------------------------------------------- errors, autotune, tracing

def test_triton_compile_error(compile_source):
    kernels = ELEMENTWISE.replace("tl.maximum(x * scale + shift, 0.0)", "tl.no_such_function(x)")
    rec = compile_source("scale_shift_relu", ssr_candidate(f"out = torch.empty_like(x)\n{LAUNCH}\nreturn out",
                                                           kernels=kernels))
    assert rec.verdict == FAIL
    assert rec.reason.startswith("compile error: _ssr: ")
    assert "no_such_function" in rec.reason
    assert rec.data["kernels"] == []


def test_triton_shape_mismatch_is_a_compile_error(compile_source):
    kernels = ELEMENTWISE.replace("x = tl.load(x_ptr + offs, mask=mask)",
                                  "x = tl.load(x_ptr + offs, mask=mask) + tl.zeros((BLOCK // 2,), dtype=tl.float32)")
    assert kernels != ELEMENTWISE
    rec = compile_source("scale_shift_relu", ssr_candidate(f"out = torch.empty_like(x)\n{LAUNCH}\nreturn out",
                                                           kernels=kernels))
    assert rec.verdict == FAIL and rec.reason.startswith("compile error: _ssr: ")
    assert "incompatible" in rec.reason.lower() or "shape" in rec.reason.lower()


AUTOTUNED = '''
@triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=1),
                          triton.Config({"BLOCK": 256}, num_warps=2),
                          triton.Config({"BLOCK": 512}, num_warps=4)], key=["n"])
@triton.jit
def _ssr(x_ptr, out_ptr, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x * scale + shift, 0.0), mask=mask)
'''


def test_autotune_every_config_compiled(compile_source):
    rec = compile_source("scale_shift_relu", ssr_candidate(
        "out = torch.empty_like(x)\n"
        "_ssr[lambda meta: (triton.cdiv(x.numel(), meta['BLOCK']),)](x, out, x.numel(), self.scale, self.shift)\n"
        "return out", kernels=AUTOTUNED))
    assert rec.verdict == PASS, rec.reason
    assert rec.data["n_kernels"] == 3
    ks = rec.data["kernels"]
    assert [(k["constexprs"]["BLOCK"], k["num_warps"]) for k in ks] == [(128, 1), (256, 2), (512, 4)]
    assert all(k["kernel"] == "_ssr" and k["reg"] > 0 for k in ks)
    assert rec.reason == "3 kernel build(s) for sm_90: _ssr"


# Note: the candidates below stay clear of torch elementwise ops on meta tensors (x * s, relu, abs) before their
# launches: the first such op imports torch._dynamo, which replaces torch.manual_seed, and the worker then reports
# tampering (see test_elementwise_torch_op_on_meta_is_not_tampering). sum/max/softmax/empty_like are safe.

def test_forward_reading_values_is_inconclusive(compile_source):
    rec = compile_source("scale_shift_relu", ssr_candidate(
        f"if x.sum().item() == 0:\n    return x\nout = torch.empty_like(x)\n{LAUNCH}\nreturn out"))
    assert rec.verdict == INCONCLUSIVE
    assert "could not trace kernel launches on meta tensors" in rec.reason and "meta" in rec.reason
    assert "item" in rec.reason and "correctness on a device decides" in rec.reason
    assert rec.data["kernels"] == [] and "item" in rec.data["trace_error"]


def test_forward_stopping_after_a_launch_passes_with_note(compile_source):
    rec = compile_source("scale_shift_relu", ssr_candidate(
        f"out = torch.empty_like(x)\n{LAUNCH}\nif out.sum().item() < 0:\n    return x\nreturn out"))
    assert rec.verdict == PASS, rec.reason
    assert rec.data["n_kernels"] == 1
    assert "forward stopped early on meta tensors" in rec.reason


def test_pure_torch_candidate(compile_source):
    rec = compile_source("softmax_rows", HEAD + "class ModelNew(torch.nn.Module):\n"
                                                "    def forward(self, x):\n        return torch.softmax(x, dim=-1)\n")
    assert rec.verdict == PASS, rec.reason
    assert rec.reason == "no Triton kernel launched (nothing to compile)"
    assert rec.data["n_kernels"] == 0 and rec.data["trace_error"] is None


def test_elementwise_torch_op_on_meta_is_not_tampering(compile_source):
    rec = compile_source("scale_shift_relu", ssr_candidate("return torch.relu(x * self.scale + self.shift)",
                                                           kernels=""))
    # torch's first elementwise op on meta tensors imports torch._dynamo, which wraps torch.manual_seed: the worker
    # loads dynamo before its tamper snapshot, so this is not the candidate's doing
    assert rec.verdict == PASS, rec.reason


def test_candidate_without_modelnew(compile_source):
    rec = compile_source("scale_shift_relu", HEAD + "class Model(torch.nn.Module):\n    pass\n")
    assert rec.verdict == FAIL
    assert "does not define class ModelNew(torch.nn.Module)" in rec.reason


def test_constructor_mismatch_fails(compile_source):
    # scale_shift_relu's Model takes (scale, shift); this ModelNew takes nothing.
    rec = compile_source("scale_shift_relu", HEAD + "class ModelNew(torch.nn.Module):\n"
                                                    "    def __init__(self):\n        super().__init__()\n")
    assert rec.verdict == FAIL
    assert "constructor does not accept get_init_inputs()" in rec.reason


def test_crashing_candidate_then_worker_restarts(device, compile_source):
    restarts = device.compile_worker.restarts
    rec = compile_source("scale_shift_relu", "import os\nos._exit(3)\n")
    assert rec.verdict == FAIL
    assert rec.reason.startswith("compile crashed") and "crashed" in rec.reason and "exit code 3" in rec.reason
    assert device.compile_worker.restarts == restarts + 1
    assert not device.compile_worker.alive()
    good = ssr_candidate(f"out = torch.empty_like(x)\n{LAUNCH}\nreturn out").replace("BLOCK=1024", "BLOCK=2048")
    rec = compile_source("scale_shift_relu", good)
    assert rec.verdict == PASS, rec.reason
    assert rec.data["n_kernels"] == 1 and rec.data["kernels"][0]["constexprs"]["BLOCK"] == 2048
    assert device.compile_worker.alive()


# ---------------------------------------------------------------- judge and limits, without a worker

def kernel_facts(**kw):
    k = {"kernel": "k", "num_warps": 4, "num_stages": 2, "shared_bytes": 1024, "reg": 64, "stack": 0, "local": 0}
    k.update(kw)
    return k


def test_launch_limits():
    assert compile_stage.launch_problems(kernel_facts()) == []
    assert compile_stage.launch_problems(kernel_facts(num_warps=64, reg=16)) == ["k: 2048 threads per block > 1024"]
    assert compile_stage.launch_problems(kernel_facts(shared_bytes=232448)) == []
    assert compile_stage.launch_problems(kernel_facts(shared_bytes=232449)) == ["k: 232449 B shared memory > 232448 B"]
    assert compile_stage.launch_problems(kernel_facts(num_warps=8, reg=255)) == []  # 65280 registers fit
    assert compile_stage.launch_problems(kernel_facts(num_warps=16, reg=255)) == [
        "k: 255 registers x 512 threads > 65536 per SM"]
    assert compile_stage.launch_problems(kernel_facts(num_warps=8, reg=None)) == []  # no cuobjdump: unknown


def test_judge_outcomes():
    ok = {"kernels": [kernel_facts()], "compile_errors": [], "trace_error": None}
    assert compile_stage.judge(ok, 1.5).verdict == PASS and compile_stage.judge(ok, 1.5).cost_s == 1.5
    rec = compile_stage.judge({"error": "timed out after 180 s", "timed_out": True, "traceback": "tb"}, 180.0)
    assert rec.verdict == FAIL and rec.reason == "compile timed out (timed out after 180 s)" and rec.data == {
        "traceback": "tb"}
    rec = compile_stage.judge({"tampered": ["time.perf_counter"], "kernels": [], "compile_errors": []}, 1.0)
    assert rec.verdict == FAIL and rec.reason == "tampering: importing the candidate changed time.perf_counter"
    rec = compile_stage.judge({**ok, "compile_errors": ["k: CompilationError: x"]}, 1.0)
    assert rec.verdict == FAIL and rec.reason == "compile error: k: CompilationError: x"
    rec = compile_stage.judge({**ok, "kernels": [kernel_facts(local=16)]}, 1.0)
    assert rec.verdict == PASS and [f["check"] for f in rec.flags] == ["spills"]


def test_ptx_facts():
    facts = compile_probe.ptx_facts("wgmma.mma_async.sync.aligned\ncp.async.bulk.tensor.2d\nld.global.nc.v4.b32")
    assert facts["wgmma"] and facts["tma"] and facts["cp_async"] and facts["ld_global_v4"]
    assert not facts["mma"] and not facts["local_memory"]
    assert compile_probe.ptx_facts("mma.sync.aligned.m16n8k16\n.local .align 4")["mma"] is True
    assert compile_probe.ptx_facts("")["wgmma"] is False


def test_compile_from_a_script_that_imports_torch_at_its_top(tmp_path):
    """A researcher's script importing workbench (and so torch) at its top: the spawned worker re-imports it before
    its private TMPDIR is set, which had fixed Python's temp dir on the machine's /tmp (read-only under isolation)
    and failed every ptxas call. The compile stage passes from such a script."""
    import subprocess
    import sys

    script = tmp_path / "research.py"
    script.write_text(textwrap.dedent('''
        from workbench.core.candidate import Candidate
        from workbench.devices.local import LocalDevice
        from workbench.examples import EXAMPLES
        from workbench.harness.ladder import Ladder
        from workbench.problems import Problem
        from workbench.proposers.offline import OfflineProposer  # noqa: F401 (torch, triton and their temp dir)
        if __name__ == "__main__":
            ex = EXAMPLES[0]
            problem = Problem.load(ex.problem, list(ex.cpu_overrides))
            ev = Ladder(LocalDevice("cpu")).evaluate(problem, Candidate.from_file(ex.path), up_to="compile")
            print([(s.name, s.verdict, s.reason) for s in ev.stages])
            raise SystemExit(0 if ev.ok else 1)
    '''))
    import os
    from pathlib import Path

    import workbench
    root = str(Path(workbench.__file__).parents[1])
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": root})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Read-only" not in proc.stdout
