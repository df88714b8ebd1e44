"""Search: strategies (deterministic under a seed), budget stops, resume without re-measuring, memory round trip,
and the replay device (answers only what was recorded, never invents a number).

GPU timings here come from `RecordingGPU`, a test double standing in for the H200: it answers the ladder's device
stages with times derived from the candidate's source, so the search logic (not a GPU) is under test."""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from workbench import HARNESS_VERSION
from workbench.core.records import FAIL, PASS, StageRecord
from workbench.devices.replay import ReplayDevice
from workbench.harness.budget import Budget
from workbench.harness.ladder import Ladder, PromotionPolicy
from workbench.problems import Problem
from workbench.proposers.offline import OfflineProposer
from workbench.search import ScreeningConfig, Search, SearchMemory
from workbench.search.memory import Attempt
from workbench.store import Store

STAGE_GPU_S = 0.5


class RecordingGPU:
    kind = "cuda"
    slots = 1
    name = "cuda:NVIDIA H200"
    gpu_name = None  # no floor: the test double has no measured ceilings
    timeouts: dict = {}

    def __init__(self):
        self.calls = 0

    def provenance(self):
        return {"device": self.name, "gpu_name": "NVIDIA H200", "harness_version": HARNESS_VERSION}

    def compile(self, problem, path):
        return StageRecord("compile", PASS, "ok")

    def map_compile(self, problem, paths, workers=2):
        return [self.compile(problem, p) for p in paths]

    def run_stages(self, problem, path, stages, options=None):
        self.calls += 1
        h = int(hashlib.sha256(Path(path).read_text().encode()).hexdigest()[:8], 16)
        out = []
        for s in stages:
            if s == "correctness" and h % 11 == 0:
                out.append(StageRecord(s, FAIL, "output mismatch: relative error 0.5 > 0.0001", 1.0, STAGE_GPU_S))
                break
            data = {}
            if s != "correctness":
                ms = 0.5 + (h % 1000) / 1000.0
                data = {"candidate_ms": ms, "eager_ms": 1.0, "speedup_vs_eager": 1.0 / ms, "compile_ms": 0.8,
                        "speedup_vs_compile": 0.8 / ms, "method": "recorded", "reps": 10, "spread": 0.01}
            out.append(StageRecord(s, PASS, "ok", STAGE_GPU_S, STAGE_GPU_S, data=data))
        return out

    def close(self):
        pass


@pytest.fixture(scope="module")
def problem():
    return Problem.load("linear_gelu", ["batch_size=32", "in_features=48", "out_features=40"])


@pytest.fixture(scope="module")
def proposer(problem):
    return OfflineProposer(problem)


@pytest.mark.parametrize("strategy", ["greedy", "beam", "evolutionary", "mcts"])
def test_strategy_is_deterministic_and_improves(problem, proposer, strategy):
    def run(seed):
        s = Search(problem, RecordingGPU(), strategy=strategy, proposer=proposer, seed=seed, per_step=3)
        s.run(steps=6)
        return s

    a, b, c = run(1), run(1), run(2)
    ids = lambda s: [n.candidate for n in s.tree.nodes.values()]  # noqa: E731
    assert ids(a) == ids(b) and ids(a) != ids(c)
    assert len(a.tree.nodes) >= 8
    root = a.tree.root
    assert a.best is not None and a.best.speedup >= (root.speedup or 0)
    assert a.report()["strategy"] == strategy


def test_budget_stops_exactly(problem, proposer):
    budget = Budget(gpu_seconds=5 * STAGE_GPU_S)
    s = Search(problem, RecordingGPU(), proposer=proposer, budget=budget, per_step=4)
    s.run()
    assert budget.gpu_spent >= budget.gpu_seconds
    # the ladder refuses device work once the budget is spent: at most one call's worth over the limit
    assert budget.gpu_spent <= budget.gpu_seconds + 3 * STAGE_GPU_S
    assert s.step().stopped and "budget" in s.step().stopped


def test_resume_repeats_no_measured_work(tmp_path, problem, proposer):
    store = Store(tmp_path / "s.sqlite")
    gpu = RecordingGPU()
    first = Search(problem, gpu, proposer=proposer, store=store, search_id="run1", seed=3)
    first.run(steps=3)
    calls, n_nodes = gpu.calls, len(first.tree.nodes)
    # a "killed" search is rebuilt from its events; its nodes are not evaluated again
    again = Search(problem, gpu, proposer=proposer, store=store, search_id="run1", seed=3)
    assert len(again.tree.nodes) == n_nodes and again.steps == 3
    assert again.best.candidate == first.best.candidate and gpu.calls == calls
    again.run(steps=1)
    assert len(again.tree.nodes) > n_nodes
    assert len({n.candidate for n in again.tree.nodes.values()}) == len(again.tree.nodes)  # no repeats


@pytest.mark.parametrize("strategy", ["greedy", "evolutionary", "mcts"])
def test_resumed_search_proposes_what_an_uninterrupted_one_does(tmp_path, problem, proposer, strategy):
    """3 steps, a resume, 3 more: the same nodes as 6 steps in one go with the same seed (the seeded generator goes
    on from where the last step left it), and the memory's attempts keep their parents across the resume."""
    whole = Search(problem, RecordingGPU(), strategy=strategy, proposer=proposer, seed=7, per_step=3)
    whole.run(steps=6)
    store = Store(tmp_path / "s.sqlite")
    kw = dict(strategy=strategy, proposer=proposer, seed=7, per_step=3, store=store, search_id="r")
    first = Search(problem, RecordingGPU(), **kw)
    first.run(steps=3)
    again = Search(problem, RecordingGPU(), **kw)
    assert again.memory.attempts == first.memory.attempts
    again.run(steps=3)

    def nodes(s):
        return [(n.parent, n.move, n.candidate, n.status, n.speedup) for n in s.tree.nodes.values()]

    assert len(whole.tree.nodes) > len(first.tree.nodes) and nodes(again) == nodes(whole)
    assert again.memory.attempts == whole.memory.attempts
    assert all(a.parent is not None for a in again.memory.attempts if a.move != "root")
    store.close()


def test_an_external_runner_evaluates_asked_proposals(problem, proposer):
    """ask / tell without `step`: the caller evaluates each proposal itself (here on another ladder, as a remote
    worker would) and tells the result; the tree is the one `step` builds."""
    stepped = Search(problem, RecordingGPU(), proposer=proposer, seed=5, per_step=3)
    stepped.run(steps=3)
    told = Search(problem, RecordingGPU(), proposer=proposer, seed=5, per_step=3)
    remote = Ladder(RecordingGPU())
    for _ in range(3):
        for p in told.ask():
            told.tell(p, remote.evaluate(problem, p.candidate))
        told.end_step()
    assert [(n.parent, n.move, n.candidate, n.speedup) for n in told.tree.nodes.values()] == \
        [(n.parent, n.move, n.candidate, n.speedup) for n in stepped.tree.nodes.values()]
    assert told.steps == 3 and [e["type"] for e in told.events].count("step") == 3


def test_memory_round_trip_and_render():
    m = SearchMemory()
    m.record(Attempt("a", None, "root", "measured", "full_timing", 1.5))
    m.record(Attempt("b", "a", "config:g0", "measured", "quick_timing", 2.0), parent_speedup=1.5)
    m.record(Attempt("c", "a", "fuse:addmm", "failed", "correctness", None, "output mismatch: relative error 1"))
    m.add_findings([{"title": "DRAM at 91% of peak", "advice": "fuse the epilogue"}])
    back = SearchMemory.from_json(m.to_json())
    assert back.render() == m.render()
    assert back.move_stats()["config"]["improved"] == 1
    assert back.failures()["output mismatch"] == 1
    assert "best so far: b at 2x eager" in m.render()
    w = m.move_weights(["config", "fuse"])
    assert w["config"] > w["fuse"]


def test_replay_answers_only_recorded_measurements(tmp_path, problem, proposer):
    recorded = Store(tmp_path / "h200.sqlite")
    # every recorded candidate quick-timed (the first too: not straight to full timing)
    ladder = Ladder(RecordingGPU(), store=recorded, policy=PromotionPolicy(first_straight_to_full=False))
    cands = proposer.propose(6, seed=5)
    for c in cands[:4]:
        ladder.evaluate(problem, c)
    replay = ReplayDevice([recorded])
    assert replay.name == "replay:cuda:NVIDIA H200"
    for c in cands[:4]:
        recs = replay.run_stages(problem, c.write(), ["correctness", "quick_timing"])
        truth = recorded.find_evaluation(problem.key, c.hash, "cuda:NVIDIA H200", "quick_timing")
        assert [r.verdict for r in recs] == [s.verdict for s in truth.stages if s.name in
                                              ("correctness", "quick_timing")]
        if recs[-1].ok:
            assert recs[-1].data["candidate_ms"] == truth.stage("quick_timing").data["candidate_ms"]
    for c in cands[4:]:
        recs = replay.run_stages(problem, c.write(), ["correctness", "quick_timing"])
        assert recs[0].verdict == "refused" and "not measured" in recs[0].reason
        assert not any("candidate_ms" in r.data for r in recs)


def test_search_on_replay_never_promotes_unanswerable(tmp_path, problem, proposer):
    recorded = Store(tmp_path / "h200.sqlite")
    gpu_search = Search(problem, RecordingGPU(), proposer=proposer, store=recorded, seed=0)
    gpu_search.run(steps=3)
    replay = Search(problem, ReplayDevice([recorded]), proposer=proposer, seed=1, budget=Budget(gpu_seconds=100))
    replay.run(steps=4)
    for node in replay.tree.nodes.values():
        assert node.status in ("measured", "failed", "refused")
        if node.status == "refused":
            assert node.speedup is None and node.fidelity != "full_timing"
        if node.status == "measured":  # only candidates the GPU actually measured
            assert recorded.find_evaluation(problem.key, node.candidate, "cuda:NVIDIA H200", "quick_timing")


def _definitions(source: str) -> list[str]:
    """A candidate's top-level statements as normalised code, without the leading docstring (it describes the
    problem and was written by the machine that ran the benchmark, not the kernels)."""
    import ast

    tree = ast.parse(source)
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(getattr(tree.body[0], "value", None),
                                                                        ast.Constant):
        tree.body = tree.body[1:]
    return [ast.unparse(node) for node in tree.body]


def test_shipped_suite_results_still_match_the_templates():
    """The committed H200 results name their candidates by source: a kernel-template change that would orphan them
    must fail here (then the data is re-collected), not surprise a user. Every group's kernel, rendered by today's
    templates under its own name, is in the measured source as it was measured; the rest of the module (header,
    ModelNew) is the same up to launcher names: groups that compute the same kernel now share the first one's, where
    the measured sources repeated it per group."""
    import re

    from workbench.kernels import family
    from workbench.proposers.offline import Choice

    rows_path = Path(__file__).resolve().parents[1] / "results" / "suite" / "rows.jsonl"
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    assert rows
    for row in rows:
        if row.get("status") != "ok":
            continue
        if "superseded" in row:  # kept for the record, marked with why (the space it was measured in changed)
            assert len(row["superseded"]) > 40, row["problem"]
            continue
        prop = OfflineProposer(Problem.load(row["problem"]))
        choice = Choice.from_dict(row["config"])
        measured = _definitions(row["best_source"])
        configs = {gid: json.loads(cfg) for gid, cfg in choice.configs}
        for g in prop.groups(dict(choice.fuse)):
            r = family(g.family).render(g.spec, configs[g.gid], f"_{g.gid}_{g.family}")
            for part in _definitions(r.kernel_src) + _definitions(r.launcher_src):
                assert part in measured, (row["problem"], g.gid, part[:200])
        unnamed = [re.sub(r"\b_g\d+_", "_g_", d) for d in _definitions(prop.render(choice).source)]
        assert {d for d in unnamed if not d.startswith("@") and "def _g_" not in d} == \
            {re.sub(r"\b_g\d+_", "_g_", d) for d in measured if not d.startswith("@") and "def _g" not in d}, \
            row["problem"]


def test_moves_are_labelled_and_follow_memory(proposer):
    rng = random.Random(0)
    moves = proposer.moves(proposer.default_choice(), rng, k=20)
    kinds = {m.split(":")[0] for m, _ in moves}
    assert kinds <= {"config", "fuse"} and "config" in kinds
    assert len({c for _, c in moves}) == len(moves)


class OracleSurrogate:
    """A surrogate test double that knows RecordingGPU's formula (so the screening logic, not a model, is tested)."""

    def forecast(self, problem, candidates, anchor="eager"):
        import math

        from workbench.surrogates import from_log2

        out = []
        for c in candidates:
            h = int(hashlib.sha256(c.source.encode()).hexdigest()[:8], 16)
            out.append(from_log2(math.log2(1.0 / (0.5 + (h % 1000) / 1000.0)), 0.05, 0.9 if h % 11 == 0 else 0.0))
        return out


def test_screening_measures_within_slots_and_keeps_skips(tmp_path, problem, proposer):
    from workbench.surrogates import SelectivePolicy

    gpu = RecordingGPU()
    store = Store(tmp_path / "s.sqlite")
    s = Search(problem, gpu, proposer=proposer, seed=4, per_step=2, store=store, search_id="scr",
               screening=ScreeningConfig(OracleSurrogate(), SelectivePolicy(tau=0.5, explore=0.0, seed=0),
                                         overgenerate=3))
    s.run(steps=4)
    skipped = [n for n in s.tree.nodes.values() if n.status == "skipped"]
    measured = [n for n in s.tree.nodes.values() if n.status != "skipped"]
    assert skipped and s.report()["skipped_by_surrogate"] == len(skipped)
    assert gpu.calls <= 2 * len(measured)  # every device call belongs to a measured node, never to a skipped one
    assert all(n.forecast and n.forecast["decision"] == "skip" for n in skipped)
    assert len(measured) <= 1 + 2 * 3  # the root, then at most the slots per step
    assert s.report()["surrogate"] == "OracleSurrogate"
    again = Search(problem, gpu, proposer=proposer, seed=4, per_step=2, store=store, search_id="scr",
                   screening=ScreeningConfig(OracleSurrogate(), SelectivePolicy(tau=0.5, explore=0.0, seed=0)))
    assert sum(n.status == "skipped" for n in again.tree.nodes.values()) == len(skipped)


def test_screening_needs_both_parts(problem, proposer):
    with pytest.raises(ValueError, match="surrogate and a selective policy"):
        Search(problem, RecordingGPU(), proposer=proposer, screening=ScreeningConfig(OracleSurrogate(), None))


class LearningSurrogate(OracleSurrogate):
    """The oracle double that also takes the search's measurements back (`observe_candidates`), as the learned
    surrogate does."""

    def __init__(self):
        self.compile_records, self.seen = {}, []

    def add_compile_records(self, records):
        self.compile_records.update(records)

    def observe_candidates(self, problem, candidates, log2_speedup):
        self.seen += [(c.hash, y) for c, y in zip(candidates, log2_speedup)]


def test_measurements_go_back_to_a_learning_surrogate(problem, proposer):
    import math

    from workbench.surrogates import SelectivePolicy

    sur = LearningSurrogate()
    s = Search(problem, RecordingGPU(), proposer=proposer, seed=4, per_step=2,
               screening=ScreeningConfig(sur, SelectivePolicy(tau=0.5, explore=0.0, seed=0), overgenerate=3,
                                         surrogate_learns=True))
    s.run(steps=3)
    measured = {n.candidate: math.log2(n.speedup) for n in s.tree.nodes.values() if n.status == "measured"}
    assert measured and dict(sur.seen) == pytest.approx(measured)  # every measured node, once, as log2 speedup
    assert len(sur.seen) == len(measured)
    assert set(sur.compile_records) >= set(measured)  # its compile record came with it
    quiet = LearningSurrogate()  # by default the search does not teach it
    Search(problem, RecordingGPU(), proposer=proposer, seed=4, per_step=2,
           screening=ScreeningConfig(quiet, SelectivePolicy(tau=0.5, explore=0.0, seed=0), overgenerate=3)).run(steps=2)
    assert quiet.seen == []
