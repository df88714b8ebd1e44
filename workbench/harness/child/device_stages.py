"""Worker-side entry point for the stages that run on a device: correctness, quick timing, full timing.

One call runs the requested stages in order and stops at the first that does not pass, so the candidate is imported
and its inputs built once per climb. The candidate pair is kept between calls for the same candidate (a quick timing
followed by a promotion to full timing re-uses it). A CUDA error that can leave the context broken marks the result
fatal; the parent then replaces the worker.
"""
from __future__ import annotations

import time
import traceback
from typing import Any, Callable

import torch

from ...core.records import FAIL, PASS, Stage
from ...problems.loader import ProblemError
from ...problems.problem import Problem
from . import correctness, sandbox, timing, watchdog
from .execution import ModelPair, build_pair

_pair_cache: dict[tuple, ModelPair] = {}


def _get_pair(problem: Problem, cand_path: str, device: torch.device, watch: dict[str, Any] | None) -> ModelPair:
    key = (problem, cand_path, str(device))
    if key not in _pair_cache:
        _pair_cache.clear()
        sandbox.drop_modules()
        _pair_cache[key] = build_pair(problem, cand_path, device, watch=watch)
    _pair_cache[key].watch = watch
    return _pair_cache[key]


def run(progress: Callable[[str], None], problem: tuple, cand_path: str, device: str, stages: list[str],
        options: dict[str, Any] | None = None, watch: dict[str, Any] | None = None) -> dict[str, Any]:
    """`options`: the ladder's (seeds, and for a rung of correctness `seed_start`/`seed_stop`; tolerance, floor,
    compile modes); `watch`: the device's watchdog settings (`watchdog`: "construct" and "call" seconds, the call's
    "factor" over the reference's measured time, "compile" seconds for one kernel compile)."""
    opts = options or {}
    if watch:
        watchdog.watch_kernel_compiles(watch.get("compile"))
    dev = torch.device(device)
    prob = Problem(*problem)
    results: list[dict[str, Any]] = []
    fatal = False
    for stage in stages:
        progress(stage)
        t0 = time.perf_counter()
        try:
            models = _get_pair(prob, cand_path, dev, watch)
            if stage == Stage.CORRECTNESS:
                r = correctness.check(models, n_seeds=opts.get("seeds", 5), tol_overrides=opts.get("tolerance"),
                                      first=opts.get("seed_start", 0), stop=opts.get("seed_stop"))
            elif stage in timing.TIMING_SETTINGS:
                r = timing.measure(models, stage, floor_ms=opts.get("floor_ms"),
                                   compile_modes=opts.get("compile_modes"))
            else:
                r = {"verdict": FAIL, "reason": f"unknown device stage '{stage}'"}
        except ProblemError as e:
            r = {"verdict": FAIL, "reason": f"problem error: {e}"}
        except sandbox.CandidateError as e:
            r = {"verdict": FAIL, "reason": f"malformed candidate: {e}"}
        except BaseException as e:  # the candidate's own exception, whatever it is
            fatal = sandbox.cuda_context_broken(e)
            r = {"verdict": FAIL, "reason": f"raised {type(e).__name__}: {str(e).strip()[:500]}",
                 "data": {"traceback": traceback.format_exc(limit=8)[-3000:]}}
            if fatal:
                r["reason"] += " (CUDA context broken: worker replaced)"
            _pair_cache.clear()
        if not fatal and dev.type == "cuda":
            try:  # an asynchronous kernel fault surfaces here, after the stage returned
                sandbox.cuda_sync()
            except BaseException as e:
                fatal = True
                r = {"verdict": FAIL, "reason": f"raised {type(e).__name__}: {str(e).strip()[:500]} "
                                                "(CUDA context broken: worker replaced)"}
        r["name"] = stage
        r["seconds"] = time.perf_counter() - t0
        results.append(r)
        progress(dict(r))
        if r["verdict"] != PASS or fatal:
            break
    return {"stages": results, "fatal": fatal}
