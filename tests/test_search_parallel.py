"""A search over a device with several GPUs (a Ray device's `slots`): a step's measurements run at once, and the tree
is the one a one-GPU device builds, node for node, because results are applied in proposal order."""
from __future__ import annotations

import threading
import time

import pytest
from test_search import STAGE_GPU_S, RecordingGPU

from workbench.harness.budget import Budget
from workbench.problems import Problem
from workbench.proposers.offline import OfflineProposer
from workbench.search import Search
from workbench.store import Store


class TwoGPUs(RecordingGPU):
    """RecordingGPU's answers, from `slots` GPUs at once; it counts how many calls overlapped."""

    def __init__(self, slots: int):
        super().__init__()
        self.slots, self.inflight, self.most = slots, 0, 0
        self.lock = threading.Lock()

    def run_stages(self, problem, path, stages, options=None):
        with self.lock:
            self.inflight += 1
            self.most = max(self.most, self.inflight)
        try:
            time.sleep(0.05)  # long enough for a step's other calls to start
            return super().run_stages(problem, path, stages, options)
        finally:
            with self.lock:
                self.inflight -= 1


@pytest.fixture(scope="module")
def problem():
    return Problem.load("scale_shift_relu", ["batch_size=16", "dim=1024"])


def _tree(search: Search):
    return [(n.nid, n.parent, n.move, n.candidate, n.status, n.speedup) for n in search.tree.nodes.values()]


@pytest.mark.parametrize("strategy", ["greedy", "mcts"])
def test_parallel_search_builds_the_same_tree(problem, strategy, tmp_path):
    one = Search(problem, TwoGPUs(1), strategy=strategy, proposer=OfflineProposer(problem), seed=3, per_step=4)
    one.run(steps=4)
    dev = TwoGPUs(2)
    store = Store(tmp_path / "par.sqlite")
    two = Search(problem, dev, strategy=strategy, proposer=OfflineProposer(problem), seed=3, per_step=4, store=store)
    two.run(steps=4)
    assert dev.most == 2, "the step's evaluations never overlapped"
    assert _tree(two) == _tree(one)
    # every measurement reached the store, written from the driver's threads
    assert len(store.evaluations_frame()) == len(two.tree.nodes)
    nodes = [e for e in two.events if e["type"] == "node"]
    assert [e["nid"] for e in nodes] == sorted(e["nid"] for e in nodes)
    assert all(e["wall_s"] > 0 for e in nodes)
    store.close()


def test_parallel_search_stops_on_budget(problem):
    # each measured candidate costs 2 or 3 stages of STAGE_GPU_S (correctness, quick, maybe full timing)
    budget = Budget(gpu_seconds=6 * STAGE_GPU_S)
    dev = TwoGPUs(2)
    s = Search(problem, dev, proposer=OfflineProposer(problem), seed=0, per_step=4, budget=budget)
    s.run(steps=50)
    assert s.budget.exhausted()
    # overrun bounded by the evaluations already started when the budget ran out: at most slots - 1 = 1 more
    assert budget.gpu_spent <= 6 * STAGE_GPU_S + 3 * STAGE_GPU_S
    assert all(n.status in ("measured", "failed") for n in s.tree.nodes.values())
