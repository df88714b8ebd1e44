"""Reading model replies: a `ModelNew` module, a one-line rationale, and forecast JSON.

Modules: fenced blocks (```python, ```py or bare ```) are collected; the one defining `class ModelNew` is taken (the
last, when several do). With no fence at all the reply is taken as bare code from its first import/def/class line. A
block left open at the end of the reply, a reply stopped at `max_tokens`, or a syntax error at the very end of the
code is reported as "truncated"; other syntax errors say where they are.

Forecasts: the first ```json block, else the first `{...}` that decodes as JSON. `probabilities` is a list of 9
numbers (the order of `BINS`) or a dict keyed by bin label (missing labels count 0); negatives, NaN and infinities
are refused, the rest normalised to sum 1.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import re
from typing import Any

from ..core.outcomes import BINS, check_probs

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_OPEN_FENCE = re.compile(r"```[ \t]*(python|py|python3)?[ \t]*\n((?:(?!```).)*)\Z", re.DOTALL | re.IGNORECASE)
_MODEL_NEW = re.compile(r"^class\s+ModelNew\b", re.MULTILINE)
_CODE_START = re.compile(r"^(import |from |@|class |def |[A-Za-z_]\w* = )", re.MULTILINE)
_RATIONALE = re.compile(r"^[\s>*_#-]*rationale[*_]*\s*:[*_]*\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_PY_TAGS = ("", "python", "py", "python3")


@dataclasses.dataclass(frozen=True)
class ParsedModule:
    source: str | None
    failure: str | None = None  # None, "truncated", "no code", "no class ModelNew", "syntax error at line ..."

    @property
    def ok(self) -> bool:
        return self.source is not None


def _code_blocks(reply: str) -> tuple[list[str], str | None]:
    """Closed python/untagged fenced blocks, and the text of a block left open at the end (None if there is none)."""
    blocks, end = [], 0
    for m in _FENCE.finditer(reply):
        if m.group(1).lower() in _PY_TAGS:
            blocks.append(m.group(2))
        end = m.end()
    tail = _OPEN_FENCE.search(reply, end)
    return blocks, (tail.group(2) if tail else None)


def _defines_model_new(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)


def extract_module(reply: str, stop_reason: str | None = None) -> ParsedModule:
    blocks, open_tail = _code_blocks(reply)
    truncated = stop_reason == "max_tokens"
    with_model = [b for b in blocks if _MODEL_NEW.search(b)]
    if with_model:
        code = with_model[-1]
        if open_tail is not None and _MODEL_NEW.search(open_tail):
            return ParsedModule(None, "truncated")  # a later, unfinished module supersedes the finished one
    elif open_tail is not None:
        return ParsedModule(None, "truncated")
    elif blocks:
        code = blocks[-1]
    else:
        start = _CODE_START.search(reply)
        if start is None:
            return ParsedModule(None, "truncated" if truncated else "no code")
        code = reply[start.start():]
        code = _RATIONALE.sub("", code)  # a rationale line after bare code is prose, not Python
    code = code.strip("\n") + "\n"
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        lines = code.count("\n")
        at_end = e.lineno is None or e.lineno >= lines or "never closed" in str(e.msg) or "EOF" in str(e.msg)
        if truncated or at_end:
            return ParsedModule(None, "truncated")
        return ParsedModule(None, f"syntax error at line {e.lineno}: {e.msg}")
    if not _defines_model_new(tree):
        return ParsedModule(None, "truncated" if truncated else "no class ModelNew")
    return ParsedModule(code)


def extract_rationale(reply: str, limit: int = 300) -> str:
    """The text after the first "Rationale:" line, one line, at most `limit` characters ("" when there is none)."""
    m = _RATIONALE.search(reply)
    if not m:
        return ""
    text = m.group(1).strip().strip("*_").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclasses.dataclass(frozen=True)
class ParsedForecast:
    probs: tuple[float, ...] | None
    reasoning: str = ""
    failure: str | None = None


def _json_objects(reply: str):
    for m in _FENCE.finditer(reply):
        if m.group(1).lower() == "json":
            yield m.group(2)
    decoder = json.JSONDecoder()
    for i, ch in enumerate(reply):
        if ch == "{":
            try:
                obj, _ = decoder.raw_decode(reply, i)
            except ValueError:
                continue
            if isinstance(obj, dict):
                yield obj


def probabilities(value: Any) -> tuple[float, ...]:
    """A list of 9 numbers or a dict by bin label, checked and normalised (ValueError with the reason)."""
    if isinstance(value, dict):
        norm = {k.replace(" ", ""): k for k in value}
        unknown = [k for k in norm if k not in BINS]
        if unknown:
            raise ValueError(f"unknown bin label(s) {unknown}; labels are {list(BINS)}")
        value = [value[norm[b]] if b in norm else 0.0 for b in BINS]
    if not isinstance(value, (list, tuple)):
        raise ValueError("probabilities must be a list of 9 numbers or a dict by bin label")
    if any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in value):
        raise ValueError("probabilities must be numbers")
    return check_probs(value)


def extract_forecast(reply: str) -> ParsedForecast:
    last = "no JSON object in the reply"
    for obj in _json_objects(reply):
        if isinstance(obj, str):
            try:
                obj = json.loads(obj)
            except ValueError as e:
                last = f"invalid JSON: {e}"
                continue
        if not isinstance(obj, dict) or "probabilities" not in obj:
            last = "JSON without 'probabilities'"
            continue
        try:
            probs = probabilities(obj["probabilities"])
        except ValueError as e:
            return ParsedForecast(None, failure=str(e))
        reasoning = obj.get("reasoning", "")
        return ParsedForecast(probs, reasoning if isinstance(reasoning, str) else json.dumps(reasoning))
    return ParsedForecast(None, failure=last)
