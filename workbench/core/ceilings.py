"""Measured ceilings of a device: copy bandwidth and matrix rates per dtype.

The roofline floor is only as honest as its ceilings, so they are measured on the device (experiments/
measure_ceilings.py) and committed under results/ceilings/<device-slug>.json, never typed from a datasheet. A device
with no file has no floor, and says so.
"""
from __future__ import annotations

import json
import re
from typing import Any

from .paths import ceilings_dir


def slug(gpu_name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-")


def available() -> dict[str, dict[str, Any]]:
    """Every measured device: {gpu name: ceilings}."""
    out = {}
    d = ceilings_dir()
    if d.is_dir():
        for p in sorted(d.glob("*.json")):
            data = json.loads(p.read_text())
            out[data["device"]] = data
    return out


def load(gpu_name: str) -> dict[str, Any] | None:
    p = ceilings_dir() / f"{slug(gpu_name)}.json"
    return json.loads(p.read_text()) if p.exists() else None
