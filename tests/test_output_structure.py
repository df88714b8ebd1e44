"""The output judge compares the whole structure of an output, and degenerate problems are refused (issue 18, item 3).

Before, only the tensor leaves were compared, in order: swapped dict keys, a list for a dict, a wrong Python float or a
str for a float passed, and a problem whose reference returns None or empty tensors passed every candidate. CPU only.
"""
from __future__ import annotations

import collections
import itertools
import types

import pytest
import torch

from workbench.core.records import DEGENERATE_PROBLEM, FAIL, INCONCLUSIVE, PASS
from workbench.harness.child import correctness
from workbench.harness.child.execution import ModelPair
from workbench.harness.child.judge import judge_outputs

X, Y = torch.linspace(1, 2, 64), torch.linspace(-3, -1, 64)
Pair = collections.namedtuple("Pair", "values indices")


def judge(cand, ref):
    return judge_outputs(cand, ref, "strict", [torch.float32])  # no reference rounding to forgive


# ---------------------------------------------------------------- the judge: what differs, and where


@pytest.mark.parametrize("cand, ref, reason", [
    ({"a": X, "b": X.to(torch.int64)}, {"b": X, "a": X},
     "wrong dtype: out['b'] is torch.int64, expected torch.float32"),
    ([X, Y], {"a": X, "b": Y}, "wrong type: out is a list, expected a dict"),
    ({"a": X, "c": Y}, {"a": X, "b": Y}, "wrong keys: out lacks key(s) 'b' and has unexpected key(s) 'c'"),
    ({"a": X}, {"a": X, "b": Y}, "wrong keys: out lacks key(s) 'b'"),
    ((X, "0.5"), (X, 0.5), "wrong type: out[1] is a str, expected a float"),
    ((X, 1), (X, 1.0), "wrong type: out[1] is a int, expected a float"),
    ((X, 1), (X, True), "wrong type: out[1] is a int, expected a bool"),
    ((X, 3), (X, 4), "wrong value: out[1] is 3, expected 4"),
    ((X, "mean"), (X, "sum"), "wrong value: out[1] is 'mean', expected 'sum'"),
    ((X, X), (X, None), "wrong type: out[1] is a Tensor, expected a NoneType"),
    (X, None, "wrong type: out is a Tensor, expected a NoneType"),
    ((X, Y), Pair(X, Y), "wrong type: out is a tuple, expected a Pair with fields ('values', 'indices')"),
    ((X, {"logits": X[:3]}), (X, {"logits": X}), "wrong shape: out[1]['logits'] is (3,), expected (64,)"),
])
def test_structure_differences_fail_and_say_where(cand, ref, reason):
    j = judge(cand, ref)
    assert not j.ok and j.failure == reason


def test_swapped_dict_keys_fail_at_the_key():
    j = judge({"a": Y, "b": X}, {"a": X, "b": Y})
    assert not j.ok and j.failure.startswith("output mismatch") and j.failure.endswith("(at out['a'])")


def test_a_wrong_python_float_fails_and_one_within_the_bounds_passes():
    j = judge((X, 0.75), (X, 0.5))
    assert not j.ok and j.failure.startswith("output mismatch: 0.75, expected 0.5") and j.failure.endswith(
        "(at out[1])")
    j = judge((X, 0.5 * (1 + 1e-6)), (X, 0.5))
    assert j.ok and j.precision == "fp32" and len(j.outputs) == 2
    assert judge(float("nan"), float("nan")).ok and not judge(1.0, float("nan")).ok
    assert judge(float("inf"), float("inf")).ok and not judge(float("-inf"), float("inf")).ok


def test_a_nested_value_mismatch_names_its_path():
    j = judge((X, {"logits": Y * 1.1}), (X, {"logits": Y}))
    assert not j.ok and j.failure.endswith("(at out[1]['logits'])")


@pytest.mark.parametrize("cand, ref", [
    ({"b": Y, "a": X}, {"a": X, "b": Y}),  # keys in another order: read by key, the same output
    ((X, Y), (X, Y)),
    ([X, Y], (X, Y)),  # a list for a tuple: indexed and unpacked the same way
    (Pair(X, Y), (X, Y)),  # a named tuple where a plain one is expected is still a tuple
    (Pair(X, Y), Pair(X, Y)),
    ((X, {"logits": Y, "n": 3, "tag": "x", "mask": None}, True), (X, {"logits": Y, "n": 3, "tag": "x", "mask": None},
                                                                  True)),
])
def test_correct_structured_outputs_pass(cand, ref):
    j = judge(cand, ref)
    assert j.ok, j.failure


# ---------------------------------------------------------------- the correctness stage, end to end on the CPU


class _Returns(torch.nn.Module):
    def __init__(self, make):
        super().__init__()
        self.make = make

    def forward(self, x):
        return self.make(x)


_problems = itertools.count()


def _check(ref, cand, inputs=lambda: [torch.randn(4, 8)], seeds=2):
    # each check its own problem key: the worker keeps reference outputs per problem
    problem = types.SimpleNamespace(effective_precision="strict", inputs=inputs, key=f"fake{next(_problems)}")
    pair = ModelPair(problem, torch.device("cpu"), _Returns(ref), _Returns(cand), [])
    return correctness.check(pair, n_seeds=seeds)


def test_correctness_fails_swapped_keys_and_passes_the_right_dict():
    ref = lambda x: {"relu": torch.relu(x), "neg": -x}  # noqa: E731
    r = _check(ref, lambda x: {"relu": -x, "neg": torch.relu(x)})
    assert r["verdict"] == FAIL and "(at out['relu'])" in r["reason"]
    r = _check(ref, lambda x: {"neg": -x, "relu": torch.relu(x)})
    assert r["verdict"] == PASS, r["reason"]


def test_correctness_fails_a_str_for_a_float():
    r = _check(lambda x: (x * 2, float(x.sum())), lambda x: (x * 2, str(float(x.sum()))))
    assert r["verdict"] == FAIL and r["reason"].startswith("wrong type: out[1] is a str, expected a float")


@pytest.mark.parametrize("ref, inputs, why", [
    (lambda x: None, lambda: [torch.randn(4, 8)], "the reference returned no value (NoneType)"),
    (lambda x: (x[:0], x[:, :0]), lambda: [torch.randn(4, 8)], "the reference returned only empty tensors"),
    (lambda x: x * 2, lambda: [torch.randn(0, 8)], "every input is empty [(0, 8)]"),
])
def test_degenerate_problems_are_inconclusive(ref, inputs, why):
    """Any candidate would pass: not a pass, and not the candidate's failure either."""
    r = _check(ref, lambda x: "anything", inputs)
    assert r["verdict"] == INCONCLUSIVE and r["reason"].startswith(f"{DEGENERATE_PROBLEM}: {why}"), r["reason"]


def test_a_python_float_output_alone_is_judged():
    r = _check(lambda x: float(x.sum()), lambda x: float(x.sum()) + 1.0)
    assert r["verdict"] == FAIL and r["reason"].startswith("output mismatch")


def test_an_output_whose_structure_changes_between_runs_is_nondeterministic():
    calls = []

    def flipping(x):
        calls.append(1)
        return {"y": x * 2} if len(calls) % 2 else [x * 2]

    r = _check(lambda x: {"y": x * 2}, flipping, seeds=1)
    assert r["verdict"] == FAIL and r["reason"].startswith("nondeterministic: the output changed between two runs")
