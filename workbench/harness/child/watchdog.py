"""Watchdog windows inside a worker: how long the candidate may take at what it is doing now.

A stage's own timeout is a backstop sized for its whole work (minutes); a candidate that hangs would cost all of it.
So the worker says, while it runs candidate code, how long that piece may take: tracing or constructing the candidate
(seconds), compiling one kernel (longer), one call of its forward (scaled to the reference's measured time, with a
floor). The window lives in memory shared with the parent (`devices.worker`): a deadline on the system-wide monotonic
clock and a label, written here without a system call, read by the parent each time it polls; past the deadline the
parent kills the worker and blames the label. Nothing is armed between the candidate's pieces (the harness's own work
and the reference are held to the stage's timeout only).

A candidate can reach this memory (it runs in the process): it can only shorten or lift its own windows, never extend
the stage's timeout, which the parent keeps.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

_monotonic = time.monotonic  # saved before any candidate is imported (the sandbox guards the live one too)
_deadline: Any = None  # shared doubles: [deadline on the monotonic clock (0: none), the window's seconds]
_label: Any = None  # shared bytes: what the window is for
_stack: list[tuple[str, float | None]] = []
_reference_s: dict[tuple, float] = {}  # (problem key, device) -> the reference forward's measured seconds
LABEL_BYTES = 120


def attach(deadline: Any, label: Any) -> None:
    """Called once in the worker: the shared memory the parent reads."""
    global _deadline, _label
    _deadline, _label = deadline, label
    disarm()


def _arm(label: str, seconds: float | None) -> None:
    if _deadline is None:
        return
    if seconds is None or seconds <= 0:
        _deadline[0] = 0.0
        return
    _label.value = label.encode("utf-8", "replace")[: LABEL_BYTES - 1]
    _deadline[1] = float(seconds)
    _deadline[0] = _monotonic() + float(seconds)


def disarm() -> None:
    """No window (between tasks, and whenever the harness's own code runs)."""
    _stack.clear()
    if _deadline is not None:
        _deadline[0] = 0.0


@contextlib.contextmanager
def window(label: str, seconds: float | None) -> Iterator[None]:
    """The candidate may take `seconds` at `label` (None: no window of its own). Nested windows restore the outer
    one when they end, from that moment."""
    _stack.append((label, seconds))
    _arm(label, seconds)
    try:
        yield
    finally:
        _stack.pop()
        if _stack:
            _arm(*_stack[-1])
        elif _deadline is not None:
            _deadline[0] = 0.0


def overriding(label: str, seconds: float | None) -> None:
    """Replace the current window for a while without nesting (a kernel compile inside a call); `resume` ends it."""
    if _stack:
        _arm(label, seconds)


def resume() -> None:
    """The current window again, from now (after `overriding`)."""
    if _stack:
        _arm(*_stack[-1])


# ---- the reference's measured time, which the call windows scale with ----

def note_reference(key: tuple, seconds: float) -> None:
    """Keep the fastest measured forward of the reference (its first call pays warm-ups the floor covers)."""
    old = _reference_s.get(key)
    _reference_s[key] = seconds if old is None else min(old, seconds)


def reference_seconds(key: tuple) -> float | None:
    return _reference_s.get(key)


def call_seconds(settings: dict[str, Any] | None, key: tuple) -> float | None:
    """How long one call of the candidate's forward may take: `factor` times the reference's measured forward, at
    least `call` seconds (the floor: launch overheads, lazy initialisation, a slow interpreter). None: no window."""
    if not settings or not settings.get("call"):
        return None
    ref = _reference_s.get(key)
    scaled = settings.get("factor", 0.0) * ref if ref is not None else 0.0
    return max(float(settings["call"]), scaled)


_compile_s: list[float | None] = [None]


def watch_kernel_compiles(seconds: float | None) -> None:
    """Give a Triton kernel compile inside a candidate's window its own, longer window (`seconds`): a compile
    is no hang. Wraps JITFunction._do_compile once per worker (the GPU worker compiles on a kernel's first launch)."""
    _compile_s[0] = seconds
    try:
        from triton.runtime.jit import JITFunction
    except Exception:
        return
    original = getattr(JITFunction, "_do_compile", None)
    if original is None or getattr(original, "_wb_watched", False):
        return

    def _do_compile(self, *args, **kwargs):
        overriding(f"compiling kernel {getattr(self, '__name__', '?')}", _compile_s[0])
        try:
            return original(self, *args, **kwargs)
        finally:
            resume()

    _do_compile._wb_watched = True  # type: ignore[attr-defined]
    JITFunction._do_compile = _do_compile
