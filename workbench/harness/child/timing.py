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
- the eager reference (and, at full fidelity, the reference under torch.compile, in each mode asked for: "default"
  and optionally "max-autotune") is timed in the same worker run with the same method, so every speedup is a ratio
  from one run.
"""
from __future__ import annotations

import functools
import statistics
from typing import Any

import torch

from ...core.records import FAIL, PASS, REFUSED
from . import graph_launch, sandbox, watchdog
from .execution import (
    CALL_LABEL,
    ModelPair,
    make_inputs,
    reference_rounding,
    run_model,
    run_pair_reference,
    set_precision,
    tensors,
)
from .judge import judge_outputs

TIMING_SETTINGS = {
    # Calls are sized by time, like triton.testing.do_bench (whose default is ~100 ms of calls): a time-based warm-up
    # (clocks reach their loaded state), then rounds of at least `min_reps`, at most `reps`, about `target_s` of timed
    # calls per model. Quick and full differ only in how long they look and in the torch.compile reference.
    "quick_timing": dict(sets=3, warmup_s=0.02, reps=30, target_s=0.03, min_reps=5, compile_ref=False),
    "full_timing": dict(sets=3, warmup_s=0.05, reps=500, target_s=0.1, min_reps=20, compile_ref=True),
}
METHOD = ("cuda events; L2 flushed before each call; device-wide sync before end event; rotated inputs; reference "
          "and candidate interleaved call by call; median")
# Without a roofline floor, a speedup over eager above this is flagged as suspicious (KernelBench's fallback check).
EXCESSIVE_SPEEDUP = 10.0

COMPILE_MODES = ("default", "max-autotune", "max-autotune-no-cudagraphs", "reduce-overhead")
_compiled_refs: dict[tuple[str, str], Any] = {}  # (problem key, mode) -> torch.compile'd reference, per worker
_flush_buffers: dict[str, torch.Tensor] = {}


def _flush_buffer(device: torch.device) -> torch.Tensor:
    key = str(device)
    if key not in _flush_buffers:
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20) or (50 << 20)
        # 4x the L2 and at least 256 MB: writing it takes long enough (~80 us) for the host to enqueue the timed call
        # behind it, so the candidate's launch latency from Python is hidden as it is in a steady stream of calls
        _flush_buffers[key] = torch.empty(max(4 * l2, 256 << 20), dtype=torch.uint8, device=device)
    return _flush_buffers[key]


def _timed_call(model, inputs: list[Any], flush: torch.Tensor, graph_step: bool = False,
                window_s: float | None = None) -> tuple[float, Any]:
    if graph_step:
        # each call of a compiled reference is a new step for CUDA-graph trees (max-autotune, reduce-overhead): the
        # previous call's outputs may be overwritten, and only the last is kept. Host-side, outside the timed window;
        # never for the candidate or eager, so plain timing does not load inductor
        _mark_step()
    with watchdog.window(CALL_LABEL, window_s):  # armed before the flush: outside the timed window
        flush.zero_()
        start, end = sandbox.Event(enable_timing=True), sandbox.Event(enable_timing=True)
        sandbox.event_record(start)
        with torch.no_grad():
            out = model(*inputs)
        sandbox.cuda_sync()  # every stream: work hidden on a side stream is inside the window
        sandbox.event_record(end)
        sandbox.event_sync(end)
    return sandbox.event_elapsed(start, end), out


def _mark_step() -> None:
    mark = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    if mark is not None:
        mark()


def _model_name(mode: str) -> str:
    return "compiled" if mode == "default" else f"compiled[{mode}]"


def time_interleaved(models: dict[str, Any], sets: list[list[Any]], device: torch.device, warmup_s: float,
                     reps: int, target_s: float, min_reps: int, windows: dict[str, float | None] | None = None
                     ) -> tuple[dict[str, list[float]], dict[str, Any], int]:
    """Time several models call by call in rotating order, so clock and thermal drift fall on all of them alike.
    Returns times in ms per model, each model's last output, and the index of the input set of the last round.
    `windows`: the watchdog's seconds for one call of a model (the candidate's), armed outside the timed window."""
    flush = _flush_buffer(device)
    names = list(models)
    windows = windows or {}
    for name in names:  # warm-up: at least 2 calls and `warmup_s` of calls per model
        t0, w = sandbox.perf_counter(), 0
        while w < 2 or sandbox.perf_counter() - t0 < warmup_s:
            with watchdog.window(CALL_LABEL, windows.get(name)):
                run_model(models[name], sets[w % len(sets)], device)
            w += 1
    times: dict[str, list[float]] = {n: [] for n in names}
    last: dict[str, Any] = {}
    n, i = reps, 0
    while i < n:
        inputs = sets[i % len(sets)]
        order = names[i % len(names):] + names[: i % len(names)]
        for name in order:
            ms, last[name] = _timed_call(models[name], inputs, flush, graph_step=name.startswith("compiled"),
                                         window_s=windows.get(name))
            times[name].append(ms)
        i += 1
        if i == min_reps:  # size the run to the target time once the first rounds are known
            per = max(statistics.median(t) for t in times.values()) / 1e3
            n = max(min_reps, min(reps, int(target_s / max(per, 1e-6))))
    return times, last, (i - 1) % len(sets)


def stats(times: list[float]) -> dict[str, float]:
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
    med = statistics.median(times)
    return {"median_ms": med, "min_ms": min(times), "mean_ms": statistics.fmean(times),
            "q25_ms": q[0], "q75_ms": q[2], "spread": (q[2] - q[0]) / med if med > 0 else 0.0, "n": len(times)}


def measure(models: ModelPair, stage: str, floor_ms: float | None = None, seed: int = 99991,
            compile_modes: tuple[str, ...] | list[str] | None = None) -> dict[str, Any]:
    """Time the candidate against the eager reference (and at full fidelity against torch.compile in each of
    `compile_modes`, default ("default",)) call by call in one run."""
    dev = models.device
    if dev.type != "cuda":
        return {"verdict": REFUSED, "reason": "timing needs a CUDA GPU", "data": {}}
    cfg = TIMING_SETTINGS[stage]
    set_precision(models.problem.effective_precision)
    sets = [make_inputs(models.problem, dev, seed + j) for j in range(cfg["sets"])]
    ref_outs = [run_pair_reference(models, s) for s in sets]
    timed = {"eager": models.reference, "candidate": models.candidate}
    compile_info: dict[str, Any] = {}
    if cfg["compile_ref"]:
        for mode in compile_modes or ("default",):
            if mode not in COMPILE_MODES:
                raise ValueError(f"unknown torch.compile mode '{mode}' (one of {COMPILE_MODES})")
            compiled, info = _compiled_reference(models, sets, mode)
            if compiled is not None:
                timed[_model_name(mode)] = compiled
            compile_info.update({k if mode == "default" else f"{k}[{mode}]": v for k, v in info.items()})
    t0 = sandbox.perf_counter()
    times, last, last_set = time_interleaved(timed, sets, dev, cfg["warmup_s"], cfg["reps"], cfg["target_s"],
                                             cfg["min_reps"], windows={"candidate": models.call_seconds()})
    timed_wall = sandbox.perf_counter() - t0

    # The timed output must still be right: a candidate may not change behaviour once it is timed.
    inputs, ref_out = sets[last_set], ref_outs[last_set]
    judged = judge_outputs(last["candidate"], ref_out, models.problem.effective_precision,
                           [t.dtype for t in tensors(inputs) if t.is_floating_point()],
                           rounding=functools.partial(reference_rounding, models, inputs, ref_out))
    if not judged.ok:
        return {"verdict": FAIL, "reason": f"output mismatch during timing: {judged.failure}", "data": {}}

    data = _speed_data(times, compile_modes or ())
    data.update(method=METHOD, input_sets=len(sets), models_timed=list(timed), timed_wall_s=timed_wall,
                **compile_info)
    launch = graph_launch.describe(models.candidate)
    if launch is not None:  # what ran: a declared graph that fell back to the plain forward says so
        data["launch"] = launch
    flags = sanity_flags(data, floor_ms)
    return {"verdict": PASS, "reason": _reason(data), "data": data, "flags": flags}


def _speed_data(times: dict[str, list[float]], compile_modes: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """Statistics per timed model and the candidate's speedups over each reference."""
    cand, eager = stats(times["candidate"]), stats(times["eager"])
    data: dict[str, Any] = {"candidate": cand, "eager": eager, "candidate_ms": cand["median_ms"],
                            "eager_ms": eager["median_ms"], "speedup_vs_eager": eager["median_ms"] / cand["median_ms"],
                            "reps": cand["n"], "spread": cand["spread"]}
    if "compiled" in times:
        comp = stats(times["compiled"])
        data.update(compiled=comp, compile_ms=comp["median_ms"],
                    speedup_vs_compile=comp["median_ms"] / cand["median_ms"])
    for mode in compile_modes:
        name = _model_name(mode)
        if mode != "default" and name in times:
            comp = stats(times[name])
            tag = mode.replace("-", "_")  # max-autotune -> compile_max_autotune_ms, speedup_vs_max_autotune
            data.update({name: comp, f"compile_{tag}_ms": comp["median_ms"],
                         f"speedup_vs_{tag}": comp["median_ms"] / cand["median_ms"]})
    return data


def sanity_flags(data: dict[str, Any], floor_ms: float | None) -> list[dict[str, str]]:
    """Warnings for a time too good to be true (the stage still passes; a person or a later check decides). Below
    the roofline floor when the problem has one; without a floor, KernelBench's cruder test: a speedup over eager
    above `EXCESSIVE_SPEEDUP`. Marks `data` with what was found."""
    ms = data["candidate_ms"]
    if floor_ms is not None:
        data["floor_ms"] = floor_ms
        if ms < floor_ms:
            data["below_floor"] = True
            return [{"check": "below_floor", "severity": "warning",
                     "reason": f"{ms:.4g} ms is under the roofline floor {floor_ms:.4g} ms: suspicious (skipped "
                               "work, or counts that miss the problem's structure)"}]
        return []
    if data["speedup_vs_eager"] > EXCESSIVE_SPEEDUP:
        data["excessive_speedup"] = True
        return [{"check": "excessive_speedup", "severity": "warning",
                 "reason": f"{data['speedup_vs_eager']:.3g}x eager is over {EXCESSIVE_SPEEDUP:g}x and the problem "
                           "has no roofline floor to hold it against: suspicious (skipped work?)"}]
    return []


def _reason(data: dict[str, Any]) -> str:
    reason = f"{data['candidate_ms']:.4g} ms (spread {data['spread']:.1%}), {data['speedup_vs_eager']:.3g}x eager"
    if "speedup_vs_compile" in data:
        reason += f", {data['speedup_vs_compile']:.3g}x torch.compile"
    if "speedup_vs_max_autotune" in data:
        reason += f", {data['speedup_vs_max_autotune']:.3g}x max-autotune"
    return reason


def _compiled_reference(models: ModelPair, sets, mode: str = "default") -> tuple[Any, dict[str, Any]]:
    """The reference under torch.compile in `mode` (compiled once per problem and mode per worker), or None with the
    reason. The compile (and max-autotune's tuning) happens here, before any timed call; its time is reported."""
    key = (models.problem.key, mode)

    # torch.compile wraps some torch functions (torch.manual_seed) when dynamo loads: those changes are the
    # harness's own and accepted, after checking that the candidate changed nothing before.
    def compile_and_warm():
        if key not in _compiled_refs:
            # Inductor's pool of compile subprocesses fails inside an isolated worker (measured on the H200:
            # "SubprocException" for every reference): its kernels compile in this process instead, as ours do.
            import torch._inductor.config as inductor_config
            inductor_config.compile_threads = 1
            _compiled_refs[key] = torch.compile(models.reference, mode=None if mode == "default" else mode)
        for s in sets[:2]:  # compile outside the timed calls; CUDA-graph modes record on the second call
            _mark_step()
            run_model(_compiled_refs[key], s, models.device)
        return _compiled_refs[key]

    t0 = sandbox.perf_counter()
    try:
        tampered, compiled = sandbox.run_harness_code(compile_and_warm)
    except Exception as e:  # the reference failing to compile is not the candidate's fault
        return None, {"compile_error": f"{type(e).__name__}: {str(e)[:300]}"}
    if tampered:
        return None, {"tampered_before_compile": tampered}
    return compiled, {"compile_wall_s": sandbox.perf_counter() - t0}
