"""Reference outputs kept across a problem's candidates (harness/child/reference_cache.py), judged in-process on the
CPU: the reference runs once per fixed seed per problem, the last seed is always fresh, kept outputs are checksummed,
a reference that mutates its inputs is never kept, and the cache stays inside its byte budget."""
from __future__ import annotations

import itertools
import types

import pytest
import torch

from workbench.core.records import FAIL, PASS
from workbench.harness.child import correctness, reference_cache
from workbench.harness.child.execution import ModelPair

_keys = itertools.count()


class Counting(torch.nn.Module):
    """Counts its forward calls, its deep copies' included (the determinism probe runs a copy)."""

    def __init__(self, fn):
        super().__init__()
        self.fn, self.counter = fn, [0]

    @property
    def calls(self) -> int:
        return self.counter[0]

    def forward(self, x):
        self.counter[0] += 1
        return self.fn(x)

    def __deepcopy__(self, memo):
        twin = Counting(self.fn)
        twin.counter = self.counter
        return twin


def _problem():
    return types.SimpleNamespace(effective_precision="strict", inputs=lambda: [torch.randn(4, 8)],
                                 key=f"cached{next(_keys)}")


def _check(problem, ref, cand, seeds=5):
    return correctness.check(ModelPair(problem, torch.device("cpu"), ref, cand, []), n_seeds=seeds)


@pytest.fixture(autouse=True)
def _empty_cache():
    reference_cache.clear()
    yield
    reference_cache.clear()


def test_the_reference_runs_once_per_fixed_seed_per_problem():
    problem = _problem()
    ref = Counting(torch.relu)
    first = _check(problem, ref, Counting(torch.relu))
    assert first["verdict"] == PASS and ref.calls == 2 + 5  # the determinism probe, then one run per seed
    second = _check(problem, ref, Counting(torch.relu))
    assert second["verdict"] == PASS and ref.calls == 2 + 5 + 1  # only the fresh seed ran the reference
    assert first["data"]["fresh_seed"] != second["data"]["fresh_seed"]


def test_a_wrong_candidate_still_fails_on_kept_outputs():
    problem = _problem()
    ref = Counting(torch.relu)
    assert _check(problem, ref, Counting(torch.relu))["verdict"] == PASS
    r = _check(problem, ref, Counting(lambda x: torch.relu(x) + 1e-3))
    assert r["verdict"] == FAIL and "output mismatch" in r["reason"]


def test_a_candidate_right_only_on_the_fixed_seeds_fails_on_the_fresh_one():
    problem = _problem()
    ref = Counting(torch.relu)
    _check(problem, ref, Counting(torch.relu))
    known = {float(e.out.sum()) for e in reference_cache._entries.values()}

    def memorised(x):  # correct on inputs it has seen the answers of, zeros elsewhere
        return torch.relu(x) if float(torch.relu(x).sum()) in known else torch.zeros_like(x)

    r = _check(problem, ref, Counting(memorised))
    assert r["verdict"] == FAIL and "output mismatch" in r["reason"]


def test_a_candidate_that_alters_the_kept_outputs_fails_as_tampering():
    problem = _problem()
    ref = Counting(torch.relu)
    _check(problem, ref, Counting(torch.relu))

    def saboteur(x):
        for e in reference_cache._entries.values():
            e.out.zero_()
        return torch.relu(x)

    r = _check(problem, ref, Counting(saboteur))
    assert r["verdict"] == FAIL and r["reason"].startswith("tampering: the reference's kept outputs changed")
    assert _check(problem, ref, Counting(torch.relu))["verdict"] == PASS  # the altered entry was dropped


def test_a_reference_that_mutates_its_inputs_is_never_kept():
    def in_place(x):
        return x.mul_(2)

    problem = _problem()
    ref = Counting(in_place)
    assert _check(problem, ref, Counting(in_place))["verdict"] == PASS
    calls = ref.calls
    assert _check(problem, ref, Counting(in_place))["verdict"] == PASS
    assert ref.calls == calls + 5 and not reference_cache._entries


def test_the_cache_keeps_to_its_budget_and_to_one_problem(monkeypatch):
    monkeypatch.setattr(reference_cache, "CPU_BUDGET_BYTES", 3 * 4 * 8 * 4)  # room for three outputs of 4x8 fp32
    problem = _problem()
    _check(problem, Counting(torch.relu), Counting(torch.relu))
    assert len(reference_cache._entries) == 3 and reference_cache._held <= reference_cache.CPU_BUDGET_BYTES
    _check(_problem(), Counting(torch.relu), Counting(torch.relu), seeds=2)
    assert {k[0] for k in reference_cache._entries} == {f"cached{next(_keys) - 1}"}


def test_turned_off_every_seed_runs_the_reference(monkeypatch):
    monkeypatch.setenv("WORKBENCH_REFERENCE_CACHE", "0")
    problem = _problem()
    ref = Counting(torch.relu)
    _check(problem, ref, Counting(torch.relu))
    _check(problem, ref, Counting(torch.relu))
    assert ref.calls == 2 * (2 + 5) and not reference_cache._entries
