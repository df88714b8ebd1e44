"""The quick and full timing stages (GPU only; runs in the GPU worker).

Method, chosen so that a candidate cannot make itself look fast:
- warm-up first (module load, JIT compile and autotuning stay out of the numbers);
- the L2 is flushed before every timed call by writing a buffer twice its size; the flush is enqueued before the start
  event, so it is outside the timed window;
- the end event is recorded after a device-wide synchronise, so work a candidate hides on a side stream is counted;
- input sets are rotated (distinct data at distinct addresses), so an output cache cannot pay;
- events, synchronise and elapsed-time are the originals saved at worker start, not attributes a candidate can patch;
- the output of the last timed call is checked against the reference on the same inputs (a candidate that behaves
  differently once it is being timed fails);
- the eager reference (and, at full fidelity, the reference under torch.compile) is timed in the same worker run with
  the same method, so every speedup is a ratio from one run.
"""
from __future__ import annotations

import statistics
from typing import Any

import torch

from ..devices import sandbox
from . import tolerance as tol_mod
from .execution import Pair, make_inputs, run_model, set_precision_policy, sync, tensors
from .records import FAIL, PASS

FIDELITY = {
    # Timed calls are sized by time, like triton.testing.do_bench (whose default is ~100 ms of calls): at least
    # `min_reps`, at most `reps`, about `target_s` of timed calls in all.
    "quick_timing": dict(sets=2, warmup=2, reps=20, target_s=0.03, min_reps=5, compile_ref=False),
    "full_timing": dict(sets=4, warmup=5, reps=500, target_s=0.1, min_reps=20, compile_ref=True),
}
METHOD = "cuda events; L2 flushed before each call; device-wide sync before end event; rotated inputs; median"

_compiled_refs: dict[str, Any] = {}  # problem key -> torch.compile'd reference, per worker process
_flush_buffers: dict[str, torch.Tensor] = {}


def _flush_buffer(device: torch.device) -> torch.Tensor:
    key = str(device)
    if key not in _flush_buffers:
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20) or (50 << 20)
        # 4x the L2 and at least 256 MB: writing it takes long enough (~80 us) for the host to enqueue the timed call
        # behind it, so the candidate's launch latency from Python is hidden as it is in a steady stream of calls
        _flush_buffers[key] = torch.empty(max(4 * l2, 256 << 20), dtype=torch.uint8, device=device)
    return _flush_buffers[key]


def time_model(model, sets: list[list[Any]], device: torch.device, warmup: int, reps: int,
               target_s: float, min_reps: int) -> tuple[list[float], Any, int]:
    """Times in ms of `reps` calls (fewer for slow models), the last output and the index of its input set."""
    flush = _flush_buffer(device)
    out = None
    for w in range(max(warmup, 1)):
        out = run_model(model, sets[w % len(sets)], device)
    times: list[float] = []
    n = reps
    i = 0
    while i < n:
        inputs = sets[i % len(sets)]
        flush.zero_()
        start, end = sandbox.Event(enable_timing=True), sandbox.Event(enable_timing=True)
        sandbox.event_record(start)
        with torch.no_grad():
            out = model(*inputs)
        sandbox.cuda_sync()
        sandbox.event_record(end)
        sandbox.event_sync(end)
        times.append(sandbox.event_elapsed(start, end))
        i += 1
        if i == min_reps:  # size the run to the target time once the first few calls are known
            per = statistics.median(times) / 1e3
            n = max(min_reps, min(reps, int(target_s / max(per, 1e-6))))
    return times, out, (i - 1) % len(sets)


def stats(times: list[float]) -> dict[str, float]:
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
    med = statistics.median(times)
    return {"median_ms": med, "min_ms": min(times), "mean_ms": statistics.fmean(times),
            "q25_ms": q[0], "q75_ms": q[2], "spread": (q[2] - q[0]) / med if med > 0 else 0.0, "n": len(times)}


def measure(pair: Pair, stage: str, floor_ms: float | None = None, seed: int = 99991) -> dict[str, Any]:
    dev = pair.device
    if dev.type != "cuda":
        return {"verdict": "refused", "reason": "timing needs a CUDA GPU", "data": {}}
    cfg = FIDELITY[stage]
    set_precision_policy(pair.problem.policy)
    sets = [make_inputs(pair.problem, dev, seed + j) for j in range(cfg["sets"])]
    ref_outs = [run_model(pair.reference, s, dev) for s in sets]
    timing_args = (dev, cfg["warmup"], cfg["reps"], cfg["target_s"], cfg["min_reps"])

    t0 = sandbox.perf_counter()
    eager_t, _, _ = time_model(pair.reference, sets, *timing_args)
    t1 = sandbox.perf_counter()
    cand_t, cand_last, last_set = time_model(pair.candidate, sets, *timing_args)
    t2 = sandbox.perf_counter()

    # The timed output must still be right: a candidate may not change behaviour once it is timed.
    dtypes = [t.dtype for t in tensors(sets[last_set]) if t.is_floating_point()]
    got, want = tensors(cand_last), tensors(ref_outs[last_set])
    for k, (c, r) in enumerate(zip(got, want)):
        _, tol = tol_mod.resolve(dtypes + [r.dtype], pair.problem.policy)
        ok, why, _ = tol_mod.compare(c, r, tol) if c.shape == r.shape and c.dtype == r.dtype else (
            False, "output mismatch: wrong shape or dtype", {})
        if not ok:
            return {"verdict": FAIL, "reason": f"output mismatch during timing (output {k}): {why}", "data": {}}
    if len(got) != len(want):
        return {"verdict": FAIL, "reason": "output mismatch during timing: a different number of outputs", "data": {}}

    cand, eager = stats(cand_t), stats(eager_t)
    data: dict[str, Any] = {"candidate": cand, "eager": eager, "candidate_ms": cand["median_ms"],
                            "eager_ms": eager["median_ms"], "speedup_vs_eager": eager["median_ms"] / cand["median_ms"],
                            "method": METHOD, "reps": cand["n"], "spread": cand["spread"], "input_sets": len(sets),
                            "eager_wall_s": t1 - t0, "candidate_wall_s": t2 - t1}
    if cfg["compile_ref"]:
        data.update(_time_compiled(pair, sets, timing_args, cand["median_ms"]))
    flags = []
    if floor_ms is not None:
        data["floor_ms"] = floor_ms
        if cand["median_ms"] < floor_ms:
            data["below_floor"] = True
            flags.append({"check": "below_floor", "severity": "warning",
                          "reason": f"{cand['median_ms']:.4g} ms is under the roofline floor {floor_ms:.4g} ms: "
                                    "suspicious (skipped work, or counts that miss the problem's structure)"})
    reason = f"{cand['median_ms']:.4g} ms (spread {cand['spread']:.1%}), {data['speedup_vs_eager']:.3g}x eager"
    if "speedup_vs_compile" in data:
        reason += f", {data['speedup_vs_compile']:.3g}x torch.compile"
    return {"verdict": PASS, "reason": reason, "data": data, "flags": flags}


def _time_compiled(pair: Pair, sets, timing_args, cand_ms: float) -> dict[str, Any]:
    key = pair.problem.key
    try:
        # torch.compile wraps some torch functions (torch.manual_seed) when dynamo loads: those changes are the
        # harness's own and accepted, after checking that the candidate changed nothing before.
        def compile_and_warm():
            if key not in _compiled_refs:
                _compiled_refs[key] = torch.compile(pair.reference)
            run_model(_compiled_refs[key], sets[0], pair.device)  # compile outside the timed calls
            return _compiled_refs[key]

        tampered, compiled = sandbox.run_harness_code(compile_and_warm)
        if tampered:
            return {"tampered_before_compile": tampered}
        t, _, _ = time_model(compiled, sets, *timing_args)
    except Exception as e:  # the reference failing to compile is not the candidate's fault
        return {"compile_error": f"{type(e).__name__}: {str(e)[:300]}"}
    s = stats(t)
    return {"compiled": s, "compile_ms": s["median_ms"], "speedup_vs_compile": s["median_ms"] / cand_ms}
