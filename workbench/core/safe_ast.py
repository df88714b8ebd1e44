"""`ast.parse` that is safe to call from several threads.

CPython 3.11 and 3.12 keep the AST constructor's recursion depth per interpreter, not per thread, so two threads
parsing at once can fail with "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905). The
ladder is driven from several threads when a device has several GPUs (a Ray device, a parallel search), and parsing
takes milliseconds, so the parses on that path take one lock.
"""
from __future__ import annotations

import ast
import threading

PARSE_LOCK = threading.RLock()


def parse(source: str, *args, **kwargs) -> ast.AST:
    with PARSE_LOCK:
        return ast.parse(source, *args, **kwargs)
