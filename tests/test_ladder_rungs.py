"""Correctness in two rungs and the noise-aware promotion policy, on a scripted device and on replay.

The cheap rung (the first seed) runs before quick timing; the remaining seeds only for a candidate promoted to full
timing, in the call that times it in full. A candidate that passed the cheap rung alone is never stored or served as
correct, never sets a bar when its remaining seeds fail, and never becomes a search's best over a full-timed one."""
from __future__ import annotations

import dataclasses
import math

import pytest

from workbench import HARNESS_VERSION
from workbench.core.candidate import Candidate
from workbench.core.records import FAIL, PASS, REFUSED, StageRecord
from workbench.devices.replay import ReplayDevice, rung_share
from workbench.harness.budget import Budget
from workbench.harness.ladder import Ladder, PromotionPolicy, QuickBest, quick_noise
from workbench.problems import Problem
from workbench.store import Store


@dataclasses.dataclass
class RungDevice:
    """Scripted answers: quick speedups in order (full timing reads 2x eager), candidates whose seed `fail_at[hash]`
    fails; every call's stages and options are kept."""
    quick: list
    fail_at: dict = dataclasses.field(default_factory=dict)
    kind: str = "cuda"
    name: str = "cuda:rungs"
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
        opts = dict(options or {})
        self.calls.append((tuple(stages), opts))
        bad = self.fail_at.get(open(path).read())
        out = []
        for s in stages:
            if s == "correctness":
                start, stop = opts.get("seed_start", 0), opts.get("seed_stop", opts["seeds"])
                if bad is not None and start <= bad < stop:
                    out.append(StageRecord(s, FAIL, f"output mismatch (seed {bad})", 1.0, 1.0, data={"seed": bad}))
                    break
                out.append(StageRecord(s, PASS, f"{stop - start} seeds", 1.0, 1.0, data={"seeds": stop - start}))
                continue
            sp = self.quick.pop(0) if s == "quick_timing" else 2.0
            out.append(StageRecord(s, PASS, "ok", 1.0, 1.0, data={
                "candidate_ms": 1.0 / sp, "speedup_vs_eager": sp, "method": "scripted", "reps": 20,
                "candidate": {"spread": 0.02, "n": 20}, "eager": {"spread": 0.02, "n": 20}}))
        return out


PROBLEM = Problem.load("scale_shift_relu", ["batch_size=4", "dim=64"])


def _cands(n, tag="x"):
    return [Candidate(f"# {tag} {i}\nimport triton\nimport torch\nclass ModelNew(torch.nn.Module):\n    pass\n")
            for i in range(n)]


def test_the_first_candidate_goes_straight_to_full_timing_with_every_seed():
    dev = RungDevice(quick=[])
    ev = Ladder(dev).evaluate(PROBLEM, _cands(1)[0])
    assert [c[0] for c in dev.calls] == [("correctness", "full_timing")]
    assert "seed_stop" not in dev.calls[0][1] and "seed_start" not in dev.calls[0][1]
    corr = ev.stage("correctness")
    assert corr.ok and corr.data["rung"] == "full" and ev.provenance["correctness_rung"] == "full"
    assert ev.stage("quick_timing") is None and ev.provenance["quick_skipped"] and ev.fidelity == "full_timing"


def test_cheap_rung_before_quick_timing_and_the_rest_only_on_promotion():
    dev = RungDevice(quick=[1.0, 2.5])  # after a 2x first: 1x cannot beat it, 2.5x can
    ladder = Ladder(dev, seeds=5, cheap_seeds=1)
    first, slow, fast = (ladder.evaluate(PROBLEM, c) for c in _cands(3))
    # the slow one: one seed, quick timing, no promotion; it passed the cheap rung only: not correct
    assert dev.calls[1] == (("correctness", "quick_timing"), dev.calls[1][1]) and dev.calls[1][1]["seed_stop"] == 1
    corr = slow.stage("correctness")
    assert corr.ok and corr.data["rung"] == "cheap" and corr.data["seeds"] == 1 and "not yet correct" in corr.reason
    assert slow.provenance["correctness_rung"] == "cheap" and slow.stage("full_timing") is None
    assert "cannot beat" in slow.provenance["promotion"]
    # the fast one: promoted; its remaining seeds run with full timing and the two rungs are one record
    assert dev.calls[3][0] == ("correctness", "full_timing") and dev.calls[3][1]["seed_start"] == 1
    corr = fast.stage("correctness")
    assert [s.name for s in fast.stages] == ["static", "compile", "correctness", "quick_timing", "full_timing"]
    assert corr.data["rung"] == "full" and corr.data["seeds"] == 5
    assert [r["seeds"] for r in corr.data["rungs"]] == [1, 4]
    assert corr.gpu_s == 2.0 and fast.provenance["correctness_rung"] == "full" and fast.ok
    assert ladder.budget.evaluations["correctness"] == 4  # first (1), slow (1), fast (2 rungs)


def test_a_candidate_wrong_on_its_remaining_seeds_fails_and_sets_no_bar():
    wrong = _cands(2, "wrong")[1]
    dev = RungDevice(quick=[3.0, 2.2], fail_at={wrong.source: 3})
    ladder = Ladder(dev, seeds=5, cheap_seeds=1)
    ladder.evaluate(PROBLEM, _cands(1)[0])  # 2x, full
    ev = ladder.evaluate(PROBLEM, wrong)  # passes seed 0, quick 3x, promoted, fails seed 3
    assert ev.stages[-1].name == "correctness" and ev.stages[-1].verdict == FAIL
    assert ev.stages[-1].data["rung"] == "full" and "remaining 4 seed(s)" in ev.stages[-1].reason
    assert not ev.ok and ev.stage("full_timing") is None
    assert ladder.quick_best[PROBLEM.key].bar == 2.0  # its 3x does not count
    nxt = ladder.evaluate(PROBLEM, _cands(3, "next")[2])
    assert nxt.stage("full_timing") is not None  # 2.2x beats the 2x bar; a 3x bar would have stopped it


def test_the_store_never_serves_a_cheap_rung_pass_as_correct(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    dev = RungDevice(quick=[1.0] * 10)
    ladder = Ladder(dev, store=store)
    ladder.evaluate(PROBLEM, _cands(1)[0])
    cheap = _cands(2)[1]
    ladder.evaluate(PROBLEM, cheap)  # 1x after 2x: cheap rung only
    n = len(dev.calls)
    # quick fidelity, as strict as this ladder's own cheap rung: served
    again = Ladder(dev, store=store).evaluate(PROBLEM, cheap, up_to="quick_timing")
    assert again.provenance.get("from_store") and len(dev.calls) == n
    # correctness asked for: the cheap pass does not answer; every seed runs
    judged = Ladder(dev, store=store).evaluate(PROBLEM, cheap, up_to="correctness")
    assert not judged.provenance.get("from_store") and dev.calls[-1][1].get("seed_stop") is None
    assert judged.stage("correctness").data["rung"] == "full" and judged.stage("correctness").data["seeds"] == 5


def test_the_cpu_device_and_correctness_requests_run_every_seed_at_once():
    dev = RungDevice(quick=[], kind="cpu", name="cpu")
    ev = Ladder(dev).evaluate(PROBLEM, _cands(1)[0], up_to="correctness")
    assert dev.calls[0][1].get("seed_stop") is None and ev.stage("correctness").data["rung"] == "full"


def test_promotion_reads_the_problems_noise_between_quick_and_full_timing():
    policy = PromotionPolicy(noise_z=1.0, min_margin=0.04)
    quick = StageRecord("quick_timing", PASS, data={"speedup_vs_eager": 1.9, "reps": 16,
                                                    "candidate": {"spread": 0.04}, "eager": {"spread": 0.03}})
    assert quick_noise(quick) == pytest.approx(1.2533 / 1.349 * 0.05 / 4)
    assert policy.promote(quick, None)[0] and policy.straight_to_full(None) and policy.straight_to_full(QuickBest())
    calm = QuickBest(speedup=2.1, full=2.0, pairs=[0.01, -0.01])  # quick and full agree within 1 %: margin 4 %
    assert not policy.promote(quick, calm)[0]  # 1.9 * 1.04 < 2.0
    loud = QuickBest(speedup=2.1, full=2.0, pairs=[0.08, -0.08])  # they disagree by 8 %: margin 8 %
    assert policy.promote(quick, loud)[0]  # 1.9 * 1.08 >= 2.0
    assert loud.noise == pytest.approx(0.08) and not policy.straight_to_full(loud)
    fixed = PromotionPolicy(full_within=0.0)
    assert not fixed.promote(quick, loud)[0]
    # before any pair: sqrt(2) x the median within-run noise
    assert QuickBest(speedup=2.0, noises=[0.01, 0.03, 0.02]).noise == pytest.approx(math.sqrt(2) * 0.02)


def test_replay_charges_each_rung_its_share_of_the_recorded_seeds():
    rec = StageRecord("correctness", PASS, "3 seeds", 0.9, 0.9, data={"seeds": 3})
    cheap = rung_share(rec, {"seeds": 5, "seed_stop": 1})
    rest = rung_share(rec, {"seeds": 5, "seed_start": 1})
    assert cheap.data["seeds"] == 1 and rest.data["seeds"] == 2
    assert cheap.gpu_s == pytest.approx(0.3) and rest.gpu_s == pytest.approx(0.6)
    assert rung_share(rec, {"seeds": 5}) is rec  # every seed: the recording as it is


def test_a_replayed_search_promotes_fewer_and_its_best_passed_every_seed():
    from workbench.proposers.recorded import RecordedProposer
    from workbench.search import Search

    problem = Problem.load("cross_entropy")
    device = ReplayDevice.from_dataset(problems=["cross_entropy"])
    try:
        s = Search(problem, device, strategy="greedy", proposer=RecordedProposer.from_dataset(problem),
                   budget=Budget(8.0), seed=0, per_step=4)
        s.run(steps=50)
        summaries = [s.summaries[n.nid] for n in s.tree.nodes.values() if n.nid in s.summaries]
        rungs = [x["provenance"].get("correctness_rung") for x in summaries]
        assert "cheap" in rungs and rungs.count("full") < len(rungs)
        best = s.summaries[s.best.nid]
        assert best["provenance"]["correctness_rung"] == "full"
        assert s.budget.report()["by_stage"]["correctness"]["runs"] > len(summaries)  # rungs charged apart
    finally:
        device.close()


def test_a_budget_refused_promotion_leaves_the_candidate_on_the_cheap_rung_and_marked_for_retry():
    dev = RungDevice(quick=[3.0])
    ladder = Ladder(dev, budget=Budget(gpu_seconds=4.0))
    ladder.evaluate(PROBLEM, _cands(1)[0])  # 2 GPU-s
    ev = ladder.evaluate(PROBLEM, _cands(2)[1])  # cheap + quick = 2 more: the budget is spent before the rest
    last = ev.stages[-1]
    assert last.verdict == REFUSED and last.retry and "budget" in last.reason
    assert ev.provenance["correctness_rung"] == "cheap" and ev.stage("correctness").data["rung"] == "cheap"


def test_a_stored_non_promotion_answers_only_while_the_promotion_inputs_would_decide_it_again(tmp_path):
    """A candidate not promoted stops at quick timing. Asked again for full timing, the store's record answers when
    this ladder, with its own best so far, would stop it there too; when the bar is lower (or absent, or the policy
    laxer) the candidate climbs again rather than carry an old non-promotion."""
    store = Store(tmp_path / "s.sqlite")
    dev = RungDevice(quick=[])
    first = _cands(1, "first")[0]
    Ladder(dev, store=store).evaluate(PROBLEM, first)  # straight to full timing: 2x, the bar from now on

    def not_promoted(tag):
        """A candidate stored at a 1x quick time, not promoted against the 2x bar; a ladder that knows that bar."""
        cand, ladder = _cands(1, tag)[0], Ladder(dev, store=store)
        assert ladder.evaluate(PROBLEM, first).provenance["from_store"]
        dev.quick = [1.0]
        assert "cannot beat" in ladder.evaluate(PROBLEM, cand).provenance["promotion"]
        dev.quick = [1.0]  # what the candidate measures if it runs again
        return cand, len(dev.calls), len(store.frame("evaluations"))

    # the same inputs (the 2x bar, the default policy): served, nothing run, nothing stored
    slow, calls, rows = not_promoted("same")
    same = Ladder(dev, store=store)
    same.evaluate(PROBLEM, first)
    served = same.evaluate(PROBLEM, slow)
    assert served.provenance["from_store"] and "best full-timing speedup 2x" in served.provenance["promotion"]
    assert served.fidelity == "quick_timing" and served.provenance["correctness_rung"] == "cheap"
    assert len(dev.calls) == calls and len(store.frame("evaluations")) == rows

    # no bar yet: a fresh climb goes straight to full timing, so the non-promotion does not answer
    slow, calls, _ = not_promoted("nobar")
    alone = Ladder(dev, store=store).evaluate(PROBLEM, slow)
    assert not alone.provenance.get("from_store") and alone.fidelity == "full_timing"
    assert [c[0] for c in dev.calls[calls:]] == [("correctness", "full_timing")]

    # a worse best: the 1x quick time could beat it now, so it climbs (cheap rung and quick, then the rest)
    slow, calls, _ = not_promoted("lower")
    lower = Ladder(dev, store=store)
    lower.quick_best[PROBLEM.key] = QuickBest(full=0.9)
    climbed = lower.evaluate(PROBLEM, slow)
    assert not climbed.provenance.get("from_store") and climbed.provenance["promotion"] == "promoted"
    assert [c[0] for c in dev.calls[calls:]] == [("correctness", "quick_timing"), ("correctness", "full_timing")]

    # a laxer policy under the same 2x bar: promoted, so it climbs too
    slow, calls, _ = not_promoted("lax")
    lax = Ladder(dev, store=store, policy=PromotionPolicy(full_within=1.5))
    lax.evaluate(PROBLEM, first)
    assert not lax.evaluate(PROBLEM, slow).provenance.get("from_store") and len(dev.calls) > calls

    # forced full timing (`eval`) never takes a non-promotion for an answer
    slow, calls, _ = not_promoted("forced")
    forced = Ladder(dev, store=store)
    forced.evaluate(PROBLEM, first)
    assert not forced.evaluate(PROBLEM, slow, force_full=True).provenance.get("from_store")
    assert len(dev.calls) > calls


def test_a_repeated_replay_search_on_one_store_adds_no_rows_and_serves_what_it_can(tmp_path, capsys):
    """`workbench search ... --device replay` twice on one store: the second run's evaluations are the store's
    (not promoted again under the same bar) or equal records not written twice (an unrecorded full timing)."""
    import json

    from workbench.cli import main

    store = tmp_path / "rp.sqlite"
    argv = ["search", "softmax_rows", "--device", "replay", "--steps", "2", "--per-step", "2", "--store", str(store),
            "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    rows = len(Store(store).frame("evaluations"))
    assert rows >= 3 and first["cached"] == 0
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert len(Store(store).frame("evaluations")) == rows
    assert again["cached"] >= 1 and again["best"] == first["best"]
