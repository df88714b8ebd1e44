"""A problem file checked in a separate process, with a timeout, before any candidate work.

`load_checked` is what the command line loads problems with: the file (with its `--set` values) is executed in a
fresh Python process that builds everything on the meta device (no data, any size) and checks it: `get_init_inputs()`
and `get_inputs()` return lists, `Model(*init)` constructs, the forward runs and returns tensors, nothing is empty and
the inputs and parameters fit on a GPU; given the target device's memory, they must fit in it (`check_fits`). A loop
at module level, a `sys.exit`, an `os._exit` or a crash in the file then ends that process, not the caller, and the
error names the file. Only once the check passed is the file loaded in the caller, so a broken problem is never blamed
on (or stored against) a candidate.

Where the meta device cannot run a step (a forward that reads values, an explicit `.cuda()`), the step is left
unchecked and noted; the harness's workers run it for real.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

from .loader import BUILTIN_DIR, ProblemError, apply_overrides, parse_override, read_source, resolve_path
from .problem import Problem

TIMEOUT_S = 60.0  # loading and checking the file, once torch is imported (`--problem-timeout-s`)
START_TIMEOUT_S = 300.0  # importing torch in the check process, on a loaded machine
MAX_BYTES = 256 * 2**30  # inputs and parameters: more than any one GPU holds (an H200 has 141 GB)
_CHILD = "from workbench.problems.check import _child; _child()"


def load_checked(name_or_path: str | Path, overrides: list[str] | None = None, precision: str | None = None,
                 timeout_s: float | None = None, memory: tuple[int, str] | None = None) -> Problem:
    """`Problem.load` after the problem passed `check_file` (a shipped built-in without overrides is trusted).
    `memory`: (bytes, what they are) the target device's worker holds; inputs and parameters that need more (counted
    on the meta device) are refused here, before any worker allocates them (`check_fits`)."""
    path = resolve_path(name_or_path)
    pairs = dict(parse_override(t) for t in overrides or [])
    apply_overrides(read_source(path), pairs, str(path))  # names and syntax: said here, without a process
    if pairs or path.parent != BUILTIN_DIR:
        report = check_file(path, pairs, precision, TIMEOUT_S if timeout_s is None else timeout_s)
        check_fits(path, pairs, report.get("bytes"), memory)
    return Problem.load(path, pairs, precision=precision)


def check_fits(path: Path, overrides: Mapping[str, str], nbytes: int | None, memory: tuple[int, str] | None) -> None:
    """`ProblemError` when the inputs and parameters (`nbytes`, counted on meta tensors) cannot fit in `memory`
    (bytes, in words): a worker would be killed allocating them, which reads like a crash of the machine, not a
    problem too large. Nothing to compare (no count, no device limit): nothing refused."""
    if nbytes is None or memory is None or nbytes <= memory[0]:
        return
    limit, what = memory
    sets = ", ".join(f"--set {k}={v}" for k, v in overrides.items())
    raise ProblemError(f"{path}: the inputs and parameters need {_size(nbytes)} ({nbytes:,} bytes), more than "
                       f"{what} holds ({_size(limit)}): check the sizes" + (f" (loaded with {sets})" if sets else ""))


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:,.1f} MiB"


def check_file(path: Path, overrides: Mapping[str, str], precision: str | None, timeout_s: float) -> dict[str, Any]:
    """Run `_check` in a fresh process; its report (notes on what could not be checked), or `ProblemError`."""
    spec = json.dumps({"path": str(path), "overrides": dict(overrides), "precision": precision})
    r, w = os.pipe()
    with tempfile.TemporaryFile() as log:  # the file's prints: kept off the caller's stdout (--json)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # never a GPU context for a check
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(w), spec], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, pass_fds=(w,), env=env)
        os.close(w)
        try:
            lines, timed_out = _read_lines(r, timeout_s)
        finally:
            os.close(r)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if len(lines) >= 2:
            report = json.loads(lines[1])
            if "error" in report:
                raise ProblemError(report["error"])
            return report
        if timed_out and lines:
            raise ProblemError(f"{path}: loading and checking the problem did not finish within {timeout_s:g} s "
                               "(a loop at module level, or in get_inputs, get_init_inputs or Model?); "
                               "--problem-timeout-s sets the limit")
        if timed_out:
            raise ProblemError(f"{path}: the process checking the problem did not start within "
                               f"{START_TIMEOUT_S:g} s (importing torch); try again on a less loaded machine")
        log.seek(0)
        tail = log.read().decode(errors="replace").strip().splitlines()[-5:]
        when = "while loading it" if lines else "before it could load it"
        raise ProblemError(f"{path}: the process checking the problem exited with code {proc.returncode} {when}"
                           + (f": {' | '.join(tail)}" if tail else ""))


def _read_lines(fd: int, timeout_s: float) -> tuple[list[str], bool]:
    """(the child's lines, whether time ran out): "ready" once torch is imported, then its JSON report. The
    timeout starts at "ready"."""
    buf, deadline = b"", time.monotonic() + START_TIMEOUT_S
    while buf.count(b"\n") < 2:
        left = deadline - time.monotonic()
        if left <= 0:
            return buf.decode(errors="replace").splitlines(), True
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:  # the child exited (or closed the pipe)
            break
        if b"\n" not in buf and b"\n" in chunk:
            deadline = time.monotonic() + timeout_s
        buf += chunk
    return buf.decode(errors="replace").splitlines(), False


# ---- the check process ----

def _unverifiable(e: BaseException) -> bool:
    """An error of the meta device (or of the GPU this process does not have), not of the problem."""
    x = e.__cause__ if isinstance(e, ProblemError) else e  # a ProblemError's text starts with the path
    return isinstance(x, NotImplementedError) or (x is not None and any(
        w in str(x).lower() for w in ("meta", "cuda", "nvidia")))


def _check(problem: Problem) -> dict[str, Any]:
    import torch
    from torch.utils._pytree import tree_flatten

    path, notes = problem.path, []
    problem.module, problem.effective_precision  # executes the file with the overrides
    try:
        with torch.device("meta"):
            init = problem.init_inputs()
            inputs = problem.inputs()
            model = problem.make_reference(init)
    except ProblemError as e:
        if not _unverifiable(e):
            raise
        return {"notes": [f"not checked on the meta device: {e}"]}
    if not inputs:
        raise ProblemError(f"{path}: get_inputs() returned no inputs: there is nothing to run a candidate on")
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.numel() == 0:
            raise ProblemError(f"{path}: input {i} of get_inputs() is empty (shape {tuple(x.shape)}): a size is 0")
    state = list(model.parameters()) + list(model.buffers())
    nbytes = sum(t.numel() * t.element_size() for t in tensors + state)
    if nbytes > MAX_BYTES:
        raise ProblemError(f"{path}: the inputs and parameters need {nbytes / 2**30:,.0f} GiB, more than any GPU "
                           "holds: check the sizes")
    try:
        with torch.no_grad():
            out = model(*[x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs])
    except (Exception, SystemExit) as e:
        if _unverifiable(e):
            return {"notes": [f"forward not checked on the meta device ({type(e).__name__}: {e})"],
                    "bytes": nbytes}
        raise ProblemError(f"{path}: Model's forward raised {type(e).__name__}: {e}") from e
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    if not outs:
        raise ProblemError(f"{path}: Model's forward returned {type(out).__name__}, no tensor: there is nothing to "
                           "compare a candidate's output with")
    empty = [tuple(t.shape) for t in outs if t.numel() == 0]
    if empty:
        raise ProblemError(f"{path}: Model's forward returned an empty tensor (shape {empty[0]}): a size is 0")
    return {"notes": notes, "bytes": nbytes}


def _child() -> None:
    fd, spec = int(sys.argv[1]), json.loads(sys.argv[2])
    out = os.fdopen(fd, "w")
    import torch  # noqa: F401  (before "ready": the caller's timeout is for the problem file, not for this)

    out.write("ready\n")
    out.flush()
    try:
        report = _check(Problem(spec["path"], tuple(sorted(spec["overrides"].items())), spec["precision"]))
    except ProblemError as e:
        report = {"error": str(e)}
    except SystemExit as e:
        report = {"error": f"{spec['path']}: the problem called sys.exit({e.code!r})"}
    except BaseException as e:  # whatever the file raised, said with its name
        report = {"error": f"{spec['path']}: checking the problem raised {type(e).__name__}: {e}"}
    if "error" in report:  # torch's messages run to many lines; the first says what failed
        lines = report["error"].strip().splitlines() or [""]
        report["error"] = lines[0] + (" ..." if len(lines) > 1 else "")
        if spec["overrides"]:
            sets = ", ".join(f"--set {k}={v}" for k, v in spec["overrides"].items())
            report["error"] += f" (loaded with {sets})"
    out.write(json.dumps(report) + "\n")
    out.flush()
    os._exit(0)  # threads or atexit hooks the file started must not keep this process alive


__all__ = ["MAX_BYTES", "TIMEOUT_S", "check_file", "check_fits", "load_checked"]
