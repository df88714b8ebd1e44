"""Tolerances: hand-computed cases for `compare` (norm and elementwise checks, NaN, inf, integers) and `resolve`."""
from __future__ import annotations

import math

import pytest
import torch

from workbench.harness.tolerance import DEFAULTS, Tolerance, compare, precision_class, resolve

FP32 = DEFAULTS["fp32"]


def ones(n: int = 1000, dtype=torch.float32) -> torch.Tensor:
    return torch.ones(n, dtype=dtype)


# ---------------------------------------------------------------- defaults and classes

def test_default_bounds():
    assert DEFAULTS["fp32"] == Tolerance(norm=1e-4, rtol=1e-3, atol_rms=1e-3)
    assert DEFAULTS["tf32"].norm == 2e-3 and DEFAULTS["bf16"].norm == 1e-2 and DEFAULTS["fp16"].norm == 1e-2
    assert FP32.to_dict() == {"norm": 1e-4, "rtol": 1e-3, "atol_rms": 1e-3}


@pytest.mark.parametrize("dtypes, precision, expected", [
    ([torch.float32], "strict", "fp32"),
    ([torch.float32], "tf32", "tf32"),
    ([torch.float32], "cudnn_tf32", "tf32"),  # a reference whose convolutions ran cuDNN's tf32 (PyTorch's default)
    ([torch.bfloat16], "cudnn_tf32", "bf16"),
    ([torch.float32, torch.bfloat16], "strict", "bf16"),  # any bf16 makes the class bf16
    ([torch.bfloat16, torch.float32], "tf32", "bf16"),
    ([torch.float16, torch.float32], "strict", "fp16"),
    ([torch.float16, torch.bfloat16], "strict", "bf16"),  # bf16 is the looser of the two
    ([torch.float64], "strict", "fp64"),
    ([torch.float64, torch.float64], "tf32", "fp64"),
    ([torch.float64, torch.float32], "strict", "fp32"),  # fp64 only when everything is fp64
    ([], "strict", "fp32"),
    ([], "tf32", "tf32"),
    (["torch.bfloat16"], "strict", "bf16"),  # dtype names work too
])
def test_precision_class(dtypes, precision, expected):
    assert precision_class(dtypes, precision) == expected


def test_resolve_tf32_loosens_fp32():
    cls, tol = resolve([torch.float32], "tf32")
    assert cls == "tf32" and tol == DEFAULTS["tf32"]
    assert tol.norm == 20 * FP32.norm and tol.rtol > FP32.rtol and tol.atol_rms > FP32.atol_rms
    # a relative error of 1e-3 (tf32-like) fails strict fp32 and passes under tf32
    ref = ones()
    out = ref * (1 + 1e-3)
    assert not compare(out, ref, resolve([torch.float32], "strict")[1])[0]
    assert compare(out, ref, tol)[0]


def test_resolve_overrides_replace_fields():
    cls, tol = resolve([torch.float32], "strict", {"norm": "5e-4", "atol_rms": 2, "bogus": 7})
    assert cls == "fp32"
    assert tol == Tolerance(norm=5e-4, rtol=FP32.rtol, atol_rms=2.0)  # unknown keys ignored, strings parsed
    assert isinstance(tol.atol_rms, float)
    assert DEFAULTS["fp32"] == Tolerance(norm=1e-4, rtol=1e-3, atol_rms=1e-3)  # the defaults are not mutated
    assert resolve([torch.bfloat16], "strict", {})[1] == DEFAULTS["bf16"]


# ---------------------------------------------------------------- the norm check

def test_exact_match_passes():
    ref = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    ok, why, facts = compare(ref.clone(), ref, FP32)
    assert ok and why == ""
    assert facts["rel_err"] == 0.0 and facts["max_abs_err"] == 0.0 and facts["elements_outside"] == 0
    assert facts["ref_rms"] == pytest.approx(float(ref.pow(2).mean().sqrt()), rel=1e-5)


def test_relative_error_just_below_norm_bound_passes():
    ref = ones()
    ok, why, facts = compare(ref * (1 + 0.9e-4), ref, FP32)
    assert ok, why
    assert facts["rel_err"] == pytest.approx(0.9e-4, rel=1e-2)
    assert facts["elements_outside"] == 0  # 0.9e-4 is far inside 1e-3*|1| + 1e-3*rms


def test_relative_error_just_above_norm_bound_fails():
    ref = ones()
    ok, why, facts = compare(ref * (1 + 1.1e-4), ref, FP32)
    assert not ok
    assert facts["rel_err"] == pytest.approx(1.1e-4, rel=1e-2)
    assert why.startswith("output mismatch: relative error 0.00011 > 0.0001")
    assert "(0 of 1000 elements outside the elementwise bound)" in why


def test_norm_bound_scales_with_magnitude():
    ref = ones() * 1e-5  # a tiny output: the same relative error means the same verdict
    assert compare(ref * (1 + 0.9e-4), ref, FP32)[0]
    assert not compare(ref * (1 + 1.1e-4), ref, FP32)[0]
    ref = ones() * 1e5
    assert compare(ref * (1 + 0.9e-4), ref, FP32)[0]
    assert not compare(ref * (1 + 1.1e-4), ref, FP32)[0]


# ---------------------------------------------------------------- the elementwise check

def test_one_wrong_element_diluted_by_norm_caught_elementwise():
    n = 1_000_000
    ref = ones(n)
    out = ref.clone()
    out[123_456] = 1.05
    # the norm dilutes it: 0.05 / sqrt(1e6) = 5e-5 < 1e-4 ...
    ok, why, facts = compare(out, ref, FP32)
    assert facts["rel_err"] == pytest.approx(5e-5, rel=1e-3)
    assert facts["rel_err"] < FP32.norm
    # ... but the elementwise bound 1e-3*1 + 1e-3*rms(1) = 2e-3 < 0.05 catches it
    assert not ok
    assert facts["elements_outside"] == 1
    assert facts["max_abs_err"] == pytest.approx(0.05, rel=1e-5)
    assert f"1 of {n} elements outside" in why
    assert "worst: 1.05 vs 1" in why and "though the relative error" in why


def test_elementwise_bound_edge():
    ref = ones(10_000)
    out = ref.clone()
    out[7] = 1 + 1.9e-3  # inside 2e-3
    assert compare(out, ref, FP32)[0]
    out[7] = 1 + 2.1e-3  # outside
    ok, why, facts = compare(out, ref, FP32)
    assert not ok and facts["elements_outside"] == 1 and "elements outside" in why


def test_degenerate_small_output_accepted_by_loose_allclose_rejected_here():
    # softmax over a long row: every value is ~1/16384 = 6e-5, so atol=1e-4 swamps it
    x = 0.1 * torch.randn(8, 16384, generator=torch.Generator().manual_seed(1))
    ref = torch.softmax(x, dim=-1)
    assert float(ref.max()) < 1e-4
    uniform = torch.full_like(ref, 1.0 / ref.shape[-1])  # ignores the input entirely
    zeros = torch.zeros_like(ref)
    for out in (uniform, zeros):
        assert torch.allclose(out, ref, atol=1e-4)
        ok, why, facts = compare(out, ref, FP32)
        assert not ok
        assert "relative error" in why and facts["rel_err"] > 100 * FP32.norm
    assert compare(zeros, ref, FP32)[2]["rel_err"] == pytest.approx(1.0)


def test_bf16_outputs_compared_widened():
    ref = torch.randn(256, 256, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    tol = resolve([torch.bfloat16], "strict")[1]
    assert compare(ref.clone(), ref, tol)[0]
    off = (ref.float() * 1.004).to(torch.bfloat16)  # within bf16 rounding of 0.4%: passes bf16
    ok, why, facts = compare(off, ref, tol)
    assert ok, why
    assert 0 < facts["rel_err"] < tol.norm
    assert not compare((ref.float() * 1.05).to(torch.bfloat16), ref, tol)[0]


# ---------------------------------------------------------------- NaN and inf

def test_nan_in_output_fails():
    ref = ones(100)
    out = ref.clone()
    out[3] = float("nan")
    out[50] = float("nan")
    ok, why, facts = compare(out, ref, FP32)
    assert not ok
    assert why == "nan in output: 2 of 100 elements are NaN where the reference is finite"
    assert facts["nan"] == 2


def test_nan_in_both_at_same_place_passes():
    ref = torch.arange(10, dtype=torch.float32)
    ref[4] = float("nan")
    out = ref.clone()
    ok, why, facts = compare(out, ref, FP32)
    assert ok, why
    assert facts["rel_err"] == 0.0
    out[0] += 1.0  # the finite elements are still judged
    assert not compare(out, ref, FP32)[0]


def test_nan_in_reference_only_fails():
    ref = ones(10)
    ref[2] = float("nan")
    ok, why, _ = compare(ones(10), ref, FP32)
    assert not ok and "the reference is NaN where the output is not" in why


def test_nan_at_different_places_fails():
    ref, out = ones(10), ones(10)
    ref[1] = float("nan")
    out[2] = float("nan")
    ok, why, facts = compare(out, ref, FP32)
    assert not ok and why.startswith("nan in output: 1 of 10") and facts["nan"] == 1


def test_inf_handling():
    ref = torch.tensor([1.0, float("inf"), -float("inf"), 2.0])
    assert compare(ref.clone(), ref, FP32)[0]  # matching infinities pass
    wrong_sign = ref.clone()
    wrong_sign[1] = -float("inf")
    ok, why, _ = compare(wrong_sign, ref, FP32)
    assert not ok and why == "output mismatch: infinities of the wrong sign"
    finite = ref.clone()
    finite[1] = 3e38
    ok, why, _ = compare(finite, ref, FP32)
    assert not ok and "infinities where the reference is finite (or the reverse)" in why
    extra = ref.clone()
    extra[0] = float("inf")
    ok, why, _ = compare(extra, ref, FP32)
    assert not ok and "infinities where the reference is finite" in why
    # infinities are excluded from the norm: the finite part is judged on its own
    close = ref.clone()
    close[3] = 2.0 * (1 + 1e-5)
    ok, why, facts = compare(close, ref, FP32)
    assert ok, why
    assert math.isfinite(facts["rel_err"]) and facts["rel_err"] > 0


def test_nan_and_inf_together():
    ref = torch.tensor([float("nan"), float("inf"), 1.0])
    assert compare(ref.clone(), ref, FP32)[0]
    out = ref.clone()
    out[1] = 5.0
    assert not compare(out, ref, FP32)[0]


# ---------------------------------------------------------------- integers and special shapes

def test_integer_outputs_must_match_exactly():
    ref = torch.arange(100, dtype=torch.int64)
    ok, why, facts = compare(ref.clone(), ref, FP32)
    assert ok and why == "" and facts == {"mismatched": 0}
    out = ref.clone()
    out[10] += 1
    out[20] -= 1
    ok, why, facts = compare(out, ref, Tolerance(norm=1.0, rtol=1.0, atol_rms=1.0))  # loose bounds don't apply
    assert not ok and facts["mismatched"] == 2
    assert why == "output mismatch: 2 of 100 elements differ (integer output must match exactly)"


def test_bool_outputs_must_match_exactly():
    ref = torch.tensor([True, False, True])
    assert compare(ref.clone(), ref, FP32)[0]
    ok, _, facts = compare(torch.tensor([True, True, True]), ref, FP32)
    assert not ok and facts["mismatched"] == 1


def test_all_zero_reference():
    ref = torch.zeros(16)
    assert compare(torch.zeros(16), ref, FP32)[0]
    ok, why, facts = compare(torch.full((16,), 1e-3), ref, FP32)
    assert not ok and facts["rel_err"] == float("inf") and "relative error inf" in why


def test_fp64_outputs_stay_fp64():
    ref = torch.ones(1000, dtype=torch.float64)
    tol = resolve([torch.float64], "strict")[1]
    assert tol == DEFAULTS["fp64"]
    assert compare(ref * (1 + 0.5e-9), ref, tol)[0]
    ok, _, facts = compare(ref * (1 + 2e-9), ref, tol)  # resolvable only in float64 arithmetic
    assert not ok and facts["rel_err"] == pytest.approx(2e-9, rel=1e-3)


def test_slack_widens_only_the_elements_it_covers():
    import torch

    from workbench.harness.tolerance import Tolerance, compare

    ref = torch.ones(4, 8)
    out = ref.clone()
    out[1, 3] += 0.5
    tol = Tolerance(norm=0.5, rtol=1e-3, atol_rms=1e-3)
    assert not compare(out, ref, tol)[0]
    slack = torch.zeros_like(ref)
    slack[1, 3] = 0.5
    assert compare(out, ref, tol, slack)[0]
    slack_elsewhere = torch.zeros_like(ref)
    slack_elsewhere[0, 0] = 10.0
    assert not compare(out, ref, tol, slack_elsewhere)[0]


def test_reference_rounding_is_the_low_precision_references_own_error():
    import types

    import torch

    from workbench.harness.child.execution import reference_rounding

    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 16).to(torch.bfloat16)
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    models = types.SimpleNamespace(reference=lin, device=torch.device("cpu"),
                                   problem=types.SimpleNamespace(effective_precision="strict"))
    lo = lin(x)
    slack, rel = reference_rounding(models, [x], lo)
    hi = torch.nn.functional.linear(x.float(), lin.weight.float(), lin.bias.float())
    assert torch.allclose(slack[0], (lo.float() - hi).abs())
    assert float(slack[0].max()) > 0  # bf16 rounding is visible
    assert abs(rel[0] - float(torch.linalg.vector_norm(lo.float() - hi) / torch.linalg.vector_norm(hi))) < 1e-6

    class InsistsOnBf16(torch.nn.Module):
        def forward(self, x):
            assert x.dtype == torch.bfloat16
            return x * 2

    models.reference = InsistsOnBf16()
    assert reference_rounding(models, [x], x * 2) is None  # no fp32 re-run possible: no widening


@pytest.mark.parametrize("precision", ["tf32", "cudnn_tf32"])
def test_a_tf32_reference_also_gets_the_fp32_rounding_floor(precision):
    """The mean of a normalised tensor is 0 up to rounding: a tf32 problem's bounds widen by its strict re-run's fp32
    rounding (here, on the CPU, tf32 adds no error of its own), so a correct candidate that sums in another order
    passes; a wrong one still fails."""
    import types

    from workbench.harness.child.execution import reference_rounding

    class NormMean(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.group_norm(x, 2).mean(dim=(1, 2, 3))

    torch.manual_seed(0)
    x = torch.randn(4, 8, 6, 6)
    models = types.SimpleNamespace(reference=NormMean(), device=torch.device("cpu"),
                                   problem=types.SimpleNamespace(effective_precision=precision))
    ref = models.reference(x)
    slack, rel = reference_rounding(models, [x], ref)
    assert float(slack[0].min()) > 0 and rel[0] > 0  # the floor, where tf32's own error is 0
    _, tol = resolve([torch.float32], precision)
    other_order = torch.nn.functional.group_norm(x.double(), 2).float().mean(dim=(1, 2, 3))  # another summation
    assert not compare(other_order, ref, tol)[0]  # the cancellation fails without the floor
    assert compare(other_order, ref, tol, slack[0], rel[0])[0]
    assert not compare(other_order + 1e-2, ref, tol, slack[0], rel[0])[0]


def test_norm_slack_widens_the_relative_error_bound():
    import torch

    from workbench.harness.tolerance import Tolerance, compare

    ref = torch.ones(100)
    out = ref * 1.003  # relative error 0.003
    tol = Tolerance(norm=0.002, rtol=0.01, atol_rms=0.01)
    assert not compare(out, ref, tol)[0]
    assert compare(out, ref, tol, norm_slack=0.0015)[0]


# ---------------------------------------------------------------- the output judge (correctness and timing share it)

def _rounding(slack: torch.Tensor, rel: float, calls: list[int], outputs: int = 1):
    """A stand-in for `execution.reference_rounding` that counts its calls."""
    def compute():
        calls.append(1)
        return [slack] * outputs, [rel] * outputs
    return compute


def test_judge_passes_within_bounds_and_never_asks_for_the_reference_rounding():
    from workbench.harness.child.judge import judge_outputs

    calls: list[int] = []
    ref = torch.linspace(1, 2, 1000)
    j = judge_outputs(ref * (1 + 1e-6), ref, "strict", [torch.float32], rounding=_rounding(ref * 0, 0.0, calls))
    assert j.ok and not j.widened and j.precision == "fp32" and j.tolerance == FP32
    assert len(j.outputs) == 1 and j.outputs[0]["elements_outside"] == 0
    assert calls == []  # the fp32 re-run is paid only when values miss


def test_judge_widens_a_rounded_reference_once_and_says_so():
    from workbench.harness.child.judge import judge_outputs

    ref = torch.linspace(1, 2, 1000).to(torch.bfloat16)
    out = (ref.float() * 1.03).to(torch.bfloat16)  # 3 % off: outside bf16's norm bound of 1e-2
    calls: list[int] = []
    j = judge_outputs((out, out), (ref, ref), "strict", [], rounding=_rounding(ref.float() * 0, 0.0, calls, 2))
    assert not j.ok and j.failure.startswith("output mismatch") and j.failure.endswith("(at out[0])")
    assert calls == [1]  # asked once, and it did not help: no slack
    calls.clear()
    slack = ref.float() * 0.05
    j = judge_outputs((out, out), (ref, ref), "strict", [], rounding=_rounding(slack, 0.05, calls, 2))
    assert j.ok and j.widened and j.precision == "bf16" and len(j.outputs) == 2
    assert calls == [1]  # computed once for both outputs


def _fp32_pair(model):
    import types

    from workbench.harness.child.execution import ModelPair

    problem = types.SimpleNamespace(effective_precision="strict")
    return ModelPair(problem, torch.device("cpu"), model, model, [])


def test_fp32_reference_rounding_forgives_only_its_own_size():
    """Strict fp32: the reference is re-run in float64 only when values miss. An output that is the cancellation of
    larger terms (the mean of a group-normalised tensor: 0 up to rounding) passes when computed in another order in
    fp32, and still fails when computed in bf16 or off by a constant; an ordinary output gets no slack to speak of."""
    import functools

    from workbench.harness.child.execution import reference_rounding
    from workbench.harness.child.judge import judge_outputs

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.GroupNorm(4, 16), torch.nn.Flatten(1))
    x = torch.rand(3, 16, 9, 11) * 10 + 5
    ref = model(x).mean(dim=1)
    pair = _fp32_pair(_MeanOf(model))
    rounding = functools.partial(reference_rounding, pair, [x], ref)

    def manual(t, dtype):  # group norm by hand, in another order
        g = t.to(dtype).reshape(3, 4, -1)
        out = (g - g.mean(-1, keepdim=True)) / torch.sqrt(g.var(-1, unbiased=False, keepdim=True) + 1e-5)
        return out.reshape(3, -1).float().flip(1).mean(dim=1)

    fp32 = manual(x, torch.float32)
    assert not torch.equal(fp32, ref) and float(ref.abs().max()) < 1e-5  # pure rounding, both
    j = judge_outputs(fp32, ref, "strict", [torch.float32], rounding=rounding)
    assert j.ok and j.widened
    assert not judge_outputs(manual(x, torch.bfloat16), ref, "strict", [torch.float32], rounding=rounding).ok
    assert not judge_outputs(ref + 1e-3, ref, "strict", [torch.float32], rounding=rounding).ok

    lin = torch.linspace(1, 2, 1000)
    identity = _fp32_pair(torch.nn.Identity())
    j = judge_outputs(lin * 1.01, lin, "strict", [torch.float32],
                      rounding=functools.partial(reference_rounding, identity, [lin], lin))
    assert not j.ok  # an exact reference has no rounding to forgive


def test_fp32_reference_rounding_is_sampled_again_where_the_reference_was_lucky():
    """A cancellation the fp32 reference happens to compute exactly (integer rows whose means are exact: deviation
    0 from float64) still has rounding-sized noise in any other summation order. The re-run on nudged inputs
    samples that noise, so an output of its size passes; an error a thousand times larger still fails."""
    import functools

    from workbench.harness.child.execution import reference_rounding
    from workbench.harness.child.judge import judge_outputs

    class CenteredSum(torch.nn.Module):
        def forward(self, x):
            return (x - x.mean(dim=1, keepdim=True)).sum(dim=1)

    torch.manual_seed(0)
    x = torch.randint(50, 150, (4, 8)).float()
    x[:, -1] += (8 - x.sum(dim=1) % 8) % 8  # row sums divisible by 8: exact means, an exact 0
    ref = CenteredSum()(x)
    assert torch.equal(ref, torch.zeros(4))
    pair = _fp32_pair(CenteredSum())
    rounding = functools.partial(reference_rounding, pair, [x], ref)
    slack, _ = rounding()
    noise = 100 * 2.0 ** -23  # one ulp of the intermediates (values near 100)
    assert float(slack[0].min()) > noise  # the exact reference alone would have given no floor at all
    cand = torch.tensor([noise, -noise, 0.0, 2 * noise])
    j = judge_outputs(cand, ref, "strict", [torch.float32], rounding=rounding)
    assert j.ok and j.widened
    assert not judge_outputs(cand * 1000, ref, "strict", [torch.float32], rounding=rounding).ok


class _MeanOf(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x).mean(dim=1)


def test_judge_widens_a_tf32_reference():
    from workbench.harness.child.judge import judge_outputs

    ref = torch.linspace(1, 2, 1000)
    calls: list[int] = []
    j = judge_outputs(ref * 1.01, ref, "tf32", [torch.float32], rounding=_rounding(ref, 1.0, calls))
    assert j.ok and j.widened and calls == [1]  # a tf32 problem's reference rounds


@pytest.mark.parametrize("cand, ref, reason", [
    ((torch.ones(4), torch.ones(4)), torch.ones(4), "wrong type: out is a tuple, expected a Tensor"),
    ((torch.ones(4),), (torch.ones(4), torch.ones(4)), "wrong length: out has 1 item(s), expected 2"),
    (torch.ones(3), torch.ones(4), "wrong shape: out is (3,), expected (4,)"),
    (torch.ones(4, dtype=torch.float64), torch.ones(4),
     "wrong dtype: out is torch.float64, expected torch.float32"),
    (torch.full((4,), float("nan")), torch.ones(4), "nan in output: 4 of 4 elements are NaN where the reference is "
                                                    "finite"),
])
def test_judge_names_what_is_wrong(cand, ref, reason):
    from workbench.harness.child.judge import judge_outputs

    j = judge_outputs(cand, ref, "strict", [], rounding=lambda: pytest.fail("no value mismatch to forgive"))
    assert not j.ok and j.failure == reason


@pytest.mark.parametrize("case", ["pass", "norm", "elementwise", "slack", "zero_ref"])
def test_compare_in_chunks_gives_the_same_verdict_and_facts(monkeypatch, case):
    """An output judged in chunks (outputs of gigabytes) is judged exactly as one judged whole."""
    import torch

    from workbench.harness import tolerance
    from workbench.harness.tolerance import Tolerance, compare

    torch.manual_seed(0)
    ref = torch.randn(13, 17)
    out, slack = ref * (1 + 1e-6), None
    if case == "norm":
        out = ref * 1.01
    elif case == "elementwise":
        out = ref.clone()
        out[5, 11] += 0.5
    elif case == "slack":
        out = ref.clone()
        out[5, 11] += 0.5
        slack = torch.zeros_like(ref)
        slack[5, 11] = 1.0
    elif case == "zero_ref":
        ref = torch.zeros(13, 17)
        out = ref.clone()
        out[2, 3] = 1e-7
    tol = Tolerance(norm=1e-3, rtol=1e-3, atol_rms=1e-3)
    norm_slack = 0.1 if case == "slack" else 0.0
    whole = compare(out, ref, tol, slack, norm_slack)
    monkeypatch.setattr(tolerance, "COMPARE_CHUNK", 7)
    chunked = compare(out, ref, tol, slack, norm_slack)
    assert chunked[0] == whole[0] and chunked[1] == whole[1]
    assert chunked[2]["elements_outside"] == whole[2]["elements_outside"]
    for k in ("rel_err", "max_abs_err", "ref_rms"):
        assert chunked[2][k] == pytest.approx(whole[2][k], rel=1e-5, abs=1e-12)
    assert whole[0] == (case in ("pass", "slack"))


@pytest.mark.parametrize("precision, matmul, cudnn", [("strict", False, False), ("tf32", True, True),
                                                       ("cudnn_tf32", False, True)])
def test_the_reference_runs_the_math_its_precision_names(precision, matmul, cudnn):
    from workbench.harness.child.execution import set_precision

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        set_precision(precision)
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (matmul, cudnn)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
