"""A point of the offline proposer's space (`Choice`), its one canonical text, and how far apart two points are."""
from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """The one text of a configuration or choice dict (keys sorted): how choices are compared and stored."""
    return json.dumps(value, sort_keys=True)


@dataclasses.dataclass(frozen=True)
class Choice:
    fuse: tuple[tuple[str, bool], ...]  # fusion point -> fused?
    configs: tuple[tuple[str, str], ...]  # group id -> config as canonical JSON
    launch: str = "eager"  # "eager" or "cuda_graph" (the harness replays the forward as one graph)

    def to_dict(self) -> dict[str, Any]:
        d = {"fuse": dict(self.fuse), "configs": {k: json.loads(v) for k, v in self.configs}}
        if self.launch != "eager":  # absent when eager: points recorded before launch modes keep their identity
            d["launch"] = self.launch
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Choice":
        """The inverse of `to_dict` (events and result rows store choices this way)."""
        return cls(tuple(sorted(d["fuse"].items())), tuple((g, canonical_json(c)) for g, c in d["configs"].items()),
                   d.get("launch", "eager"))

    @property
    def canonical(self) -> str:
        """The choice as canonical JSON (the dataset's `choice_json`)."""
        return canonical_json(self.to_dict())


@functools.lru_cache(maxsize=65536)  # a recorded walk measures distances to all recorded points: compute each once
def _fields(choice: Choice) -> frozenset[tuple[str, str, str]]:
    d = choice.to_dict()
    out = {("fuse", k, json.dumps(v)) for k, v in d["fuse"].items()}
    if "launch" in d:
        out.add(("launch", "launch", d["launch"]))
    for g, cfg in d["configs"].items():
        out |= {(g, k, json.dumps(v, sort_keys=True)) for k, v in cfg.items()}
    return frozenset(out)


def distance(a: Choice, b: Choice) -> int:
    """Fusion flags and configuration fields that differ (a field missing on one side counts once)."""
    fa, fb = _fields(a), _fields(b)
    keys_a, keys_b = {f[:2] for f in fa}, {f[:2] for f in fb}
    return len(keys_a ^ keys_b) + sum(1 for f in fa if f[:2] in keys_b and f not in fb)
