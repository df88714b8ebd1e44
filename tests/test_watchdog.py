"""A candidate that hangs is rejected within seconds at every stage, on the CPU device with its default timeouts:
while it is imported, constructed or traced on meta tensors (the compile stage's "trace" window), while it is
constructed on the device, and in a call of its forward (the device stage's windows, a floor or a multiple of the
reference's measured time). The worker is replaced and the next candidate runs."""
from __future__ import annotations

import time

import pytest

from workbench.core.candidate import Candidate
from workbench.core.records import FAIL
from workbench.devices.local import DEFAULT_TIMEOUTS, LocalDevice
from workbench.examples import EXAMPLES
from workbench.harness.ladder import Ladder
from workbench.problems import Problem

LIMIT_S = 30.0  # the goal: a hang costs at most this at any stage
PROBLEM = ("scale_shift_relu", ["batch_size=4", "dim=64"])

TEMPLATE = '''import time

import torch
import triton
import triton.language as tl


@triton.jit
def _scale_shift_relu(x_ptr, out_ptr, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x * scale + shift, 0.0), mask=mask)


def _off_meta():
    return torch.empty(0).device.type != "meta"  # the compile stage builds and traces on meta tensors


class ModelNew(torch.nn.Module):
    def __init__(self, scale, shift):
        super().__init__()
        self.scale, self.shift = scale, shift
        {init}

    def forward(self, x):
        {forward}
        out = torch.empty_like(x)
        _scale_shift_relu[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), self.scale, self.shift, BLOCK=256)
        return out
'''
SLEEP = "time.sleep(10 ** 6)"


def _case(init: str = "pass", forward: str = "pass") -> Candidate:
    return Candidate(TEMPLATE.format(init=init, forward=forward))


@pytest.fixture(scope="module")
def cpu():
    dev = LocalDevice("cpu")  # the default timeouts: what the goal is about
    yield dev
    dev.close()


def _timed(cpu, cand: Candidate):
    """The ladder up to correctness on warm workers (a restart after the previous kill is not this one's cost)."""
    cpu.compile_worker.start()
    cpu.worker.start()
    t0 = time.perf_counter()
    ev = Ladder(cpu).evaluate(Problem.load(*PROBLEM), cand, up_to="correctness")
    return ev, time.perf_counter() - t0


def test_the_default_windows_are_seconds_and_kernel_compiles_get_longer():
    assert DEFAULT_TIMEOUTS["trace"] <= 20 and DEFAULT_TIMEOUTS["call"] <= 20
    assert DEFAULT_TIMEOUTS["compile"] > DEFAULT_TIMEOUTS["trace"]


@pytest.mark.parametrize("where", ["init", "forward"])
def test_a_hang_while_tracing_is_rejected_at_the_compile_stage(cpu, where):
    ev, wall = _timed(cpu, _case(**{where: SLEEP}))
    last = ev.stages[-1]
    assert last.name == "compile" and last.verdict == FAIL, (last.name, last.reason)
    assert "timed out" in last.reason and "tracing the candidate" in last.reason and "watchdog" in last.reason
    assert wall <= LIMIT_S, wall


def test_a_hang_constructing_on_the_device_is_rejected_at_correctness(cpu):
    ev, wall = _timed(cpu, _case(init=f"if _off_meta(): {SLEEP}"))
    assert ev.stage("compile").ok, ev.stage("compile").reason
    last = ev.stages[-1]
    assert last.name == "correctness" and last.verdict == FAIL
    assert "constructing the candidate" in last.reason and "watchdog" in last.reason, last.reason
    assert wall <= LIMIT_S, wall


def test_a_forward_that_hangs_on_real_data_is_rejected_at_correctness_and_the_worker_recovers(cpu):
    ev, wall = _timed(cpu, _case(forward=f"if x.device.type != 'meta': {SLEEP}"))
    assert ev.stage("compile").ok, ev.stage("compile").reason
    last = ev.stages[-1]
    assert last.name == "correctness" and last.verdict == FAIL
    assert "a call of the candidate's forward" in last.reason and "watchdog" in last.reason, last.reason
    assert wall <= LIMIT_S, wall
    ex = EXAMPLES[0]
    good = Ladder(cpu).evaluate(Problem.load(ex.problem, list(ex.cpu_overrides)), Candidate.from_file(ex.path),
                                up_to="correctness")
    assert good.ok and good.fidelity == "correctness", [(s.name, s.reason) for s in good.stages]


def test_the_call_window_scales_with_the_reference_and_has_a_floor():
    from workbench.harness.child import watchdog

    key = ("p", "cpu")
    settings = {"call": 20.0, "factor": 100.0}
    assert watchdog.call_seconds(settings, key) == 20.0  # no reference measured yet: the floor
    watchdog.note_reference(key, 0.5)
    watchdog.note_reference(key, 0.9)  # the fastest measured call counts
    assert watchdog.call_seconds(settings, key) == pytest.approx(50.0)
    assert watchdog.call_seconds(None, key) is None and watchdog.call_seconds({"call": None}, key) is None


def test_the_cli_sets_a_watchdog_window(tmp_path, capsys):
    """`--timeout trace=S` is the compile stage's tracing window: a candidate that hangs while it is constructed is
    rejected after S seconds, not the default 20."""
    import json

    from workbench.cli import main

    path = tmp_path / "hangs.py"
    path.write_text(TEMPLATE.format(init=SLEEP, forward="pass"))
    t0 = time.perf_counter()
    assert main(["eval", *PROBLEM[:1], str(path), *[f"--set={s}" for s in PROBLEM[1]], "--device", "cpu",
                 "--no-store", "--up-to", "compile", "--timeout", "trace=2", "--json"]) == 0
    wall = time.perf_counter() - t0
    last = json.loads(capsys.readouterr().out)["stages"][-1]
    assert last["name"] == "compile" and last["verdict"] == "fail", last
    assert "tracing the candidate" in last["reason"] and "took over 2 s (watchdog)" in last["reason"], last["reason"]
    assert wall < DEFAULT_TIMEOUTS["trace"] + 10, wall  # worker start-up included
