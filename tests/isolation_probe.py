"""Tasks a test runs inside an isolated worker (`Worker.call("isolation_probe:NAME", ...)`): each tries one thing a
candidate should not be able to do and reports what happened, rather than raising."""
from __future__ import annotations

import os
import socket
import subprocess
import time


def _attempt(fn) -> str:
    try:
        fn()
        return "done"
    except OSError as e:
        return f"{type(e).__name__}: {e}"


def write_file(progress, path: str) -> dict:
    return {"outcome": _attempt(lambda: open(path, "w").write("escaped"))}


def connect(progress, port: int) -> dict:
    return {"outcome": _attempt(lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close())}


def scratch(progress) -> dict:
    """The private TMPDIR is writable, and only this worker sees it."""
    path = os.path.join(os.environ["TMPDIR"], "scratch.txt")
    with open(path, "w") as f:
        f.write("mine")
    return {"path": path, "read_back": open(path).read()}


def remount(progress) -> dict:
    """Root inside the worker cannot make the file system writable again (no capabilities)."""
    r = subprocess.run(["mount", "-o", "remount,rw", "/"], capture_output=True, text=True)
    return {"returncode": r.returncode}


def shout(progress, n_bytes: int) -> dict:
    print("x" * n_bytes)
    os.write(2, b"to stderr\n")
    return {"printed": n_bytes}


def hold_memory(progress, n_bytes: int, seconds: float) -> dict:
    block = bytearray(n_bytes)
    for i in range(0, n_bytes, 4096):  # touch every page so it is resident
        block[i] = 1
    time.sleep(seconds)
    return {"held": len(block)}
