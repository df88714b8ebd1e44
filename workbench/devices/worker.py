"""Spawned worker processes that run untrusted candidates, with timeouts and restarts.

The parent never imports a candidate. A `Worker` owns one child process (spawned, so no CUDA state is inherited),
sends it a task (a function path and keyword arguments), and waits with a timeout. The child reports each stage as it
starts, so when it hangs or dies the parent knows which stage to blame. A child that times out is killed; one that
dies (segfault, abort, os._exit) or reports a broken CUDA context is restarted before the next task. Whatever
happens, the parent gets a dict back, never an exception from the child.

This module imports nothing heavy at top level: the child sets its environment (CUDA_VISIBLE_DEVICES,
TRITON_INTERPRET) before torch or triton are imported.
"""
from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import signal
import threading
import time
import traceback
from typing import Any

_CTX = mp.get_context("spawn")
_START_LOCK = threading.Lock()  # workers with different environments may start from several threads at once


def _child_main(conn, env: dict[str, str]) -> None:
    os.environ.update(env)
    from ..harness.child import sandbox  # imports torch and triton, with the environment set above

    # isort: split
    # torch imports dynamo lazily (the first elementwise op on meta tensors does) and dynamo wraps torch.manual_seed:
    # load it now so the snapshot below sees torch as the harness will, and a candidate's own patch stands out.
    import torch._dynamo  # noqa: F401

    if os.environ.get("TRITON_INTERPRET") == "1":
        from ..harness.child import interpreter_fixes

        interpreter_fixes.apply()
    sandbox.snapshot_sensitive()
    conn.send(("ready", sandbox.describe_environment()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if msg is None:
            return
        func_path, kwargs = msg
        try:
            mod_name, fn_name = func_path.split(":")
            fn = getattr(importlib.import_module(mod_name), fn_name)
            # progress(str) announces a stage; progress(dict) hands over a finished stage's record early, so it
            # survives if the child dies later in the same task.
            result = fn(progress=lambda payload: conn.send(("stage", payload)), **kwargs)
        except BaseException as e:  # the child must answer whatever the candidate did
            result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=20)}
        tampered = sandbox.tampered()
        if tampered:
            result["tampered"] = tampered
            result["fatal"] = True
        conn.send(("result", result))
        if result.get("fatal"):
            return  # exit so the parent restarts a clean process


class Worker:
    """One child process; `call` runs a task in it with a timeout and always returns a dict."""

    def __init__(self, env: dict[str, str] | None = None, name: str = "worker", start_timeout: float = 180.0):
        self.env = dict(env or {})
        self.name = name
        self.start_timeout = start_timeout
        self.proc: Any = None
        self.conn: Any = None
        self.info: dict[str, Any] = {}
        self.restarts = 0
        self._lock = threading.Lock()  # one task at a time per child: the pipe carries one conversation

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def start(self) -> float:
        """Start the child if needed; return the seconds it took (0 when already running)."""
        if self.alive():
            return 0.0
        t0 = time.perf_counter()
        self.stop()
        parent, child = _CTX.Pipe()
        self.proc = _CTX.Process(target=_child_main, args=(child, self.env), daemon=True, name=self.name)
        # The environment is set in the parent while the child starts, not only inside it: a spawned child imports
        # the parent's __main__ first, and a script that imports triton at its top would load it before
        # TRITON_INTERPRET or CUDA_VISIBLE_DEVICES took effect.
        with _START_LOCK:
            saved = {k: os.environ.get(k) for k in self.env}
            os.environ.update(self.env)
            try:
                self.proc.start()
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        child.close()
        self.conn = parent
        if not parent.poll(self.start_timeout):
            self.stop()
            raise RuntimeError(f"{self.name}: worker did not start within {self.start_timeout:.0f} s")
        try:
            kind, info = parent.recv()
        except EOFError:
            code = self.proc.exitcode
            self.stop()
            raise RuntimeError(f"{self.name}: worker died while starting (exit code {code})") from None
        self.info = info
        return time.perf_counter() - t0

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                try:
                    self.conn.send(None)
                except Exception:
                    pass
                self.proc.join(0.5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
        if self.conn is not None:
            self.conn.close()
        self.proc, self.conn = None, None

    def call(self, func_path: str, timeout: float, **kwargs: Any) -> dict[str, Any]:
        """Run func_path(**kwargs) in the child. Result dict gets `_wall_s`, `_start_s`, and on failure
        `crashed`/`timed_out` with `stage` (the stage running when it happened)."""
        with self._lock:
            return self._call(func_path, timeout, **kwargs)

    def _call(self, func_path: str, timeout: float, **kwargs: Any) -> dict[str, Any]:
        try:
            start_s = self.start()
        except RuntimeError as e:
            return {"error": str(e), "crashed": True, "_wall_s": 0.0, "_start_s": 0.0, "stage": None}
        t0 = time.perf_counter()
        stage = None
        completed: list[dict[str, Any]] = []
        deadline = t0 + timeout
        try:
            self.conn.send((func_path, kwargs))
            while True:
                left = deadline - time.perf_counter()
                if left <= 0 or not self.conn.poll(left):
                    self._kill()
                    return {"timed_out": True, "stage": stage, "error": f"timed out after {timeout:.0f} s",
                            "completed": completed, "_wall_s": time.perf_counter() - t0, "_start_s": start_s}
                kind, payload = self.conn.recv()
                if kind == "stage":
                    if isinstance(payload, dict):
                        completed.append(payload)
                    else:
                        stage = payload
                    continue
                result = payload
                break
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            code = self.proc.exitcode if self.proc is not None else None
            if self.proc is not None:
                self.proc.join(2)
                code = self.proc.exitcode
            self._kill()
            return {"crashed": True, "stage": stage, "error": f"worker crashed ({describe_exit(code)})",
                    "completed": completed, "_wall_s": time.perf_counter() - t0, "_start_s": start_s}
        if result.get("fatal"):
            self._kill()  # the child exits on its own; make sure, then restart lazily
        result["_wall_s"] = time.perf_counter() - t0
        result["_start_s"] = start_s
        return result

    def _kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        self.stop()
        self.restarts += 1


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
