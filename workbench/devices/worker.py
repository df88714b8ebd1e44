"""Spawned worker processes that run untrusted candidates, with timeouts and restarts.

The parent never imports a candidate. A `Worker` owns one child process (spawned, so no CUDA state is inherited),
sends it a task (a function path and keyword arguments), and waits with a timeout. The child reports each stage as it
starts, so when it hangs or dies the parent knows which stage to blame. A child that times out is killed; one that
dies (segfault, abort, os._exit) or reports a broken CUDA context is restarted before the next task. Whatever
happens, the parent gets a dict back, never an exception from the child.

Each child is isolated by the OS before it imports anything of a candidate's (`harness.child.isolation`: no network,
a read-only file system but for its own directory and the kernel caches, no capabilities, a CPU-time limit per task).
Its stdout and stderr go to a file in its own directory, so a candidate's prints never reach the CLI's output; the
parent hands back a bounded tail of them with each answer and truncates the file. The parent also watches the
child's resident memory (its subprocesses included) and kills it past a limit.

This module imports nothing heavy at top level: the child sets its environment (CUDA_VISIBLE_DEVICES,
TRITON_INTERPRET) before torch or triton are imported.
"""
from __future__ import annotations

import getpass
import importlib
import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

_CTX = mp.get_context("spawn")
_START_LOCK = threading.Lock()  # workers with different environments may start from several threads at once
OUTPUT_TAIL_BYTES = 4000  # how much of a task's captured stdout/stderr comes back with its answer
POLL_S = 0.25  # how often the parent looks at the child's memory and its watchdog window while it waits
WATCHDOG_LABEL_BYTES = 120  # harness.child.watchdog.LABEL_BYTES
_warned_isolation: list[str] = []  # the reason isolation is unavailable, said once per process


def memory_limit_bytes() -> int:
    """`$WORKBENCH_WORKER_MEMORY_GB`, else 60 % of this machine's memory: a worker past it is killed."""
    explicit = os.environ.get("WORKBENCH_WORKER_MEMORY_GB")
    if explicit:
        return int(float(explicit) * 2**30)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 64 * 2**30
    return int(0.6 * total)


def isolation_wanted() -> bool:
    return os.environ.get("WORKBENCH_SANDBOX", "1") not in ("0", "off", "false", "no")


def isolation_env(private_dir: Path) -> dict[str, str]:
    """What a child needs set before torch starts: its TMPDIR on its private tmpfs, and Inductor's cache pinned where
    it is without isolation (under the machine's temp dir), so compiled references stay cached across runs."""
    user = getpass.getuser() if hasattr(os, "getuid") else "user"
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(),
                                                                        f"torchinductor_{user}")
    return {"TMPDIR": str(private_dir / "tmp"), "TORCHINDUCTOR_CACHE_DIR": inductor,
            "WORKBENCH_WORKER_DIR": str(private_dir)}


def _redirect_output(private_dir: str) -> None:
    fd = os.open(os.path.join(private_dir, "output.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def uses_gpu(env: dict[str, str]) -> bool:
    """A worker with this environment will use an NVIDIA GPU (one is visible to it and it does not interpret)."""
    return bool(env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", "x")).strip()) \
        and env.get("TRITON_INTERPRET") != "1" and Path("/proc/driver/nvidia/version").exists()


_level_lock = threading.Lock()
PROBE_TIMEOUT_S = 180.0


def _machine_key() -> str:
    """What decides which isolation a GPU stack tolerates: the host, its kernel, the driver, this Python."""
    try:
        driver = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except (OSError, IndexError):
        driver = "no driver"
    u = os.uname()
    return f"{u.nodename}|{u.release}|{driver}|{sys.version_info[0]}.{sys.version_info[1]}"


def isolation_level(env: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The isolation level a worker with this environment gets, and why stronger levels were refused.
    `$WORKBENCH_ISOLATION_LEVEL` decides if set; a CPU worker gets "full"; a GPU worker the strongest level whose
    probe (harness.child.isolation) ran CUDA, NVML and Triton, found once per machine and kept in the home."""
    from ..core import paths
    from ..harness.child import isolation

    explicit = os.environ.get("WORKBENCH_ISOLATION_LEVEL")
    if explicit:
        return explicit, {}
    if not uses_gpu(env):
        return "full", {}
    cache = paths.home() / "isolation.json"
    key = _machine_key()
    with _level_lock:
        try:
            known = json.loads(cache.read_text())
        except (OSError, ValueError):
            known = {}
        if key in known:
            return known[key]["level"], known[key].get("refused", {})
        refused: dict[str, str] = {}
        level = "none"
        for name in isolation.LEVEL_NAMES[:-1]:
            with tempfile.TemporaryDirectory(prefix="wb-probe-") as tmp:
                probe_env = {**os.environ, **env, **isolation_env(Path(tmp)),
                             "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
                try:
                    proc = subprocess.run([sys.executable, "-m", "workbench.harness.child.isolation", "--probe", name,
                                           tmp], env=probe_env, capture_output=True, text=True,
                                          timeout=PROBE_TIMEOUT_S)
                    ok, why = proc.returncode == 0 and "ok" in proc.stdout, (proc.stderr or proc.stdout)[-400:]
                except subprocess.TimeoutExpired:
                    ok, why = False, f"the probe did not finish within {PROBE_TIMEOUT_S:.0f} s"
            if ok:
                level = name
                break
            refused[name] = why.strip().splitlines()[-1] if why.strip() else "failed"
        known[key] = {"level": level, "refused": refused}
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(known, indent=1))
        except OSError:
            pass
        return level, refused


def _isolate(private_dir: str) -> dict[str, Any]:
    if not isolation_wanted():
        return {"active": False, "reason": "turned off (WORKBENCH_SANDBOX=0)"}
    from ..harness.child import isolation

    level = os.environ.get("WORKBENCH_ISOLATION_LEVEL", "full")
    if level == "none":
        return {"active": False, "level": "none",
                "reason": "no level of isolation left CUDA working on this machine (see the probe's reasons)"}
    try:
        if uses_gpu(dict(os.environ)):
            isolation.init_cuda()
        return {"active": True, **isolation.apply_level(level, private_dir)}
    except (isolation.IsolationUnavailable, OSError) as e:
        return {"active": False, "reason": str(e)}


def _child_main(conn, env: dict[str, str], deadline=None, label=None) -> None:
    os.environ.update(env)
    # A spawned child re-imports the caller's script first: one importing torch at its top has had the temp dir
    # picked (the machine's /tmp, read-only under isolation: every compile failed) before TMPDIR was set here.
    tempfile.tempdir = None
    private_dir = env.get("WORKBENCH_WORKER_DIR")
    isolated: dict[str, Any] = {"active": False, "reason": "no private directory"}
    if private_dir:
        _redirect_output(private_dir)
        isolated = _isolate(private_dir)
    from ..harness.child import sandbox  # imports torch and triton, with the environment set above

    # isort: split
    # torch imports dynamo lazily (the first elementwise op on meta tensors does) and dynamo wraps torch.manual_seed:
    # load it now so the snapshot below sees torch as the harness will, and a candidate's own patch stands out.
    import torch._dynamo  # noqa: F401

    if os.environ.get("TRITON_INTERPRET") == "1":
        from ..harness.child import interpreter_fixes

        interpreter_fixes.apply()
    sandbox.snapshot_sensitive()
    from ..harness.child import watchdog

    watchdog.attach(deadline, label)
    conn.send(("ready", {**sandbox.describe_environment(), "isolation": isolated}))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if msg is None:
            return
        func_path, kwargs, cpu_seconds = msg
        if isolated.get("active"):
            from ..harness.child import isolation

            isolation.allow_cpu_seconds(cpu_seconds)
        try:
            mod_name, fn_name = func_path.split(":")
            fn = getattr(importlib.import_module(mod_name), fn_name)
            # progress(str) announces a stage; progress(dict) hands over a finished stage's record early, so it
            # survives if the child dies later in the same task.
            result = fn(progress=lambda payload: conn.send(("stage", payload)), **kwargs)
        except BaseException as e:  # the child must answer whatever the candidate did
            result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=20)}
        watchdog.disarm()
        tampered = sandbox.tampered()
        if tampered:
            result["tampered"] = tampered
            result["fatal"] = True
        sys.stdout.flush()
        sys.stderr.flush()
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
        self.private_dir: Path | None = None
        self.memory_limit = memory_limit_bytes()
        # the child's watchdog window (harness.child.watchdog): [deadline on the monotonic clock, seconds], a label
        self._deadline: Any = None
        self._label: Any = None
        self._lock = threading.Lock()  # one task at a time per child: the pipe carries one conversation

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def start(self) -> float:
        """Start the child if needed; return the seconds it took (0 when already running)."""
        if self.alive():
            return 0.0
        t0 = time.perf_counter()
        self.stop()
        self.private_dir = Path(tempfile.mkdtemp(prefix=f"wb-{self.name}-"))
        env = {**self.env, **isolation_env(self.private_dir)}
        level, refused = isolation_level(self.env) if isolation_wanted() else ("none", {})
        env["WORKBENCH_ISOLATION_LEVEL"] = level
        parent, child = _CTX.Pipe()
        self._deadline = _CTX.RawArray("d", 2)
        self._label = _CTX.RawArray("c", WATCHDOG_LABEL_BYTES)
        self.proc = _CTX.Process(target=_child_main, args=(child, env, self._deadline, self._label), daemon=True,
                                 name=self.name)
        # The environment is set in the parent while the child starts, not only inside it: a spawned child imports
        # the parent's __main__ first, and a script that imports triton at its top would load it before
        # TRITON_INTERPRET or CUDA_VISIBLE_DEVICES took effect.
        with _START_LOCK:
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
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
            tail = self.take_output()
            self.stop()
            raise RuntimeError(f"{self.name}: worker did not start within {self.start_timeout:.0f} s{_said(tail)}")
        try:
            kind, info = parent.recv()
        except EOFError:
            code = self.proc.exitcode
            tail = self.take_output()
            self.stop()
            raise RuntimeError(f"{self.name}: worker died while starting (exit code {code}){_said(tail)}") from None
        iso = info.setdefault("isolation", {})
        if refused:
            iso["refused"] = refused
        self.info = info
        if not _warned_isolation and (not iso.get("active") or iso.get("level") != "full"):
            why = "; ".join(f"{k}: {v}" for k, v in refused.items()) or iso.get("reason", "unknown")
            _warned_isolation.append(why)
            if not iso.get("active"):
                print(f"workbench: candidate workers run without OS isolation here ({why}); the static stage is "
                      "the only barrier to file and network access", file=sys.stderr)
            else:
                print(f"workbench: candidate workers run isolated at level {iso['level']!r} here (stronger levels "
                      f"broke the GPU stack: {why}); see README's reliability notes", file=sys.stderr)
        return time.perf_counter() - t0

    def take_output(self) -> dict[str, Any]:
        """What the child printed since the last call: its size and a bounded tail; the file is emptied."""
        log = self.private_dir / "output.log" if self.private_dir else None
        try:
            size = log.stat().st_size
            with open(log, "rb") as f:
                f.seek(max(0, size - OUTPUT_TAIL_BYTES))
                tail = f.read().decode("utf-8", "replace")
            os.truncate(log, 0)
        except (OSError, AttributeError):
            return {}
        return {"bytes": size, "tail": tail} if size else {}

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
        if self.private_dir is not None:
            shutil.rmtree(self.private_dir, ignore_errors=True)
            self.private_dir = None

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
        cpu_seconds = timeout * max(1, os.cpu_count() or 1)  # every core busy for the whole wall-clock limit
        try:
            self._deadline[0] = 0.0  # no window left over from a task the child did not finish
            self.conn.send((func_path, kwargs, cpu_seconds))
            while True:
                left = deadline - time.perf_counter()
                overdue = self._overdue()
                if left <= 0 or overdue:
                    output = self.take_output()
                    self._kill()
                    error = overdue or f"timed out after {timeout:.0f} s"
                    return {"timed_out": True, "stage": stage, "error": error, "watchdog": bool(overdue),
                            "completed": completed, "output": output, "_wall_s": time.perf_counter() - t0,
                            "_start_s": start_s}
                if not self.conn.poll(min(left, POLL_S)):
                    rss = process_tree_rss(self.proc.pid)
                    if rss > self.memory_limit:
                        output = self.take_output()
                        self._kill()
                        return {"crashed": True, "stage": stage, "memory_exceeded": True,
                                "error": f"killed: the worker's memory reached {rss / 2**30:.1f} GiB, over its limit "
                                         f"of {self.memory_limit / 2**30:.1f} GiB (WORKBENCH_WORKER_MEMORY_GB)",
                                "completed": completed, "output": output, "_wall_s": time.perf_counter() - t0,
                                "_start_s": start_s}
                    continue
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
            output = self.take_output()
            self._kill()
            return {"crashed": True, "stage": stage, "error": f"worker crashed ({describe_exit(code)})",
                    "completed": completed, "output": output, "_wall_s": time.perf_counter() - t0,
                    "_start_s": start_s}
        output = self.take_output()
        if output:
            result["output"] = output
        if result.get("fatal"):
            self._kill()  # the child exits on its own; make sure, then restart lazily
        result["_wall_s"] = time.perf_counter() - t0
        result["_start_s"] = start_s
        return result

    def _overdue(self) -> str | None:
        """What the child's watchdog window was for, once it has run out (None while it has not, or none is set)."""
        due = self._deadline[0] if self._deadline is not None else 0.0
        if not due or time.monotonic() < due:
            return None
        what = bytes(self._label.value).decode("utf-8", "replace") or "the candidate"
        return f"{what} took over {self._deadline[1]:.0f} s (watchdog)"

    def _kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        self.stop()
        self.restarts += 1


def _said(output: dict[str, Any]) -> str:
    return f"; it printed: {output['tail'][-1500:].strip()}" if output.get("tail") else ""


def process_tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and its descendants (a compiler or Inductor's compile pool counts too); 0 if gone."""
    total, todo, seen = 0, [pid], set()
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * page
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code == -signal.SIGXCPU:
        return "killed by SIGXCPU: over its CPU-time limit"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
