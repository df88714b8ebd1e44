"""The KernelBench benchmark: for every KernelBench-format file of a directory, a kernel search under a per-problem
GPU-seconds budget, then the best candidate through full timing (against eager and torch.compile in one run).

Each file gives one row (`FileResult`), written to `OUT/files/<level>__<name>.json` as soon as it is known: a rerun
with the same out directory skips the files already there (an interrupted run continues), and the searches keep
their events in the one store (`search_id` per problem), so a search cut off midway resumes where it stopped. A file
that is not KernelBench-format, whose model cannot be constructed or traced, or that crashes anything gives a row with
the reason and never stops the run.

On the CPU device there is no timing: each file runs at small sizes (`kernelbench_sizes`), the proposer's default
candidate climbs the ladder to correctness on the Triton interpreter, and the row says whether it is correct and
whether it has a generated kernel; timing is reported as not measured. The metrics and the report live in
`kernelbench_report`.
"""
from __future__ import annotations

import ast
import dataclasses
import fnmatch
import json
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Iterable

from .. import HARNESS_VERSION
from ..core.candidate import Candidate
from ..core.records import INCONCLUSIVE, Stage, StageRecord
from ..devices.local import LocalDevice
from ..harness.budget import Budget
from ..harness.ladder import Ladder
from ..harness.launch_mode import CUDA_GRAPH, EAGER
from ..problems import Problem
from ..problems.loader import ProblemError, module_constants
from ..proposers.offline import OfflineProposer
from ..search.search import make_search
from .kernelbench_sizes import shrink

CPU_TIMEOUTS = {"compile": 120.0, "correctness": 120.0}
NOT_TIMED = "timing not measured: the CPU device does not time kernels (run with --device cuda for speedups)"
COMPILE_SKIPPED = ("not run: the sm_90 compile stage was skipped (it is the CPU check's bottleneck); correctness is "
                   "judged on the Triton interpreter")


@dataclasses.dataclass
class FileResult:
    """One file's row of the benchmark. `status`: "ok" (it ran: see `correct`), "bad input" (not KernelBench-format,
    a model that cannot be constructed or traced), "error" (something crashed) or "timeout"."""
    file: str  # "level1/19_ReLU.py" (or the bare name outside a level directory)
    level: str  # "level1", or "" outside a level directory
    status: str
    correct: bool = False
    generated: bool = False  # the candidate has a Triton kernel (else it is plain torch)
    kernels: int = 0
    families: list[str] = dataclasses.field(default_factory=list)
    coverage_flops: float | None = None
    coverage_bytes: float | None = None
    timed: bool = False
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    candidate_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    candidate: str | None = None  # content hash of the candidate reported
    sizes: str = ""  # the sizes it ran at ("own sizes" or the shrinking rule's overrides)
    reason: str = ""  # why it fell short (empty when correct, generated and timed faster than both)
    seconds: float = 0.0
    gpu_seconds: float | None = None  # the search's and the final timing's GPU time (GPU modes)
    device: str = ""
    stages: list[list[str]] = dataclasses.field(default_factory=list)  # (stage, verdict, reason) of the last climb
    # how the timed candidate was launched: "eager", "cuda_graph" (the harness replayed it as one graph) or, for a
    # declared graph that could not be replayed, "eager (graph refused: why)"
    launch: str = "eager"
    # a graph-launched candidate is also timed against torch.compile's own CUDA graphs (mode "reduce-overhead"), in
    # the same run: KernelBench's baseline is the default mode, which launches kernel by kernel as eager does
    speedup_vs_reduce_overhead: float | None = None
    # the precision the file was judged under (`Problem.effective_precision`; "" in rows from before it was recorded,
    # when every file was judged "strict")
    precision: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FileResult":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# ---- which files ----
def discover(root: str | Path, levels: Iterable[int] | None = None, only: str | None = None) -> list[Path]:
    """KernelBench files of `root/level*/` (or of `root` itself when it has no level directories), sorted; `levels`
    keeps those levels, `only` a comma-separated list of names or glob patterns matched against the file name,
    its stem and "levelN/name"."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory")
    level_dirs = sorted(d for d in root.glob("level*") if d.is_dir())
    if level_dirs:
        wanted = {f"level{n}" for n in levels} if levels else None
        files = [f for d in level_dirs if wanted is None or d.name in wanted for f in sorted(d.glob("*.py"))]
    else:
        files = sorted(root.glob("*.py"))
    if only:
        pats = [p.strip() for p in only.split(",") if p.strip()]
        files = [f for f in files if any(fnmatch.fnmatch(n, p) for p in pats
                                         for n in (f.name, f.stem, relative_name(f)))]
    return files


def from_sample(root: str | Path, sample: str | Path) -> list[Path]:
    """The files a sample file (`experiments/kernelbench_sample.py`) names, under `root`."""
    names = json.loads(Path(sample).read_text())["files"]
    return [Path(root) / n for n in names]


def relative_name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}" if path.parent.name.startswith("level") else path.name


def level_of(path: Path) -> str:
    return path.parent.name if path.parent.name.startswith("level") else ""


def result_path(out: Path, path: Path) -> Path:
    return out / "files" / (relative_name(path).replace("/", "__") + ".json")


def file_overrides(path: Path, overrides: dict[str, str]) -> dict[str, str]:
    """The --set overrides that name a module-level constant of this file (the others do not apply to it)."""
    if not overrides:
        return {}
    try:
        consts = module_constants(ast.parse(path.read_text()))
    except SyntaxError:
        return {}
    return {k: v for k, v in overrides.items() if k in consts}


# ---- one file ----
def _bad_input(e: BaseException) -> bool:
    return isinstance(e, (ProblemError, SyntaxError))


def _failure_row(path: Path, e: BaseException, t0: float) -> FileResult:
    msg = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    if isinstance(e, FileTimeout):
        return FileResult(relative_name(path), level_of(path), "timeout", reason=str(e),
                          seconds=round(time.monotonic() - t0, 2))
    if _bad_input(e):
        return FileResult(relative_name(path), level_of(path), "bad input", reason=msg,
                          seconds=round(time.monotonic() - t0, 2))
    where = traceback.format_exc().strip().splitlines()
    return FileResult(relative_name(path), level_of(path), "error",
                      reason=msg + (f" ({where[-3].strip()[:160]})" if len(where) >= 3 else ""),
                      seconds=round(time.monotonic() - t0, 2))


def _describe_candidate(row: FileResult, proposer, cand: Candidate, choice) -> None:
    origin = dict(cand.origin)
    row.candidate = cand.hash
    row.kernels = cand.source.count("@triton.jit")
    row.generated = row.kernels > 0
    row.coverage_flops, row.coverage_bytes = origin.get("coverage_flops"), origin.get("coverage_bytes")
    if choice is not None:
        row.families = sorted({g.family for g in proposer.groups(dict(choice.fuse))})


def _stage_rows(ev) -> list[list[str]]:
    return [[str(s.name), str(s.verdict), s.reason[:300]] for s in ev.stages]


def _shortfall(row: FileResult, ev) -> str:
    """Why a row fell short of a correct generated kernel faster than eager and torch.compile, in words."""
    if not ev.ok or not row.correct:
        last = ev.stages[-1]
        return f"{last.name} {last.verdict}: {last.reason[:300]}"
    if not row.generated:
        return "no generated kernel: the proposer lowered nothing of this model (the candidate is plain torch)"
    if not row.timed:
        last = ev.stages[-1]
        return NOT_TIMED if row.device == "cpu" else f"not timed: {last.name} {last.verdict}: {last.reason[:300]}"
    pairs = (("eager", row.speedup_vs_eager), ("torch.compile", row.speedup_vs_compile))
    slow = [f"{s:.3g}x vs {name}" for name, s in pairs if s is not None and s <= 1]
    words = ["slower: " + ", ".join(slow)] if slow else []
    if row.speedup_vs_compile is None:  # the torch.compile reference did not run: say why, not a blank
        full = ev.stage(Stage.FULL_TIMING)
        data = full.data if full is not None else {}
        why = data.get("compile_error") or data.get("tampered_before_compile") or "not timed"
        words.append(f"torch.compile reference: {str(why)[:200]}")
    return "; ".join(words)


class SkipCompile:
    """A device whose compile stage does not run (verdict inconclusive, which the ladder climbs past): for the CPU
    check, where compiling every kernel for sm_90 costs more than interpreting it."""

    def __init__(self, device):
        self._device = device

    def __getattr__(self, name):
        return getattr(self._device, name)

    def compile(self, problem, cand_path) -> StageRecord:
        return StageRecord(Stage.COMPILE.value, INCONCLUSIVE, COMPILE_SKIPPED)

    def map_compile(self, problem, cand_paths, workers: int = 2) -> list[StageRecord]:
        return [self.compile(problem, p) for p in cand_paths]


def check_file_cpu(path: Path, device, store=None, seeds: int = 2, overrides: dict[str, str] | None = None,
                   skip_compile: bool = False, timeout_s: float | None = None,
                   size_caps: tuple[int, ...] | None = None, precision: str | None = None) -> FileResult:
    """CPU mode: small sizes (`shrink`, with `size_caps` for its caps), the proposer's default candidate, the ladder
    to correctness (interpreter). `precision`: the caller's (None: the file's, else PyTorch's defaults)."""
    t0 = time.monotonic()

    def prepare():
        chosen = file_overrides(path, overrides or {})
        if chosen:  # the caller chose the sizes
            problem = Problem.load(str(path), chosen, precision=precision)
            return problem, OfflineProposer(problem), "set: " + ", ".join(f"{k}={v}" for k, v in chosen.items())
        caps = {"caps": tuple(size_caps)} if size_caps else {}
        sizes, problem, proposer = shrink(path, precision=precision, **caps)
        return problem, proposer, sizes.describe()

    try:
        # the capture runs in this process: the alarm bounds it; the ladder's stages have their workers' timeouts
        problem, proposer, sizes = _with_alarm(timeout_s, prepare)
        choice = proposer.default_choice()
        cand = proposer.render(choice)
        row = FileResult(relative_name(path), level_of(path), "ok", sizes=sizes, device=device.name,
                         precision=problem.effective_precision)
        _describe_candidate(row, proposer, cand, choice)
        ladder = Ladder(SkipCompile(device) if skip_compile else device, store=store, seeds=seeds)
        ev = ladder.evaluate(problem, cand, up_to="correctness")
        row.correct = bool(ev.ok and ev.fidelity == Stage.CORRECTNESS.value)
        row.stages = _stage_rows(ev)
        row.reason = _shortfall(row, ev)
    except BaseException as e:  # noqa: BLE001 - a file's failure is its row, never the run's
        if isinstance(e, KeyboardInterrupt):
            raise
        return _failure_row(path, e, t0)
    row.seconds = round(time.monotonic() - t0, 2)
    return row


def search_id(problem_key: str, strategy: str, budget_gpu_s: float, seed: int, device_name: str) -> str:
    """The store's id of a file's search. The harness version and the device are part of it: a search begun under
    other rules (another promotion policy) or on another card is another search, not one to resume (measured: a
    resumed run refused both, the card's when an H100 state resumed on an H200)."""
    card = "".join(c if c.isalnum() else "-" for c in device_name).strip("-").lower()
    return f"kernelbench:{problem_key}:{strategy}:{budget_gpu_s:g}:{seed}:harness{HARNESS_VERSION}:{card}"


def search_file(path: Path, device, store, budget_gpu_s: float, strategy: str = "greedy",
                overrides: dict[str, str] | None = None, seed: int = 0, per_step: int = 4,
                precision: str | None = None) -> FileResult:
    """GPU mode: a search under the budget, then its best candidate through full timing (eager and torch.compile
    measured in the same run), on the search's own ladder (so the store answers what it already measured)."""
    t0 = time.monotonic()
    try:
        overrides = file_overrides(path, overrides or {})
        problem = Problem.load(str(path), overrides, precision=precision)
        search = make_search(problem, device, strategy=strategy, budget=Budget(budget_gpu_s), store=store,
                             seed=seed, per_step=per_step,
                             search_id=search_id(problem.key, strategy, budget_gpu_s, seed, device.name))
        search.run()
        sizes = "own sizes" if not overrides else "set: " + ", ".join(f"{k}={v}" for k, v in overrides.items())
        row = FileResult(relative_name(path), level_of(path), "ok", device=device.name,
                         precision=problem.effective_precision, sizes=sizes)
        best = search.best
        if best is None:  # nothing measured: report the root (the proposer's default point) and why
            choice = search.proposer.default_choice()
            cand = search.proposer.render(choice)
        else:
            choice = best.choice
            cand = search.proposer.render(choice) if choice is not None else Candidate(best.source)
        _describe_candidate(row, search.proposer, cand, choice)
        # the final timing is outside the search's budget (a search that spent it still gets its best timed); the
        # store answers what the search already measured at this fidelity
        modes = tuple(search.ladder.compile_modes)
        if getattr(choice, "launch", EAGER) == CUDA_GRAPH and "reduce-overhead" not in modes:
            modes += ("reduce-overhead",)
        # with a compile mode the search did not time, the store's full timing would answer without it
        final = Ladder(device, store=store if modes == tuple(search.ladder.compile_modes) else None, budget=Budget(),
                       compile_modes=modes)
        ev = final.evaluate(problem, cand, up_to=Stage.FULL_TIMING.value, force_full=True)
        row.gpu_seconds = round(search.budget.gpu_spent + final.budget.gpu_spent, 2)
        summary = ev.summary()
        row.correct = ev.stage(Stage.CORRECTNESS) is not None and ev.stage(Stage.CORRECTNESS).ok
        full = ev.stage(Stage.FULL_TIMING)
        row.timed = full is not None and full.ok
        if row.timed:
            for k in ("speedup_vs_eager", "speedup_vs_compile", "candidate_ms", "eager_ms", "compile_ms"):
                setattr(row, k, summary.get(k))
        row.stages = _stage_rows(ev)
        if row.timed:
            row.speedup_vs_reduce_overhead = full.data.get("speedup_vs_reduce_overhead")
        launch = (full.data or {}).get("launch") if full is not None else None
        if launch:
            row.launch = launch["ran"] if launch["ran"] != "eager" else f"eager (graph refused: {launch['reason']})"
        row.reason = _shortfall(row, ev)
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, KeyboardInterrupt):
            raise
        return _failure_row(path, e, t0)
    row.seconds = round(time.monotonic() - t0, 2)
    return row


# ---- a per-file timeout for work in this process (the proposer's capture runs here, not in a worker) ----
class FileTimeout(BaseException):  # not an Exception: the size search must not take it for "too small"
    pass


def _with_alarm(timeout_s: float | None, fn: Callable[[], Any]) -> Any:
    """fn() in this process's main thread, raising FileTimeout after `timeout_s` (no bound elsewhere)."""
    if not timeout_s or not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        return fn()

    def raise_timeout(signum, frame):
        raise FileTimeout(f"not loaded and traced within the per-file timeout of {timeout_s:g} s")

    old = signal.signal(signal.SIGALRM, raise_timeout)
    signal.alarm(max(1, int(timeout_s)))
    try:
        return fn()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


_POOL_DEVICE = None


def _pool_check(path: str, seeds: int, overrides: dict[str, str], skip_compile: bool,
                timeout_s: float | None, timeouts: dict[str, float],
                size_caps: tuple[int, ...] | None = None, precision: str | None = None) -> dict[str, Any]:
    """One file in a pool process, on that process's own CPU device (kept for the process's next files)."""
    global _POOL_DEVICE
    if _POOL_DEVICE is None:
        _POOL_DEVICE = LocalDevice("cpu", timeouts={**CPU_TIMEOUTS, **timeouts})
    return check_file_cpu(Path(path), _POOL_DEVICE, seeds=seeds, overrides=overrides, skip_compile=skip_compile,
                          timeout_s=timeout_s, size_caps=size_caps, precision=precision).to_dict()


# ---- the run ----
@dataclasses.dataclass
class RunConfig:
    device: str = "cpu"
    budget_gpu_s: float = 30.0
    strategy: str = "greedy"
    overrides: dict[str, str] = dataclasses.field(default_factory=dict)
    seeds: int = 2  # CPU correctness seeds (the GPU ladder keeps its own default)
    jobs: int = 1  # CPU mode: files checked at once, each in its own process
    timeout_s: float | None = 120.0  # per file, CPU mode: loading and tracing (each ladder stage has its own)
    skip_compile: bool = False  # CPU mode
    timeouts: dict[str, float] = dataclasses.field(default_factory=dict)  # CPU mode: stage -> s, over CPU_TIMEOUTS
    size_caps: tuple[int, ...] | None = None  # CPU mode: the caps the small sizes try (None: kernelbench_sizes.CAPS)
    precision: str | None = None  # the problems' precision (None: each file's WORKBENCH_PRECISION, else "torch")


def load_done(out: Path) -> dict[str, FileResult]:
    done = {}
    for p in sorted((out / "files").glob("*.json")):
        try:
            r = FileResult.from_dict(json.loads(p.read_text()))
        except (json.JSONDecodeError, TypeError):
            continue  # a row cut off while being written is redone
        done[r.file] = r
    return done


def _write_row(out: Path, path: Path, row: FileResult) -> None:
    target = result_path(out, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(row.to_dict(), indent=1, default=str))
    os.replace(tmp, target)  # a row is either whole or absent: an interrupted write is redone, never half-read


def _same_device(row: FileResult, here: str) -> bool:
    """Whether a stored row may stand for a run on `here`: rows from before the device was stamped on failure rows
    count only when the file never ran (bad input does not depend on the card)."""
    return row.device == here or (not row.device and row.status == "bad input")


def _same_precision(row: FileResult, path: Path, precision: str | None) -> bool:
    """Whether a stored row was judged under the precision this run judges the file under (a row from before rows
    recorded it was judged "strict"; a file that no longer loads keeps its row: it is redone only for a reason)."""
    if row.status != "ok":
        return True
    try:
        now = Problem.load(str(path), precision=precision).effective_precision
    except Exception:  # noqa: BLE001 - the row stands; the file's own failure is for its next run to report
        return True
    return (row.precision or "strict") == now


def run_files(files: list[Path], out: Path, cfg: RunConfig, store=None, device=None,
              progress: Callable[[int, int, FileResult, bool], None] | None = None) -> list[FileResult]:
    """Every file's row, in `files` order; rows already under `out/files` are reused (resume). `device`: an open
    device for GPU modes (the caller owns it); CPU mode opens its own, one per job. `progress(i, n, row, reused)`
    after each file."""
    out.mkdir(parents=True, exist_ok=True)
    done = load_done(out)
    here = device.name if device is not None else "cpu"
    rows: dict[str, FileResult] = {}
    todo = []
    for f in files:
        prior = done.get(relative_name(f))
        if prior is not None and not _same_device(prior, here):
            print(f"kernelbench: {prior.file} redone: its row was measured on {prior.device or 'an unnamed device'}, "
                  f"this run is on {here}", file=sys.stderr)
            prior = None  # a row measured on another card is not this card's number
        if prior is not None and not _same_precision(prior, f, cfg.precision):
            print(f"kernelbench: {prior.file} redone: its row was judged under {prior.precision or 'strict'} "
                  "precision, this run judges it otherwise", file=sys.stderr)
            prior = None
        if prior is not None:
            rows[prior.file] = prior
            if progress:
                progress(len(rows), len(files), prior, True)
        else:
            todo.append(f)
    if cfg.device == "cpu" and cfg.jobs > 1 and len(todo) > 1:
        with ProcessPoolExecutor(cfg.jobs, mp_context=mp.get_context("spawn")) as ex:
            futs = {ex.submit(_pool_check, str(f), cfg.seeds, cfg.overrides, cfg.skip_compile, cfg.timeout_s,
                              cfg.timeouts, cfg.size_caps, cfg.precision): f for f in todo}
            for fut in as_completed(futs):
                f = futs[fut]
                try:
                    row = FileResult.from_dict(fut.result())
                except Exception as e:  # a pool process that died: this file's row says so
                    row = _failure_row(f, e, time.monotonic())
                row.device = row.device or here
                _write_row(out, f, row)
                rows[row.file] = row
                if progress:
                    progress(len(rows), len(files), row, False)
    else:
        own = None
        if device is None:
            own = device = LocalDevice("cpu", timeouts={**CPU_TIMEOUTS, **cfg.timeouts})
        try:
            for f in todo:
                if device.kind == "cpu":
                    row = check_file_cpu(f, device, store=store, seeds=cfg.seeds, overrides=cfg.overrides,
                                         skip_compile=cfg.skip_compile, timeout_s=cfg.timeout_s,
                                         size_caps=cfg.size_caps, precision=cfg.precision)
                else:
                    row = search_file(f, device, store, cfg.budget_gpu_s, cfg.strategy, cfg.overrides,
                                      precision=cfg.precision)
                row.device = row.device or here
                _write_row(out, f, row)
                rows[row.file] = row
                if progress:
                    progress(len(rows), len(files), row, False)
        finally:
            if own is not None:
                own.close()
    return [rows[relative_name(f)] for f in files if relative_name(f) in rows]


class ProgressBar:
    """Progress over files on stderr: a redrawn bar on a terminal, one plain line per file otherwise."""

    def __init__(self, stream=None, width: int = 30):
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.width = width
        self.t0 = time.monotonic()

    def __call__(self, i: int, n: int, row: FileResult, reused: bool) -> None:
        verdict = ("correct" if row.correct else row.status if row.status != "ok" else "not correct") + \
                  (", kernel" if row.generated else ", torch") + (" (from a previous run)" if reused else "")
        elapsed = time.monotonic() - self.t0
        if self.tty:
            fill = int(self.width * i / max(n, 1))
            self.stream.write(f"\r[{'#' * fill}{'.' * (self.width - fill)}] {i}/{n} {elapsed:6.0f}s  "
                              f"{row.file[:50]:50s} {verdict[:40]:40s}")
            if i == n:
                self.stream.write("\n")
        else:
            self.stream.write(f"[{i}/{n}] {elapsed:.0f}s {row.file}: {verdict}\n")
        self.stream.flush()
