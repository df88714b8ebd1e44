"""`LLMSurrogate`: Claude forecasts how candidates' runtimes compare with an anchor kernel, as `Forecast`s.

It satisfies the `Surrogate` protocol of `workbench.surrogates.forecast`: `forecast(problem, candidates, anchor)`
answers one `Forecast` per candidate, in order, so it plugs into a search's screening (`--surrogate llm`) and into
`workbench surrogate eval` like the learned surrogate. `forecast_one(problem, anchor_source, candidate_source)` is the
single-source form (any module text, e.g. one an LLM wrote).

The stable (cached) block holds the instructions, the problem and the anchor's source, so forecasting many candidates
against one anchor pays for that prefix once. Anchors: "eager" (the reference itself) and "compile" (torch.compile of
the reference, described in words: its generated code is not ours to show). `repeats` > 1 asks again (the SDK has
no temperature: the replies vary by the service's own sampling) and averages the readable replies; when none is
readable (or every call failed) the forecast is uniform with `parsed=False` and confidence 0 -- it carries no
information, so the selective policy never skips on it -- and the calls stay in the client's record. Calls for
several candidates (and repeats) go out in parallel up to the client's concurrency limit; results come back in the
candidates' order whatever the timing.

`forecast_prompts` is also what `rewards.export_pairs` uses, so fine-tuning data and live prompts match.
"""
from __future__ import annotations

import concurrent.futures
from typing import Any, Sequence

from ..core.candidate import Candidate
from ..core.outcomes import BINS, Forecast
from .client import LLMClient, failure_text
from .parsing import ParsedForecast, extract_forecast

INSTRUCTIONS = f"""\
You forecast GPU kernel performance on an NVIDIA H200. Given a reference problem (KernelBench format: `Model`,
`get_inputs`, `get_init_inputs`), an anchor implementation and a candidate module defining `ModelNew`, predict the
candidate's outcome when it is checked for correctness and timed against the anchor at the problem's sizes.

Outcomes: the candidate fails (does not compile, crashes, or gives wrong results: "fails"), or it is correct and its
speedup over the anchor falls in one of eight bins of log2(anchor time / candidate time), edges -2, -1, -0.5, 0, 0.5,
1, 2 (so "[0,0.5)" means 1x to 1.41x faster and "<-2" more than 4x slower).
Labels, in order: {", ".join(BINS)}.

Think about memory traffic, launch count, occupancy and numerics, then answer with one JSON object:
{{"reasoning": "<two sentences at most>", "probabilities": {{"<label>": <probability>, ...}}}}
covering all nine labels, probabilities summing to 1."""

COMPILE_ANCHOR = "torch.compile(Model(*get_init_inputs())) of the reference"
ANCHORS = ("eager", "compile")


def forecast_prompts(problem_source: str, anchor: str, anchor_source: str, candidate_source: str) -> tuple[str, str]:
    """(stable system text, user text) of one forecast request."""
    stable = (f"{INSTRUCTIONS}\n\n## Reference problem\n```python\n{problem_source.strip()}\n```\n\n"
              f"## Anchor ({anchor})\n```python\n{anchor_source.strip()}\n```")
    user = f"## Candidate\n```python\n{candidate_source.strip()}\n```\n\nForecast its outcome as the JSON object."
    return stable, user


def anchor_source(problem_source: str, anchor: str) -> str:
    """What the prompt shows as the anchor: the reference itself for "eager", a description for "compile"."""
    if anchor == "eager":
        return problem_source
    if anchor == "compile":
        return COMPILE_ANCHOR
    raise ValueError(f"anchor must be one of {ANCHORS}, got {anchor!r}")


def _source_of(candidate: Any) -> str:
    if isinstance(candidate, Candidate):
        return candidate.source
    if isinstance(candidate, str):
        return candidate
    raise TypeError(f"a candidate is a Candidate or its source text, not {type(candidate).__name__}")


class LLMSurrogate:
    def __init__(self, client: LLMClient, repeats: int = 1):
        if repeats < 1:
            raise ValueError("repeats must be at least 1")
        self.client, self.repeats = client, repeats

    @property
    def workers(self) -> int:
        return max(1, int(getattr(getattr(self.client, "config", None), "concurrency", 1) or 1))

    # ---- the Surrogate protocol ----
    def forecast(self, problem: Any, candidates: Sequence[Candidate | str], anchor: str = "eager") -> list[Forecast]:
        """One Forecast per candidate, in order (anchor "eager" or "compile")."""
        if isinstance(candidates, (str, Candidate)) or candidates is None:
            raise TypeError("forecast takes a list of candidates; for one module's source use forecast_one")
        sources = [_source_of(c) for c in candidates]
        if not sources:
            return []
        src = _problem_source(problem)
        prompts = [forecast_prompts(src, anchor, anchor_source(src, anchor), s) for s in sources]
        purpose = f"forecast:{getattr(problem, 'name', 'problem')}"
        jobs = [(i, r) for i in range(len(prompts)) for r in range(self.repeats)]
        if self.workers == 1 or len(jobs) == 1:
            answers = [self._ask(*prompts[i], purpose) for i, _ in jobs]
        else:  # pool.map keeps the jobs' order, so the result does not depend on which reply came back first
            with concurrent.futures.ThreadPoolExecutor(min(self.workers, len(jobs))) as pool:
                answers = list(pool.map(lambda job: self._ask(*prompts[job[0]], purpose), jobs))
        per = [answers[i * self.repeats:(i + 1) * self.repeats] for i in range(len(prompts))]
        return [_combine(a) for a in per]

    # ---- one module's source ----
    def forecast_one(self, problem: Any, anchor_src: str | None, candidate_source: str,
                     anchor: str = "eager") -> Forecast:
        """Forecast one module. anchor_src None: the anchor's own text (`anchor_source`), e.g. the reference for
        "eager"; otherwise that source is shown as the anchor named `anchor`."""
        src = _problem_source(problem)
        shown = anchor_source(src, anchor) if anchor_src is None else anchor_src
        stable, user = forecast_prompts(src, anchor, shown, candidate_source)
        purpose = f"forecast:{getattr(problem, 'name', 'problem')}"
        return _combine([self._ask(stable, user, purpose) for _ in range(self.repeats)])

    def _ask(self, stable: str, user: str, purpose: str) -> tuple[str | None, ParsedForecast]:
        """(call id or None, the parsed reply); never raises: a failed call is a forecast failure."""
        try:
            reply = self.client.complete(stable, user, purpose=purpose)
        except Exception as e:  # retried and recorded by the client
            return None, ParsedForecast(None, failure=failure_text(e))
        return reply.call_id, extract_forecast(reply.text)


def _problem_source(problem: Any) -> str:
    return problem.source if hasattr(problem, "source") else str(problem)


def _combine(answers: Sequence[tuple[str | None, ParsedForecast]]) -> Forecast:
    """The mean of the readable replies; uniform with parsed=False when none is."""
    parsed, failures, reasoning = [], [], ""
    call_ids = tuple(cid for cid, _ in answers if cid is not None)
    for cid, got in answers:
        if got.probs is None:
            failures.append(got.failure or "unreadable")
            continue
        parsed.append(Forecast(got.probs, reasoning=got.reasoning, call_ids=(cid,) if cid else ()))
        reasoning = reasoning or got.reasoning
    if not parsed:
        return Forecast.uniform("; ".join(dict.fromkeys(failures)) or "no reply", call_ids)
    return Forecast.mean(parsed, reasoning=reasoning, call_ids=call_ids, failure="; ".join(failures) or None)
