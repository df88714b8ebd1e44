"""What several commands share: the problem and store an invocation names, the LLM client."""
from __future__ import annotations

from ..llm import CallRecorder, LLMClient, LLMConfig
from ..problems.check import load_checked
from ..store import Store


def load_problem(args):
    """The problem, checked in a separate process first (`problems.check`): a broken file exits 2 naming it."""
    return load_checked(args.problem, args.overrides, args.precision, getattr(args, "problem_timeout_s", None))


def open_store(args):
    if args.no_store:
        return None
    return Store(args.store)


def llm_client(store=None, model: str | None = None):
    """The `LLMClient` behind --proposer llm and --surrogate llm: the Anthropic SDK, ANTHROPIC_API_KEY read from the
    environment (without it `LLMUnavailable` says so and the command exits 2), each call recorded in the store's
    `llm_calls` table when a store is open. `main(llm_client_factory=...)` replaces it (tests: recorded replies)."""
    recorder = CallRecorder(store) if store is not None else None
    return LLMClient(LLMConfig(model=model) if model else LLMConfig(), recorder=recorder)
