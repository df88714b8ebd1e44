"""Sweep configurations: a notebook, base parameters and a grid, read from and written to YAML.

    name: smoke                               # the sweep's folder under the out root
    notebook: notebooks/01_explore_search.py  # py:percent (or .ipynb) with a `parameters` cell
    base: {problem: softmax_rows, steps: 1}   # parameters every run gets
    grid: {seed: [0, 1], strategy: [greedy, mcts]}   # the product of these lists, in this order
    jobs: 1                                   # runs at once
    devices: ["0", "1"]                       # optional: GPU ids, one per concurrent run (CUDA_VISIBLE_DEVICES)

`expand` turns a config into `RunSpec`s: base updated by one grid point, and a run id derived from the values.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

KEYS = ("name", "notebook", "base", "grid", "jobs", "devices")
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]+")
_MAX_READABLE = 80


class ConfigError(ValueError):
    """A sweep file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class SweepConfig:
    name: str
    notebook: str
    base: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, list] = field(default_factory=dict)
    jobs: int = 1
    devices: list[str] | None = None
    source: str | None = field(default=None, compare=False)  # the file it was read from (not written back)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "notebook": self.notebook, "base": dict(self.base),
                             "grid": {k: list(v) for k, v in self.grid.items()}, "jobs": self.jobs}
        if self.devices is not None:
            d["devices"] = list(self.devices)
        return d


@dataclass(frozen=True)
class RunSpec:
    run_id: str
    params: dict[str, Any]  # base updated by the grid point: what the notebook receives
    point: dict[str, Any]  # the grid point alone


def _err(source: str, key: str, msg: str) -> ConfigError:
    return ConfigError(f"{source}: {key}: {msg}")


def from_dict(data: Any, source: str = "<dict>") -> SweepConfig:
    """Validate a parsed mapping; errors name `source` and the offending key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with keys {', '.join(KEYS)}, got {type(data).__name__}")
    unknown = [k for k in data if k not in KEYS]
    if unknown:
        raise _err(source, str(unknown[0]), f"unknown key (allowed: {', '.join(KEYS)})")
    for k in ("name", "notebook"):
        if k not in data:
            raise _err(source, k, "missing (required)")
        if not isinstance(data[k], str) or not data[k].strip():
            raise _err(source, k, f"expected a non-empty string, got {data[k]!r}")
    name = data["name"]
    if _UNSAFE.search(name) or name in (".", ".."):
        raise _err(source, "name", f"{name!r} must be a plain folder name (letters, digits, . _ = + -)")
    base = data.get("base") or {}
    if not isinstance(base, dict):
        raise _err(source, "base", f"expected a mapping of parameter: value, got {type(base).__name__}")
    for k in base:
        if not isinstance(k, str):
            raise _err(source, f"base.{k}", "parameter names must be strings")
    grid = data.get("grid") or {}
    if not isinstance(grid, dict):
        raise _err(source, "grid", f"expected a mapping of parameter: [values], got {type(grid).__name__}")
    for k, v in grid.items():
        if not isinstance(k, str):
            raise _err(source, f"grid.{k}", "parameter names must be strings")
        if not isinstance(v, list) or not v:
            raise _err(source, f"grid.{k}", f"expected a non-empty list of values, got {v!r}")
    jobs = data.get("jobs", 1)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise _err(source, "jobs", f"expected a positive integer, got {jobs!r}")
    devices = data.get("devices")
    if devices is not None:
        if not isinstance(devices, list) or not devices \
                or not all(isinstance(d, (str, int)) and not isinstance(d, bool) for d in devices):
            raise _err(source, "devices", f"expected a non-empty list of GPU ids, got {devices!r}")
        devices = [str(d) for d in devices]
    return SweepConfig(name=name, notebook=data["notebook"], base=dict(base),
                       grid={k: list(v) for k, v in grid.items()}, jobs=jobs, devices=devices, source=source)


def load_sweep(path: str | Path) -> SweepConfig:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a UTF-8 text file (byte {e.start}: {e.reason}); a sweep config is YAML") \
            from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    return from_dict(data, source=str(path))


def to_yaml(cfg: SweepConfig, path: str | Path | None = None) -> str:
    """The config as YAML (key order kept); written to `path` when given."""
    text = yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=None)
    if path is not None:
        Path(path).write_text(text)
    return text


def _short(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "+".join(_short(x) for x in v) or "none"
    if isinstance(v, dict):
        return "+".join(f"{k}-{_short(x)}" for k, x in v.items()) or "none"
    return str(v)


def run_id(params: dict[str, Any], point: dict[str, Any]) -> str:
    """Readable grid values (`seed=0_strategy=greedy`) and a hash of all resolved parameters, so the same values
    always give the same id and a changed base gives a new one. Filesystem-safe."""
    readable = "_".join(f"{k}={_short(v)}" for k, v in point.items()) or "base"
    readable = re.sub(r"\.{2,}", ".", _UNSAFE.sub("-", readable)).strip("-.") or "run"
    readable = readable[:_MAX_READABLE]
    digest = hashlib.sha1(json.dumps(params, sort_keys=True, default=repr).encode()).hexdigest()[:8]
    return f"{readable}-{digest}"


def expand(cfg: SweepConfig) -> list[RunSpec]:
    """One `RunSpec` per point of the grid (the product of its lists, first key outermost); no grid: one run."""
    keys = list(cfg.grid)
    runs = []
    for values in itertools.product(*(cfg.grid[k] for k in keys)):
        point = dict(zip(keys, values))
        params = {**cfg.base, **point}
        runs.append(RunSpec(run_id(params, point), params, point))
    ids = [r.run_id for r in runs]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ConfigError(f"{cfg.source or cfg.name}: grid: repeated grid point gives run id {dup!r} twice")
    return runs
