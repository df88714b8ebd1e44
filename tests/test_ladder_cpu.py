"""The ladder on the CPU device: the planted-cheat suite, honest candidates, crashes and hangs, refusals, budget and
promotion, and the store's reuse of finished evaluations."""
from __future__ import annotations

import dataclasses

import pytest
from cheat_headers import candidate_files, cheat_files, read_header

from workbench import HARNESS_VERSION
from workbench.core.candidate import Candidate
from workbench.core.records import FAIL, PASS, REFUSED, StageRecord, Verdict
from workbench.devices.local import LocalDevice
from workbench.examples import EXAMPLES
from workbench.harness.budget import Budget
from workbench.harness.child import timing
from workbench.harness.ladder import Ladder, PromotionPolicy
from workbench.problems import Problem
from workbench.store import Store


@pytest.fixture(scope="module")
def cpu():
    dev = LocalDevice("cpu", timeouts={"compile": 20, "correctness": 20})  # generous: CI shares 2 cores
    yield dev
    dev.close()


@pytest.mark.parametrize("path", cheat_files(), ids=lambda p: p.stem)
def test_cheat_rejected_for_the_right_reason(cpu, path):
    h = read_header(path)
    ev = Ladder(cpu).evaluate(Problem.load(h["problem"], h["set"]), Candidate.from_file(path), up_to="correctness")
    last = ev.stages[-1]
    assert not ev.ok and last.verdict == FAIL
    assert last.name == h["caught_by"], (last.name, last.reason)
    assert h["reason"] in last.reason.lower(), last.reason


@pytest.mark.parametrize("path", candidate_files(), ids=lambda p: p.stem)
def test_honest_candidate_passes_and_timing_is_refused(cpu, path):
    h = read_header(path)
    ev = Ladder(cpu).evaluate(Problem.load(h["problem"], h["set"]), Candidate.from_file(path))
    names = [s.name for s in ev.stages]
    assert names == ["static", "compile", "correctness", "quick_timing"], [(s.name, s.reason) for s in ev.stages]
    assert all(s.ok for s in ev.stages[:3])
    assert ev.stages[-1].verdict == REFUSED and "not a gpu time" in ev.stages[-1].reason.lower()
    assert ev.ok and ev.fidelity == "correctness"
    summary = ev.summary()
    assert "candidate_ms" not in summary and "speedup_vs_eager" not in summary  # nothing invented


@pytest.mark.parametrize("ex", EXAMPLES, ids=lambda e: e.problem)
def test_shipped_examples_are_correct_at_small_shapes(cpu, ex):
    ev = Ladder(cpu).evaluate(Problem.load(ex.problem, list(ex.cpu_overrides)), Candidate.from_file(ex.path),
                              up_to="correctness")
    assert ev.ok and ev.fidelity == "correctness", [(s.name, s.reason) for s in ev.stages]


def _runtime_case(tmp_path, body: str) -> str:
    src = f'''import torch
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(torch.nn.Module):
    def __init__(self, scale, shift):
        super().__init__()
        self.calls = 0

    def forward(self, x):
{body}
'''
    p = tmp_path / "case.py"
    p.write_text(src)
    return str(p)


def test_device_worker_recovers_from_crash_and_hang(cpu, tmp_path):
    """Past the compile stage (which runs forward on meta tensors), a candidate that dies or spins on real data is
    recorded as failed and the next candidate runs on a fresh worker."""
    problem = Problem.load("scale_shift_relu", ["batch_size=4", "dim=64"])
    crash = _runtime_case(tmp_path, "        if x.device.type != 'meta':\n            import os\n"
                                    "            os.abort()\n        return x")
    recs = cpu.run_stages(problem, crash, ["correctness"])
    assert recs[-1].verdict == FAIL and "crashed" in recs[-1].reason and "SIGABRT" in recs[-1].reason
    hang = _runtime_case(tmp_path, "        while x.device.type != 'meta':\n            pass\n        return x")
    recs = cpu.run_stages(problem, hang, ["correctness"])
    assert recs[-1].verdict == FAIL and "timed out" in recs[-1].reason
    good = Candidate.from_file(EXAMPLES[0].path).write()
    recs = cpu.run_stages(problem, good, ["correctness"])
    assert recs[-1].ok, recs[-1].reason


def test_tampering_at_runtime_is_caught(cpu, tmp_path):
    problem = Problem.load("scale_shift_relu", ["batch_size=4", "dim=64"])
    sneaky = _runtime_case(tmp_path, "        import time as t\n        setattr(t, 'perf_counter', lambda: 0.0)\n"
                                     "        out = torch.empty_like(x)\n"
                                     "        return torch.relu(x * 1.5 + 0.25)")
    recs = cpu.run_stages(problem, sneaky, ["correctness"])
    assert recs[-1].verdict == FAIL and "tampering" in recs[-1].reason and "perf_counter" in recs[-1].reason
    recs = cpu.run_stages(problem, Candidate.from_file(EXAMPLES[0].path).write(), ["correctness"])
    assert recs[-1].ok  # a fresh worker, unpatched


def test_malformed_candidate(cpu, tmp_path):
    problem = Problem.load("scale_shift_relu", ["batch_size=4", "dim=64"])
    p = tmp_path / "nomodel.py"
    p.write_text("import torch\n\nclass Other(torch.nn.Module):\n    pass\n")
    ev = Ladder(cpu).evaluate(problem, Candidate.from_file(p))
    assert ev.stages[-1].name == "static" and ev.stages[-1].verdict == FAIL and "ModelNew" in ev.stages[-1].reason
    recs = cpu.run_stages(problem, str(p), ["correctness"])
    assert recs[-1].verdict == FAIL and "ModelNew" in recs[-1].reason


# ---- ladder policy with a scripted device: budget, promotion, store reuse ----

@dataclasses.dataclass
class ScriptedDevice:
    """A device whose stage results are given by the test (the ladder's logic, not a device, is under test)."""
    quick_ms: list
    kind: str = "cuda"
    name: str = "cuda:scripted"
    slots: int = 1
    gpu_name: str = None
    calls: list = dataclasses.field(default_factory=list)

    def provenance(self):
        return {"device": self.name, "harness_version": HARNESS_VERSION}

    def compile(self, problem, path):
        return StageRecord("compile", PASS, "ok")

    def map_compile(self, problem, paths, workers=2):
        return [self.compile(problem, p) for p in paths]

    def run_stages(self, problem, path, stages, options=None):
        self.calls.append(tuple(stages))
        out = []
        for s in stages:
            data = {}
            if s in ("quick_timing", "full_timing"):
                ms = self.quick_ms.pop(0) if s == "quick_timing" else 1.0
                data = {"candidate_ms": ms, "speedup_vs_eager": 2.0 / ms, "method": "scripted", "reps": 5,
                        "spread": 0.01}
            out.append(StageRecord(s, PASS, "ok", cost_s=1.0, gpu_s=1.0, data=data))
        return out


def _cands(n):
    return [Candidate(f"# {i}\nimport triton\nimport torch\nclass ModelNew(torch.nn.Module):\n    pass\n")
            for i in range(n)]


def test_promotion_only_for_competitive_quick_times():
    problem = Problem.load("scale_shift_relu", ["batch_size=4", "dim=64"])
    dev = ScriptedDevice(quick_ms=[1.5, 0.9])
    ladder = Ladder(dev, policy=PromotionPolicy(full_within=0.2))
    a, b, c = (ladder.evaluate(problem, x) for x in _cands(3))
    # first one: nothing to compare with, so straight to full timing (2x eager), no quick timing
    assert a.stage("full_timing") is not None and a.stage("quick_timing") is None and a.provenance["quick_skipped"]
    assert b.stage("full_timing") is None and "over" in b.provenance["promotion"]  # 1.33x * 1.2 < 2x
    assert c.stage("full_timing") is not None  # 2.22x
    assert ladder.budget.spent["full_timing"] == 2.0 and ladder.budget.evaluations["quick_timing"] == 2


def test_budget_refuses_gpu_stages_once_spent():
    problem = Problem.load("scale_shift_relu", ["batch_size=4", "dim=64"])
    dev = ScriptedDevice(quick_ms=[1.0] * 10)
    ladder = Ladder(dev, budget=Budget(gpu_seconds=2.0))
    first = ladder.evaluate(problem, _cands(1)[0])  # the first: correctness + full timing = 2 GPU-s
    assert ladder.budget.gpu_spent == 2.0 and first.stage("full_timing") is not None
    second = ladder.evaluate(problem, _cands(2)[1])
    assert second.stages[-1].verdict == REFUSED and "budget" in second.stages[-1].reason
    assert len(dev.calls) == 1  # no device work after the budget was spent
    assert ladder.budget.report()["by_stage"]["correctness"]["runs"] == 1


def test_store_answers_repeated_evaluations(tmp_path):
    problem = Problem.load("scale_shift_relu", ["batch_size=4", "dim=64"])
    dev = ScriptedDevice(quick_ms=[1.0, 1.0])
    store = Store(tmp_path / "s.sqlite")
    cand = _cands(1)[0]
    first = Ladder(dev, store=store).evaluate(problem, cand)
    again = Ladder(dev, store=store).evaluate(problem, cand)
    assert len(dev.calls) == 1  # correctness + full (the first candidate); nothing for the second request
    assert again.provenance.get("from_store") and again.fidelity == first.fidelity == "full_timing"
    frame = store.evaluations_frame()
    assert len(frame) == 1 and frame["harness_version"].iloc[0] == HARNESS_VERSION


def test_a_weaker_correctness_verdict_is_not_served_from_the_store(tmp_path):
    """A pass on fewer seeds, or under other tolerances, does not answer a stricter ladder: it is run again; a pass
    on more seeds answers a ladder that asks for fewer."""
    problem = Problem.load("scale_shift_relu", ["batch_size=4", "dim=64"])
    dev = ScriptedDevice(quick_ms=[1.0] * 10)
    store = Store(tmp_path / "s.sqlite")
    cand = _cands(1)[0]
    Ladder(dev, store=store, seeds=1).evaluate(problem, cand, up_to="correctness")
    assert len(dev.calls) == 1
    stricter = Ladder(dev, store=store, seeds=5).evaluate(problem, cand, up_to="correctness")
    assert len(dev.calls) == 2 and not stricter.provenance.get("from_store")
    assert stricter.provenance["correctness"] == {"seeds": 5, "tolerance": None}
    looser = Ladder(dev, store=store, seeds=3).evaluate(problem, cand, up_to="correctness")
    assert len(dev.calls) == 2 and looser.provenance.get("from_store")
    other_bounds = Ladder(dev, store=store, seeds=3, tolerance={"fp32": 1e-2}).evaluate(problem, cand,
                                                                                         up_to="correctness")
    assert len(dev.calls) == 3 and not other_bounds.provenance.get("from_store")


@pytest.mark.parametrize("seeds", [0, -1])
def test_a_ladder_without_correctness_seeds_is_refused(seeds):
    with pytest.raises(ValueError, match="seeds must be at least 1"):
        Ladder(ScriptedDevice(quick_ms=[]), seeds=seeds)


def test_a_budget_refusal_is_marked_for_retry_and_old_records_keep_their_flags():
    problem = Problem.load("scale_shift_relu", ["batch_size=4", "dim=64"])
    ladder = Ladder(ScriptedDevice(quick_ms=[1.0]), budget=Budget(gpu_seconds=0.0))
    refused = ladder.evaluate(problem, _cands(1)[0]).stages[-1]
    assert refused.verdict == REFUSED and refused.retry and not refused.reusable and "retry" not in refused.data
    assert StageRecord.from_dict(refused.to_dict()) == refused
    # records stored before the flags were fields carry them inside `data`
    old = StageRecord.from_dict({"name": "correctness", "verdict": "fail", "data": {"executor_failure": "timeout",
                                                                                     "seed": 3}})
    assert old.executor_failure == "timeout" and old.data == {"seed": 3} and not old.reusable
    assert old.verdict is Verdict.FAIL and old.verdict == "fail" and f"{old.verdict}" == "fail"
    with pytest.raises(ValueError):
        StageRecord("static", "passed")  # a verdict is one of Verdict's values


def test_timing_flags_a_time_too_good_to_be_true():
    """Below the roofline floor when the problem has one; without a floor, KernelBench's cruder test (a speedup over
    eager above EXCESSIVE_SPEEDUP). A flag warns; it does not fail the stage."""
    fast = {"candidate_ms": 0.01, "speedup_vs_eager": 50.0}
    data = dict(fast)
    [flag] = timing.sanity_flags(data, floor_ms=0.02)
    assert flag["check"] == "below_floor" and flag["severity"] == "warning" and data["below_floor"]
    data = dict(fast)
    [flag] = timing.sanity_flags(data, floor_ms=None)
    assert flag["check"] == "excessive_speedup" and flag["severity"] == "warning" and data["excessive_speedup"]
    assert "50x eager" in flag["reason"]
    assert timing.sanity_flags(dict(fast), floor_ms=0.005) == []  # above a known floor: the floor is the better judge
    plausible = {"candidate_ms": 0.2, "speedup_vs_eager": timing.EXCESSIVE_SPEEDUP * 0.9}
    assert timing.sanity_flags(plausible, floor_ms=None) == [] and "excessive_speedup" not in plausible
