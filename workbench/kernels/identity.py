"""Candidate identity that survives cosmetic template edits.

A candidate the offline proposer renders is, for each group of its layout, a kernel family at a template version, a
spec (what the group computes, read off the graph) and a configuration; the proposer's choice (fusion flags and one
configuration per group) picks them. `Identity` holds exactly that, and its `key` names the candidate whatever its
source text. Recorded measurements answer for a candidate by identity; the source hash stays as a consistency check,
and a text that differs from the measured one while the identity matches is reported as drift (a cosmetic edit).

The ladder hands devices a file, so the offline proposer notes the identity of every source it renders
(`note_rendered`), and whoever answers from recordings looks a source up with `rendered` (the replay device, through
the recorded dataset). Within a process, the latest render of a source wins (templates change mid-process only under
a test's monkeypatch).

Dataset rows exported before identities were recorded carry none. Their export checked that the choice rendered the
measured source exactly, so they were measured at `LEGACY_TEMPLATE_VERSION` of every family, with the specs the
current partition gives.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

LEGACY_TEMPLATE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Identity:
    choice: str  # the proposer's choice as canonical JSON: {"configs": {group: config}, "fuse": {point: fused}}
    kernels: tuple[tuple[str, str, int, str], ...]  # per group: (group id, family, template version, spec JSON)

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps([self.choice, self.kernels]).encode()).hexdigest()[:16]

    @property
    def templates(self) -> dict[str, int]:
        """Template version of each family the candidate uses."""
        return {fam: version for _, fam, version, _ in self.kernels}

    def measured_by(self, recorded_key: str | None) -> bool:
        """Did a measurement recorded for this choice (a dataset row whose choice still renders what was measured)
        measure the kernels this identity names? A row that recorded its identity must match it; an older row (None)
        was measured at the legacy version of every family."""
        if recorded_key:
            return recorded_key == self.key
        return all(v == LEGACY_TEMPLATE_VERSION for v in self.templates.values())


def spec_json(spec: Any) -> str:
    """A kernel spec as canonical JSON. Fields left at their default are omitted, so a field added later with a
    default that keeps today's kernels changes no identity."""
    return json.dumps(_plain(spec), sort_keys=True)


def _plain(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)
                if f.default is dataclasses.MISSING or getattr(x, f.name) != f.default}
    if isinstance(x, (tuple, list)):
        return [_plain(v) for v in x]
    return x


_RENDERED: dict[tuple[str, str], Identity] = {}


def note_rendered(problem_key: str, source_hash: str, identity: Identity) -> None:
    """Record that the offline proposer rendered this source for this problem as this identity."""
    _RENDERED[(problem_key, source_hash)] = identity


def rendered(problem_key: str, source_hash: str) -> Identity | None:
    """The identity this source was rendered as in this process, or None (a source of unknown identity)."""
    return _RENDERED.get((problem_key, source_hash))


def anonymous(spec: Any) -> Any:
    """The spec with its input names (graph value names: `sigmoid_3`, `add_12`) replaced by positional ones (`_v0`,
    `_v1`, ... in order of appearance), in the `name` of every input, the `bool_inputs` lists and the `expr`
    expressions that read them. Two groups whose anonymous specs are equal compute the same kernel on different
    values (the launcher takes its inputs positionally), so the proposer renders it once."""
    names: dict[str, str] = {}

    def collect(x: Any) -> None:
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            for f in dataclasses.fields(x):
                v = getattr(x, f.name)
                if f.name == "name" and isinstance(v, str):
                    names.setdefault(v, f"_v{len(names)}")
                else:
                    collect(v)
        elif isinstance(x, (tuple, list)):
            for v in x:
                collect(v)

    collect(spec)
    if not names:
        return spec
    # a name is a whole identifier, not an attribute (`tl.maximum` beside a value named `maximum`)
    pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
                         + r")(?!\w)")

    def rename(x: Any) -> Any:
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            changes = {}
            for f in dataclasses.fields(x):
                v = getattr(x, f.name)
                if f.name == "name" and isinstance(v, str):
                    changes[f.name] = names[v]
                elif f.name == "expr" and isinstance(v, str):
                    changes[f.name] = pattern.sub(lambda m: names[m.group(1)], v)
                elif f.name == "bool_inputs" and isinstance(v, tuple):
                    changes[f.name] = tuple(names.get(n, n) for n in v)
                elif dataclasses.is_dataclass(v) or isinstance(v, (tuple, list)):
                    changes[f.name] = rename(v)
            return dataclasses.replace(x, **changes)
        if isinstance(x, tuple):
            return tuple(rename(v) for v in x)
        if isinstance(x, list):
            return [rename(v) for v in x]
        return x

    return rename(spec)
