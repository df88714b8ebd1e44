"""The correctness stage (runs in a worker, on a GPU or on the CPU through the Triton interpreter).

For each of several seeds: fresh random inputs (constant inputs are refused, they hide unwritten outputs), separate
clones for the reference and the candidate, the two run in alternating order, freed memory poisoned before the
candidate runs (so an output it never writes, or one that reuses the reference's freed output, reads as NaN), inputs
compared before and after (mutation fails, unless the reference mutates the same input the same way), output
structure and values judged by `judge.judge_outputs` (the judge the timed output is re-checked by), and the candidate
run a second time on the same inputs (results that change between runs fail as nondeterministic). Before the first
seed a copy of the reference runs twice on the same inputs: a reference whose outputs differ (dropout in training
mode, state kept between calls) cannot judge anything, and the verdict is inconclusive with that reason. So is a
degenerate problem, which any candidate would pass: every input empty, or a reference output with no value to judge
(None, empty tensors only).

The reference's outputs for the fixed seeds, and the probe's answer, are kept across the candidates of a problem
(`reference_cache`: checksummed, re-verified after each candidate run); the last seed of every evaluation is fresh
and its reference runs on the spot, so kept outputs never decide a verdict alone.
"""
from __future__ import annotations

import copy
import functools
from typing import Any

import torch

from ...core.records import DEGENERATE_PROBLEM, FAIL, INCONCLUSIVE, PASS, RANDOM_REFERENCE
from .. import tolerance as tol_mod
from . import graph_launch, reference_cache
from .execution import (
    ModelPair,
    clone,
    degenerate_inputs,
    empty_inputs,
    judged_values,
    make_inputs,
    nbytes,
    poison,
    reference_rounding,
    run_candidate,
    run_pair_reference,
    run_reference,
    same_inputs,
    set_precision,
    tensors,
)
from .judge import judge_outputs, structure

SEED_BASE = 1234


def _fail(reason: str, **data: Any) -> dict[str, Any]:
    return {"verdict": FAIL, "reason": reason, "data": data}


def check(models: ModelPair, n_seeds: int = 5, tol_overrides: dict[str, Any] | None = None,
          max_cpu_elements: int = 1 << 22, first: int = 0, stop: int | None = None) -> dict[str, Any]:
    """Judge the candidate on seeds `first` .. `stop` - 1 of `n_seeds` (default all): the ladder's cheap rung runs
    the first seeds, the rest only when the candidate is promoted; split or not, the seeds are the same ones (the
    last of the `n_seeds`, the fresh one, belongs to the rung that ends the set)."""
    problem, dev = models.problem, models.device
    stop = n_seeds if stop is None else min(stop, n_seeds)
    if not 0 <= first < stop:
        raise ValueError(f"no seeds to run: seeds {first} .. {stop - 1} of {n_seeds}")
    precision = problem.effective_precision
    set_precision(precision)
    state_dtypes = [t.dtype for t in list(models.reference.parameters()) + list(models.reference.buffers())
                    if t.is_floating_point()]
    out_sizes: list[int] = []  # the reference's output blocks, poisoned before each candidate run
    worst_rel, bitwise, widened = 0.0, True, False
    judged = None
    fresh = None
    reference_cache.keep_only(problem.key)
    tol_key = repr(sorted((tol_overrides or {}).items()))
    for i in range(first, stop):
        last_fresh = n_seeds > 1 and i == n_seeds - 1  # one seed nobody computed before (see reference_cache)
        seed = reference_cache.fresh_seed() if last_fresh else SEED_BASE + 7919 * i
        fresh = seed if last_fresh else fresh
        inputs = make_inputs(problem, dev, seed)
        refusal = _unjudgeable(inputs, dev, max_cpu_elements if i == first else None)
        if refusal:
            return refusal
        # the generated inputs are the snapshot: no model ever sees them (each runs on a clone), and one copy fewer
        # is what lets a 16 GiB input (45_Average_Pooling_2D) be judged on an 80 GB card
        snapshot = inputs
        if i == 0:
            unusable = reference_cache.probe((problem.key, str(dev), tol_key), lambda s=snapshot: _unusable_reference(
                models, s, precision, tol_overrides))
            if unusable:
                return {"verdict": INCONCLUSIVE, "reason": unusable, "data": {"seed": seed}}
        key = (problem.key, str(dev), seed)
        kept = None if last_fresh else reference_cache.get(key)
        cand_in = clone(inputs)
        if kept is not None:  # the reference's output for these inputs, computed for an earlier candidate
            ref_in, ref_out, out_sizes = snapshot, kept.out, kept.sizes
            cand_out = _run_candidate(models, cand_in, out_sizes)
            if not reference_cache.intact(kept):
                reference_cache.drop(key)
                return _fail("tampering: the reference's kept outputs changed while the candidate ran "
                             f"(seed {seed})", seed=seed)
        else:
            ref_in = clone(inputs)
            if i % 2 == 0:  # alternate the order, so neither model always runs on a fresh allocator
                ref_out, out_sizes = _run_reference(models, ref_in)
                cand_out = _run_candidate(models, cand_in, out_sizes)
            else:
                cand_out = _run_candidate(models, cand_in, out_sizes)
                ref_out, out_sizes = _run_reference(models, ref_in)
            if not last_fresh and not same_inputs(snapshot, ref_in):
                kept = reference_cache.put(key, ref_out, out_sizes, dev)

        mutated = _mutated_inputs(snapshot, ref_in, cand_in)
        if mutated:
            return _fail(f"input mutated: the candidate changed input(s) {mutated} (seed {seed})", seed=seed)
        del ref_in, cand_in  # judged: the models' copies go before the re-run makes another
        input_dtypes = [t.dtype for t in tensors(inputs) if t.is_floating_point()]
        rounding = functools.partial(reference_rounding, models, snapshot, ref_out)
        if kept is not None:
            rounding = functools.partial(kept.rounding_once, rounding)
        judged = judge_outputs(cand_out, ref_out, precision, input_dtypes + state_dtypes, tol_overrides,
                               rounding=rounding)
        if not judged.ok:
            return _fail(f"{judged.failure} (seed {seed})", seed=seed, outputs=judged.outputs)
        widened = widened or judged.widened
        worst_rel = max(worst_rel, max((f.get("rel_err", 0.0) for f in judged.outputs), default=0.0))

        unstable = _rerun_differs(models, snapshot, cand_out, out_sizes, judged.tolerance)
        if unstable is not None:
            if unstable:
                return _fail(f"{unstable} (seed {seed})", seed=seed)
            bitwise = False
        del ref_out, cand_out, rounding, inputs, snapshot  # before the next seed's inputs are made
    precision_class = judged.precision if judged else "fp32"
    tol = (judged.tolerance if judged else None) or tol_mod.DEFAULTS["fp32"]
    bound = (f"{tol.norm:g}, widened by the reference's own rounding against its wider re-run" if widened
             else f"{tol.norm:g}")
    ran = stop - first
    which = (f"{n_seeds} seeds" if ran == n_seeds else f"{ran} of {n_seeds} seeds" if first == 0
             else f"seeds {first + 1}-{stop} of {n_seeds}")
    return {"verdict": PASS, "reason": f"{which} within {precision_class} bounds (worst relative error "
                                       f"{worst_rel:.2g} <= {bound})",
            "data": {"seeds": ran, "seed_range": [first, stop], "of_seeds": n_seeds, "precision": precision_class,
                     "tolerance": tol.to_dict(), "worst_rel_err": worst_rel,
                     "bound_widened_by_reference_rounding": widened, "bitwise_reproducible": bitwise,
                     "policy": precision, "fresh_seed": fresh,
                     **({"launch": launch} if (launch := graph_launch.describe(models.candidate)) else {})}}


def _unjudgeable(inputs: list[Any], dev: torch.device, max_cpu_elements: int | None) -> dict[str, Any] | None:
    """An inconclusive answer when these inputs cannot judge the candidate (None when they can); the size limit
    for the CPU interpreter is checked when `max_cpu_elements` is given."""
    if dev.type == "cpu" and max_cpu_elements is not None:
        n = sum(t.numel() for t in tensors(inputs))
        if n > max_cpu_elements:
            return {"verdict": INCONCLUSIVE, "data": {"input_elements": n},
                    "reason": f"inputs hold {n:,} elements: too large for the Triton interpreter on the CPU; "
                              "shrink the problem with --set (e.g. batch_size=16) or run on a GPU"}
    empty = empty_inputs(inputs)
    if empty:
        return {"verdict": INCONCLUSIVE, "data": {"input_shapes": empty},
                "reason": f"{DEGENERATE_PROBLEM}: every input is empty {empty} (a size set to 0?): any candidate "
                          "would pass, correctness cannot be judged on them"}
    const = degenerate_inputs(inputs)
    if const:
        return {"verdict": INCONCLUSIVE, "data": {"constant_inputs": const},
                "reason": f"get_inputs() gave constant input(s) {const}: correctness cannot be judged on them"}
    return None


def _unusable_reference(models: ModelPair, inputs: list[Any], precision: str,
                        tol_overrides: dict[str, Any] | None) -> str | None:
    """Why the reference cannot be compared against (None when it can): its output holds no value to judge (None,
    empty tensors), or a copy of it, run twice on the same inputs, gives outputs that differ beyond the bounds
    (random ops such as dropout with p > 0 in training mode, or state the model keeps between calls). A copy, so the
    models the seeds judge start in the same state."""
    probe = copy.deepcopy(models.reference)
    first = run_reference(probe, clone(inputs), models.device)
    if not judged_values(first):
        shapes = [tuple(t.shape) for t in tensors(first)]
        what = f"only empty tensors {shapes} (a size set to 0?)" if shapes else f"no value ({type(first).__name__})"
        return (f"{DEGENERATE_PROBLEM}: the reference returned {what}: any candidate would pass, correctness cannot "
                "be judged against it")
    second = run_reference(probe, clone(inputs), models.device)
    del probe
    moved, _ = structure(second, first)
    if moved:
        return f"the reference is not deterministic: its output changed between two runs ({moved})"
    for k, (a, b) in enumerate(zip(tensors(first), tensors(second))):
        if torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)) or not a.is_floating_point():
            continue
        _, tol = tol_mod.resolve([a.dtype], precision, tol_overrides)
        ok, why, _ = tol_mod.compare(b, a, tol)
        if not ok:
            return (f"{RANDOM_REFERENCE}: two runs on the same inputs differ (output {k}: "
                    f"{why.split(': ', 1)[-1]}); dropout with p > 0 in training mode, or state kept between calls? "
                    "correctness cannot be judged against it")
    return None


def _run_reference(models: ModelPair, inputs: list[Any]) -> tuple[Any, list[int]]:
    """The reference's output as a separate copy, and its blocks' sizes; the original blocks are freed and
    poisoned, so a candidate that reuses a freed reference output reads NaN."""
    dev = models.device
    out = run_pair_reference(models, inputs)
    held = clone(out)
    sizes = [nbytes(t) for t in tensors(out)]
    del out
    poison(dev, sizes)
    return held, sizes


def _run_candidate(models: ModelPair, inputs: list[Any], poison_sizes: list[int]) -> Any:
    poison(models.device, poison_sizes)
    return run_candidate(models, inputs)


def _mutated_inputs(snapshot: list[Any], ref_in: list[Any], cand_in: list[Any]) -> list[int]:
    """Inputs the candidate changed, except where the reference changes them the same way."""
    ref_changed = set(same_inputs(snapshot, ref_in))
    expected = [ref_in[k] if k in ref_changed else snapshot[k] for k in range(len(snapshot))]
    return same_inputs(expected, cand_in)


def _rerun_differs(models: ModelPair, snapshot: list[Any], first: Any, poison_sizes: list[int],
                   tol: tol_mod.Tolerance) -> str | None:
    """Run the candidate again on the same inputs: a result that moves between runs is a race (or randomness),
    whatever its average. None when the two runs are bitwise equal; "" when they differ within a tenth of the
    bounds (rounding of a non-deterministic reduction order); else why they differ."""
    second = _run_candidate(models, clone(snapshot), poison_sizes)
    moved, _ = structure(second, first)
    if moved:
        return f"nondeterministic: the output changed between two runs ({moved})"
    differs: str | None = None
    for k, (a, b) in enumerate(zip(tensors(first), tensors(second))):
        if not torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)):
            differs = ""
            ok, why, _ = tol_mod.compare(b, a, tol_mod.Tolerance(tol.norm / 10, tol.rtol / 10, tol.atol_rms / 10))
            if not ok:
                return (f"nondeterministic: two runs on the same inputs differ beyond rounding "
                        f"(output {k}: {why.split(': ', 1)[-1]})")
    return differs
