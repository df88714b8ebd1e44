"""Papermill sweeps: run one notebook over a grid of parameters, one process per run, resumable.

    summary = run_sweep("experiments/smoke_sweep.yaml", jobs=2)
    print(summary.text()); summary.frame()

Layout under the out root (default `results/runs`):

    <out_root>/.jupyter/kernels/workbench-sweep/kernel.json   a kernelspec for this interpreter (JUPYTER_PATH)
    <out_root>/<sweep name>/sweep.yaml                          the sweep config as resolved (grid, base, notebook)
    <out_root>/<sweep name>/.input/<notebook>.ipynb            the notebook converted from py:percent
    <out_root>/<sweep name>/<run_id>/manifest.json             status running -> ok | failed, environment, times
    <out_root>/<sweep name>/<run_id>/config.yaml               the resolved parameters
    <out_root>/<sweep name>/<run_id>/notebook.ipynb            the executed notebook (also when it failed)
    <out_root>/<sweep name>/<run_id>/papermill.log             papermill's stdout/stderr

Every parameter name is checked against the notebook's `parameters` cell before any run starts, and every value
against the type of the literal there (a string where a number is expected is refused; an int may stand for a float;
a parameter whose default is None takes anything). A failed run keeps its error and traceback in its manifest and the
sweep goes on; running the sweep again skips the runs whose manifest says "ok" and reruns the others. The resolved
sweep config is written to `<out_root>/<sweep name>/sweep.yaml`; `workbench report` reads the run directories.
With `devices` each concurrent run gets its own `CUDA_VISIBLE_DEVICES`; without, the notebook's own `device`
parameter decides. Runs whose device is Ray share one cluster (`_sweep_ray_cluster`).

What stops the children, so that nothing keeps writing into a run directory:
- run from the main thread, SIGTERM and SIGINT are forwarded to the running papermill processes and their kernels,
  which are waited for (killed after STOP_GRACE_S); their runs are recorded as failed ("interrupted"), the runs not
  yet started are not started, and `run_sweep` raises `SweepInterrupted`. (Python handles signals in the main thread
  only: from another thread, e.g. a widget's, a signal is not seen by the sweep.)
- from any thread, an exception that leaves `run_sweep` (a `progress` callback that raises, to stop it) stops the
  children the same way, records their runs as interrupted with its reason, and then propagates.
- from any thread, on Linux, the sweep's process ending however it ends (SIGTERM with no handler, SIGKILL,
  `os._exit`, a notebook kernel's restart) sends SIGTERM to each papermill child (PR_SET_PDEATHSIG), and its
  notebook kernel exits within about a second of it (ipykernel follows its parent). Nothing is recorded then: the
  runs' manifests stay "running", and a rerun redoes them.
The children run in sessions of their own: a signal to the caller's process group (a terminal's Ctrl-C, Jupyter's
interrupt) reaches only the sweep's process.

`SweepSummary` is what one call did (ok, failed, skipped, not started); its `frame()` reads the run directories through
`workbench.lab.runs` (the report.json a notebook saved with `save_run`), like `workbench report` does.
"""
from __future__ import annotations

import ast
import datetime as _dt
import fnmatch
import json
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

from ..devices.ray_device import ray_share
from .runs import REPORT, load_runs, read_manifest
from .sweep_config import ConfigError, RunSpec, SweepConfig, expand, load_sweep, to_yaml

KERNEL_NAME = "workbench-sweep"
OUT_DIR_PARAM = "out_dir"  # passed to notebooks that declare it: where they may write events/parquet
_PARAM_CELL = re.compile(r"^#\s*%%.*\btags\s*=\s*\[[^\]]*[\"']parameters[\"']")
_CELL = re.compile(r"^#\s*%%")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_TAIL = 30  # traceback lines kept in a failed manifest
# ray.init arguments of the sweep's own cluster: "local" starts a fresh one even when another runs on this machine
# (ray.init() alone would join that, and shutting down would not stop it); tests add num_cpus to keep it small
RAY_INIT_KWARGS: dict[str, Any] = {"address": "local", "include_dashboard": False}


class SweepError(ValueError):
    """A sweep that cannot start (unknown parameters, missing notebook, nothing selected)."""


class SweepInterrupted(Exception):
    """SIGTERM or SIGINT stopped the sweep: its running children were stopped and waited for, the runs they were
    doing are recorded as failed ("interrupted"), the runs not yet started were not started."""

    def __init__(self, signum: int, summary: "SweepSummary"):
        self.signum, self.summary = signum, summary
        name = signal.Signals(signum).name
        super().__init__(f"sweep {summary.name} stopped by {name}: {len(summary.failed)} run(s) failed or "
                         f"interrupted, {len(summary.not_started)} not started; running it again resumes")


# ---------------------------------------------------------------------------------------------- the notebook


def resolve_notebook(cfg: SweepConfig) -> Path:
    """The notebook path: absolute, else relative to the working directory, else to the config file's folder or one
    of its parents (so `notebooks/...` in `experiments/x.yaml` works from anywhere in the repository)."""
    p = Path(cfg.notebook)
    if p.is_absolute():
        cands = [p]
    else:
        cands = [Path.cwd() / p]
        if cfg.source:
            src = Path(cfg.source).resolve().parent
            cands += [d / p for d in (src, *src.parents)]
    for c in cands:
        if c.is_file():
            return c.resolve()
    raise SweepError(f"{cfg.source or cfg.name}: notebook: {cfg.notebook} not found")


def _read(nb: Path) -> str:
    try:
        return nb.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SweepError(f"{nb}: not a UTF-8 text file (byte {e.start}: {e.reason})") from None


def _parameters_source(nb: Path) -> str:
    if nb.suffix == ".ipynb":
        cells = json.loads(_read(nb))["cells"]
        for c in cells:
            if c.get("cell_type") == "code" and "parameters" in c.get("metadata", {}).get("tags", []):
                src = c["source"]
                return "".join(src) if isinstance(src, list) else src
        raise SweepError(f"{nb}: no cell tagged 'parameters'")
    lines = _read(nb).splitlines()
    for i, line in enumerate(lines):
        if _PARAM_CELL.match(line):
            body = []
            for nxt in lines[i + 1:]:
                if _CELL.match(nxt):
                    break
                body.append(nxt)
            return "\n".join(body)
    raise SweepError(f"{nb}: no cell marked '# %% tags=[\"parameters\"]'")


def notebook_parameters(nb: str | Path) -> list[str]:
    """Names assigned in the notebook's `parameters` cell, in order."""
    nb = Path(nb)
    try:
        tree = ast.parse(_parameters_source(nb))
    except SyntaxError as e:
        raise SweepError(f"{nb}: parameters cell does not parse: {e}") from None
    names: list[str] = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and n.id not in names:
                    names.append(n.id)
    return names


_NO_DEFAULT = object()


def notebook_defaults(nb: str | Path) -> dict[str, Any]:
    """The literal value each name of the `parameters` cell is given (names assigned something that is not a
    literal are left out)."""
    nb = Path(nb)
    try:
        tree = ast.parse(_parameters_source(nb))
    except SyntaxError as e:
        raise SweepError(f"{nb}: parameters cell does not parse: {e}") from None
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            for t in targets:
                if isinstance(t, ast.Name):
                    out[t.id] = value
    return out


def _type_name(v: Any) -> str:
    return "None" if v is None else type(v).__name__


def value_fits(default: Any, value: Any) -> bool:
    """Whether `value` may replace the notebook's literal `default`: same kind of literal (bool, number, string,
    list, dict); an int stands for a float; a None default takes anything."""
    if default is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))


def check_parameters(cfg: SweepConfig, nb: Path) -> list[str]:
    """The notebook's parameter names; raises `SweepError` naming the file, the section and the parameter when a
    name is unknown or a value does not fit its default's type."""
    known = notebook_parameters(nb)
    defaults = notebook_defaults(nb)
    for section, names in (("base", cfg.base), ("grid", cfg.grid)):
        bad = [k for k in names if k not in known]
        if bad:
            raise SweepError(f"{cfg.source or cfg.name}: {section}: unknown parameter(s) {', '.join(bad)} for "
                             f"{nb.name}; its parameters are: {', '.join(known)}")
    checks = [("base", k, v) for k, v in cfg.base.items()] + \
        [("grid", k, v) for k, vals in cfg.grid.items() for v in vals]
    for section, k, v in checks:
        d = defaults.get(k, _NO_DEFAULT)
        if d is not _NO_DEFAULT and not value_fits(d, v):
            raise SweepError(f"{cfg.source or cfg.name}: {section}.{k}: {v!r} ({_type_name(v)}) does not fit "
                             f"{nb.name}'s default {d!r} ({_type_name(d)})")
    return known


def _input_notebook(nb: Path, sweep_dir: Path) -> Path:
    if nb.suffix == ".ipynb":
        return nb
    import jupytext

    out = sweep_dir / ".input" / (nb.stem + ".ipynb")
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = jupytext.read(nb)
    doc.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": "workbench sweep", "language": "python"}
    jupytext.write(doc, out)
    return out


def ensure_kernelspec(out_root: Path) -> Path:
    """A kernelspec for this interpreter under `<out_root>/.jupyter` (put on JUPYTER_PATH for the runs), so a fresh
    `pip install -e .[test]` needs no `ipykernel install`."""
    root = out_root / ".jupyter"
    d = root / "kernels" / KERNEL_NAME
    d.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": f"workbench sweep ({sys.executable})", "language": "python"}
    (d / "kernel.json").write_text(json.dumps(spec, indent=1))
    return root


# ---------------------------------------------------------------------------------------------- environment


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cmd(args: list[str], cwd: Path | None = None) -> str | None:
    if shutil.which(args[0]) is None:
        return None
    try:
        r = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def gpu_names(smi_l: str) -> list[str]:
    """GPU names from `nvidia-smi -L` output (`GPU 0: NVIDIA H200 (UUID: GPU-...)`), in index order."""
    return [m.group(1).strip() for m in re.finditer(r"^GPU \d+: (.*?)(?: \(UUID:.*\))?\s*$", smi_l, re.M)]


def environment(repo: Path) -> dict[str, Any]:
    sha = _cmd(["git", "rev-parse", "HEAD"], repo)
    status = _cmd(["git", "status", "--porcelain"], repo) if sha else None
    gpus = gpu_names(_cmd(["nvidia-smi", "-L"]) or "")
    return {"git_sha": sha.strip() if sha else None, "git_dirty": bool(status.strip()) if status is not None else None,
            "python": platform.python_version(), "executable": sys.executable,
            "torch": _version("torch"), "triton": _version("triton"), "workbench": _version("workbench"),
            "numpy": _version("numpy"), "pandas": _version("pandas"), "papermill": _version("papermill"),
            "host": platform.node(), "gpus": gpus}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=repr))
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------- one run


def _notebook_error(path: Path) -> tuple[str, list[str]] | None:
    """(ename: evalue, traceback lines) of the first error output of an executed notebook."""
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    for c in nb.get("cells", []):
        for o in c.get("outputs", []) or []:
            if o.get("output_type") == "error":
                tb = [ln for t in o.get("traceback", []) for ln in _ANSI.sub("", t).splitlines()]
                return f"{o.get('ename')}: {o.get('evalue')}", tb
    return None


KERNEL_START_TRIES = 3
KERNEL_START_FAILURE = "Kernel died before replying to kernel_info"
STOP_GRACE_S = 20.0  # after a forwarded signal, how long a child may take before it is killed
# A papermill child's first act on Linux: ask the kernel for SIGTERM once the thread that started it ends (which
# happens when the sweep's process ends, however it ends: SIGKILL, os._exit, a Jupyter kernel restart), then become
# papermill. Its notebook kernel follows within about a second: ipykernel exits when its parent does. An exec
# rather than a preexec_fn, which is unsafe in a process with threads.
_DIE_WITH_PARENT = """import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    os._exit(1)  # the sweep ended before the request above was in place
os.execvp(sys.argv[2], sys.argv[2:])  # the command the sweep asked for
"""


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (papermill's kernel runs in its own session: a process-group signal misses it)."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _send(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


class _Children:
    """The sweep's papermill processes. `stop(signum)` forwards the signal to each and to its descendants (the
    kernel); `wait` returns once the child and those descendants are gone, killing them after STOP_GRACE_S. Once
    stopped, no new child starts. Each child runs in a session of its own (a terminal's or Jupyter's signal to the
    caller's process group reaches the sweep, which decides, not the children behind its back) and, on Linux, dies
    with the sweep's process (`_DIE_WITH_PARENT`)."""

    def __init__(self):
        self.lock = threading.RLock()  # the signal handler takes it in the main thread
        self.procs: dict[subprocess.Popen, list[int]] = {}
        self.stopped: int | None = None
        self.stopped_at = 0.0
        self.why: str | None = None  # what stopped the sweep when it was not a signal (an exception in it)

    def start(self, args: list[str], **kw) -> subprocess.Popen | None:
        with self.lock:
            if self.stopped is not None:
                return None
            if sys.platform.startswith("linux"):
                args = [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *args]
            proc = subprocess.Popen(args, start_new_session=True, **kw)
            self.procs[proc] = []
            return proc

    def stop(self, signum: int, frame=None, why: str | None = None) -> None:
        with self.lock:
            again = self.stopped is not None
            if not again:
                self.why = why
            self.stopped, self.stopped_at = (self.stopped or signum), time.monotonic()
            for proc in self.procs:
                self.procs[proc] = sorted(set(self.procs[proc]) | set(_descendants(proc.pid)))
                _send([proc.pid, *self.procs[proc]], signal.SIGKILL if again else signum)  # a second signal: now

    def wait(self, proc: subprocess.Popen) -> int:
        while True:
            try:
                rc = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if self.stopped is not None and time.monotonic() - self.stopped_at > STOP_GRACE_S:
                    _send([proc.pid, *_descendants(proc.pid)], signal.SIGKILL)
        with self.lock:
            rest = self.procs.pop(proc, [])
        while self.stopped is not None and any(_alive(p) for p in rest):  # the kernel outlives papermill briefly
            if time.monotonic() - self.stopped_at > STOP_GRACE_S:
                _send(rest, signal.SIGKILL)
            time.sleep(0.2)
        return rc


@contextmanager
def _forward_signals(children: _Children):
    """SIGTERM and SIGINT stop the children instead of leaving them running (main thread only: where Python can
    handle signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, children.stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _run_one(spec: RunSpec, run_dir: Path, input_nb: Path, kernel_root: Path, env_info: dict, cwd: Path,
             pass_out_dir: bool, devices: "queue.Queue[str] | None",
             ray_env: dict[str, str] | None = None, children: _Children | None = None) -> "RunResult":
    children = children or _Children()
    if children.stopped is not None:
        return RunResult(spec.run_id, run_dir, "not started", spec.params)
    run_dir.mkdir(parents=True, exist_ok=True)
    device = devices.get() if devices is not None else None
    t0 = time.monotonic()
    manifest: dict[str, Any] = {"run_id": spec.run_id, "sweep": run_dir.parent.name, "status": "running",
                                "params": spec.params,
                                "grid_point": spec.point, "notebook": str(input_nb), "start": _now(), "end": None,
                                "seconds": None, "error": None, "traceback": None,
                                "cuda_visible_devices": device, **env_info}
    if ray_env is not None:
        manifest.update(ray_address=ray_env.get("WORKBENCH_RAY_ADDRESS"),
                        ray_share=int(ray_env["WORKBENCH_RAY_SHARE"]))
    manifest["gpu"] = (env_info["gpus"][int(device)] if device is not None and device.isdigit()
                       and int(device) < len(env_info["gpus"]) else env_info["gpus"][0] if env_info["gpus"] else None)
    try:
        _write_json(run_dir / "manifest.json", manifest)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(spec.params, sort_keys=False, default_flow_style=None))
        out_nb = run_dir / "notebook.ipynb"
        args = [sys.executable, "-m", "papermill", str(input_nb), str(out_nb), "-k", KERNEL_NAME, "-l", "python",
                "-f", str(run_dir / "config.yaml"), "--cwd", str(cwd), "--no-progress-bar", "--log-output"]
        if pass_out_dir:
            args += ["-p", OUT_DIR_PARAM, str(run_dir)]
        env = dict(os.environ)
        env["JUPYTER_PATH"] = os.pathsep.join([str(kernel_root), *filter(None, [env.get("JUPYTER_PATH")])])
        if device is not None:
            env["CUDA_VISIBLE_DEVICES"] = device
        env.update(ray_env or {})
        rc = None
        for attempt in range(KERNEL_START_TRIES):
            with open(run_dir / "papermill.log", "w") as log:
                proc = children.start(args, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
                if proc is None:
                    break
                rc = children.wait(proc)
            # a kernel that died before answering ran no cell: the machine's fault, not the notebook's; try again
            if rc == 0 or children.stopped is not None \
                    or KERNEL_START_FAILURE not in (run_dir / "papermill.log").read_text(errors="replace"):
                break
        if rc == 0:
            manifest["status"] = "ok"
        elif children.stopped is not None:
            manifest["status"] = "failed"
            manifest["error"] = f"interrupted: {children.why}" if children.why else \
                f"interrupted by {signal.Signals(children.stopped).name}"
        else:
            manifest["status"] = "failed"
            err = _notebook_error(out_nb)
            if err:
                manifest["error"], tb = err
            else:
                tb = (run_dir / "papermill.log").read_text(errors="replace").splitlines()
                manifest["error"] = next((ln for ln in reversed(tb) if ln.strip()), f"papermill exited {rc}")
            manifest["traceback"] = "\n".join(tb[-_TAIL:])
    except Exception as e:  # the sweep goes on; the run says why
        manifest["status"] = "failed"
        manifest["error"] = f"{type(e).__name__}: {e}"
        manifest["traceback"] = "".join(traceback.format_exc().splitlines(keepends=True)[-_TAIL:])
    finally:
        if devices is not None and device is not None:
            devices.put(device)
    manifest["end"] = _now()
    manifest["seconds"] = round(time.monotonic() - t0, 3)
    _write_json(run_dir / "manifest.json", manifest)
    return RunResult(spec.run_id, run_dir, manifest["status"], spec.params, manifest["error"], manifest["seconds"])


# ---------------------------------------------------------------------------------------------- the summary


@dataclass
class RunResult:
    run_id: str
    dir: Path
    status: str  # "ok" | "failed" | "skipped" (an earlier run finished ok) | "not started" (the sweep was stopped)
    params: dict[str, Any]
    error: str | None = None
    seconds: float | None = None


@dataclass
class SweepSummary:
    name: str
    root: Path
    runs: list[RunResult] = field(default_factory=list)

    def _with(self, status: str) -> list[RunResult]:
        return [r for r in self.runs if r.status == status]

    @property
    def ok(self) -> list[RunResult]:
        return self._with("ok")

    @property
    def failed(self) -> list[RunResult]:
        return self._with("failed")

    @property
    def skipped(self) -> list[RunResult]:
        return self._with("skipped")

    @property
    def not_started(self) -> list[RunResult]:
        return self._with("not started")

    def dirs(self, status: str | None = None) -> list[Path]:
        return [r.dir for r in self.runs if status is None or r.status == status]

    def frame(self):
        """One row per run of this call: its parameters, status (ok, failed, skipped), error and seconds; when any
        run saved its search report (report.json, `workbench.lab.runs.save_run`), also best_speedup (vs eager, NaN
        when nothing was timed or no report) and gpu_seconds, as `workbench.lab.runs.load_runs` reads them."""
        import pandas as pd  # a light module until a frame is asked for

        saved = load_runs(self.root).runs.set_index("run_id") if self.runs else None
        reported = any((r.dir / REPORT).exists() for r in self.runs)
        rows = []
        for r in self.runs:
            row = {"run_id": r.run_id, **r.params, "status": r.status, "error": r.error, "seconds": r.seconds}
            if reported:
                row["best_speedup"] = saved.at[r.run_id, "best_speedup"]
                row["gpu_seconds"] = saved.at[r.run_id, "gpu_seconds"]
            rows.append(row)
        return pd.DataFrame(rows)

    def text(self) -> str:
        stopped = f", {len(self.not_started)} not started" if self.not_started else ""
        lines = [f"sweep {self.name}: {len(self.ok)} ok, {len(self.failed)} failed, {len(self.skipped)} skipped"
                 f"{stopped} ({self.root})"]
        for r in self.runs:
            extra = f"  {r.error}" if r.error else ""
            secs = f" {r.seconds:.1f}s" if r.seconds is not None else ""
            lines.append(f"  {r.status:8s}{r.run_id}{secs}{extra}")
        return "\n".join(lines)

    __str__ = text


# ---------------------------------------------------------------------------------------------- the sweep


def _select(specs: list[RunSpec], only: str | Iterable[str] | None) -> list[RunSpec]:
    if only is None:
        return specs
    pats = [only] if isinstance(only, str) else list(only)
    chosen = [s for s in specs if any(s.run_id == p or fnmatch.fnmatchcase(s.run_id, p) for p in pats)]
    if not chosen:
        raise SweepError(f"--only {', '.join(pats)} matches no run; the runs are: "
                         + ", ".join(s.run_id for s in specs))
    return chosen


def _ray_targets(specs: list[RunSpec], defaults: dict[str, Any]) -> dict[str, str]:
    """run id -> the cluster its device joins, for the runs whose device is Ray: "" for "ray" (the environment's
    cluster, else the sweep's), ADDR for "ray:ADDR" (as `get_device` reads them)."""
    out = {}
    for s in specs:
        dev = s.params.get("device", defaults.get("device"))
        if isinstance(dev, str) and (dev == "ray" or dev.startswith("ray:")):
            out[s.run_id] = dev[4:]
    return out


def _ray_envs(targets: dict[str, str], jobs: int) -> dict[str, dict[str, str]]:
    """run id -> its WORKBENCH_RAY_SHARE: at most `jobs` of the runs on one cluster run at once, so each takes that
    part of it (a value set in this environment wins: it may know of other sweeps on the cluster)."""
    user = ""
    if targets and os.environ.get("WORKBENCH_RAY_SHARE", "").strip():
        try:  # the device's own reading of it
            user = str(ray_share())
        except ValueError as e:
            raise SweepError(str(e)) from e
    on = list(targets.values())
    return {rid: {"WORKBENCH_RAY_SHARE": user or str(min(jobs, on.count(t)))} for rid, t in targets.items()}


def _import_ray():
    try:
        import ray
    except ImportError as e:
        raise SweepError("runs with device 'ray' need ray: pip install 'workbench[ray]'") from e
    return ray


@contextmanager
def _sweep_ray_cluster(ray):
    """The address of a Ray cluster for the sweep's "ray" runs: this process's when it is already connected (left
    running), else a local one started here and shut down on leaving, whatever happened in between.

    `run_sweep` uses it when a run's `device` (from the sweep, else the notebook's default) is "ray" and neither
    $WORKBENCH_RAY_ADDRESS nor $RAY_ADDRESS is set: one cluster, sized to this machine, for all the runs (its address
    passed to them as $WORKBENCH_RAY_ADDRESS), since a cluster per run would each claim all the machine's GPUs. Runs
    that use Ray get $WORKBENCH_RAY_SHARE = how many of them run at once on their cluster, so each `RayDevice` takes
    only its part (a value already in the environment is kept: e.g. two sweeps sharing one cluster). The manifest of
    such a run records `ray_address` (what the sweep passed, None when it passed none) and `ray_share`."""
    if ray.is_initialized():
        yield ray.get_runtime_context().gcs_address
        return
    ray.init(**RAY_INIT_KWARGS)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def run_sweep(path_or_cfg: str | Path | SweepConfig, jobs: int | None = None, out_root: str | Path = "results/runs",
              only: str | Iterable[str] | None = None,
              progress: Callable[[int, int, RunResult], None] | None = None) -> SweepSummary:
    """Run the sweep's notebook once per grid point (`jobs` at once, default the config's), skipping runs already
    "ok". `only`: run ids or glob patterns (`"seed=0_*"`) selecting some runs. `progress(i, n, run)` is called as
    each of the `n` runs to do ends, in the order they end (`workbench.widgets.ItemProgress` draws it as a bar).
    Raises `ConfigError`/`SweepError` before starting anything when the file, a parameter name or the selection is
    wrong, and `SweepInterrupted` (with the summary) after a SIGTERM or SIGINT, once the children it forwarded the
    signal to have ended."""
    cfg = path_or_cfg if isinstance(path_or_cfg, SweepConfig) else load_sweep(path_or_cfg)
    nb = resolve_notebook(cfg)
    known = check_parameters(cfg, nb)
    specs = _select(expand(cfg), only)
    jobs = cfg.jobs if jobs is None else jobs
    if jobs < 1:
        raise SweepError(f"jobs must be at least 1, got {jobs}")
    devices = None
    if cfg.devices:
        devices = queue.Queue()
        for d in cfg.devices:
            devices.put(d)
        jobs = min(jobs, len(cfg.devices))  # one GPU per concurrent run

    out_root = Path(out_root).resolve()
    sweep_dir = out_root / cfg.name
    summary = SweepSummary(cfg.name, sweep_dir)
    results: dict[str, RunResult] = {}
    todo = []
    for s in specs:
        m = read_manifest(sweep_dir / s.run_id)
        if m is not None and m.get("status") == "ok":
            results[s.run_id] = RunResult(s.run_id, sweep_dir / s.run_id, "skipped", s.params, None, m.get("seconds"))
        else:
            todo.append(s)
    # Ray: runs that share a cluster are told how many of them run at once; "ray" runs with no cluster in the
    # environment get one the sweep starts (below), instead of one each
    ray_targets = _ray_targets(todo, notebook_defaults(nb))
    ray_envs = _ray_envs(ray_targets, jobs)
    own_cluster = "" in ray_targets.values() and not (os.environ.get("WORKBENCH_RAY_ADDRESS")
                                                      or os.environ.get("RAY_ADDRESS"))
    ray = _import_ray() if own_cluster else None  # before anything is written: a missing ray stops the sweep here
    if todo:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        to_yaml(cfg, sweep_dir / "sweep.yaml")
        kernel_root = ensure_kernelspec(out_root)
        input_nb = _input_notebook(nb, sweep_dir)
        env_info = environment(nb.parent)
        cwd = Path.cwd()
        pass_out_dir = OUT_DIR_PARAM in known and OUT_DIR_PARAM not in cfg.base and OUT_DIR_PARAM not in cfg.grid
        with (_sweep_ray_cluster(ray) if own_cluster else nullcontext()) as address:
            for rid, t in ray_targets.items():
                if t == "" and address:
                    ray_envs[rid]["WORKBENCH_RAY_ADDRESS"] = address
            children = _Children()
            with _forward_signals(children), ThreadPoolExecutor(max_workers=jobs) as pool:
                futs = [pool.submit(_run_one, s, sweep_dir / s.run_id, input_nb, kernel_root, env_info, cwd,
                                    pass_out_dir, devices, ray_envs.get(s.run_id), children) for s in todo]
                try:
                    for i, f in enumerate(as_completed(futs), 1):
                        r = f.result()
                        results[r.run_id] = r
                        if progress is not None:
                            progress(i, len(futs), r)
                except BaseException as e:  # in any thread: the children stop before it propagates (the pool waits)
                    children.stop(signal.SIGTERM, why=f"the sweep stopped on {type(e).__name__}: {e}"[:300])
                    raise
        summary.runs = [results[s.run_id] for s in specs]
        if children.stopped is not None:
            raise SweepInterrupted(children.stopped, summary)
    summary.runs = [results[s.run_id] for s in specs]
    return summary


__all__ = ["ConfigError", "RunResult", "SweepError", "SweepInterrupted", "SweepSummary", "check_parameters",
           "ensure_kernelspec", "notebook_defaults", "notebook_parameters", "run_sweep", "value_fits"]
