"""`LLMClient`: one place where the workbench talks to Anthropic's Messages API.

Everything the proposer and the surrogate send goes through `LLMClient.complete(stable, user, purpose)`:

- the request is `messages.create(model, max_tokens, temperature, system=[stable block], messages=[user turn])`, where
  the stable block (instructions + problem source, the same for every call on a problem) carries
  `cache_control: {"type": "ephemeral"}` so repeated calls read it from the prompt cache;
- rate limits (429), overload (529, `OverloadedError`), 5xx and connection errors are retried with exponential
  backoff and jitter, up to `max_retries`; a `threading.Semaphore` caps the calls in flight;
- each call (success or final failure) becomes one record: model, tokens (input, output, cache read, cache write),
  cost, latency, purpose, stop reason and the reply text, all passed through `redact` first. The key is never stored.

Without `ANTHROPIC_API_KEY` (and no client injected) the constructor raises `LLMUnavailable`: callers carry on with the
offline proposer and surrogate, and no number is invented.
"""
from __future__ import annotations

import dataclasses
import os
import random
import re
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # the recorder imports this module (for redact)
    from .recorder import CallRecorder

NO_KEY = "no ANTHROPIC_API_KEY in the environment: the offline proposer and surrogate carry on"
RETRY_STATUS = frozenset({429, 500, 502, 503, 504, 529})
_KEY_RE = re.compile(r"sk-ant-[A-Za-z0-9_\-]+")


class LLMUnavailable(RuntimeError):
    """No way to reach the model (no key, or the SDK is not installed)."""


@dataclasses.dataclass(frozen=True)
class LLMConfig:
    model: str = "claude-sonnet-4-5"
    temperature: float = 0.7
    max_tokens: int = 8192
    concurrency: int = 4
    max_retries: int = 5
    backoff_s: float = 1.0          # first retry waits about this long (x 0.5..1.5 jitter), doubling each time
    max_backoff_s: float = 60.0
    # US dollars per million tokens (Claude Sonnet 4.5 list prices; cache writes are the 5-minute TTL rate)
    price_input: float = 3.0
    price_output: float = 15.0
    price_cache_read: float = 0.30
    price_cache_write: float = 3.75

    def cost(self, usage: dict[str, int]) -> float:
        return (usage.get("input_tokens", 0) * self.price_input + usage.get("output_tokens", 0) * self.price_output
                + usage.get("cache_read_input_tokens", 0) * self.price_cache_read
                + usage.get("cache_creation_input_tokens", 0) * self.price_cache_write) / 1e6


@dataclasses.dataclass(frozen=True)
class Reply:
    text: str
    call_id: str
    stop_reason: str | None
    usage: dict[str, int]
    cost: float
    latency_s: float
    model: str

    @property
    def truncated(self) -> bool:
        return self.stop_reason == "max_tokens"


def redact(text: Any) -> Any:
    """Scrub anything that looks like an Anthropic key (and the live key's value) from text about to be logged."""
    if not isinstance(text, str):
        return text
    out = _KEY_RE.sub("sk-ant-[REDACTED]", text)
    live = os.environ.get("ANTHROPIC_API_KEY")
    if live and len(live) >= 8:
        out = out.replace(live, "[REDACTED]")
    return out


def _usage(response: Any) -> dict[str, int]:
    u = getattr(response, "usage", None)
    keys = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    return {k: int(getattr(u, k, 0) or 0) for k in keys}


def _text(response: Any) -> str:
    return "".join(getattr(b, "text", "") for b in getattr(response, "content", []) or []
                   if getattr(b, "type", "text") == "text")


def retryable(error: BaseException) -> bool:
    """Rate limits, overload, server errors and lost connections: worth another try after a wait."""
    try:
        import anthropic
    except ImportError:  # an injected client without the SDK: judge by the status code alone
        return getattr(error, "status_code", None) in RETRY_STATUS
    if isinstance(error, (anthropic.RateLimitError, anthropic.APIConnectionError)):
        return True
    if isinstance(error, anthropic.APIStatusError):
        return error.status_code in RETRY_STATUS or "overloaded" in str(error).lower()
    return False


class LLMClient:
    def __init__(self, config: LLMConfig | None = None, client: Any = None, recorder: CallRecorder | None = None):
        self.config = config or LLMConfig()
        if client is None:
            if not os.environ.get("ANTHROPIC_API_KEY"):
                raise LLMUnavailable(NO_KEY)
            try:
                import anthropic
            except ImportError:
                raise LLMUnavailable("the anthropic package is not installed (pip install 'workbench[llm]'): "
                                     "the offline proposer and surrogate carry on") from None
            client = anthropic.Anthropic(max_retries=0)  # retries are ours, so they are counted and recorded
        self.client = client
        self.recorder = recorder
        self._slots = threading.Semaphore(max(1, self.config.concurrency))
        self._lock = threading.Lock()
        self.sleep: Callable[[float], None] = time.sleep  # tests replace it
        self.calls, self.retries, self.total_cost = 0, 0, 0.0
        self.tokens = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0,
                       "cache_creation_input_tokens": 0}

    def request(self, stable: str, user: str) -> dict[str, Any]:
        """The keyword arguments of `messages.create` for one call."""
        return {
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            "temperature": self.config.temperature,
            "system": [{"type": "text", "text": stable, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": user}],
        }

    def backoff(self, attempt: int) -> float:
        base = min(self.config.max_backoff_s, self.config.backoff_s * 2 ** attempt)
        return base * (0.5 + random.random())

    def complete(self, stable: str, user: str, purpose: str) -> Reply:
        kwargs = self.request(stable, user)
        call_id = uuid.uuid4().hex[:16]
        t0, attempt = time.perf_counter(), 0
        with self._slots:
            while True:
                try:
                    response = self.client.messages.create(**kwargs)
                    break
                except Exception as e:
                    if not retryable(e) or attempt >= self.config.max_retries:
                        self._record(call_id, purpose, kwargs, None, time.perf_counter() - t0, attempt, e)
                        raise
                    with self._lock:
                        self.retries += 1
                    self.sleep(self.backoff(attempt))
                    attempt += 1
        latency = time.perf_counter() - t0
        usage = _usage(response)
        reply = Reply(text=_text(response), call_id=call_id, stop_reason=getattr(response, "stop_reason", None),
                      usage=usage, cost=self.config.cost(usage), latency_s=latency,
                      model=getattr(response, "model", None) or self.config.model)
        with self._lock:
            self.calls += 1
            self.total_cost += reply.cost
            for k, v in usage.items():
                self.tokens[k] += v
        self._record(call_id, purpose, kwargs, reply, latency, attempt, None)
        return reply

    def _record(self, call_id: str, purpose: str, kwargs: dict[str, Any], reply: Reply | None, latency: float,
                retries: int, error: BaseException | None) -> None:
        if self.recorder is None:
            return
        usage = reply.usage if reply else {}
        self.recorder.record({
            "id": call_id, "purpose": purpose, "model": reply.model if reply else kwargs["model"],
            "input_tokens": usage.get("input_tokens", 0), "output_tokens": usage.get("output_tokens", 0),
            "cache_read_tokens": usage.get("cache_read_input_tokens", 0),
            "cache_write_tokens": usage.get("cache_creation_input_tokens", 0),
            "cost_usd": reply.cost if reply else 0.0, "latency_s": latency, "retries": retries,
            "stop_reason": reply.stop_reason if reply else None, "ok": error is None,
            "error": redact(f"{type(error).__name__}: {error}") if error else None,
            "prompt": redact(kwargs["messages"][0]["content"]), "reply": redact(reply.text) if reply else None,
        })

    def summary(self) -> dict[str, Any]:
        return {"calls": self.calls, "retries": self.retries, "cost_usd": round(self.total_cost, 6), **self.tokens}
