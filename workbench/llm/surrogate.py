"""`LLMSurrogate`: Claude forecasts how a candidate's runtime compares with an anchor kernel, as a `Forecast`.

The stable (cached) block holds the instructions, the problem and the anchor's source, so forecasting many candidates
against one anchor pays for that prefix once. `repeats` > 1 asks again (temperature > 0) and averages the readable
replies; when none is readable the forecast is uniform with `parsed=False` and confidence 0, and the calls stay in
the client's record with their replies.

`forecast_prompts` is also what `rewards.export_pairs` uses, so fine-tuning data and live prompts match.
"""
from __future__ import annotations

from typing import Any

from .client import LLMClient
from .forecast import BINS, Forecast
from .parsing import extract_forecast

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


def forecast_prompts(problem_source: str, anchor: str, anchor_source: str, candidate_source: str) -> tuple[str, str]:
    """(stable system text, user text) of one forecast request."""
    stable = (f"{INSTRUCTIONS}\n\n## Reference problem\n```python\n{problem_source.strip()}\n```\n\n"
              f"## Anchor ({anchor})\n```python\n{anchor_source.strip()}\n```")
    user = f"## Candidate\n```python\n{candidate_source.strip()}\n```\n\nForecast its outcome as the JSON object."
    return stable, user


class LLMSurrogate:
    def __init__(self, client: LLMClient, repeats: int = 1):
        if repeats < 1:
            raise ValueError("repeats must be at least 1")
        self.client, self.repeats = client, repeats

    def forecast(self, problem: Any, anchor_source: str | None, candidate_source: str,
                 anchor: str = "eager") -> Forecast:
        """anchor_source None: the reference itself is the anchor (eager PyTorch)."""
        source = problem.source if hasattr(problem, "source") else str(problem)
        name = getattr(problem, "name", "problem")
        stable, user = forecast_prompts(source, anchor, source if anchor_source is None else anchor_source,
                                        candidate_source)
        parsed, call_ids, failures, reasoning = [], [], [], ""
        for _ in range(self.repeats):
            try:
                reply = self.client.complete(stable, user, purpose=f"forecast:{name}")
            except Exception as e:  # retried and recorded by the client
                failures.append(f"{type(e).__name__}: {e}")
                continue
            call_ids.append(reply.call_id)
            got = extract_forecast(reply.text)
            if got.probs is None:
                failures.append(got.failure or "unreadable")
                continue
            parsed.append(Forecast(got.probs, reasoning=got.reasoning, call_ids=(reply.call_id,)))
            reasoning = reasoning or got.reasoning
        if not parsed:
            return Forecast.uniform("; ".join(dict.fromkeys(failures)) or "no reply", call_ids)
        return Forecast.mean(parsed, reasoning=reasoning, call_ids=tuple(call_ids),
                             failure="; ".join(failures) or None)
