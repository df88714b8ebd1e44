"""`LLMClient`: one place where the workbench talks to Anthropic's Messages API, through the `anthropic` SDK.

Everything the proposer and the surrogate send goes through `LLMClient.complete(stable, user, purpose)`:

- the request is `messages.create(model, max_tokens, system=[stable block], messages=[user turn])`, where the stable
  block (instructions + problem source, the same for every call on a problem) carries `cache_control: {"type":
  "ephemeral"}` so repeated calls read it from the prompt cache. The SDK this is built for (`anthropic>=2.16,<3`,
  pinned in pyproject) has no sampling parameters (no `temperature`, `top_p`, `top_k`): replies vary by the
  service's own sampling, which is what the proposer's n parallel asks and the surrogate's `repeats` rely on. The
  constructor checks the request's keywords against `inspect.signature(messages.create)` once, so an SDK that no
  longer accepts one is refused in words (`LLMUnavailable`) before any call, not a `TypeError` on every call;
- retries are ours (the SDK client is built with `max_retries=0`, so each one is counted and recorded): rate limits
  (429, waiting at least what its `retry-after` asks), overload (529), other 5xx, 408/409 and lost connections, with
  exponential backoff and jitter, up to `max_retries` and `retry_budget_s` seconds of waiting per call. A 401/403
  (bad key, no permission), a 404 (unknown model) or an SDK that rejects the request is never retried and makes the
  client `fatal`: later calls fail at once with the same message (the search stops on it). After a call that could
  not reach the service, later calls try once without retries until one gets through, so a network that is down
  costs one bounded retry sequence, not one per call;
- a call's final failure is an `LLMCallError` whose message says what happened, after how many attempts and how long,
  and what to do; `summary()` counts failed calls and keeps the last error;
- a `threading.Semaphore` caps the calls in flight;
- each call (success or final failure) becomes one record: model, tokens (input, output, cache read, cache write),
  cost, latency, purpose, stop reason and the reply text, all passed through `redact` first. The key is never stored.

Without `ANTHROPIC_API_KEY` (and no key or client passed) the constructor raises `LLMUnavailable`: callers carry on with
the offline proposer and surrogate, and no number is invented. `http_client` (an `httpx2.Client`, the SDK's HTTP
library) is handed to the SDK unchanged: the tests pass one on a mock transport, so they run the same code path as a
live call.
"""
from __future__ import annotations

import dataclasses
import email.utils
import inspect
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
SDK_RANGE = "anthropic>=2.16,<3"  # the range pyproject's [llm] extra pins; keep the two in step
RETRY_STATUS = frozenset({408, 409, 429, 529})  # and every 5xx: the SDK's own retry policy
FATAL_STATUS = {401: "auth", 403: "permission", 404: "not_found"}
_KEY_RE = re.compile(r"sk-ant-[A-Za-z0-9_\-]+")


class LLMUnavailable(RuntimeError):
    """No way to reach the model (no key, the SDK is not installed, or it does not accept our request)."""


class LLMCallError(RuntimeError):
    """One call's final failure, in words. `kind`: "auth", "permission", "not_found", "sdk" (fatal: every later call
    would fail the same way), "unreachable", "rate_limited", "server", "request" or "other"."""

    FATAL = frozenset({"auth", "permission", "not_found", "sdk"})

    def __init__(self, message: str, kind: str, status_code: int | None = None, attempts: int = 1,
                 elapsed_s: float = 0.0):
        super().__init__(message)
        self.kind, self.status_code, self.attempts, self.elapsed_s = kind, status_code, attempts, elapsed_s

    @property
    def fatal(self) -> bool:
        return self.kind in self.FATAL


@dataclasses.dataclass(frozen=True)
class LLMConfig:
    model: str = "claude-sonnet-4-6"
    max_tokens: int = 8192
    concurrency: int = 4
    max_retries: int = 4            # retries after the first attempt of one call
    backoff_s: float = 1.0          # first retry waits about this long (x 0.5..1.5 jitter), doubling each time
    max_backoff_s: float = 30.0     # no single wait is longer (a longer retry-after gives up instead)
    retry_budget_s: float = 60.0    # one call's waits add up to at most this; a retry past it is not made
    timeout_s: float | None = None  # per attempt; None: the SDK's own (10 min for a non-streaming call, 5 s to connect)
    # US dollars per million tokens (Claude Sonnet list prices of the 4.5 release, assumed for the default model;
    # cache writes are the 5-minute TTL rate)
    price_input: float = 3.0
    price_output: float = 15.0
    price_cache_read: float = 0.30
    price_cache_write: float = 3.75

    def __post_init__(self) -> None:
        if self.max_tokens < 1 or self.concurrency < 1 or self.max_retries < 0:
            raise ValueError("LLMConfig: max_tokens and concurrency must be at least 1, max_retries at least 0")
        if not (self.backoff_s >= 0 and self.max_backoff_s >= 0 and self.retry_budget_s >= 0):
            raise ValueError("LLMConfig: backoff_s, max_backoff_s and retry_budget_s must be non-negative numbers")

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


def sdk_parameters(create: Callable[..., Any]) -> tuple[frozenset[str], frozenset[str]] | None:
    """(every keyword `create` accepts, the ones it requires), or None when it takes any keyword (`**kwargs`)."""
    params = inspect.signature(create).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    named = [p for p in params if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    return (frozenset(p.name for p in named), frozenset(p.name for p in named if p.default is inspect.Parameter.empty))


def _sdk_version() -> str:
    try:
        import anthropic
    except ImportError:
        return "not installed"
    return getattr(anthropic, "__version__", "unknown")


def check_request(create: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """Refuse, in words, an SDK whose `messages.create` does not take exactly what `LLMClient.request` sends."""
    accepted = sdk_parameters(create)
    if accepted is None:
        return
    names, required = accepted
    extra, missing = sorted(set(kwargs) - names), sorted(required - set(kwargs))
    if extra or missing:
        what = "; ".join(filter(None, (f"does not accept {extra}" if extra else "",
                                       f"requires {missing}" if missing else "")))
        raise LLMUnavailable(f"the installed anthropic SDK ({_sdk_version()}) messages.create {what}: the workbench "
                             f"is built for {SDK_RANGE} (pip install '{SDK_RANGE}')")


def retry_after_s(error: BaseException) -> float | None:
    """What the service asked to wait before trying again (`retry-after-ms`, `retry-after` in seconds or as a date)."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    if not headers:
        return None
    try:
        if headers.get("retry-after-ms") is not None:
            return float(headers["retry-after-ms"]) / 1000
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            date = email.utils.parsedate_tz(value)
            return None if date is None else max(0.0, email.utils.mktime_tz(date) - time.time())
    except (TypeError, ValueError):
        return None


def classify(error: BaseException) -> tuple[str, bool]:
    """(kind, worth another try) of one attempt's error: see `LLMCallError` for the kinds."""
    try:
        import anthropic
    except ImportError:  # an injected client without the SDK: judge by the status code alone
        anthropic = None
    status = getattr(error, "status_code", None)
    if anthropic is not None and isinstance(error, anthropic.APIConnectionError):
        return "unreachable", True
    if isinstance(error, TypeError):  # the SDK refused our keywords: every call would
        return "sdk", False
    if isinstance(status, int):
        should = getattr(getattr(error, "response", None), "headers", {}).get("x-should-retry")
        if status in FATAL_STATUS:
            return FATAL_STATUS[status], False
        kind = "rate_limited" if status == 429 else "server" if status >= 500 else "request"
        if should in ("true", "false"):  # the service says whether a retry can help: obey, as the SDK does
            return kind, should == "true"
        return kind, status in RETRY_STATUS or status >= 500
    return "other", False


def describe(error: BaseException, kind: str, attempts: int, elapsed: float, model: str, note: str = "") -> str:
    """One line for a call's final failure: the SDK's error, what it means, attempts and time, what to do."""
    status = getattr(error, "status_code", None)
    detail = getattr(error, "api_message", None) or getattr(error, "message", None) or str(error)
    head = f"{type(error).__name__}" + (f" (HTTP {status})" if isinstance(status, int) else "")
    tries = f"{attempts} attempt{'s' if attempts != 1 else ''} over {elapsed:.1f} s"
    what = {
        "auth": "the API key was refused: check ANTHROPIC_API_KEY (not retried)",
        "permission": "this key may not use the Messages API or this model (not retried)",
        "not_found": f"the model '{model}' was not found: choose another with --llm-model (not retried)",
        "sdk": f"the installed anthropic SDK ({_sdk_version()}) rejected the request: the workbench is built for "
               f"{SDK_RANGE}",
        "unreachable": f"could not reach the Anthropic API after {tries}: check the network (and "
                       "ANTHROPIC_BASE_URL if set)",
        "rate_limited": f"still rate limited after {tries}",
        "server": f"the service kept failing after {tries}",
    }.get(kind, f"failed after {tries}")
    return redact(f"{head}: {detail} -- {what}{note}")


class LLMClient:
    def __init__(self, config: LLMConfig | None = None, client: Any = None, recorder: CallRecorder | None = None,
                 http_client: Any = None, api_key: str | None = None):
        self.config = config or LLMConfig()
        if client is None:
            key = api_key or os.environ.get("ANTHROPIC_API_KEY")
            if not key:
                raise LLMUnavailable(NO_KEY)
            try:
                import anthropic
            except ImportError:
                raise LLMUnavailable(f"the anthropic package is not installed (pip install 'workbench[llm]', i.e. "
                                     f"'{SDK_RANGE}'): the offline proposer and surrogate carry on") from None
            options: dict[str, Any] = {"api_key": key, "max_retries": 0}  # retries are ours: counted and recorded
            if http_client is not None:
                options["http_client"] = http_client
            if self.config.timeout_s is not None:
                options["timeout"] = self.config.timeout_s
            client = anthropic.Anthropic(**options)
        check_request(client.messages.create, self.request("", ""))
        self.client = client
        self.recorder = recorder
        self._slots = threading.Semaphore(max(1, self.config.concurrency))
        self._lock = threading.Lock()
        self.sleep: Callable[[float], None] = time.sleep  # tests replace it
        self.calls, self.retries, self.failed, self.total_cost = 0, 0, 0, 0.0
        self.tokens = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0,
                       "cache_creation_input_tokens": 0}
        self.fatal: str | None = None  # set by a failure every later call would repeat: they fail at once with it
        self._fatal_kind = ""
        self.unreachable = False  # the last call could not reach the service: the next one tries once
        self.last_error: str | None = None

    def request(self, stable: str, user: str) -> dict[str, Any]:
        """The keyword arguments of `messages.create` for one call (only ones the SDK's signature has)."""
        return {
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            "system": [{"type": "text", "text": stable, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": user}],
        }

    def backoff(self, attempt: int) -> float:
        base = min(self.config.max_backoff_s, self.config.backoff_s * 2 ** attempt)
        return base * (0.5 + random.random())

    def complete(self, stable: str, user: str, purpose: str) -> Reply:
        kwargs = self.request(stable, user)
        call_id = uuid.uuid4().hex[:16]
        t0, attempt, waited = time.perf_counter(), 0, 0.0
        if self.fatal is not None:  # nothing sent: it would fail the same way
            error = LLMCallError(self.fatal, self._fatal_kind, attempts=0)
            self._fail(call_id, purpose, kwargs, 0.0, 0, error)
            raise error
        max_retries = 0 if self.unreachable else self.config.max_retries
        with self._slots:
            while True:
                try:
                    response = self.client.messages.create(**kwargs)
                    break
                except Exception as e:
                    kind, again = classify(e)
                    wait, note = (self.backoff(attempt), "") if again else (0.0, "")
                    asked = retry_after_s(e) if again else None
                    if asked is not None and asked > wait:
                        wait = asked
                        if asked > self.config.max_backoff_s:
                            again, note = False, f" (the service asked to wait {asked:.0f} s, more than " \
                                                 f"max_backoff_s={self.config.max_backoff_s:g})"
                    if again and waited + wait > self.config.retry_budget_s:
                        again = False
                    if not again or attempt >= max_retries:
                        if kind == "unreachable" and self.unreachable and attempt == 0:
                            note += " (unreachable on the call before too: tried once)"
                        elapsed = time.perf_counter() - t0
                        error = LLMCallError(describe(e, kind, attempt + 1, elapsed, self.config.model, note), kind,
                                             getattr(e, "status_code", None), attempt + 1, elapsed)
                        with self._lock:
                            self.unreachable = kind == "unreachable"
                            if error.fatal:
                                self.fatal, self._fatal_kind = str(error), kind
                        self._fail(call_id, purpose, kwargs, elapsed, attempt, error)
                        raise error from e
                    with self._lock:
                        self.retries += 1
                    self.sleep(wait)
                    waited += wait
                    attempt += 1
        latency = time.perf_counter() - t0
        usage = _usage(response)
        reply = Reply(text=_text(response), call_id=call_id, stop_reason=getattr(response, "stop_reason", None),
                      usage=usage, cost=self.config.cost(usage), latency_s=latency,
                      model=getattr(response, "model", None) or self.config.model)
        with self._lock:
            self.unreachable = False
            self.calls += 1
            self.total_cost += reply.cost
            for k, v in usage.items():
                self.tokens[k] += v
        self._record(call_id, purpose, kwargs, reply, latency, attempt, None)
        return reply

    def _fail(self, call_id: str, purpose: str, kwargs: dict[str, Any], latency: float, retries: int,
              error: LLMCallError) -> None:
        with self._lock:
            self.failed += 1
            self.last_error = str(error)
        self._record(call_id, purpose, kwargs, None, latency, retries, error)

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
            "error": redact(str(error)) if error else None,
            "prompt": redact(kwargs["messages"][0]["content"]), "reply": redact(reply.text) if reply else None,
        })

    def summary(self) -> dict[str, Any]:
        return {"calls": self.calls, "retries": self.retries, "failed": self.failed, "last_error": self.last_error,
                "cost_usd": round(self.total_cost, 6), **self.tokens}


def failure_text(error: BaseException) -> str:
    """How a failed call reads in a proposal or forecast: an `LLMCallError`'s own message (it names the SDK error),
    anything else as "Type: message"."""
    return redact(str(error) if isinstance(error, LLMCallError) else f"{type(error).__name__}: {error}")
