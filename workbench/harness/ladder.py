"""The coarse-to-fine evaluation ladder: static -> compile -> correctness -> quick timing -> full timing.

Each rung is cheaper than the next; a candidate climbs only while it passes, and reaches full timing only when the
promotion policy says its quick time earned it. GPU-seconds are charged to a `Budget` per stage; when it is spent, GPU
stages are refused (with that reason) instead of run. With a store, an evaluation already stored at the requested
fidelity (same problem, candidate, device and harness version) is returned instead of measured again.
"""
from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..core import ceilings
from ..core.candidate import Candidate
from ..core.contracts import Device, EvaluationSource
from ..core.records import FAIL, REFUSED, STAGES, Evaluation, Stage, StageRecord
from ..problems.problem import Problem
from .budget import Budget
from .static import check_static


@dataclasses.dataclass(frozen=True)
class PromotionPolicy:
    """Promote to full timing when the quick time is within `full_within` of the best quick time seen for this problem
    (relative: 0.2 = up to 20 % slower), and, if set, at least `min_speedup` times faster than eager."""
    full_within: float = 0.2
    min_speedup: float | None = None

    def promote(self, quick: StageRecord, best_quick_ms: float | None) -> tuple[bool, str]:
        ms = quick.data.get("candidate_ms")
        if ms is None:
            return False, "no quick time"
        if self.min_speedup is not None and quick.data.get("speedup_vs_eager", 0.0) < self.min_speedup:
            return False, f"quick speedup {quick.data.get('speedup_vs_eager', 0):.3g}x < {self.min_speedup:g}x"
        if best_quick_ms is not None and ms > best_quick_ms * (1 + self.full_within):
            return False, f"quick time {ms:.4g} ms is over {1 + self.full_within:.2f}x the best {best_quick_ms:.4g} ms"
        return True, "promoted"


class Ladder:
    def __init__(self, device: Device, store: EvaluationSource | None = None, policy: PromotionPolicy | None = None,
                 budget: Budget | None = None, seeds: int = 5, tolerance: dict[str, float] | None = None,
                 compile_modes: tuple[str, ...] = ("default",), compile_pool: list[Device] | None = None):
        self.device = device
        # torch.compile modes full timing measures the reference in (a benchmark adds "max-autotune")
        self.compile_modes = tuple(compile_modes)
        self.store = store
        self.policy = policy or PromotionPolicy()
        self.budget = budget or Budget()
        if seeds < 1:
            raise ValueError(f"seeds must be at least 1 (correctness runs the candidate on that many fresh input "
                             f"sets), got {seeds}")
        self.seeds = seeds
        self.tolerance = tolerance
        self.best_quick_ms: dict[str, float] = {}
        self._floors: dict[str, float | None] = {}
        self.floor_errors: dict[str, str] = {}  # why a problem has no roofline floor (recorded in provenance)
        self._compiled: dict[tuple[str, str], StageRecord] = {}
        # CPU devices that `compile_ahead` compiles on instead of the device's own workers (kept open by their owner)
        self.compile_pool = compile_pool

    def precompile(self, problem: Problem, candidates: list[Candidate], workers: int = 4,
                   pool: list[Device] | None = None) -> None:
        """Run the compile stage for many candidates at once, ahead of their climbs, so compilation stays off the
        GPU's critical path; `evaluate` then uses these records. By default the device compiles them on `workers`
        CPU workers of its own; a caller that compiles for many problems may pass its own `pool` of CPU devices."""
        todo = [c for c in candidates if (problem.key, c.hash) not in self._compiled]
        if not todo:
            return
        paths = [c.write() for c in todo]
        if pool:
            n = len(pool)
            with ThreadPoolExecutor(n) as ex:  # device i % n serves one task at a time (its worker's lock)
                records = list(ex.map(lambda i: pool[i % n].compile(problem, paths[i]), range(len(todo))))
        else:
            records = self.device.map_compile(problem, paths, workers=workers)
        for cand, rec in zip(todo, records):
            self._compiled[(problem.key, cand.hash)] = rec

    def compile_ahead(self, problem: Problem, candidates: list[Candidate], workers: int = 2) -> dict[str, StageRecord]:
        """Compile records for candidates before any GPU stage (what a surrogate reads to forecast them): the
        replay device answers from its recordings, other devices compile on CPU workers (`precompile`). The records
        are kept for the candidates' climbs, so nothing is compiled twice."""
        self.precompile(problem, candidates, workers=workers, pool=self.compile_pool)
        return {c.hash: self._compiled[(problem.key, c.hash)] for c in candidates
                if (problem.key, c.hash) in self._compiled}

    def evaluate(self, problem: Problem, candidate: Candidate, up_to: str = "full_timing",
                 force_full: bool = False) -> Evaluation:
        if up_to not in STAGES:
            raise ValueError(f"up_to must be one of {STAGES}")
        if self.store is not None:
            cached = self.store.find_evaluation(problem.key, candidate.hash, self.device.name, up_to)
            if cached is not None and self._as_strict(cached):
                cached.provenance = {**cached.provenance, "from_store": True}
                self.note_best(problem, cached)
                return cached
        ev = Evaluation(problem.key, candidate.hash, self.device.name,
                        provenance={**self.device.provenance(),
                                    "correctness": {"seeds": self.seeds, "tolerance": self.tolerance}})
        want = STAGES[: STAGES.index(up_to) + 1]
        self._climb(problem, candidate, want, ev, force_full)
        timing = ev.stage(Stage.FULL_TIMING) or ev.stage(Stage.QUICK_TIMING)
        if timing is not None and timing.ok:
            ev.provenance.update(timing_method=timing.data.get("method"), reps=timing.data.get("reps"),
                                 spread=timing.data.get("spread"))
        self.note_best(problem, ev)
        blamed = problem_error(ev)
        if blamed:  # the problem's fault, not the candidate's: never stored against the candidate
            ev.provenance["problem_error"] = blamed
        elif self.store is not None:
            self.store.put_problem(problem)
            self.store.put_candidate(candidate)
            self.store.put_evaluation(ev)
        return ev

    def _as_strict(self, stored: Evaluation) -> bool:
        """Whether a stored evaluation was judged at least as strictly as this ladder judges: a correctness pass on
        fewer seeds, or any correctness verdict under other tolerances, does not answer for this ladder (it is run
        again). Records that do not say (made before these settings were stored) are taken as the defaults."""
        judged = stored.stage(Stage.CORRECTNESS)
        if judged is None:
            return True  # it ended before correctness (static or compile): the settings did not matter
        settings = stored.provenance.get("correctness") or {}
        if settings.get("tolerance") != self.tolerance:
            return False
        seeds = judged.data.get("seeds", settings.get("seeds"))  # what the stage ran, else what was asked
        return not judged.ok or seeds is None or seeds >= self.seeds

    def _climb(self, problem: Problem, candidate: Candidate, want: tuple[str, ...], ev: Evaluation,
               force_full: bool) -> None:
        t0 = time.perf_counter()
        static = check_static(candidate.source, problem.source, problem.effective_precision)
        static.cost_s = time.perf_counter() - t0
        ev.stages.append(static)
        if not static.ok or len(want) == 1:
            return
        path = candidate.write()
        comp = self._compiled.pop((problem.key, candidate.hash), None) or self.device.compile(problem, path)
        ev.stages.append(comp)
        if comp.verdict == FAIL or len(want) == 2:
            return
        device_stages = [s for s in want if s in (Stage.CORRECTNESS, Stage.QUICK_TIMING)]
        if not self._run(problem, path, device_stages, ev):
            return
        if Stage.FULL_TIMING not in want:
            return
        quick = ev.stage(Stage.QUICK_TIMING)
        if quick is None or not quick.ok:
            return
        promote, why = (True, "forced") if force_full else self.policy.promote(
            quick, self.best_quick_ms.get(problem.key))
        ev.provenance["promotion"] = why
        if promote:
            self._run(problem, path, [Stage.FULL_TIMING.value], ev)

    def _run(self, problem: Problem, path, stages: list[str], ev: Evaluation) -> bool:
        """Run device stages under the budget; True when all passed."""
        why = self.budget.exhausted()
        if why and self.device.kind in ("cuda", "replay"):
            ev.stages.append(StageRecord(stages[0], REFUSED, f"not run: {why}", retry=True))
            return False
        options: dict[str, Any] = {"seeds": self.seeds, "tolerance": self.tolerance,
                                   "floor_ms": self.floor_ms(problem), "compile_modes": list(self.compile_modes)}
        if problem.key in self.floor_errors:
            ev.provenance["floor_error"] = self.floor_errors[problem.key]
        records = self.device.run_stages(problem, path, stages, options)
        for r in records:
            if r.verdict != REFUSED:  # a refusal ran nothing: it is not an evaluation and cost nothing
                self.budget.charge(r.name, r.gpu_s)
        ev.stages.extend(records)
        return bool(records) and len(records) == len(stages) and all(r.ok for r in records)

    def floor_ms(self, problem: Problem) -> float | None:
        """The roofline floor on this device, from its measured ceilings (None when none were measured)."""
        if problem.key not in self._floors:
            self._floors[problem.key] = None
            gpu = self.device.gpu_name
            c = ceilings.load(gpu) if gpu else None
            if c is not None:
                # torch loads with the counting: kept out of the parent until a GPU stage needs a floor
                from ..problems.analysis import count, roofline_floor

                try:
                    self._floors[problem.key] = roofline_floor(count(problem), c).ms
                except Exception as e:  # no floor: timing still runs, without the below-the-floor check
                    self.floor_errors[problem.key] = f"{type(e).__name__}: {e}"

        return self._floors[problem.key]

    def note_best(self, problem: Problem, ev: Evaluation) -> None:
        """Take an evaluation's quick time into the best quick time the promotion policy compares against (a resumed
        search notes its stored evaluations, as the uninterrupted one did when it made them)."""
        quick = ev.stage(Stage.QUICK_TIMING)
        if quick is not None and quick.ok and "candidate_ms" in quick.data:
            ms = quick.data["candidate_ms"]
            best = self.best_quick_ms.get(problem.key)
            self.best_quick_ms[problem.key] = ms if best is None else min(best, ms)



PROBLEM_ERROR_PREFIX = "problem error"


def problem_error(ev: Evaluation) -> str | None:
    """The reason when the evaluation ended on the problem's own error (its inputs, its reference), not the
    candidate's: such an answer says nothing about the candidate."""
    last = ev.stages[-1] if ev.stages else None
    if last is not None and last.verdict == FAIL and last.reason.startswith(PROBLEM_ERROR_PREFIX):
        return last.reason
    return None
