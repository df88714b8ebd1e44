"""`Search`: the object a notebook holds, stepping a kernel search cell by cell or running it headless.

One `step()`: the strategy proposes up to `per_step` points of the proposer's space (the first step evaluates the
proposer's default point as the root), each is rendered to a candidate and climbs the ladder (quick timing for all,
full timing for the ones the promotion policy picks), the tree, the memory and the strategy learn from the outcome,
and an event is emitted (to `events`, to listeners such as widgets, and to the store). The budget stops the search
at a GPU-seconds limit or a wall-clock limit.

LLM moves: with `llm_moves` (`make_search(..., proposer="llm")`), children are modules written by the LLM proposer
(move "llm") from the parent's source, its last measurement summary and the memory's text; the root is still the
offline proposer's default point. A node then holds either a `choice` (rendered by the offline proposer) or a
`source` (an LLM-written module, evaluated as is). A reply with no usable module is no node: it is recorded in the
memory as a failed "llm" attempt (stage "propose", with the reason) and emitted as a `proposal_failed` event; a step
whose proposals all failed is still a step (no nodes, not "space exhausted"), and only `max_failed_steps` such steps
in a row stop the search ("llm proposals failing").

Findings: with `findings="static"`, every evaluated node is read by the profiler's expert tools at no GPU cost (the
static reading of its compile record and the roofline verdict from its measured time; `diagnosis.py`), the findings
are kept on the node, in its event and in the memory, and the offline proposer's moves from that node follow them for
about `guided_share` of its children, from findings of at least `guided_min_severity` (default "warning": an
"info" finding is one its tool judges harmless; `proposers/guided.py`). `findings="ncu"` adds Nsight Compute counters
on a live GPU, charged to the budget.

Resume: a search with a `search_id` and a store appends its events there; a new `Search` with the same id and
configuration replays them to rebuild the tree and the memory, and the ladder answers stored evaluations from the
store, so nothing measured is measured again.
"""
from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ..harness.budget import Budget
from ..harness.ladder import Ladder, PromotionPolicy
from ..core.records import REFUSED
from ..problems.problem import Problem
from ..core.candidate import Candidate
from ..proposers.offline import Choice, OfflineProposer
from . import strategies
from .diagnosis import NodeDiagnosis
from .memory import Attempt, SearchMemory
from .tree import Node, Tree


@dataclasses.dataclass
class StepReport:
    step: int
    nodes: list[dict[str, Any]]
    gpu_seconds: float
    best: dict[str, Any] | None
    stopped: str | None = None


class Search:
    def __init__(self, problem: Problem, device, strategy: str | strategies.Strategy = "greedy",
                 proposer: OfflineProposer | None = None, budget: Budget | None = None, store=None, seed: int = 0,
                 per_step: int = 4, policy: PromotionPolicy | None = None, search_id: str | None = None,
                 llm_moves=None, max_failed_steps: int = 3, surrogate=None, screen=None, overgenerate: int = 3,
                 findings: str | None = None, guided_share: float | None = None,
                 guided_min_severity: str | None = None, counters=None, surrogate_learns: bool = False):
        self.problem = problem
        # measured speedups go back to a surrogate that can learn from them (off by default: on replay it sharpened
        # forecasts but made screening worse at equal budget, results/search/report.md)
        self.surrogate_learns = surrogate_learns
        self.device = device
        self.proposer = proposer or OfflineProposer(problem)
        self.strategy = strategies.make(strategy) if isinstance(strategy, str) else strategy
        self.budget = budget or Budget()
        self.store = store
        self.seed = seed
        self.rng = random.Random(seed)
        self.per_step = per_step
        self.ladder = Ladder(device, store=store, policy=policy, budget=self.budget)
        self.tree = Tree()
        self.memory = SearchMemory()
        self.events: list[dict[str, Any]] = []
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        self.steps = 0
        self.llm_moves = llm_moves  # llm_moves.LLMMoves, or None: the offline proposer's moves
        self.max_failed_steps = max_failed_steps
        self.failed_steps = 0  # steps in a row whose proposals all failed (LLM moves only)
        self.summaries: dict[int, dict[str, Any]] = {}  # nid -> its evaluation summary (without stages)
        # screening: the strategy over-generates `overgenerate` x the slots, the surrogate forecasts each, and the
        # selective policy (`screen.decide(forecasts, slots)`) picks what the GPU measures; the rest are skipped,
        # each skip kept with its forecast so calibration can be checked on any measured later
        if (surrogate is None) != (screen is None):
            raise ValueError("screening needs both a surrogate and a selective policy (screen)")
        self.surrogate, self.screen, self.overgenerate = surrogate, screen, max(1, overgenerate)
        # findings: None (none read), "static" (compile records + roofline, no GPU time) or "ncu" (counters too)
        self.diagnosis = NodeDiagnosis(problem, device, findings, counters) if findings is not None else None
        if guided_share is not None and not 0.0 <= guided_share <= 1.0:
            raise ValueError(f"guided_share must be within [0, 1], got {guided_share}")
        self.guided_share, self.guided_min_severity = guided_share, guided_min_severity
        self.search_id = search_id
        if search_id and store is not None:
            self._resume(store.search_events(search_id))

    # ---- the loop ----
    def step(self) -> StepReport:
        stopped = self.budget.exhausted()
        if stopped:
            return StepReport(self.steps, [], self.budget.gpu_spent, self.best_summary(), stopped)
        screening = self.surrogate is not None and self.tree.root is not None
        if self.tree.root is None:
            proposals = [(None, "root", self.proposer.default_choice())]
        else:
            proposals = self.strategy.propose(self, self.per_step * (self.overgenerate if screening else 1))
        failed = self._record_failed_proposals()
        if not proposals and not failed:
            return StepReport(self.steps, [], self.budget.gpu_spent, self.best_summary(), "space exhausted")
        self.failed_steps = 0 if proposals else self.failed_steps + 1
        nodes = []
        decisions: list[tuple[str, dict[str, Any] | None]] = [("measure", None)] * len(proposals)
        if screening and proposals:
            decisions = self._screen(proposals)
        slots = self._slots()
        measure: list[tuple] = []
        for (parent, move, payload), (decision, forecast) in zip(proposals, decisions):
            if decision == "skip":
                nodes.append(self._skip(parent, move, payload, forecast))
            elif slots > 1:
                measure.append((parent, move, payload, forecast))
            elif self.budget.exhausted():
                break
            else:
                nodes.append(self._evaluate(parent, move, payload, forecast))
        if measure:
            nodes.extend(self._evaluate_concurrently(measure, slots))
        self.steps += 1
        self._emit({"type": "step", "step": self.steps, "gpu_seconds": self.budget.gpu_spent,
                    "best": self.best_summary()})
        stopped = self.budget.exhausted()
        if not stopped and self.failed_steps >= self.max_failed_steps:
            stopped = "llm proposals failing"
        return StepReport(self.steps, [n.summary() for n in nodes], self.budget.gpu_spent, self.best_summary(),
                          stopped)

    # ---- where children come from ----
    @property
    def supports_crossover(self) -> bool:
        return self.llm_moves is None

    def child_moves(self, parent: Node, k: int) -> list[tuple[str, Any]]:
        """Candidate (move, payload) children of a node, for the strategies to filter: the offline proposer's moves
        (3k of them, the strategy keeps k unseen ones), or k LLM-written candidates."""
        if self.llm_moves is not None:
            return self.llm_moves.moves(parent.payload, self.rng, k=k, memory=self.memory,
                                        measurements=self.summaries.get(parent.nid))
        return self.proposer.moves(parent.choice, self.rng, k=3 * k, memory=self.memory, findings=parent.findings,
                                   guided_share=self.guided_share, min_severity=self.guided_min_severity)

    def _record_failed_proposals(self) -> int:
        """Unusable LLM replies of this step: failed "llm" attempts in the memory, and events (no nodes)."""
        if self.llm_moves is None:
            return 0
        failures = self.llm_moves.drain_failures()
        for f in failures:
            self.memory.record(Attempt(f.call_id or "", f.parent, "llm", "failed", "propose", None, f.reason))
            self._emit({"type": "proposal_failed", "parent": f.parent, "move": "llm", "reason": f.reason,
                        "call_id": f.call_id, "rationale": f.rationale})
        return len(failures)

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

    def _candidate(self, payload: Choice | Candidate) -> Candidate:
        return payload if isinstance(payload, Candidate) else self.proposer.render(payload)

    def _add_node(self, parent: int | None, move: str, payload: Choice | Candidate,
                  cand: Candidate | None = None) -> tuple[Node, Candidate]:
        cand = cand or self._candidate(payload)
        if isinstance(payload, Candidate):  # an LLM-written module, evaluated as written
            return self.tree.add(parent, move, None, cand.hash, source=cand.source), cand
        return self.tree.add(parent, move, payload, cand.hash), cand

    def _screen(self, proposals) -> list[tuple[str, dict[str, Any]]]:
        """Forecast every proposal and let the selective policy choose what climbs the ladder."""
        cands = [self._candidate(p) for _, _, p in proposals]
        if isinstance(getattr(self.surrogate, "compile_records", None), dict):
            # a surrogate that reads compile facts gets them first: compiling is a CPU rung, it costs no GPU time
            self.surrogate.compile_records.update(self.ladder.compile_ahead(self.problem, cands))
        forecasts = self.surrogate.forecast(self.problem, cands, "eager")
        labels = self.screen.decide(forecasts, self.per_step)
        return [(label, {"probs": list(f.probs), "point": f.point, "confidence": f.confidence, "decision": label})
                for label, f in zip(labels, forecasts)]

    def _skip(self, parent: int | None, move: str, payload: Choice | Candidate, forecast: dict[str, Any]) -> Node:
        node, cand = self._add_node(parent, move, payload)
        node.status, node.forecast = "skipped", forecast
        node.reason = f"skipped by the surrogate (confidence {forecast['confidence']:.2f})"
        self.memory.record(Attempt(cand.hash, self.tree.nodes[parent].candidate if parent is not None else None,
                                   move, "skipped", "", None, node.reason))
        self._emit({"type": "node", "nid": node.nid, "parent": parent, "move": move, "skipped": True,
                    "choice": payload.to_dict() if not isinstance(payload, Candidate) else None,
                    **({"source": cand.source, "origin": dict(cand.origin)} if isinstance(payload, Candidate)
                       else {}),
                    "candidate": cand.hash, "summary": {}, "last_stage": None, "forecast": forecast,
                    "gpu_seconds": self.budget.gpu_spent})
        return node

    def _slots(self) -> int:
        """How many evaluations the device runs at once: a Ray device's GPU actors; 1 for a local or replay one."""
        try:
            return max(1, int(getattr(self.device, "slots", 1)))
        except (TypeError, ValueError):
            return 1

    def _evaluate_concurrently(self, items: list[tuple], slots: int) -> list[Node]:
        """A step's measurements spread over a device with several GPUs. Each starts only while the budget lasts;
        nodes are added and results applied in proposal order, so the tree does not depend on which GPU finished
        first. With `slots` GPUs the budget may be overrun by up to `slots - 1` evaluations already started."""
        cands = [self._candidate(payload) for _, _, payload, _ in items]

        def run(cand: Candidate):
            if self.budget.exhausted():
                return None
            t0 = time.perf_counter()
            ev = self.ladder.evaluate(self.problem, cand)
            last = ev.stages[-1] if ev.stages else None
            if last is not None and last.verdict == REFUSED and last.data.get("retry") and self.budget.exhausted():
                return None  # the budget ran out while it compiled (another GPU's charge): as if never started
            return cand, ev, time.perf_counter() - t0

        with ThreadPoolExecutor(min(slots, len(items))) as ex:
            done = list(ex.map(run, cands))
        return [self._evaluate(parent, move, payload, forecast, measured=m)
                for (parent, move, payload, forecast), m in zip(items, done) if m is not None]

    def _evaluate(self, parent: int | None, move: str, payload: Choice | Candidate,
                  forecast: dict[str, Any] | None = None, measured: tuple | None = None) -> Node:
        """Add the node and climb the ladder (or take `measured`: (candidate, evaluation, wall seconds) already run)."""
        node, cand = self._add_node(parent, move, payload, measured[0] if measured else None)
        choice = None if isinstance(payload, Candidate) else payload
        node.forecast = forecast
        if measured is None:
            t0 = time.perf_counter()
            ev = self.ladder.evaluate(self.problem, cand)
            wall = time.perf_counter() - t0
        else:
            _, ev, wall = measured
        summary = {k: v for k, v in ev.summary().items() if k != "stages"}
        self.summaries[node.nid] = summary
        self._apply(node, ev.summary())
        self._teach_surrogate(cand, node, ev)
        if self.diagnosis is not None:
            self._diagnose(node, cand, ev)
        parent_speedup = self.tree.nodes[parent].speedup if parent is not None else None
        self.memory.record(Attempt(cand.hash, self.tree.nodes[parent].candidate if parent is not None else None,
                                   move, node.status, node.stage, node.speedup, node.reason), parent_speedup)
        self.strategy.observe(self, node)
        self._emit({"type": "node", "nid": node.nid, "parent": parent, "move": move,
                    "choice": choice.to_dict() if choice is not None else None,
                    **({"source": cand.source, "origin": dict(cand.origin)} if choice is None else {}),
                    "candidate": cand.hash, "summary": summary, "forecast": forecast,
                    "last_stage": dataclasses.asdict(ev.stages[-1]) if ev.stages else None,
                    **({"findings": node.findings} if node.findings is not None else {}),
                    "wall_s": wall, "gpu_seconds": self.budget.gpu_spent})
        return node

    def _teach_surrogate(self, cand: Candidate, node: Node, ev) -> None:
        """A measured speedup goes back to a surrogate that learns from them (`observe_candidates`: the learned one
        shifts its forecasts for this problem by what the measurements say about its offset). A resumed search
        starts that learning afresh: it is soft state, rebuilt from the next measurements."""
        observe = getattr(self.surrogate, "observe_candidates", None)
        if not self.surrogate_learns or observe is None or node.status != "measured" or not node.speedup:
            return
        records = getattr(self.surrogate, "compile_records", None)
        comp = ev.stage("compile")
        if isinstance(records, dict) and comp is not None and cand.hash not in records:
            records[cand.hash] = comp
        observe(self.problem, [cand], [math.log2(node.speedup)])

    def _diagnose(self, node: Node, cand: Candidate, ev) -> None:
        """The node's findings (counters only for a measured node, in "ncu" mode), on the node and in the memory."""
        metrics, note = self.diagnosis.collect(self.budget, cand) if node.status == "measured" else (None, None)
        node.findings = [f.to_dict() for f in self.diagnosis.findings(ev, metrics)]
        self.memory.add_findings([{**f, "candidate": cand.hash, "nid": node.nid} for f in node.findings])
        if note:
            self._emit({"type": "profile_note", "nid": node.nid, "note": note})

    @staticmethod
    def _status(summary: dict[str, Any], last: dict[str, Any] | None) -> str:
        if last is None:
            return "failed"
        if last["verdict"] == "fail":
            return "failed"
        if summary.get("speedup_vs_eager"):
            return "measured"
        return "refused" if last["verdict"] == "refused" else "passed"

    def _apply(self, node: Node, summary: dict[str, Any], last: dict[str, Any] | None = None) -> None:
        last = last or (summary["stages"][-1] if summary.get("stages") else None)
        node.status = self._status(summary, last)
        node.stage = last["name"] if last else ""
        node.reason = last["reason"] if last else ""
        node.speedup = summary.get("speedup_vs_eager")
        node.speedup_vs_compile = summary.get("speedup_vs_compile")
        node.candidate_ms = summary.get("candidate_ms")
        node.fidelity = summary.get("fidelity", "")

    # ---- events, persistence ----
    def _emit(self, event: dict[str, Any]) -> None:
        event = {"seq": len(self.events), **event}
        self.events.append(event)
        if self.store is not None and self.search_id:
            self.store.put_search_event(self.search_id, event["seq"], json.loads(json.dumps(event, default=str)))
        for listener in self.listeners:
            listener(event)

    def _resume(self, events: list[dict[str, Any]]) -> None:
        """Rebuild tree, memory and strategy statistics from stored events (no evaluation is re-run)."""
        for e in events:
            if e["type"] == "node":
                if e.get("source") is not None:  # an LLM-written module
                    node = self.tree.add(e["parent"], e["move"], None, e["candidate"], source=e["source"])
                else:
                    choice = Choice.from_dict(e["choice"])
                    node = self.tree.add(e["parent"], e["move"], choice, e["candidate"])
                self.summaries[node.nid] = e["summary"]
                node.forecast = e.get("forecast")
                if e.get("skipped"):
                    node.status = "skipped"
                    node.reason = f"skipped by the surrogate (confidence {e['forecast']['confidence']:.2f})"
                    self.memory.record(Attempt(node.candidate, None, node.move, "skipped", "", None, node.reason))
                    continue
                self._apply(node, e["summary"], e["last_stage"])
                if e.get("findings") is not None:
                    node.findings = e["findings"]
                    self.memory.add_findings([{**f, "candidate": node.candidate, "nid": node.nid}
                                              for f in node.findings])
                parent_speedup = self.tree.nodes[e["parent"]].speedup if e["parent"] is not None else None
                self.memory.record(Attempt(node.candidate, None, node.move, node.status, node.stage, node.speedup,
                                           node.reason), parent_speedup)
                self.tree.backpropagate(node)
            elif e["type"] == "proposal_failed":
                self.memory.record(Attempt(e.get("call_id") or "", e.get("parent"), e.get("move", "llm"), "failed",
                                           "propose", None, e.get("reason", "")))
            elif e["type"] == "step":
                self.steps = e["step"]
        self.events = list(events)
        for e in events:
            if "gpu_seconds" in e:
                self.budget.spent["resumed"] = e["gpu_seconds"]

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
        return {"problem": self.problem.key, "strategy": self.strategy.name, "device": self.device.name,
                "seed": self.seed, "steps": self.steps, "best": self.best_summary(),
                "gpu_seconds": self.budget.gpu_spent, "evaluations": self.budget.report()["by_stage"],
                "proposer": "llm" if self.llm_moves is not None else "offline",
                "candidates": len(nodes), "by_status": {s: sum(n.status == s for n in nodes)
                                                        for s in sorted({n.status for n in nodes})},
                "skipped_by_surrogate": sum(n.status == "skipped" for n in nodes),
                "surrogate": type(self.surrogate).__name__ if self.surrogate is not None else None,
                "findings": self.diagnosis.mode if self.diagnosis is not None else None,
                "findings_by_tool": dict(Counter(f["tool"] for n in nodes for f in n.findings or []))}


def make_search(problem: Problem, device, proposer: str = "offline", llm_client=None, **search_kwargs) -> Search:
    """A `Search` whose children come from the offline proposer (`proposer="offline"`) or from the LLM proposer
    (`proposer="llm"`; the root is still the offline proposer's default point).

    `llm_client`: a `workbench.llm.LLMClient`, or an object with the Anthropic SDK's interface (`.messages.create`,
    e.g. a recorded test double), wrapped in an `LLMClient`; None builds an `LLMClient` from the environment, which
    raises `workbench.llm.LLMUnavailable` without `ANTHROPIC_API_KEY` (the caller may fall back to "offline"). Calls
    are recorded next to the search's store (`llm_calls`) when a store is given and the client was built here.
    `search_kwargs` go to `Search` (strategy, budget, store, seed, per_step, policy, search_id, findings="static" for
    findings-guided moves at no GPU cost, guided_share, ...); `offline=` passes
    an existing `OfflineProposer`, `llm_config=` an `LLMConfig` for a client built here.
    """
    offline = search_kwargs.pop("offline", None) or OfflineProposer(problem)
    llm_config = search_kwargs.pop("llm_config", None)
    if proposer == "offline":
        if llm_client is not None:
            raise ValueError("llm_client given with proposer='offline'")
        return Search(problem, device, proposer=offline, **search_kwargs)
    if proposer != "llm":
        raise ValueError(f"unknown proposer '{proposer}' (choose from offline, llm)")
    from ..llm import LLMClient, LLMProposer
    from ..llm.recorder import CallRecorder
    from ..llm.moves import LLMMoves

    store = search_kwargs.get("store")
    if llm_client is None or not isinstance(llm_client, LLMClient):
        recorder = CallRecorder.for_store(store) if store is not None and getattr(store, "path", None) else None
        llm_client = LLMClient(llm_config, client=llm_client, recorder=recorder)
    moves = LLMMoves(LLMProposer(problem, llm_client, store=store), offline)
    return Search(problem, device, proposer=offline, llm_moves=moves, **search_kwargs)
