"""`LLMMoves`: a search's children written by the LLM proposer instead of drawn from the offline proposer's space.

`moves(parent_payload, rng, k, memory, measurements)` has the shape of `OfflineProposer.moves`: it returns up to k
(move, payload) pairs, here ("llm", Candidate) with the candidate's origin carrying the call id, model and rationale.
The parent payload is the parent node's source, or its offline `Choice` (the root is the offline proposer's default
point, a sensible first kernel), which is rendered to get the source the model improves on. Each call sends the parent
source, the parent's last measurement summary and `memory.render()` (`LLMProposer.propose(..., n=k)`).

A proposal without a candidate (an unparsable or truncated reply, or a call that failed after the client's retries)
does not become a node: it is kept in `failures` (drained by the search, which records each in its memory as a failed
"llm" attempt at stage "propose" with the reason, and emits a `proposal_failed` event so a resumed search remembers
it). It never raises into the search. The rng is not used (sampling is the model's), it is accepted for the API.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any

from ..core.candidate import Candidate, content_hash

MOVE = "llm"


@dataclasses.dataclass(frozen=True)
class FailedProposal:
    parent: str | None  # content hash of the parent candidate
    reason: str  # "unparsable reply: no code", "llm call failed: RateLimitError: ...", ...
    call_id: str | None
    rationale: str = ""


class LLMMoves:
    def __init__(self, llm_proposer: Any, offline: Any):
        self.llm = llm_proposer  # workbench.llm.LLMProposer (or anything with its propose())
        self.offline = offline  # workbench.proposers.offline.OfflineProposer: renders a Choice parent
        self.failures: list[FailedProposal] = []
        self.calls = 0  # moves() calls
        self.usable = 0  # proposals that gave a candidate
        self.failed = 0  # proposals that did not
        self.last_failure: str | None = None

    @property
    def fatal(self) -> str | None:
        """Why no later LLM call can succeed (a refused key, an unknown model, an SDK that rejects the request), from
        the proposer's client; None while calls may still work."""
        return getattr(getattr(self.llm, "client", None), "fatal", None)

    def parent_source(self, parent_payload: Any) -> str | None:
        if parent_payload is None:
            return None
        if isinstance(parent_payload, str):
            return parent_payload
        if isinstance(parent_payload, Candidate):
            return parent_payload.source
        return self.offline.render(parent_payload).source

    def moves(self, parent_payload: Any, rng: random.Random | None = None, k: int = 1, memory: Any = None,
              measurements: Any = None) -> list[tuple[str, Candidate]]:
        if k < 1:
            return []
        source = self.parent_source(parent_payload)
        memory_text = memory.render() if memory is not None else ""
        try:
            proposals = self.llm.propose(parent_source=source, measurements=measurements, findings_text="",
                                         memory_text=memory_text, n=k)
        except Exception as e:  # LLMProposer catches call errors itself; anything else must not stop the search
            proposals = []
            self._failed(FailedProposal(content_hash(source) if source else None,
                                        f"llm call failed: {type(e).__name__}: {e}", None))
        self.calls += 1
        out: list[tuple[str, Candidate]] = []
        for p in proposals:
            if p.ok:
                self.usable += 1
                out.append((MOVE, p.candidate))
                continue
            what = "unparsable reply" if p.call_id else "llm call failed"
            self._failed(FailedProposal(content_hash(source) if source else None,
                                        f"{what}: {p.failure or 'no candidate'}", p.call_id, p.rationale))
        return out

    def _failed(self, failure: FailedProposal) -> None:
        self.failures.append(failure)
        self.failed += 1
        self.last_failure = failure.reason

    def drain_failures(self) -> list[FailedProposal]:
        out, self.failures = self.failures, []
        return out
