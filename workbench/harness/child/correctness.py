"""The correctness stage (runs in a worker, on a GPU or on the CPU through the Triton interpreter).

For each of several seeds: fresh random inputs (constant inputs are refused, they hide unwritten outputs), separate
clones for the reference and the candidate, the two run in alternating order, freed memory poisoned before the
candidate runs (so an output it never writes, or one that reuses the reference's freed output, reads as NaN), inputs
compared before and after (mutation fails, unless the reference mutates the same input the same way), output
structure, shape and dtype checked, values judged by `tolerance.compare`, and the candidate run a second time on the
same inputs (results that change between runs fail as nondeterministic).
"""
from __future__ import annotations

from typing import Any

import torch

from .. import tolerance as tol_mod
from .execution import (Pair, clone, degenerate_inputs, make_inputs, nbytes, poison, reference_rounding, run_model,
                        same_inputs, set_precision_policy, tensors, widenable)
from ...core.records import FAIL, INCONCLUSIVE, PASS

SEED_BASE = 1234


def _fail(reason: str, **data: Any) -> dict[str, Any]:
    return {"verdict": FAIL, "reason": reason, "data": data}


def check(pair: Pair, n_seeds: int = 5, tol_overrides: dict[str, Any] | None = None,
          max_cpu_elements: int = 1 << 22) -> dict[str, Any]:
    problem, dev = pair.problem, pair.device
    set_precision_policy(problem.policy)
    state_dtypes = [t.dtype for t in list(pair.reference.parameters()) + list(pair.reference.buffers())
                    if t.is_floating_point()]
    out_sizes: list[int] = []
    worst_rel = 0.0
    bitwise = True
    cls_name, tol = "fp32", tol_mod.DEFAULTS["fp32"]
    widened = False
    for i in range(n_seeds):
        seed = SEED_BASE + 7919 * i
        inputs = make_inputs(problem, dev, seed)
        if dev.type == "cpu" and i == 0:
            n = sum(t.numel() for t in tensors(inputs))
            if n > max_cpu_elements:
                return {"verdict": INCONCLUSIVE, "data": {"input_elements": n},
                        "reason": f"inputs hold {n:,} elements: too large for the Triton interpreter on the CPU; "
                                  "shrink the problem with --set (e.g. batch_size=16) or run on a GPU"}
        const = degenerate_inputs(inputs)
        if const:
            return {"verdict": INCONCLUSIVE, "data": {"constant_inputs": const},
                    "reason": f"get_inputs() gave constant input(s) {const}: correctness cannot be judged on them"}
        snapshot = clone(inputs)
        ref_in, cand_in = clone(inputs), clone(inputs)

        def run_reference():
            out = run_model(pair.reference, ref_in, dev)
            held = clone(out)  # a separate copy; the original block is freed and poisoned below
            sizes = [nbytes(t) for t in tensors(out)]
            del out
            poison(dev, sizes)
            return held, sizes

        def run_candidate(args):
            poison(dev, out_sizes)
            return run_model(pair.candidate, args, dev)

        if i % 2 == 0:
            ref_out, out_sizes = run_reference()
            cand_out = run_candidate(cand_in)
        else:
            cand_out = run_candidate(cand_in)
            ref_out, out_sizes = run_reference()

        # Inputs: the candidate may change an input only where the reference changes it the same way.
        ref_changed = set(same_inputs(snapshot, ref_in))
        expected = [ref_in[k] if k in ref_changed else snapshot[k] for k in range(len(snapshot))]
        mutated = same_inputs(expected, cand_in)
        if mutated:
            return _fail(f"input mutated: the candidate changed input(s) {mutated} (seed {seed})", seed=seed)

        verdict = _compare_outputs(cand_out, ref_out, problem.policy, inputs, state_dtypes, tol_overrides)
        if verdict[0] is not None and verdict[0].startswith("output mismatch") and \
                widenable(ref_out, problem.policy):
            # A bf16/fp16 or tf32 reference carries its own rounding error, large where few terms are summed (early
            # rows of causal attention) or where layers compound it (a tf32 MLP): even the exact answer can fall
            # outside a bound judged against it. Re-run the reference in strict fp32; widen the bounds by its error.
            rounding = reference_rounding(pair, snapshot, ref_out)
            if rounding is not None:
                verdict = _compare_outputs(cand_out, ref_out, problem.policy, inputs, state_dtypes, tol_overrides,
                                           rounding)
                if verdict[0] is None:
                    widened = True
        if verdict[0] is not None:
            return _fail(f"{verdict[0]} (seed {seed})", seed=seed, **verdict[2])
        cls_name, tol, facts = verdict[1], verdict[3], verdict[2]
        worst_rel = max(worst_rel, max((f.get("rel_err", 0.0) for f in facts.get("outputs", [])), default=0.0))

        # Same inputs again: a result that moves between runs is a race (or randomness), whatever its average.
        again_in = clone(snapshot)
        cand_out2 = run_candidate(again_in)
        for k, (a, b) in enumerate(zip(tensors(cand_out), tensors(cand_out2))):
            if a.shape != b.shape or a.dtype != b.dtype:
                return _fail(f"nondeterministic: output {k} changed shape or dtype between runs (seed {seed})")
            if not torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)):
                bitwise = False
                ok, why, f = tol_mod.compare(b, a, tol_mod.Tolerance(tol.norm / 10, tol.rtol / 10, tol.atol_rms / 10))
                if not ok:
                    return _fail(f"nondeterministic: two runs on the same inputs differ beyond rounding "
                                 f"(output {k}: {why.split(': ', 1)[-1]}; seed {seed})", seed=seed)
        del ref_out, cand_out, cand_out2
    return {"verdict": PASS, "reason": f"{n_seeds} seeds within {cls_name} bounds (worst relative error "
                                       f"{worst_rel:.2g} <= {tol.norm:g})",
            "data": {"seeds": n_seeds, "precision": cls_name, "tolerance": tol.to_dict(), "worst_rel_err": worst_rel,
                     "bound_widened_by_reference_rounding": widened,
                     "bitwise_reproducible": bitwise, "policy": problem.policy}}


def _compare_outputs(cand_out: Any, ref_out: Any, policy: str, inputs: list[Any], state_dtypes: list[Any],
                     tol_overrides: dict[str, Any] | None, rounding: tuple[list, list] | None = None):
    """(failure reason or None, precision class, facts, tolerance)."""
    cands, refs = tensors(cand_out), tensors(ref_out)
    if len(cands) != len(refs):
        return (f"wrong shape: the candidate returned {len(cands)} tensor(s), the reference {len(refs)}",
                "", {}, None)
    facts: dict[str, Any] = {"outputs": []}
    cls_name, tol = "fp32", tol_mod.DEFAULTS["fp32"]
    for k, (c, r) in enumerate(zip(cands, refs)):
        if tuple(c.shape) != tuple(r.shape):
            return f"wrong shape: output {k} is {tuple(c.shape)}, expected {tuple(r.shape)}", "", facts, None
        if c.dtype != r.dtype:
            return f"wrong dtype: output {k} is {c.dtype}, expected {r.dtype}", "", facts, None
        if c.device != r.device:
            return f"wrong device: output {k} is on {c.device}, expected {r.device}", "", facts, None
        dtypes = [t.dtype for t in tensors(inputs) if t.is_floating_point()] + state_dtypes + [r.dtype]
        cls_name, tol = tol_mod.resolve(dtypes, policy, tol_overrides)
        ok, why, f = (tol_mod.compare(c, r, tol, rounding[0][k], rounding[1][k]) if rounding is not None
                      else tol_mod.compare(c, r, tol))
        facts["outputs"].append(f)
        if not ok:
            return (why if len(refs) == 1 else f"{why} (output {k})"), cls_name, facts, tol
    return None, cls_name, facts, tol
