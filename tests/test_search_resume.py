"""A search id is one search: bound to its configuration, written by one process at a time, and resumed exactly.

Interrupted at any event (between steps, or in the middle of one) and resumed from the store with everything in
memory dropped, a search produces the same events as the uninterrupted one: ids, parents, moves, verdicts, speedups,
GPU-seconds, best, the generator's draws. Timings come from `RecordingGPU` (tests/test_search.py), so this runs on
the CPU in seconds."""
from __future__ import annotations

import copy
import functools
import json
import multiprocessing

import pytest
from test_search import STAGE_GPU_S, OracleSurrogate, RecordingGPU

from workbench.harness import ladder as ladder_module
from workbench.harness.budget import Budget
from workbench.harness.ladder import PromotionPolicy
from workbench.problems import Problem
from workbench.proposers.offline import OfflineProposer
from workbench.search import ScreeningConfig, Search
from workbench.search.search import SearchMismatch
from workbench.store import Store
from workbench.store.lease import SearchLocked
from workbench.surrogates import SelectivePolicy

STEPS, PER_STEP = 6, 3


@pytest.fixture(autouse=True)
def _static_once(monkeypatch):
    """The static stage's AST checks are most of these searches' CPU time and a pure function of the sources: each
    candidate is checked once across the many runs here (a copy each time: the ladder sets the record's cost)."""
    memo = functools.lru_cache(maxsize=None)(ladder_module.check_static)
    monkeypatch.setattr(ladder_module, "check_static", lambda *a: copy.deepcopy(memo(*a)))


@pytest.fixture(scope="module")
def problem():
    return Problem.load("linear_gelu", ["batch_size=32", "in_features=48", "out_features=40"])


@pytest.fixture(scope="module")
def proposer(problem):
    return OfflineProposer(problem)  # its state is pure caches (layouts, valid spaces): shared to save their cost


def _search(problem, proposer, store, strategy, screening=False, **kw):
    """Everything but the proposer's caches built afresh, as a new process would (only the store carries over)."""
    kw.setdefault("budget", Budget(gpu_seconds=36 * STAGE_GPU_S))  # the budget runs out within the steps
    if screening:  # explore > 0: the policy's own generator decides too
        kw["screening"] = ScreeningConfig(OracleSurrogate(), SelectivePolicy(tau=0.5, explore=0.5, seed=1),
                                          overgenerate=2)
    return Search(problem, RecordingGPU(), strategy=strategy, proposer=proposer, store=store,
                  search_id="s", seed=7, per_step=PER_STEP, **kw)


def _events(store):
    """The stored events, without what differs between any two runs (wall seconds)."""
    out = []
    for e in store.search_events("s"):
        e = json.loads(json.dumps(e))
        e.pop("wall_s", None)
        out.append(e)
    return out


def _interrupted(problem, proposer, tmp_path, strategy, steps, told, screening=False):
    """`steps` whole steps, then `told` proposals of the next one told (a kill at that point), everything dropped,
    then a resume run to the end. Returns the resumed store's events."""
    store = Store(tmp_path / f"{strategy}-{steps}-{told}-{screening}.sqlite")
    first = _search(problem, proposer, store, strategy, screening)
    first.run(steps)
    if told:
        for p in first.ask()[:told]:
            first.tell(p, *first._evaluate(p.candidate)) if p.measure else first.tell(p)
    first.close()
    del first
    again = _search(problem, proposer, store, strategy, screening)
    again.run(STEPS - steps)
    assert again.steps == STEPS or again.stopped()
    return _events(store), again


@pytest.mark.parametrize("strategy,screening", [("greedy", True), ("evolutionary", False), ("mcts", False)])
def test_a_search_interrupted_anywhere_and_resumed_equals_the_uninterrupted_one(tmp_path, problem, proposer,
                                                                                strategy, screening):
    whole_store = Store(tmp_path / "whole.sqlite")
    whole = _search(problem, proposer, whole_store, strategy, screening)
    whole.run(STEPS)
    expected = _events(whole_store)
    assert [e["type"] for e in expected].count("step") >= 4
    # between steps (k = 0 is a kill during the root's step), and in the middle of a step
    for steps, told in [(1, 0), (3, 0), (0, 0), (2, 1), (4, 2)]:
        got, again = _interrupted(problem, proposer, tmp_path, strategy, steps, told, screening)
        assert got == expected, f"{strategy}: interrupted after {steps} step(s) and {told} tell(s)"
        assert again.rng.draws == whole.rng.draws
        assert again.memory.attempts == whole.memory.attempts
        assert all(a.parent is not None for a in again.memory.attempts if a.move != "root")
        assert again.best_summary() == whole.best_summary()
        assert again.report()["candidates"] == whole.report()["candidates"]


def test_a_kill_during_an_evaluation_the_store_kept_repeats_no_work(tmp_path, problem, proposer):
    """Killed after the evaluation was stored but before its node was told: the same nodes, the evaluation answered
    by the store (marked cached), no device work done twice."""
    kw = dict(budget=Budget(), promotion=PromotionPolicy(full_within=1e9))  # every timed node reaches full timing
    whole = _search(problem, proposer, Store(tmp_path / "w.sqlite"), "greedy", **kw)
    whole.run(STEPS)
    store = Store(tmp_path / "k.sqlite")
    first = _search(problem, proposer, store, "greedy", **kw)
    first.run(2)
    nid = len(first.tree.nodes)  # the node the next proposal becomes
    first.ladder.evaluate(problem, first.ask()[0].candidate)  # stored; the kill comes before the tell
    first.close()
    again = _search(problem, proposer, store, "greedy", **kw)
    again.run(STEPS - 2)

    def nodes(s):
        return [(n.nid, n.parent, n.move, n.candidate, n.status, n.speedup) for n in s.tree.nodes.values()]

    assert nodes(again) == nodes(whole)
    assert again.report()["cached"] == 1 and again.summaries[nid]["cached"]
    assert first.device.calls + again.device.calls == whole.device.calls


def test_a_resume_with_another_configuration_is_refused_naming_what_differs(tmp_path, problem, proposer):
    store = Store(tmp_path / "s.sqlite")
    first = _search(problem, proposer, store, "greedy")
    first.run(1)
    first.close()
    other = Problem.load("linear_gelu", ["batch_size=16", "in_features=48", "out_features=40"])
    for kw, named in [(dict(strategy="mcts"), "strategy"), (dict(seed=8), "seed"), (dict(per_step=2), "per_step"),
                      (dict(budget=Budget(gpu_seconds=99)), "budget_gpu_s"), (dict(problem=other), "problem")]:
        args = dict(strategy="greedy", proposer=proposer, store=store, search_id="s", seed=7,
                    per_step=PER_STEP, budget=Budget(gpu_seconds=30 * STAGE_GPU_S))
        args.update(kw)
        prob = args.pop("problem", problem)
        with pytest.raises(SearchMismatch, match=f"{named}: created with"):
            Search(prob, RecordingGPU(), **args)
    # the refused resumes wrote nothing and left the id free: the right configuration resumes it
    again = _search(problem, proposer, store, "greedy")
    assert again.steps == 1


def _hold(path, ready, done):
    store = Store(path)
    lease = store.lease_search("s")
    ready.set()
    done.wait(30)
    lease.release()


def test_a_second_writer_is_refused_and_a_dead_holder_blocks_nothing(tmp_path, problem, proposer):
    path = tmp_path / "s.sqlite"
    ctx = multiprocessing.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(path, ready, done))
    holder.start()
    try:
        assert ready.wait(60)
        with pytest.raises(SearchLocked, match=r"'s' is being written by pid \d+ on"):
            _search(problem, proposer, Store(path), "greedy")
    finally:
        holder.kill()  # dies holding the lock, as after kill -9
        holder.join()
    s = _search(problem, proposer, Store(path), "greedy")  # the kernel dropped the dead holder's lock
    s.run(1)


def test_a_newer_search_in_the_same_process_takes_the_id_over(tmp_path, problem, proposer):
    """A notebook cell run again builds a new Search while the old one is still referenced: the new one resumes,
    the old one stops writing (its next event is refused) instead of interleaving with it."""
    store = Store(tmp_path / "s.sqlite")
    old = _search(problem, proposer, store, "greedy")
    old.run(1)
    new = _search(problem, proposer, store, "greedy")
    with pytest.raises(SearchLocked, match="reopened by a newer search"):
        old.run(1)
    new.run(1)
    assert new.steps == 2 and [e["type"] for e in store.search_events("s")].count("step") == 2


def test_the_cli_resumes_an_id_and_refuses_another_configuration(tmp_path, capsys):
    from workbench.cli import main

    args = ["search", "cross_entropy", "--device", "replay", "--steps", "1", "--per-step", "2", "--search-id", "x",
            "--store", str(tmp_path / "s.sqlite")]
    assert main(args) == 0
    assert main(args) == 0 and "resuming search 'x': 1 step(s)" in capsys.readouterr().out
    assert main([*args, "--seed", "1", "--strategy", "mcts"]) == 2
    err = capsys.readouterr().err
    assert "search id 'x' belongs to another search" in err and "seed: created with 0, now 1" in err
    assert "strategy: created with 'greedy', now 'mcts'" in err and "Traceback" not in err
    assert main([*args[:-2], "--no-store"]) == 2 and "--search-id needs the store" in capsys.readouterr().err
