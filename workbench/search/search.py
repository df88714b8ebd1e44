"""`Search`: the object a notebook holds, stepping a kernel search cell by cell or running it headless.

The loop is ask / tell (Optuna's pattern):

- `ask(k)`: the strategy proposes up to k points (the first ask gives the proposer's default point, the root), each
  rendered to a candidate. When the search screens (`ScreeningConfig`) the strategy over-generates, the surrogate
  forecasts every proposal and the selective policy decides which the GPU measures; each `Proposal` carries its
  forecast and decision.
- `tell(proposal, evaluation)`: the proposal becomes a node (a skipped one with no evaluation); the tree, the memory,
  the strategy and a learning surrogate learn from it, profiler findings are read when asked for
  (`FindingsConfig`), and a node event is emitted (to `events`, to listeners such as widgets, and to the store).
- `end_step()`: the step event. `step()` is ask, evaluate on the device's slots (several at once on a multi-GPU
  device), tell in proposal order, end the step; `run()` steps until the budget (GPU-seconds or wall clock) stops
  it. An external runner may evaluate proposals itself (another machine, a notebook cell) and tell the results.

LLM moves (`LLMMovesConfig`, `make_search(..., proposer="llm")`): children are modules the LLM proposer writes from
the parent's source, its last measurement summary and the memory's text. A reply with no usable module is no node: it
is recorded in the memory as a failed "llm" attempt and as a `proposal_failed` event; a step whose proposals all
failed is still a step, and `max_failed_steps` such steps in a row stop the search.

Resume: a search with a `search_id` and a store appends its events there; a new `Search` with the same id and
configuration replays them (the same code path as a live tell) to rebuild the tree, the memory and the strategy's
statistics, and moves its seeded generator (and the screening policy's) to where the last step left it, so it
proposes what the uninterrupted search would have; the ladder answers stored evaluations from the store, so nothing
measured is measured again. A step cut off midway is asked again from the state it started in, and the proposals it
had already told are told from their stored events, so a resume at any event continues the same run. The id is
bound to the configuration it was created with (`identity()`: a resume that differs is a `SearchMismatch`), and
one process at a time writes it (`store.lease.SearchLease`: a second writer gets `SearchLocked`).
Event meanings (node status, "best") live in `workbench.core.events`.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from ..core.candidate import Candidate
from ..core.contracts import Device
from ..core.events import (
    Decision,
    NodeEvent,
    NodeStatus,
    ProfileNote,
    ProposalFailed,
    StepEvent,
    event_from_dict,
    skip_reason,
    status_of,
)
from ..core.records import REFUSED, Evaluation, Stage, StageRecord
from ..devices.resolve import replays_dataset
from ..harness.budget import Budget
from ..harness.ladder import Ladder, PromotionPolicy
from ..llm import LLMClient, LLMProposer
from ..llm.moves import LLMMoves
from ..llm.recorder import CallRecorder
from ..problems.problem import Problem
from ..proposers.offline import Choice, OfflineProposer
from ..proposers.recorded import RecordedProposer
from ..store.lease import SearchLease
from . import strategies
from .config import FindingsConfig, LLMMovesConfig, ScreeningConfig
from .diagnosis import NodeDiagnosis
from .memory import Attempt, SearchMemory
from .rng import DrawCountingRandom
from .strategies import Proposal, SearchView
from .tree import Node, Tree


@runtime_checkable
class ReadsCompileRecords(Protocol):
    """A surrogate that forecasts better with compile facts: the search compiles proposals ahead (a CPU rung, no GPU
    time) and hands it the records before it forecasts."""

    def add_compile_records(self, records: Mapping[str, StageRecord]) -> None:
        ...


@runtime_checkable
class LearnsFromMeasurements(Protocol):
    """A surrogate that shifts its forecasts for a problem by what measurements of it say."""

    def observe_candidates(self, problem: Problem, candidates: list[Candidate], log2_speedup: list[float]) -> None:
        ...


def _stage_dict(record: StageRecord) -> dict[str, Any]:
    """A stage record as node events store it (its fields, without the derived `ok`)."""
    return {k: v for k, v in record.to_dict().items() if k != "ok"}


class SearchMismatch(ValueError):
    """A search id resumed with another configuration (a ValueError: the CLI exits 2 with the message)."""


@dataclasses.dataclass
class StepReport:
    step: int
    nodes: list[dict[str, Any]]
    gpu_seconds: float
    best: dict[str, Any] | None
    stopped: str | None = None

    def __repr__(self) -> str:  # one line: a notebook cell that ends in search.step() echoes it
        best = self.best or {}
        speed = best.get("speedup")
        shown = f", best {speed:.3g}x" if isinstance(speed, (int, float)) else ""
        return (f"StepReport(step {self.step}: {len(self.nodes)} node(s), {self.gpu_seconds:.1f} GPU-s{shown}"
                f"{', stopped: ' + self.stopped if self.stopped else ''})")


class Search:
    def __init__(self, problem: Problem, device: Device, strategy: str | strategies.Strategy = "greedy",
                 proposer: OfflineProposer | None = None, budget: Budget | None = None, store=None, seed: int = 0,
                 per_step: int = 4, promotion: PromotionPolicy | None = None, search_id: str | None = None,
                 screening: ScreeningConfig | None = None, findings: FindingsConfig | None = None,
                 llm: LLMMovesConfig | None = None):
        """`per_step`: proposals measured per step; `promotion`: which quick-timed candidates the ladder times in
        full; `store`: where evaluations and (with `search_id`) events are kept, and what a resumed search replays."""
        self.problem = problem
        self.device = device
        self.proposer = proposer or OfflineProposer(problem)
        self.strategy = strategies.make_strategy(strategy) if isinstance(strategy, str) else strategy
        self.budget = budget or Budget()
        self.store = store
        self.seed = seed
        self.rng = DrawCountingRandom(seed)
        self.per_step = per_step
        self.ladder = Ladder(device, store=store, policy=promotion, budget=self.budget)
        self.tree = Tree()
        self.memory = SearchMemory()
        self.events: list[dict[str, Any]] = []
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        self.steps = 0
        self.screening, self.findings, self.llm = screening, findings, llm
        self.diagnosis = NodeDiagnosis(problem, device, findings) if findings is not None else None
        self.failed_steps = 0  # steps in a row whose proposals all failed (LLM moves only)
        self.summaries: dict[int, dict[str, Any]] = {}  # nid -> its evaluation summary (without stages)
        self.view = SearchView(self.tree, self.rng, self.proposer, self.memory, problem, self.child_moves,
                               supports_crossover=llm is None)
        self._step_failures = 0  # failed LLM proposals since the last step event
        self._step_nodes: list[Node] = []  # nodes told since the last step event
        self._tail: list[dict[str, Any]] = []  # stored events of a step cut off midway, told again at the next ask
        self._draws_at_step = 0  # the generator's draws when the current step began, and the policy's state
        self._policy_at_step = self._policy_state()
        self.search_id = search_id
        self._lease: SearchLease | None = None
        if search_id and store is not None:
            self._lease = store.lease_search(search_id)
            try:
                self._bind(store)
                self._resume(store.search_events(search_id))
            except BaseException:
                self.close()
                raise

    def identity(self) -> dict[str, Any]:
        """What a search id is bound to: everything that decides which candidates it proposes and how they are
        judged (`--steps` is not: it says how far this run goes)."""
        s, f = self.screening, self.findings
        client = getattr(getattr(getattr(self.llm_moves, "llm", None), "client", None), "config", None)
        return {"problem": self.problem.key, "strategy": self.strategy.name,
                "strategy_params": {k: v for k, v in vars(self.strategy).items()
                                    if not k.startswith("_") and isinstance(v, (bool, int, float, str))},
                "seed": self.seed, "per_step": self.per_step, "device": self.device.name,
                "budget_gpu_s": self.budget.gpu_seconds, "budget_wall_s": self.budget.wall_seconds,
                "proposer": "llm" if self.llm is not None else type(self.proposer).__name__,
                "llm_model": getattr(client, "model", None),
                "promotion": dataclasses.asdict(self.ladder.policy) if dataclasses.is_dataclass(self.ladder.policy)
                else repr(self.ladder.policy),
                "screening": None if s is None else {"surrogate": type(s.surrogate).__name__,
                                                     "policy": repr(s.selective), "overgenerate": s.overgenerate,
                                                     "surrogate_learns": s.surrogate_learns},
                "findings": None if f is None else {"mode": f.mode, "guided_share": f.guided_share,
                                                    "guided_min_severity": f.guided_min_severity}}

    def _bind(self, store) -> None:
        """Bind the id to this configuration when it is new; else fail naming what differs from its own."""
        mine = json.loads(json.dumps(self.identity(), default=str))
        stored = store.bind_search(self.search_id, mine)
        if stored is None:
            return
        diff = [k for k in sorted(set(stored) | set(mine)) if stored.get(k) != mine.get(k)]
        if diff:
            said = "; ".join(f"{k}: created with {stored.get(k)!r}, now {mine.get(k)!r}" for k in diff)
            raise SearchMismatch(f"search id {self.search_id!r} belongs to another search ({said}): resume it with "
                                 "the settings it was created with, or choose another search id (--search-id)")

    def close(self) -> None:
        """Give up the search id (another process may then resume it); the process ending does the same."""
        if self._lease is not None:
            self._lease.release()

    @property
    def llm_moves(self) -> LLMMoves | None:
        return self.llm.moves if self.llm is not None else None

    @property
    def supports_crossover(self) -> bool:
        return self.view.supports_crossover

    # ---- ask / tell ----
    def ask(self, k: int | None = None) -> list[Proposal]:
        """Up to `k` (default `per_step`) proposals to measure, rendered; the root alone first. When the search
        screens, the strategy proposes `overgenerate` x k and the selective policy lets at most k through: every
        proposal comes back with its forecast and decision, the skipped ones to be told without an evaluation. An
        empty list: the space is exhausted, or every LLM reply failed (`end_step()` then counts a failed step)."""
        k = k or self.per_step
        if self.tree.root is None:
            proposals = [Proposal(None, "root", self.proposer.default_choice())]
        else:
            proposals = self.strategy.propose(self.view, k * (self.screening.overgenerate if self.screening else 1))
        self._record_failed_proposals()
        proposals = [dataclasses.replace(p, candidate=p.candidate or self._render(p.payload)) for p in proposals]
        if self.screening is not None and self.tree.root is not None and proposals:
            proposals = self._screen(proposals, k)
        if self._tail:
            return self._retell_tail(proposals, k)
        return proposals

    def _retell_tail(self, proposals: list[Proposal], k: int) -> list[Proposal]:
        """The first ask after a resume in the middle of a step: the proposals that step had told come back in the
        same order, and are told from their stored events (no evaluation, the same fields); the rest are returned.
        Proposals that differ (another proposer, an LLM's new replies) keep the stored nodes as they were told."""
        tail, self._tail = self._tail, []
        told = [d for d in tail if d.get("type") == NodeEvent.type]
        same = len(told) <= len(proposals) and all(
            (p.parent, p.move, p.candidate.hash, not p.measure) == (d["parent"], d["move"], d["candidate"],
                                                                   bool(d.get("skipped")))
            for p, d in zip(proposals, told))
        if not same:
            self._restore_generators(self._draws_at_step, self._policy_at_step)
            self._replay(tail)
            return self.ask(k)
        kept = tail[: tail.index(told[-1]) + 1] if told else []
        if len(kept) < len(tail):  # notes written after the last told node: this run writes its own
            self.store.drop_search_events(self.search_id, len(self.events) + len(kept))
        self._replay(kept)
        return proposals[len(told):]

    def tell(self, proposal: Proposal, evaluation: Evaluation | None = None, wall_s: float | None = None) -> Node:
        """Make a proposal a node: a skipped one (no evaluation), or one measured by `evaluation` (from
        `self.ladder.evaluate`, or an external runner's), which `wall_s` seconds of wall clock produced."""
        cand = proposal.candidate or self._render(proposal.payload)
        choice = None if isinstance(proposal.payload, Candidate) else proposal.payload
        common = dict(nid=len(self.tree.nodes), parent=proposal.parent, move=proposal.move, candidate=cand.hash,
                      choice=choice.to_dict() if choice is not None else None,
                      source=None if choice is not None else cand.source,
                      origin=None if choice is not None else dict(cand.origin), forecast=proposal.forecast)
        if not proposal.measure:
            event = NodeEvent(**common, skipped=True, gpu_seconds=self.budget.gpu_spent)
        else:
            if evaluation is None:
                raise ValueError("a proposal the search measures is told with its evaluation")
            summary = {k: v for k, v in evaluation.summary().items() if k != "stages"}
            last = _stage_dict(evaluation.stages[-1]) if evaluation.stages else None
            status = status_of(summary, last)
            self._teach_surrogate(cand, status, summary.get("speedup_vs_eager"), evaluation)
            findings = self._diagnose(common["nid"], cand, evaluation, status) if self.diagnosis else None
            event = NodeEvent(**common, summary=summary, last_stage=last, findings=findings, wall_s=wall_s,
                              gpu_seconds=self.budget.gpu_spent)
        node = self._add(event, choice)
        self._emit(event)
        return node

    def end_step(self) -> StepReport:
        """Close a step (the nodes told since the last one): count it, note whether all its LLM proposals failed,
        emit the step event."""
        nodes = self._close_step()
        self.steps += 1
        best = self.best_summary()
        self._draws_at_step, self._policy_at_step = self.rng.draws, self._policy_state()
        self._emit(StepEvent(self.steps, self.budget.gpu_spent, best, rng_draws=self.rng.draws,
                             policy_rng=self._policy_at_step))
        return StepReport(self.steps, [n.summary() for n in nodes], self.budget.gpu_spent, best, self.stopped())

    def _close_step(self) -> list[Node]:
        if self._step_nodes or self._step_failures:
            self.failed_steps = 0 if self._step_nodes else self.failed_steps + 1
        nodes, self._step_nodes, self._step_failures = self._step_nodes, [], 0
        return nodes

    def stopped(self) -> str | None:
        """Why no further step should run: the budget, a reference that is random (no candidate can ever be judged
        against it, so more measurements only spend the budget), or LLM replies failing step after step; None to go
        on."""
        reason = self.budget.exhausted()
        if not reason and self.memory.random_reference:
            reason = f"no candidate can be judged: {self.memory.random_reference[:160]}"
        if not reason and self.llm is not None:
            if self.llm.moves.fatal:
                reason = f"llm unusable: {self.llm.moves.fatal}"
            elif self.failed_steps >= self.llm.max_failed_steps:
                reason = (f"llm proposals failing: {self.failed_steps} steps in a row without a usable module; "
                          f"last: {self._last_llm_failure()}")
        return reason

    def _last_llm_failure(self) -> str:
        """The newest failed LLM proposal's reason (this run's, else one replayed from the events)."""
        last = self.llm.moves.last_failure if self.llm is not None else None
        if last is None:
            last = next((a.reason for a in reversed(self.memory.attempts) if a.stage == "propose"), None)
        return last or "unknown"

    def llm_failure(self) -> str | None:
        """Why the LLM proposer gave this run nothing, or None: it stopped the search (a fatal error, or failing
        steps), or every one of its proposals in this run failed. The CLI exits non-zero with it."""
        if self.llm is None:
            return None
        reason = self.stopped()
        if reason and reason.startswith("llm "):
            return reason
        moves = self.llm.moves
        if moves.failed and not moves.usable:
            return f"every LLM proposal failed ({moves.failed}); last: {self._last_llm_failure()}"
        return None

    # ---- the loop ----
    def step(self) -> StepReport:
        """Ask, measure on the device's slots, tell in proposal order, end the step."""
        stopped = self.budget.exhausted()
        if stopped:
            return StepReport(self.steps, [], self.budget.gpu_spent, self.best_summary(), stopped)
        proposals = self.ask()
        if not proposals and not self._step_failures and not self._step_nodes:  # (nodes: a cut-off step, retold)
            return StepReport(self.steps, [], self.budget.gpu_spent, self.best_summary(), "space exhausted")
        self._measure_and_tell(proposals)
        return self.end_step()

    def run(self, steps: int | None = None, progress: Callable[[StepReport], None] | None = None) -> Node | None:
        done = 0
        while steps is None or done < steps:
            report = self.step()
            done += 1
            if progress:
                progress(report)
            if report.stopped:
                break
        return self.best

    def _measure_and_tell(self, proposals: list[Proposal]) -> None:
        """One GPU: evaluate and tell one proposal at a time while the budget lasts. Several: evaluate the step's
        measured proposals at once (`_evaluate_concurrently`), then tell everything in proposal order, so the tree
        does not depend on which GPU finished first."""
        slots = self._slots()
        done = iter(self._evaluate_concurrently([p for p in proposals if p.measure], slots)) if slots > 1 else None
        for p in proposals:
            if not p.measure:
                self.tell(p)
                continue
            if done is not None:
                measured = next(done)
                if measured is None:  # not started, or refused, once the budget ran out
                    continue
            elif self.budget.exhausted():
                break
            else:
                measured = self._evaluate(p.candidate)
            self.tell(p, *measured)

    # ---- where children come from ----
    def child_moves(self, parent: Node, k: int) -> list[tuple[str, Any]]:
        """Candidate (move, payload) children of a node, for the strategies to filter: the offline proposer's moves
        (3k of them, the strategy keeps k unseen ones), or k LLM-written candidates."""
        if self.llm is not None:
            return self.llm.moves.moves(parent.payload, self.rng, k=k, memory=self.memory,
                                        measurements=self.summaries.get(parent.nid))
        f = self.findings
        return self.proposer.moves(parent.choice, self.rng, k=3 * k, memory=self.memory, findings=parent.findings,
                                   guided_share=f.guided_share if f else None,
                                   min_severity=f.guided_min_severity if f else None)

    def _record_failed_proposals(self) -> None:
        """Unusable LLM replies since the last ask: failed "llm" attempts in the memory, and events (no nodes)."""
        if self.llm is None:
            return
        for f in self.llm.moves.drain_failures():
            event = ProposalFailed(f.parent, f.reason, f.call_id, f.rationale)
            self._add_failure(event)
            self._emit(event)

    def _add_failure(self, e: ProposalFailed) -> None:
        self.memory.record(Attempt(e.call_id or "", e.parent, e.move, "failed", "propose", None, e.reason))
        self._step_failures += 1

    def _render(self, payload: Choice | Candidate) -> Candidate:
        return payload if isinstance(payload, Candidate) else self.proposer.render(payload)

    def _screen(self, proposals: list[Proposal], slots: int) -> list[Proposal]:
        """Forecast every proposal and let the selective policy choose which `slots` climb the ladder."""
        surrogate, cands = self.screening.surrogate, [p.candidate for p in proposals]
        if isinstance(surrogate, ReadsCompileRecords):
            surrogate.add_compile_records(self.ladder.compile_ahead(self.problem, cands))
        forecasts = surrogate.forecast(self.problem, cands, "eager")
        decisions = [Decision(label) for label in self.screening.selective.decide(forecasts, slots)]
        return [dataclasses.replace(p, decision=d, forecast={"probs": list(f.probs), "point": f.point,
                                                             "confidence": f.confidence, "decision": d.value})
                for p, f, d in zip(proposals, forecasts, decisions)]

    # ---- measuring ----
    def _slots(self) -> int:
        """How many evaluations the device runs at once: a Ray device's GPU actors; 1 for a local or replay one."""
        return max(1, int(self.device.slots))

    def _evaluate(self, cand: Candidate) -> tuple[Evaluation, float]:
        """Climb the ladder: (the evaluation, its wall seconds)."""
        t0 = time.perf_counter()
        ev = self.ladder.evaluate(self.problem, cand)
        return ev, time.perf_counter() - t0

    def _evaluate_concurrently(self, proposals: list[Proposal], slots: int) -> list[tuple[Evaluation, float] | None]:
        """Evaluations on `slots` GPUs at once, in proposal order. Each starts only while the budget lasts (None
        when it did not start, or was refused because another GPU's charge spent the budget while it compiled), so
        the budget may be overrun by up to `slots - 1` evaluations already started."""
        def run(cand: Candidate) -> tuple[Evaluation, float] | None:
            if self.budget.exhausted():
                return None
            ev, wall = self._evaluate(cand)
            last = ev.stages[-1] if ev.stages else None
            if last is not None and last.verdict == REFUSED and last.retry and self.budget.exhausted():
                return None
            return ev, wall

        if not proposals:
            return []
        with ThreadPoolExecutor(min(slots, len(proposals))) as ex:
            return list(ex.map(run, [p.candidate for p in proposals]))

    def _teach_surrogate(self, cand: Candidate, status: NodeStatus, speedup: float | None, ev: Evaluation) -> None:
        """A measured speedup goes back to a surrogate that learns from them (`ScreeningConfig.surrogate_learns`),
        with its compile record when the surrogate reads those. A resumed search starts that learning afresh: it is
        soft state, rebuilt from the next measurements."""
        s = self.screening
        if s is None or not s.surrogate_learns or not isinstance(s.surrogate, LearnsFromMeasurements):
            return
        if status != NodeStatus.MEASURED or not speedup:
            return
        comp = ev.stage("compile")
        if comp is not None and isinstance(s.surrogate, ReadsCompileRecords):
            s.surrogate.add_compile_records({cand.hash: comp})
        s.surrogate.observe_candidates(self.problem, [cand], [math.log2(speedup)])

    def _diagnose(self, nid: int, cand: Candidate, ev: Evaluation, status: NodeStatus) -> list[dict[str, Any]]:
        """The node's findings (counters only for a measured node, in "ncu" mode); a note when counters failed."""
        metrics, note = self.diagnosis.collect(self.budget, cand) if status == NodeStatus.MEASURED else (None, None)
        if note:
            self._emit(ProfileNote(nid, note))
        return [f.to_dict() for f in self.diagnosis.findings(ev, metrics)]

    # ---- the tree and memory, from a node event (live tells and resume alike) ----
    def _add(self, e: NodeEvent, choice: Choice | None) -> Node:
        node = self.tree.add(e.parent, e.move, choice, e.candidate, source=e.source)
        node.forecast = e.forecast
        parent = self.tree.nodes[e.parent] if e.parent is not None else None
        self._step_nodes.append(node)
        if e.skipped:
            node.status, node.reason = NodeStatus.SKIPPED, skip_reason(e.forecast)
            self.memory.record(Attempt(node.candidate, parent.candidate if parent else None, node.move,
                                       NodeStatus.SKIPPED.value, "", None, node.reason))
            return node
        self.summaries[node.nid] = e.summary
        self._apply(node, e.summary, e.last_stage)
        if e.findings is not None:
            node.findings = e.findings
            self.memory.add_findings([{**f, "candidate": node.candidate, "nid": node.nid} for f in node.findings])
        self.memory.record(Attempt(node.candidate, parent.candidate if parent else None, node.move,
                                   node.status.value, node.stage, node.speedup, node.reason),
                           parent.speedup if parent else None)
        self.strategy.observe(self.view, node)
        return node

    @staticmethod
    def _apply(node: Node, summary: dict[str, Any], last: dict[str, Any] | None) -> None:
        node.status = status_of(summary, last)
        node.stage = last["name"] if last else ""
        node.reason = last["reason"] if last else ""
        node.speedup = summary.get("speedup_vs_eager")
        node.speedup_vs_compile = summary.get("speedup_vs_compile")
        node.candidate_ms = summary.get("candidate_ms")
        node.fidelity = summary.get("fidelity", "")

    # ---- events, persistence ----
    def _emit(self, event: NodeEvent | StepEvent | ProposalFailed | ProfileNote) -> None:
        if self._lease is not None:
            self._lease.check()  # a newer Search took the id over in this process: this one must not write
        d = dataclasses.replace(event, seq=len(self.events)).to_dict()
        self.events.append(d)
        if self.store is not None and self.search_id:
            self.store.put_search_event(self.search_id, d["seq"], json.loads(json.dumps(d, default=str)))
        for listener in self.listeners:
            listener(d)

    def _resume(self, stored: list[dict[str, Any]]) -> None:
        """Replay stored events through the live path (no evaluation is re-run) up to the last step event: nodes and
        failed proposals rebuild the tree, the memory and the strategy's statistics, and the stored evaluations the
        ladder's best quick time; the last step event gives the step count and where the seeded generators were
        (events written before that was recorded leave them at the seed). Events after it (a step cut off midway)
        wait for the next ask (`_retell_tail`); with LLM moves, whose replies cannot be asked again, they are
        replayed now."""
        ends = [i for i, d in enumerate(stored) if d.get("type") == StepEvent.type]
        steps = [event_from_dict(stored[i]) for i in ends]
        cut = len(stored) if self.llm is not None else (ends[-1] + 1 if ends else 0)
        self._replay(stored[:cut])
        self._tail = stored[cut:]
        draws = next((e.rng_draws for e in reversed(steps) if e.rng_draws is not None), 0)
        self._restore_generators(draws, steps[-1].policy_rng if steps and steps[-1].policy_rng else
                                 self._policy_at_step)

    def _replay(self, events: list[dict[str, Any]]) -> None:
        for d in events:
            e = event_from_dict(d)
            if isinstance(e, NodeEvent):
                self._add(e, Choice.from_dict(e.choice) if e.choice is not None else None)
                self._note_quick_time(e)
            elif isinstance(e, ProposalFailed):
                self._add_failure(e)
            elif isinstance(e, StepEvent):
                self._close_step()
                self.steps = e.step
        self.events.extend(events)
        spent = [d["gpu_seconds"] for d in events if "gpu_seconds" in d]
        if spent:
            self.budget.carry_over(float(spent[-1]))

    def _policy_state(self) -> dict[str, Any] | None:
        """The screening policy's generator state (numpy's), so a resume continues its explore draws."""
        rng = getattr(self.screening.selective, "_rng", None) if self.screening is not None else None
        return rng.bit_generator.state if hasattr(rng, "bit_generator") else None

    def _restore_generators(self, draws: int, policy: dict[str, Any] | None) -> None:
        self.rng.seed(self.seed)
        self.rng.advance(draws)
        self._draws_at_step, self._policy_at_step = draws, policy
        if policy is not None and self._policy_state() is not None:
            self.screening.selective._rng.bit_generator.state = policy

    def _note_quick_time(self, e: NodeEvent) -> None:
        """The ladder's promotion compares quick times with the best seen: a replayed node's stored evaluation counts,
        as it did when it was measured."""
        if e.skipped:
            return
        stored = self.store.find_evaluation(self.problem.key, e.candidate, self.device.name, Stage.QUICK_TIMING.value)
        if stored is not None:
            self.ladder.note_best(self.problem, stored)

    # ---- what a notebook reads ----
    @property
    def best(self) -> Node | None:
        return self.tree.best()

    def best_summary(self) -> dict[str, Any] | None:
        b = self.best
        return None if b is None else {"nid": b.nid, "candidate": b.candidate, "speedup_vs_eager": b.speedup,
                                       "speedup_vs_compile": b.speedup_vs_compile, "candidate_ms": b.candidate_ms,
                                       "fidelity": b.fidelity}

    def table(self):
        return self.tree.to_frame()

    def report(self) -> dict[str, Any]:
        nodes = list(self.tree.nodes.values())
        statuses = [str(n.status) for n in nodes]
        return {"problem": self.problem.key, "strategy": self.strategy.name, "device": self.device.name,
                "seed": self.seed, "steps": self.steps, "best": self.best_summary(),
                "gpu_seconds": self.budget.gpu_spent, "evaluations": self.budget.report()["by_stage"],
                "proposer": "llm" if self.llm is not None else "offline",
                "candidates": len(nodes), "by_status": {s: statuses.count(s) for s in sorted(set(statuses))},
                # nodes whose evaluation the store answered (measured before, by this search or another)
                "cached": sum(bool(self.summaries.get(n.nid, {}).get("cached")) for n in nodes),
                "skipped_by_surrogate": statuses.count(NodeStatus.SKIPPED.value),
                "surrogate": type(self.screening.surrogate).__name__ if self.screening is not None else None,
                "findings": self.diagnosis.mode if self.diagnosis is not None else None,
                "findings_by_tool": dict(Counter(f["tool"] for n in nodes for f in n.findings or []))}


def make_search(problem: Problem, device: Device, proposer: str = "offline", llm_client=None,
                offline: OfflineProposer | None = None, llm_config=None, max_failed_steps: int = 3,
                dataset: str | None = None, **search_kwargs) -> Search:
    """A `Search` whose children come from the offline proposer (`proposer="offline"`) or from the LLM proposer
    (`proposer="llm"`; the root is still the offline proposer's default point).

    `llm_client`: a `workbench.llm.LLMClient`, or an object with the Anthropic SDK's interface (`.messages.create`,
    e.g. a recorded test double), wrapped in an `LLMClient`; None builds an `LLMClient` from the environment, which
    raises `workbench.llm.LLMUnavailable` without `ANTHROPIC_API_KEY` (the caller may fall back to "offline"). Calls
    are recorded next to the search's store (`llm_calls`) when a store is given and the client was built here.
    `offline`: an existing `OfflineProposer` (default: the offline proposer, or on a replay of the shipped dataset
    the `RecordedProposer` that walks its measured points: anything else would be answered "not measured";
    `dataset` names another dataset directory); `llm_config`: an `LLMConfig` for a client built here;
    `max_failed_steps`: see `LLMMovesConfig`. `search_kwargs` go to `Search` (strategy, budget, store, seed,
    per_step, promotion, search_id, screening, findings).
    """
    if offline is None:
        offline = RecordedProposer.from_dataset(problem, dataset) if replays_dataset(device) \
            else OfflineProposer(problem)
    if proposer == "offline":
        if llm_client is not None:
            raise ValueError("llm_client given with proposer='offline'")
        return Search(problem, device, proposer=offline, **search_kwargs)
    if proposer != "llm":
        raise ValueError(f"unknown proposer '{proposer}' (choose from offline, llm)")
    store = search_kwargs.get("store")
    if llm_client is None or not isinstance(llm_client, LLMClient):
        recorder = CallRecorder(store) if store is not None else None
        llm_client = LLMClient(llm_config, client=llm_client, recorder=recorder)
    moves = LLMMoves(LLMProposer(problem, llm_client, store=store), offline)
    return Search(problem, device, proposer=offline, llm=LLMMovesConfig(moves, max_failed_steps), **search_kwargs)
