"""Hardware counters from Nsight Compute (`ncu`): the command, a driver that runs the candidate, and the parser.

`collect` runs `ncu` on a small driver (this module, `--drive`) that builds the problem and the candidate on the GPU,
calls the forward twice outside the profiled range (JIT compile and autotuning stay out), then a couple of times
inside an NVTX range that ncu is told to profile. The report is exported as ncu's raw CSV page (one row per kernel
launch, a units row under the header) and parsed into {kernel name: {metric: value}}, numbers in ncu's base units.
The `ncu_report` Python module shipped with Nsight Compute (extras/python) reads the report when the CSV export fails.

Clocks are left alone (`--clock-control none`) so counters describe the clocks the timing stages see. No ncu, no GPU,
or no permission to read counters (ERR_NVGPUCTRPERM) raise `ProfilerUnavailable` with the reason.
"""
from __future__ import annotations

import csv
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..devices.local import cuda_gpu_count, gpu_lock
from ..devices.worker import isolation_env, isolation_level, isolation_wanted
from ..problems.problem import Problem
from .findings import ProfilerUnavailable

SECTIONS = ("SpeedOfLight", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats", "WarpStateStats", "SchedulerStats",
            "ComputeWorkloadAnalysis")
# Metrics the expert tools read that the sections above may not print in the raw page.
EXTRA_METRICS = (
    "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_sector_hit_rate.pct",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smsp__sass_inst_executed_op_local_ld.sum",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
)
NVTX_RANGE = "workbench_profile"
DEFAULT_CALLS = 2  # forward calls inside the profiled range
SEARCH_PATHS = ("/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu")
PERMISSION_MARKERS = ("ERR_NVGPUCTRPERM", "does not have permission to access NVIDIA GPU Performance Counters")


class ProfilingFailed(RuntimeError):
    """ncu ran but produced no counters (the candidate crashed, or ncu failed): the message carries its output."""


def find_ncu() -> str:
    """The ncu executable: on PATH, or in the usual install places."""
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in SEARCH_PATHS:
        hits = sorted(glob.glob(pattern), reverse=True)  # newest version first
        if hits and os.access(hits[0], os.X_OK):
            return hits[0]
    raise ProfilerUnavailable("Nsight Compute (ncu) is not installed here: not on PATH, nor under "
                              "/opt/nvidia/nsight-compute/*/ncu or /usr/local/cuda/bin/ncu. Hardware counters need a "
                              "GPU machine with ncu; the static reading and the roofline verdict do not.")


def profile_command(ncu: str, target: list[str], report: str, sections=SECTIONS, metrics=EXTRA_METRICS) -> list[str]:
    """`ncu` profiling every kernel launched inside the driver's NVTX range (push/pop ranges end with '/')."""
    cmd = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", "--force-overwrite",
           "--export", report]
    for s in sections:
        cmd += ["--section", s]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    return cmd + list(target)


def import_command(ncu: str, report: str) -> list[str]:
    return [ncu, "--import", report, "--csv", "--page", "raw", "--print-units", "base"]


def check_permission(output: str) -> None:
    if any(m in output for m in PERMISSION_MARKERS):
        raise ProfilerUnavailable("ncu may not read GPU performance counters here (ERR_NVGPUCTRPERM): an administrator "
                                  "must allow it (NVreg_RestrictProfilingToAdminUsers=0) or ncu must run as root")


# ---------------------------------------------------------------- parsing

_TIME = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_BASES = {"byte", "byte/second", "byte/s", "hz", "inst", "cycle", "sector", "request", "warp", "block", "thread",
          "register", "wavefront", "inst/cycle", "warp/cycle"}
_PREFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def unit_scale(unit: str) -> float:
    """Factor to ncu's base unit (byte, nsecond, byte/second, hz, ...) for a scaled unit (Mbyte, usecond, Gbyte/s)."""
    u = unit.strip()
    if u in _TIME:
        return _TIME[u]
    if "/" in u and u.split("/", 1)[1] in ("usecond", "msecond", "second", "us", "ms", "s"):  # byte/msecond etc
        num, den = u.split("/", 1)
        return unit_scale(num) * (1e9 / _TIME[den])  # to .../second
    if len(u) > 1 and u[0] in _PREFIX and u[1:].lower() in _BASES:
        return _PREFIX[u[0]]
    return 1.0


def parse_value(text: str, unit: str = "") -> float | str | None:
    """A CSV cell as a float in base units (thousands separators dropped), a string when not a number, None if
    empty or n/a."""
    s = text.strip()
    if not s or s.lower() in ("n/a", "nan"):
        return None
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    try:
        return float(s) * unit_scale(unit)
    except ValueError:
        return text.strip()


def _aggregate(launches: list[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """One dict per kernel name: numbers averaged over its launches, strings from the last, and `launches`."""
    out: dict[str, dict[str, Any]] = {}
    sums: dict[str, dict[str, list[float]]] = {}
    for name, row in launches:
        k = out.setdefault(name, {"launches": 0})
        k["launches"] += 1
        for metric, v in row.items():
            if isinstance(v, float):
                sums.setdefault(name, {}).setdefault(metric, []).append(v)
            elif v is not None:
                k[metric] = v
    for name, metrics in sums.items():
        for metric, vals in metrics.items():
            out[name][metric] = sum(vals) / len(vals)
    return out


def parse_csv(text: str) -> dict[str, dict[str, Any]]:
    """Parse ncu CSV output: the raw page (header of metric names, a units row, one row per launch) or the long
    details format (Metric Name / Metric Unit / Metric Value columns). Lines that are not CSV (==PROF== messages, the
    program's own output) are skipped."""
    rows = list(csv.reader(io.StringIO("\n".join(line for line in text.splitlines() if line.startswith('"')))))
    if not rows or "Kernel Name" not in rows[0]:
        raise ValueError("no ncu CSV header (a row with 'Kernel Name') in this output")
    header, body = rows[0], rows[1:]
    col = {h: i for i, h in enumerate(header)}
    name_i, id_i = col["Kernel Name"], col.get("ID", 0)
    launches: list[tuple[str, dict[str, Any]]] = []
    if "Metric Name" in col and "Metric Value" in col:
        by_id: dict[tuple[str, str], dict[str, Any]] = {}
        for r in body:
            if len(r) < len(header) or not r[col["Metric Name"]]:
                continue
            row = by_id.setdefault((r[id_i], r[name_i]), {})
            unit = r[col["Metric Unit"]] if "Metric Unit" in col else ""
            row[r[col["Metric Name"]]] = parse_value(r[col["Metric Value"]], unit)
        launches = [(name, row) for (_, name), row in by_id.items()]
        return _aggregate(launches)
    units = [""] * len(header)
    if body and body[0][id_i].strip() == "":  # the units row sits under the header, with an empty ID
        units, body = body[0] + [""] * (len(header) - len(body[0])), body[1:]
    for r in body:
        if len(r) < len(header):
            continue
        row = {h: parse_value(r[i], units[i]) for i, h in enumerate(header) if i != name_i}
        launches.append((r[name_i], row))
    return _aggregate(launches)


def _ncu_report_module(ncu: str | None):
    """Nsight Compute's own `ncu_report` module (extras/python of the install), or None."""
    roots = [Path(ncu).resolve().parent] if ncu else []
    roots += [Path(p) for p in sorted(glob.glob("/opt/nvidia/nsight-compute/*"), reverse=True)]
    for root in roots:
        extras = root / "extras" / "python"
        if (extras / "ncu_report.py").exists():
            sys.path.insert(0, str(extras))
            try:
                import ncu_report  # type: ignore

                return ncu_report
            except ImportError:
                continue
    return None


def read_report_module(mod, path: str | Path) -> dict[str, dict[str, Any]]:
    """Read an .ncu-rep with `ncu_report` (values in base units, as the raw CSV page gives them)."""
    ctx = mod.load_report(str(path))
    launches = []
    for i in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(i)
        for j in range(rng.num_actions()):
            act = rng.action_by_idx(j)
            row: dict[str, Any] = {}
            for name in act.metric_names():
                metric = act.metric_by_name(name)
                try:
                    v = metric.value()
                except Exception:
                    continue
                row[name] = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else \
                    (str(v) if v is not None else None)
            launches.append((act.name(), row))
    return _aggregate(launches)


def read_report(path: str | Path, ncu: str) -> dict[str, dict[str, Any]]:
    """Counters of a report: the raw CSV export, or `ncu_report` when the export fails."""
    proc = subprocess.run(import_command(ncu, str(path)), capture_output=True, text=True, timeout=300)
    try:
        return parse_csv(proc.stdout)
    except ValueError:
        mod = _ncu_report_module(ncu)
        if mod is None:
            raise ProfilingFailed(f"could not read {path}: {(proc.stderr or proc.stdout)[-1500:]}") from None
        return read_report_module(mod, path)


def forward_ms(metrics: dict[str, dict[str, Any]], calls: int = DEFAULT_CALLS) -> float | None:
    """GPU time of one forward from the counters: each kernel's mean duration x its launches per call, summed."""
    total = 0.0
    for m in metrics.values():
        d = m.get("gpu__time_duration.sum")
        if isinstance(d, float):
            total += d * m.get("launches", calls) / calls
    return total / 1e6 if total else None  # nanoseconds -> ms


# ---------------------------------------------------------------- running

def collect(problem: Any, cand_path: str | Path, calls: int = DEFAULT_CALLS, timeout: float = 600.0,
            gpu_index: int = 0, keep: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Profile the candidate's forward under ncu on GPU `gpu_index`; {kernel: {metric: value}}. `keep` names a
    directory to keep the .ncu-rep in."""
    if cuda_gpu_count() <= gpu_index:
        raise ProfilerUnavailable("no CUDA GPU is visible here: hardware counters need a GPU with Nsight Compute (ncu)")
    ncu = find_ncu()
    spec = json.dumps({"problem": [problem.path, [list(p) for p in problem.overrides], problem.precision],
                       "cand_path": str(Path(cand_path).resolve()), "calls": calls})
    with tempfile.TemporaryDirectory(prefix="wb-ncu-") as tmp:
        out_dir = Path(keep) if keep else Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        report = out_dir / "profile"
        private = Path(tmp) / "driver"  # the driver's own writable place once it isolates itself
        private.mkdir()
        cmd = profile_command(ncu, [sys.executable, "-m", "workbench.profiling.ncu", "--drive", spec], str(report))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        physical = visible.split(",")[gpu_index].strip() if visible else str(gpu_index)
        # ncu itself (not isolated) keeps the machine's TMPDIR; the driver moves to its private one once isolated
        env = {**os.environ, **isolation_env(private), "CUDA_VISIBLE_DEVICES": physical, "TRITON_INTERPRET": "0",
               "TMPDIR": os.environ.get("TMPDIR", tempfile.gettempdir()),
               "WORKBENCH_ISOLATION_LEVEL": NCU_ISOLATION or isolation_level({"CUDA_VISIBLE_DEVICES": physical})[0]}
        with gpu_lock(int(physical) if physical.isdigit() else 0):
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
            except subprocess.TimeoutExpired:
                raise ProfilingFailed(f"ncu did not finish within {timeout:.0f} s") from None
        output = proc.stdout + proc.stderr
        check_permission(output)
        rep = report.with_suffix(".ncu-rep")
        if proc.returncode != 0 or not rep.exists():
            raise ProfilingFailed(f"ncu exited {proc.returncode} without a report: {output[-2000:]}")
        metrics = read_report(rep, ncu)
    if not metrics:
        raise ProfilingFailed("ncu profiled no kernel inside the range: the forward launched none on the GPU")
    return metrics


# The driver isolates itself as a GPU worker does (the machine's probed level); $WORKBENCH_NCU_ISOLATION names
# another level (full, files, network, none) for a machine where ncu's injection needs more than CUDA does.
NCU_ISOLATION = os.environ.get("WORKBENCH_NCU_ISOLATION")


def _isolate_driver() -> None:
    level = os.environ.get("WORKBENCH_ISOLATION_LEVEL", "full")
    if not isolation_wanted() or level == "none" or not os.environ.get("WORKBENCH_WORKER_DIR"):
        return
    from ..harness.child import isolation

    # ncu keeps its lock and its files for the injection library (inside this process) in the machine's temp dir
    # ("Failed to access the temporary directory. Ensure that /tmp is writable" on the H200 when it was not), so that
    # directory stays writable here; the rest of the isolation holds. $WORKBENCH_NCU_TMP=private makes it read-only.
    extra = () if os.environ.get("WORKBENCH_NCU_TMP") == "private" else (tempfile.gettempdir(),)
    try:
        isolation.init_cuda()
        isolation.apply_level(level, os.environ["WORKBENCH_WORKER_DIR"], extra_writable=extra)
    except (isolation.IsolationUnavailable, OSError) as e:
        print(f"workbench: the ncu driver runs without OS isolation here ({e})", file=sys.stderr)
        return
    os.environ["TMPDIR"] = str(Path(os.environ["WORKBENCH_WORKER_DIR"]) / "tmp")
    tempfile.tempdir = None  # read $TMPDIR again


def _drive(spec: dict[str, Any]) -> None:
    """Run under ncu: build the models on the GPU, warm up outside the profiled range, then call the forward inside."""
    _isolate_driver()  # before the candidate or the problem is imported
    import torch  # only under ncu: the parent's `collect` stays light

    from ..harness.child.execution import build_pair, make_inputs, run_model, set_precision

    path, overrides, precision = spec["problem"]
    problem = Problem(path, tuple(tuple(p) for p in overrides), precision)
    device = torch.device("cuda")
    models = build_pair(problem, spec["cand_path"], device)
    set_precision(problem.effective_precision)
    inputs = make_inputs(problem, device, seed=0)
    for _ in range(2):  # JIT compilation and autotuning happen here, not in the profiled range
        run_model(models.candidate, inputs, device)
    torch.cuda.nvtx.range_push(NVTX_RANGE)
    for _ in range(spec.get("calls", DEFAULT_CALLS)):
        run_model(models.candidate, inputs, device)
    torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--drive":
        _drive(json.loads(sys.argv[2]))
    else:
        sys.exit("usage: python -m workbench.profiling.ncu --drive SPEC_JSON (run by ncu, not by hand)")
