"""The coarse-to-fine evaluation ladder: static -> compile -> correctness -> quick timing -> full timing.

Each rung is cheaper than the next; a candidate climbs only while it passes, and reaches full timing only when the
promotion policy says its quick time earned it. GPU-seconds are charged to a `Budget` per stage; when it is spent, GPU
stages are refused (with that reason) instead of run. With a store, an evaluation already stored at the requested
fidelity (same problem, candidate, device and harness version) is returned instead of measured again, and so is one
that stopped at quick timing when the promotion policy, asked again with the current best, would stop it there too.
"""
from __future__ import annotations

import dataclasses
import math
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

# The relative standard error of a median of n samples whose interquartile range is `spread` x the median:
# 1.2533 sigma / sqrt(n) with sigma = IQR / 1.349 for a normal spread.
MEDIAN_SE = 1.2533 / 1.349


def quick_noise(quick: StageRecord) -> float | None:
    """The relative noise of a quick speedup (candidate median over eager median, one interleaved run): the two
    medians' standard errors from their measured spreads and repetitions. None when the record does not say."""
    d = quick.data
    reps = d.get("reps") or (d.get("candidate") or {}).get("n")
    cand = (d.get("candidate") or {}).get("spread", d.get("spread"))
    if not reps or cand is None:
        return None
    eager = (d.get("eager") or {}).get("spread", cand)
    return MEDIAN_SE * (cand ** 2 + eager ** 2) ** 0.5 / reps ** 0.5


@dataclasses.dataclass
class QuickBest:
    """Per problem, what promotion compares with: the best full-timing speedup and the best quick one of candidates
    not failed; the disagreements of quick and full timing measured on the candidates timed at both (log ratios);
    and the quick timings' own measured noise (`quick_noise`)."""
    speedup: float | None = None  # the best quick speedup
    full: float | None = None  # the best full-timing speedup
    pairs: list[float] = dataclasses.field(default_factory=list)  # log(quick / full) of one candidate each
    noises: list[float] = dataclasses.field(default_factory=list)

    @property
    def bar(self) -> float | None:
        """What a candidate must be able to beat: the best full-timing speedup (what "best" ranks first), else the
        best quick one."""
        return self.full if self.full is not None else self.speedup

    @property
    def noise(self) -> float | None:
        """The problem's measured noise of a quick speedup against the bar: the root mean square of quick against
        full timing over its candidates timed at both (systematic gap and run-to-run noise together); before any,
        sqrt(2) x the median noise of its quick timings within their runs."""
        if self.pairs:
            return (sum(x * x for x in self.pairs) / len(self.pairs)) ** 0.5
        if not self.noises:
            return None
        xs = sorted(self.noises)
        mid = len(xs) // 2
        return 2 ** 0.5 * (xs[mid] if len(xs) % 2 else 0.5 * (xs[mid - 1] + xs[mid]))


@dataclasses.dataclass(frozen=True)
class PromotionPolicy:
    """Promote a quick-timed candidate to full timing (and to the rest of its correctness seeds) only when its quick
    speedup could beat the best so far given the problem's measured noise: `speedup x (1 + margin) >= bar`, where
    the bar is the best full-timing speedup (else the best quick one) and margin = max(`min_margin`, `noise_z` x the
    problem's noise (`QuickBest.noise`: how far its quick speedups lay from its full ones)). With nothing to compare
    with, the first timed candidate goes straight to full timing (`first_straight_to_full`: a quick time could not
    change that). `full_within`, when set, is a fixed margin instead; `min_speedup`, when set, also requires that
    many times eager. Speedups, not times, are compared: each is a ratio from one interleaved run (clock drift falls
    on both models), and "best" ranks by them. The defaults are tuned on the replayed H200 measurements
    (experiments/search_replay.py, part b'; results/search/promotion/)."""
    noise_z: float = 1.0
    min_margin: float = 0.04
    full_within: float | None = None
    min_speedup: float | None = None
    first_straight_to_full: bool = True

    def margin(self, noise: float | None) -> float:
        if self.full_within is not None:
            return self.full_within
        return max(self.min_margin, self.noise_z * (noise or 0.0))

    def straight_to_full(self, best: QuickBest | None) -> bool:
        """Whether a candidate skips quick timing: nothing to compare it with, so it would be promoted anyway."""
        return self.first_straight_to_full and self.min_speedup is None and (best is None or best.bar is None)

    def promote(self, quick: StageRecord, best: QuickBest | None) -> tuple[bool, str]:
        """(promote?, why); the noise is the problem's measured one, or this timing's own before any other."""
        speedup = quick.data.get("speedup_vs_eager")
        if not speedup:
            return False, "no quick speedup"
        if self.min_speedup is not None and speedup < self.min_speedup:
            return False, f"quick speedup {speedup:.3g}x < {self.min_speedup:g}x"
        if best is None or best.bar is None:
            return True, "promoted"
        noise = best.noise
        if noise is None:
            own = quick_noise(quick)
            noise = None if own is None else 2 ** 0.5 * own
        m = self.margin(noise)
        if speedup * (1 + m) < best.bar:
            what = "full-timing" if best.full is not None else "quick"
            return False, (f"quick speedup {speedup:.4g}x cannot beat the best {what} speedup {best.bar:.4g}x: the "
                           f"best is over it by more than the margin {m:.1%}")
        return True, "promoted"


class Ladder:
    def __init__(self, device: Device, store: EvaluationSource | None = None, policy: PromotionPolicy | None = None,
                 budget: Budget | None = None, seeds: int = 5, tolerance: dict[str, float] | None = None,
                 compile_modes: tuple[str, ...] = ("default",), compile_pool: list[Device] | None = None,
                 cheap_seeds: int = 1):
        """`seeds`: the correctness seeds a candidate must pass to count as correct; `cheap_seeds`: how many of them
        run before quick timing on a device that times (the cheap rung); the others run only when the candidate is
        promoted to full timing, in the same call. A candidate that was never promoted stays "passed the cheap rung"
        (its correctness record says `rung: cheap`), never correct. Where no timing follows (the CPU device, or
        `up_to="correctness"`) all seeds run at once."""
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
        if cheap_seeds < 1:
            raise ValueError(f"cheap_seeds must be at least 1, got {cheap_seeds}")
        self.cheap_seeds = min(cheap_seeds, seeds)
        self.tolerance = tolerance
        self.quick_best: dict[str, QuickBest] = {}  # per problem: what promotion compares with
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
        cached = self._stored(problem, candidate, up_to, force_full) if self.store is not None else None
        if cached is not None:
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

    def _stored(self, problem: Problem, candidate: Candidate, up_to: str, force_full: bool) -> Evaluation | None:
        """The stored evaluation that answers this request, or None (then the candidate climbs). One that reached
        `up_to` answers when it was judged as strictly (`_as_strict`). For full timing, one that stopped at a passed
        quick timing answers too when this ladder would stop there now (`_not_promoted_now`): not promoting is a
        decision of the promotion inputs, so it is taken again with the current ones, never served from the past."""
        found = self.store.find_evaluation(problem.key, candidate.hash, self.device.name, up_to)
        if found is not None and self._as_strict(found, up_to):
            return found
        if up_to != Stage.FULL_TIMING or force_full or self.device.kind == "cpu":
            return None
        quick = self.store.find_evaluation(problem.key, candidate.hash, self.device.name, Stage.QUICK_TIMING.value)
        if quick is None or not self._as_strict(quick, Stage.QUICK_TIMING.value):
            return None
        why = self._not_promoted_now(problem, quick)
        if why is None:
            return None
        # the decision that answers is today's (its bar may differ from the stored one's); the measurements are stored
        quick.provenance = {**quick.provenance, "promotion": why}
        return quick

    def _not_promoted_now(self, problem: Problem, stored: Evaluation) -> str | None:
        """Why this ladder would not promote a stored evaluation that ends at a passed quick timing, given what its
        policy compares with now (the problem's best so far); None when it would climb on (straight to full timing,
        or promoted), or the record does not end so."""
        last = stored.stages[-1] if stored.stages else None
        if last is None or last.name != Stage.QUICK_TIMING or not last.ok:
            return None
        best = self.quick_best.get(problem.key)
        straight = getattr(self.policy, "straight_to_full", None)
        if straight is not None and straight(best):
            return None  # a fresh climb would skip quick timing and time it in full
        promote, why = self.policy.promote(last, best)
        return None if promote else why

    def _as_strict(self, stored: Evaluation, up_to: str = Stage.FULL_TIMING.value) -> bool:
        """Whether a stored evaluation was judged at least as strictly as this ladder judges at `up_to`: a
        correctness pass on fewer seeds, or any correctness verdict under other tolerances, does not answer for this
        ladder (it is run again). A pass on the cheap rung is a pass on its seeds only: it answers a request that
        would itself stop at the cheap rung (quick timing on a device that times, with as many seeds), never one
        for correctness or full timing. A failure on any rung answers. Records that do not say (made before these
        settings were stored) are taken as the defaults."""
        judged = [s for s in stored.stages if s.name == Stage.CORRECTNESS]
        if not judged:
            return True  # it ended before correctness (static or compile): the settings did not matter
        settings = stored.provenance.get("correctness") or {}
        if settings.get("tolerance") != self.tolerance:
            return False
        if any(s.verdict == FAIL for s in judged):
            return True
        if not judged[0].ok:
            return True  # inconclusive or refused: `reaches` decided whether it answers
        seeds = judged[0].data.get("seeds", settings.get("seeds"))  # what the stage ran, else what was asked
        if seeds is None:
            return True
        need = self.seeds
        if up_to == Stage.QUICK_TIMING and self._two_rungs((Stage.CORRECTNESS.value, Stage.QUICK_TIMING.value)):
            need = self.cheap_seeds
        return seeds >= need

    def _two_rungs(self, want: tuple[str, ...]) -> bool:
        """Whether correctness splits: quick timing follows it and the device times (the CPU device refuses timing,
        so there all seeds run at once), and the cheap rung has fewer seeds than the whole set."""
        return (Stage.QUICK_TIMING in want and self.device.kind != "cpu" and self.cheap_seeds < self.seeds)

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
        straight = getattr(self.policy, "straight_to_full", None)
        if (Stage.FULL_TIMING in want and not force_full and self.device.kind != "cpu" and straight is not None
                and straight(self.quick_best.get(problem.key))):
            self._straight_to_full(problem, path, ev)
            return
        device_stages = [s for s in want if s in (Stage.CORRECTNESS, Stage.QUICK_TIMING)]
        two_rungs = self._two_rungs(want)
        k = self.cheap_seeds if two_rungs else self.seeds
        ran = self._run(problem, path, device_stages, ev, {"seed_stop": k} if two_rungs else {})
        first = ev.stage(Stage.CORRECTNESS)
        if first is not None and first.verdict != REFUSED:
            self._label_rung(first, k, "cheap" if two_rungs else "full")
        ev.provenance["correctness_rung"] = "cheap" if two_rungs and first is not None and first.ok else (
            "full" if first is not None and first.ok else None)
        quick = ev.stage(Stage.QUICK_TIMING)
        if not ran or Stage.FULL_TIMING not in want or quick is None or not quick.ok:
            return
        promote, why = (True, "forced") if force_full else self.policy.promote(quick, self.quick_best.get(problem.key))
        ev.provenance["promotion"] = why
        if not promote:
            return
        if not two_rungs:
            self._run(problem, path, [Stage.FULL_TIMING.value], ev)
            return
        # the promoted candidate's remaining seeds, then full timing, in one call (the built pair is reused)
        before = len(ev.stages)
        self._run(problem, path, [Stage.CORRECTNESS.value, Stage.FULL_TIMING.value], ev, {"seed_start": k})
        rest = ev.stages[before] if len(ev.stages) > before else None
        if rest is not None and rest.name == Stage.CORRECTNESS and rest.ok:
            del ev.stages[before]
            _merge_rungs(first, rest, k, self.seeds)
            ev.provenance["correctness_rung"] = "full"
        elif rest is not None and rest.name == Stage.CORRECTNESS:
            rest.data = {**rest.data, "rung": "full", "seed_range": rest.data.get("seed_range", [k, self.seeds])}
            rest.reason = f"on promotion, the remaining {self.seeds - k} seed(s): {rest.reason}"

    def _straight_to_full(self, problem: Problem, path, ev: Evaluation) -> None:
        """The problem's first timed candidate: nothing to compare a quick time with, so every correctness seed and
        full timing at once. Where the device cannot time it in full (a replay with no such recording), quick timing
        instead, as a candidate that was not promoted."""
        ev.provenance.update(promotion="straight to full timing: the problem's first timed candidate (no quick time "
                                       "to compare)", quick_skipped=True)
        ran = self._run(problem, path, [Stage.CORRECTNESS.value, Stage.FULL_TIMING.value], ev)
        first = ev.stage(Stage.CORRECTNESS)
        if first is not None and first.verdict != REFUSED:
            self._label_rung(first, self.seeds, "full")
        ev.provenance["correctness_rung"] = "full" if first is not None and first.ok else None
        last = ev.stages[-1]
        if ran or last.name != Stage.FULL_TIMING or last.verdict != REFUSED or first is None or not first.ok:
            return
        # in place of the refused full timing, in the same climb (the budget allowed that call)
        ev.stages.pop()
        ev.provenance["quick_fallback"] = f"full timing refused ({last.reason}): quick timing instead"
        self._run(problem, path, [Stage.QUICK_TIMING.value], ev, check_budget=False)

    @staticmethod
    def _label_rung(rec: StageRecord, seeds: int, rung: str) -> None:
        """What a correctness pass covers, as the ladder asked it (a device's record may count otherwise)."""
        rec.data = {"seeds": seeds, **rec.data, "rung": rung} if rec.ok else {**rec.data, "rung": rung}
        if rung == "cheap" and rec.ok:
            rec.reason = (f"cheap rung: {rec.reason}; the other seeds run only on promotion to full timing (not "
                          "yet correct)")

    def _run(self, problem: Problem, path, stages: list[str], ev: Evaluation,
             rung: dict[str, int] | None = None, check_budget: bool = True) -> bool:
        """Run device stages under the budget; True when all passed. `rung`: which correctness seeds this call runs
        (`seed_start`, `seed_stop`; default all)."""
        why = self.budget.exhausted() if check_budget else None
        if why and self.device.kind in ("cuda", "replay"):
            ev.stages.append(StageRecord(stages[0], REFUSED, f"not run: {why}", retry=True))
            return False
        options: dict[str, Any] = {"seeds": self.seeds, "tolerance": self.tolerance,
                                   "floor_ms": self.floor_ms(problem), "compile_modes": list(self.compile_modes),
                                   **(rung or {})}
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
        """Take an evaluation's speedups into what the promotion policy compares with, unless a stage failed (a
        candidate wrong on its remaining seeds, or during timing, sets no bar); its quick timing's noise and, timed at
        both fidelities, the disagreement of the two count either way. A resumed search notes its stored
        evaluations, as the uninterrupted one did when it made them."""
        quick, full = ev.stage(Stage.QUICK_TIMING), ev.stage(Stage.FULL_TIMING)
        quick = quick if quick is not None and quick.ok else None
        full = full if full is not None and full.ok else None
        if quick is None and full is None:
            return
        best = self.quick_best.setdefault(problem.key, QuickBest())
        q, f = ((r.data.get("speedup_vs_eager") if r is not None else None) for r in (quick, full))
        if quick is not None:
            noise = quick_noise(quick)
            if noise is not None:
                best.noises.append(noise)
        if q and f:
            best.pairs.append(math.log(q / f))
        if any(s.verdict == FAIL for s in ev.stages):
            return
        if q:
            best.speedup = q if best.speedup is None else max(best.speedup, q)
        if f:
            best.full = f if best.full is None else max(best.full, f)

    @property
    def best_quick_speedup(self) -> dict[str, float | None]:
        return {k: v.speedup for k, v in self.quick_best.items()}



def _merge_rungs(first: StageRecord, rest: StageRecord, cheap: int, seeds: int) -> None:
    """The cheap rung's pass and the remaining seeds' pass as one correctness record: all seeds passed."""
    a, b = first.data, rest.data
    first.reason = f"{seeds} seeds passed in two rungs ({cheap} before quick timing, {seeds - cheap} on promotion): " \
                   f"{rest.reason}"
    first.cost_s += rest.cost_s
    first.gpu_s += rest.gpu_s
    first.flags = [*first.flags, *rest.flags]
    ran = [a.get("seeds", cheap), b.get("seeds", seeds - cheap)]
    merged = {**a, **b, "seeds": sum(ran), "rung": "full", "seed_range": [0, seeds],
              "rungs": [{"seeds": ran[0], "cost_s": first.cost_s - rest.cost_s, "gpu_s": first.gpu_s - rest.gpu_s},
                        {"seeds": ran[1], "cost_s": rest.cost_s, "gpu_s": rest.gpu_s}]}
    if "worst_rel_err" in a or "worst_rel_err" in b:
        merged["worst_rel_err"] = max(a.get("worst_rel_err", 0.0), b.get("worst_rel_err", 0.0))
    if "bitwise_reproducible" in a or "bitwise_reproducible" in b:
        merged["bitwise_reproducible"] = bool(a.get("bitwise_reproducible", True) and
                                              b.get("bitwise_reproducible", True))
    if "bound_widened_by_reference_rounding" in a or "bound_widened_by_reference_rounding" in b:
        merged["bound_widened_by_reference_rounding"] = bool(a.get("bound_widened_by_reference_rounding") or
                                                             b.get("bound_widened_by_reference_rounding"))
    first.data = merged


PROBLEM_ERROR_PREFIX = "problem error"


def problem_error(ev: Evaluation) -> str | None:
    """The reason when the evaluation ended on the problem's own error (its inputs, its reference), not the
    candidate's: such an answer says nothing about the candidate."""
    last = ev.stages[-1] if ev.stages else None
    if last is not None and last.verdict == FAIL and last.reason.startswith(PROBLEM_ERROR_PREFIX):
        return last.reason
    return None
