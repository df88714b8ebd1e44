"""LLM parts of the workbench (Anthropic): a proposer that writes `ModelNew` candidates and a surrogate that forecasts
them. Without `ANTHROPIC_API_KEY`, `LLMClient` raises `LLMUnavailable` and the offline proposer/surrogate carry on.
The `anthropic` package is only imported when a real client is built (the `llm` extra)."""
from .client import LLMCallError, LLMClient, LLMConfig, LLMUnavailable, Reply, redact
from .parsing import extract_forecast, extract_module, extract_rationale
from .proposer import LLMProposer, Proposal
from .recorder import CallRecorder
from .surrogate import LLMSurrogate

__all__ = ["CallRecorder", "LLMCallError", "LLMClient", "LLMConfig", "LLMProposer", "LLMSurrogate",
           "LLMUnavailable", "Proposal", "Reply", "extract_forecast", "extract_module", "extract_rationale", "redact"]
