"""The shipped H200 dataset and searches that replay it: templates still render the recorded sources, a cosmetic
template edit still replays while a template version bump does not, the recorded walk stays on measured points,
searches are deterministic, stop on budget, resume, and the CLI's JSON holds what a sweep reads."""
from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys

import pytest

from workbench import kernels
from workbench.core.records import REFUSED, StageRecord
from workbench.devices.replay import ReplayDevice
from workbench.harness.budget import Budget
from workbench.harness.ladder import Ladder
from workbench.kernels import identity
from workbench.problems import Problem
from workbench.proposers.choice import distance
from workbench.proposers.offline import Choice, OfflineProposer
from workbench.proposers.recorded import RecordedProposer
from workbench.search import ScreeningConfig, Search
from workbench.store import Store
from workbench.store.dataset import RecordedDataset, load

PROBLEM = "cross_entropy"  # its whole space (114 points) was measured


@pytest.fixture(scope="module")
def candidates():
    return load("candidates")


@pytest.fixture(scope="module")
def problem():
    return Problem.load(PROBLEM)


@pytest.fixture(scope="module")
def device():
    d = ReplayDevice.from_dataset(problems=[PROBLEM])
    yield d
    d.close()


def test_recorded_rows_still_render_their_measured_kernels(candidates):
    """Rows marked `regenerates` must still render the kernels that were measured: their recorded identity (family,
    template version, spec and configuration per group), or for a row without one its exact source text. A cosmetic
    template edit keeps the identity (the text drifts, replay reports it); an edit that changes the kernels bumps the
    family's template version, and a partition that now lowers more of a problem changes its groups: either orphans
    the rows, and `python experiments/export_dataset.py --recheck` must mark them before this passes."""
    rng = random.Random(0)
    ok = candidates[candidates["regenerates"]]
    assert len(ok) > 0
    for name, rows in ok.groupby("problem"):
        prop = OfflineProposer(Problem.load(name))
        assert (rows["problem_key"] == prop.problem.key).all(), f"{name}: the problem file changed since collection"
        picks = rows.iloc[sorted(rng.sample(range(len(rows)), min(3, len(rows))))]
        for _, r in picks.iterrows():
            choice = Choice.from_dict(json.loads(r["choice_json"]))
            recorded = r.get("identity")
            if isinstance(recorded, str) and recorded:
                assert prop.identity(choice).key == recorded, \
                    f"{name}: a kernel change orphans recorded candidate {r['candidate']}"
            else:
                assert prop.render(choice).hash == r["candidate"], \
                    f"{name}: template change orphans recorded candidate {r['candidate']}"


def test_dataset_tables_are_consistent(candidates):
    problems = load("problems")
    assert set(candidates["problem_key"]) == set(problems["problem_key"])
    timed = candidates[candidates["outcome"] == "ok"]
    assert (timed["speedup_vs_eager"] > 0).all() and timed["log2_speedup"].notna().all()
    assert candidates.loc[candidates["outcome"] == "fails", "failed_stage"].notna().all()
    assert not candidates.duplicated(["problem_key", "candidate"]).any()


def test_recorded_dataset_answers_like_a_store(candidates):
    ds = RecordedDataset(problems=[PROBLEM])
    row = candidates[candidates["problem"] == PROBLEM].iloc[0]
    ev = ds.find_evaluation(row["problem_key"], row["candidate"], "cuda:NVIDIA H200", "quick_timing")
    assert ev is not None and ev.stage("quick_timing") is not None
    assert ds.find_evaluation(row["problem_key"], row["candidate"], "cuda:OTHER", "quick_timing") is None
    assert ds.find_evaluation(row["problem_key"], "0" * 16, "cuda:NVIDIA H200", "quick_timing") is None


def _row_of(candidates, choice: Choice):
    rows = candidates[(candidates["problem"] == PROBLEM) & candidates["regenerates"]]
    return rows[rows["choice_json"] == choice.canonical].iloc[0]


def test_a_cosmetic_template_edit_still_replays_the_recorded_row(monkeypatch, problem, candidates):
    """cross_entropy is one row-family kernel: a comment added to that family's rendered kernel changes every source
    hash, yet the candidates replay their recorded measurements (matched by identity), and the drift is reported."""
    monkeypatch.setattr(identity, "_RENDERED", {})  # this test's renders only
    row_family = kernels.FAMILIES["row"]
    plain_render = row_family.render

    def commented(spec, config, name):
        r = plain_render(spec, config, name)
        return dataclasses.replace(r, kernel_src="# a cosmetic edit\n" + r.kernel_src)

    monkeypatch.setattr(row_family, "render", commented)
    proposer = RecordedProposer.from_dataset(problem)
    choice = proposer.default_choice()
    row = _row_of(candidates, choice)
    cand = proposer.render(choice)
    assert "# a cosmetic edit" in cand.source and cand.hash != row["candidate"]
    assert dict(cand.origin)["identity"] == proposer.identity(choice).key
    device = ReplayDevice.from_dataset(problems=[PROBLEM])
    with pytest.warns(UserWarning, match="different source text"):
        ev = Ladder(device).evaluate(problem, cand, up_to="quick_timing")
    recorded = json.loads(row["evaluation_json"])["stages"]
    assert ev.stage("compile") == StageRecord.from_dict(next(s for s in recorded if s["name"] == "compile"))
    quick = ev.stage("quick_timing")
    assert quick.ok and quick.data["replayed"] and quick.data["candidate_ms"] == row["candidate_ms"]
    assert device.drifted == 1 and device.stores[0].drift == {(problem.key, cand.hash): row["candidate"]}
    device.close()


def test_a_template_version_bump_makes_another_candidate(monkeypatch, problem, candidates):
    """The same choice at a bumped row-family version is a new candidate: its text is unchanged, but no recorded row
    answers for it, and the recorded walk has no point left."""
    monkeypatch.setattr(identity, "_RENDERED", {})
    proposer = OfflineProposer(problem)
    choice = Choice.from_dict(json.loads(_row_of(candidates, proposer.default_choice())["choice_json"]))
    monkeypatch.setattr(kernels.FAMILIES["row"], "template_version", 2)
    cand = proposer.render(choice)
    assert cand.hash == _row_of(candidates, choice)["candidate"]  # the text alone would still match
    device = ReplayDevice.from_dataset(problems=[PROBLEM])
    (rec,) = device.run_stages(problem, cand.write(), ["correctness", "quick_timing"])
    assert rec.verdict == REFUSED and "not measured" in rec.reason
    assert (problem.key, cand.hash) not in device.stores[0]
    with pytest.raises(ValueError, match="no recorded points"):
        RecordedProposer.from_dataset(problem)
    device.close()


def test_recorded_proposer_walks_only_measured_points(problem):
    prop = RecordedProposer.from_dataset(problem)
    assert prop.space_size() == len(prop.recorded) > 10
    assert prop.is_recorded(prop.default_choice())
    rng = random.Random(0)
    c = prop.default_choice()
    for _ in range(5):
        moves = prop.moves(c, rng, k=6)
        assert moves and all(prop.is_recorded(m) for _, m in moves)
        assert all(m != c for _, m in moves)
        c = moves[-1][1]
    assert all(prop.is_recorded(x) for x in prop.sample(20, seed=3))


def test_recorded_proposer_refuses_an_unmeasured_problem():
    p = Problem.load("cross_entropy", ["batch_size=64"])  # another key: never measured
    with pytest.raises(ValueError, match="no recorded points"):
        RecordedProposer.from_dataset(p)


def test_distance_counts_differing_fields():
    a = Choice.from_dict({"fuse": {"x": True}, "configs": {"g0": {"BLOCK": 64, "num_warps": 4}}})
    b = Choice.from_dict({"fuse": {"x": False}, "configs": {"g0": {"BLOCK": 64, "num_warps": 8}}})
    assert distance(a, a) == 0 and distance(a, b) == 2


@pytest.mark.parametrize("strategy", ["greedy", "beam", "evolutionary", "mcts"])
def test_replay_search_is_deterministic_and_measured(problem, device, strategy):
    def run():
        s = Search(problem, device, strategy=strategy, proposer=RecordedProposer.from_dataset(problem), seed=4,
                   budget=Budget(gpu_seconds=6.0))
        s.run(steps=50)
        return s

    a, b = run(), run()
    assert [n.candidate for n in a.tree.nodes.values()] == [n.candidate for n in b.tree.nodes.values()]
    assert a.best is not None and a.best.speedup > 1.0  # cross-entropy: the fused kernels beat eager on the H200
    for n in a.tree.nodes.values():  # every node was answered from a real measurement
        assert n.status in ("measured", "failed"), (n.status, n.reason)


def test_replay_budget_stops_within_one_evaluation(problem, device, candidates):
    s = Search(problem, device, proposer=RecordedProposer.from_dataset(problem), seed=0, per_step=1,
               budget=Budget(gpu_seconds=3.0))
    s.run(steps=500)
    assert s.budget.exhausted()
    rows = candidates[candidates["problem"] == PROBLEM]
    one_evaluation = max(sum(st["gpu_s"] for st in json.loads(js)["stages"]) for js in rows["evaluation_json"])
    assert 3.0 <= s.budget.gpu_spent <= 3.0 + one_evaluation


def test_replay_search_resumes_without_repeating(tmp_path, problem, device):
    store = Store(tmp_path / "s.sqlite")
    a = Search(problem, device, proposer=RecordedProposer.from_dataset(problem), seed=2, store=store,
               search_id="run1", budget=Budget(gpu_seconds=100))
    a.run(steps=3)
    n_before = len(a.tree.nodes)
    answered = device.answered
    b = Search(problem, device, proposer=RecordedProposer.from_dataset(problem), seed=2, store=store,
               search_id="run1", budget=Budget(gpu_seconds=100))
    assert len(b.tree.nodes) == n_before and device.answered == answered  # rebuilt from events, nothing replayed
    b.run(steps=1)
    assert len(b.tree.nodes) > n_before


def test_screened_replay_search_measures_only_recorded(problem, device):
    from workbench.core import ceilings
    from workbench.surrogates import RooflineSurrogate, SelectivePolicy

    ds = RecordedDataset(problems=[PROBLEM])
    screening = ScreeningConfig(RooflineSurrogate(ceilings.load("NVIDIA H200")), SelectivePolicy(tau=0.5, seed=0))
    s = Search(problem, device, proposer=RecordedProposer.from_dataset(problem), seed=0, per_step=2,
               screening=screening, budget=Budget(gpu_seconds=5))
    s.run(steps=6)
    measured = [n for n in s.tree.nodes.values() if n.status != "skipped"]
    assert measured and all((problem.key, n.candidate) in ds for n in measured)
    assert s.report()["skipped_by_surrogate"] == sum(n.status == "skipped" for n in s.tree.nodes.values())


def test_cli_search_on_replay_prints_the_sweep_fields():
    out = subprocess.run([sys.executable, "-m", "workbench.cli", "search", PROBLEM, "--device", "replay",
                          "--strategy", "mcts", "--budget-gpu-s", "4", "--no-store", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout.strip().splitlines()[-1])
    assert rep["device"] == "replay:cuda:NVIDIA H200" and rep["replay"]["answered"] > 0
    assert rep["best"]["speedup_vs_eager"] > 1.0 and "speedup_vs_compile" in rep["best"]
    assert rep["gpu_seconds"] >= 4.0 and rep["evaluations"]["quick_timing"]["runs"] > 0
    assert rep["skipped_by_surrogate"] == 0
