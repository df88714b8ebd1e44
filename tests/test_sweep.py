"""Sweep configs (workbench.lab.sweep_config) and papermill sweeps (workbench.lab.sweep).

The real sweep runs notebook 01 on the CPU device (softmax_rows 8x100, one step): two runs that finish and one whose
problem does not exist, in one call with two at once; a tiny notebook written here checks the per-run
CUDA_VISIBLE_DEVICES and the `out_dir` parameter."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from workbench.lab.sweep import SweepError, gpu_names, notebook_defaults, notebook_parameters, run_sweep, value_fits
from workbench.lab.sweep_config import ConfigError, SweepConfig, expand, from_dict, load_sweep, to_yaml

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "experiments" / "smoke_sweep.yaml"
NB01 = ROOT / "notebooks" / "01_explore_search.py"


def _needs_papermill():
    for m in ("papermill", "jupytext", "ipykernel", "nbformat"):
        pytest.importorskip(m)


def test_expand_and_run_ids():
    cfg = load_sweep(SMOKE)
    assert cfg.name == "smoke" and cfg.notebook == "notebooks/01_explore_search.py"
    runs = expand(cfg)
    assert len(runs) == 4
    assert [r.point for r in runs] == [{"seed": 0, "strategy": "greedy"}, {"seed": 0, "strategy": "mcts"},
                                       {"seed": 1, "strategy": "greedy"}, {"seed": 1, "strategy": "mcts"}]
    assert runs[1].params == {**cfg.base, "seed": 0, "strategy": "mcts"}
    assert runs[1].run_id.startswith("seed=0_strategy=mcts-")
    assert [r.run_id for r in expand(load_sweep(SMOKE))] == [r.run_id for r in runs]  # deterministic
    assert len({r.run_id for r in runs}) == 4
    # a changed base gives new ids; values that are not path-safe are made so
    other = dataclasses.replace(cfg, base={**cfg.base, "steps": 2})
    assert not {r.run_id for r in expand(other)} & {r.run_id for r in runs}
    odd = SweepConfig("odd", "nb.py", grid={"overrides": [["a=1", "b/c=2 x"]], "problem": ["../x"]})
    (rid,) = [r.run_id for r in expand(odd)]
    assert "/" not in rid and " " not in rid and rid.startswith("overrides=a=1+b-c=2-x_problem=.-x-")
    assert [r.run_id.rsplit("-", 1)[0] for r in expand(SweepConfig("b", "nb.py", base={"x": 1}))] == ["base"]


def test_yaml_round_trip(tmp_path):
    cfg = load_sweep(SMOKE)
    p = tmp_path / "again.yaml"
    to_yaml(cfg, p)
    assert load_sweep(p) == cfg
    cfg2 = SweepConfig("gpu", "nb.py", base={"overrides": ["a=1"], "flag": True, "x": None},
                       grid={"seed": [0, 1]}, jobs=2, devices=["0", "1"])
    assert from_dict(__import__("yaml").safe_load(to_yaml(cfg2))) == cfg2


@pytest.mark.parametrize("text, key", [
    ("name: a\nnotebook: nb.py\ngird: {seed: [1]}\n", "gird"),
    ("notebook: nb.py\n", "name"),
    ("name: a/b\nnotebook: nb.py\n", "name"),
    ("name: a\nnotebook: nb.py\ngrid: {seed: 3}\n", "grid.seed"),
    ("name: a\nnotebook: nb.py\ngrid: {seed: []}\n", "grid.seed"),
    ("name: a\nnotebook: nb.py\nbase: [1, 2]\n", "base"),
    ("name: a\nnotebook: nb.py\njobs: 0\n", "jobs"),
    ("name: a\nnotebook: nb.py\ndevices: 0\n", "devices"),
])
def test_config_errors_name_file_and_key(tmp_path, text, key):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_sweep(p)
    assert str(p) in str(e.value) and f": {key}:" in str(e.value)


def test_notebook_parameters_and_gpu_names():
    assert notebook_parameters(NB01) == ["problem", "overrides", "strategy", "steps", "seed", "budget_gpu_s",
                                         "surrogate", "tau", "findings", "compare", "device", "replay_data",
                                         "interactive", "out_dir"]
    assert notebook_defaults(NB01)["budget_gpu_s"] is None and notebook_defaults(NB01)["overrides"] == []
    assert gpu_names("GPU 0: NVIDIA H200 (UUID: GPU-1)\nGPU 1: NVIDIA H200 (UUID: GPU-2)\n") == ["NVIDIA H200"] * 2
    assert gpu_names("") == []


def test_unknown_parameter_rejected_before_any_run(tmp_path):
    out = tmp_path / "runs"
    cfg = dataclasses.replace(load_sweep(SMOKE), base={**load_sweep(SMOKE).base, "stpes": 1})
    with pytest.raises(SweepError) as e:
        run_sweep(cfg, out_root=out)
    msg = str(e.value)
    assert "stpes" in msg and "base" in msg and "problem, overrides, strategy, steps" in msg
    cfg = dataclasses.replace(load_sweep(SMOKE), grid={"seed": [0], "temperature": [0.1, 1.0]})
    with pytest.raises(SweepError, match="grid: unknown parameter.*temperature"):
        run_sweep(cfg, out_root=out)
    with pytest.raises(SweepError, match="matches no run"):
        run_sweep(load_sweep(SMOKE), out_root=out, only="seed=7*")
    # values are checked against the type of the notebook's literal, before anything starts
    cfg = dataclasses.replace(load_sweep(SMOKE), base={**load_sweep(SMOKE).base, "steps": "2"})
    with pytest.raises(SweepError, match=r"base\.steps: '2' \(str\) does not fit 01_explore_search.py's default 3"):
        run_sweep(cfg, out_root=out)
    cfg = dataclasses.replace(load_sweep(SMOKE), grid={"seed": [0, 1.5]})
    with pytest.raises(SweepError, match=r"grid\.seed: 1\.5 \(float\)"):
        run_sweep(cfg, out_root=out)
    assert not out.exists()  # nothing started, not even the folder


def test_value_fits_the_default_literal():
    assert value_fits(0.0, 15) and value_fits(0.0, 1.5) and not value_fits(0.0, True) and not value_fits(0.0, "1")
    assert value_fits(3, 4) and not value_fits(3, 4.0) and not value_fits(3, False)
    assert value_fits(True, False) and not value_fits(True, 1)
    assert value_fits([], ["a=1"]) and not value_fits([], "a=1") and value_fits("", "x") and not value_fits("", 1)
    assert value_fits(None, {"any": "thing"}) and value_fits({}, {"a": 1}) and not value_fits({}, [])


@pytest.mark.timeout(120)
def test_real_sweep_of_notebook_01(tmp_path):
    _needs_papermill()
    base = {**load_sweep(SMOKE).base}
    cfg = SweepConfig("t", str(NB01), base=base, grid={"problem": ["softmax_rows", "no_such_problem"], "seed": [0, 1]},
                      jobs=2)
    out = tmp_path / "runs"
    good = "problem=softmax_rows_*"
    # two runs of softmax_rows and one of a problem that does not exist, two at a time
    s = run_sweep(cfg, out_root=out, only=[good, "problem=no_such_problem_seed=0-*"])
    assert len(s.runs) == 3 and len(s.ok) == 2 and len(s.failed) == 1 and not s.skipped, s.text()
    for r in s.ok:
        m = json.loads((r.dir / "manifest.json").read_text())
        assert m["status"] == "ok" and m["error"] is None and m["params"] == r.params
        assert m["start"] and m["end"] and m["python"] and m["workbench"] and "git_sha" in m and "gpu" in m
        assert (r.dir / "notebook.ipynb").is_file() and (r.dir / "config.yaml").is_file()
        assert __import__("yaml").safe_load((r.dir / "config.yaml").read_text()) == r.params
    bad = s.failed[0]
    m = json.loads((bad.dir / "manifest.json").read_text())
    assert m["status"] == "failed" and m["error"].startswith("ProblemError: no problem file at 'no_such_problem'")
    assert "Problem.load" in m["traceback"] and (bad.dir / "notebook.ipynb").is_file()
    frame = s.frame()
    assert list(frame.status) == ["ok", "ok", "failed"] and list(frame.seed) == [0, 1, 0]
    # the report parsed from the executed notebooks: nothing timed on the CPU, no GPU-seconds spent
    assert frame.gpu_seconds[:2].tolist() == [0.0, 0.0] and math.isnan(frame.gpu_seconds[2])
    assert frame.best_speedup.isna().all()
    # resume: the two finished runs are skipped
    again = run_sweep(cfg, out_root=out, only=good)
    assert [r.status for r in again.runs] == ["skipped", "skipped"]
    assert [r.dir for r in again.runs] == s.dirs("ok") and "2 skipped" in again.text()


TINY = '''# %% tags=["parameters"]
x = 1
out_dir = ""

# %%
import json, os
from pathlib import Path
Path(out_dir, "seen.json").write_text(json.dumps({"x": x, "cuda": os.environ.get("CUDA_VISIBLE_DEVICES")}))
'''


@pytest.mark.timeout(60)
def test_devices_and_out_dir(tmp_path):
    _needs_papermill()
    nb = tmp_path / "tiny.py"
    nb.write_text(TINY)
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("name: tiny\nnotebook: tiny.py\ngrid: {x: [1, 2, 3]}\njobs: 4\ndevices: [3, 5]\n")
    s = run_sweep(cfg, out_root=tmp_path / "runs")  # the notebook is found next to the config
    assert len(s.ok) == 3, s.text()
    seen = [json.loads((r.dir / "seen.json").read_text()) for r in s.runs]
    assert [v["x"] for v in seen] == [1, 2, 3] and {v["cuda"] for v in seen} <= {"3", "5"}
    for r, v in zip(s.runs, seen):
        assert json.loads((r.dir / "manifest.json").read_text())["cuda_visible_devices"] == v["cuda"]
    assert "best_speedup" not in s.frame().columns  # no search report in this notebook


@pytest.mark.timeout(60)
def test_sweep_progress_as_each_run_ends(tmp_path, capsys):
    """`run_sweep(progress=...)` hears of each run as it ends (i of the runs to do); `workbench sweep` says so on
    stderr, a notebook draws it with `workbench.widgets.ItemProgress`."""
    _needs_papermill()
    from workbench.cli import main
    from workbench.widgets import ItemProgress

    (tmp_path / "tiny.py").write_text(TINY)
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("name: tiny\nnotebook: tiny.py\ngrid: {x: [1, 2, 3]}\njobs: 2\n")
    bar = ItemProgress(desc="sweep tiny")
    seen = []
    s = run_sweep(cfg, out_root=tmp_path / "runs", progress=lambda i, n, r: (seen.append((i, n, r.run_id)),
                                                                              bar(i, n, r)))
    assert len(s.ok) == 3 and [(i, n) for i, n, _ in seen] == [(1, 3), (2, 3), (3, 3)]
    assert sorted(rid for _, _, rid in seen) == sorted(r.run_id for r in s.runs)
    assert [line.split(" s")[0].rsplit("(", 1)[0].strip() for line in bar.lines] == \
        [f"sweep tiny: {i}/3 ok {rid}" for i, _, rid in seen]
    assert capsys.readouterr().out.splitlines() == bar.lines  # headless: one printed line a run
    assert main(["sweep", str(cfg), "--out", str(tmp_path / "cli")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" ok ")[0] for line in err if line.startswith("sweep: ")] == ["sweep: 1/3", "sweep: 2/3",
                                                                                    "sweep: 3/3"]


FAILS = '''# %% tags=["parameters"]
x = 1

# %%
if x == 2:
    raise ValueError("x=2 is not allowed")
'''


@pytest.mark.timeout(120)
def test_sweep_with_failed_runs_exits_nonzero_saying_how_many(tmp_path, capsys):
    _needs_papermill()
    from workbench.cli import main

    (tmp_path / "fails.py").write_text(FAILS)
    cfg = tmp_path / "fails.yaml"
    cfg.write_text("name: fails\nnotebook: fails.py\ngrid: {x: [1, 2]}\njobs: 2\n")
    assert main(["sweep", str(cfg), "--out", str(tmp_path / "runs")]) == 1
    out, err = capsys.readouterr()
    assert "1 ok, 1 failed" in out and "1 of 2 run(s) failed" in err and "Traceback" not in err


BEATS = '''# %% tags=["parameters"]
x = 1
out_dir = ""

# %%
import os, time
from pathlib import Path
Path(out_dir, "kernel.pid").write_text(str(os.getpid()))
for i in range(3000):
    Path(out_dir, "beat").write_text(str(i))
    time.sleep(0.1)
'''


@pytest.mark.timeout(180)
def test_sigterm_stops_the_papermill_child_and_its_kernel(tmp_path):
    """SIGTERM to a sweep reaches papermill and the kernel; the sweep waits for them, records the run as
    interrupted, starts no other run and exits 128 + 15: nothing keeps writing into the run directory."""
    import signal
    import subprocess
    import sys
    import time

    _needs_papermill()
    (tmp_path / "beats.py").write_text(BEATS)
    cfg = tmp_path / "beats.yaml"
    cfg.write_text("name: beats\nnotebook: beats.py\ngrid: {x: [1, 2]}\njobs: 1\n")
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "sweep", str(cfg), "--out", str(runs)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    deadline = time.monotonic() + 120
    while not list(runs.glob("beats/*/beat")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    (beat,) = list(runs.glob("beats/*/beat"))
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, (out, err)
    assert "stopped by SIGTERM" in err and "1 not started" in err and "Traceback" not in err
    last = beat.read_text()
    time.sleep(1.0)
    assert beat.read_text() == last  # the kernel stopped writing
    pid = int((beat.parent / "kernel.pid").read_text())
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    m = json.loads((beat.parent / "manifest.json").read_text())
    assert m["status"] == "failed" and m["error"] == "interrupted by SIGTERM"
    assert len(list(runs.glob("beats/*/manifest.json"))) == 1  # the second run never started


def test_binary_config_or_notebook_is_named(tmp_path):
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"\x89PNG\r\n\xff\xfe")
    with pytest.raises(ConfigError, match=r"bin\.yaml: not a UTF-8 text file"):
        load_sweep(bad)
    nb = tmp_path / "nb.py"
    nb.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SweepError, match=r"nb\.py: not a UTF-8 text file"):
        notebook_parameters(nb)


QUICK_OR_BEATS = '''# %% tags=["parameters"]
x = 1
out_dir = ""

# %%
import os, time
from pathlib import Path
if x == 2:
    Path(out_dir, "kernel.pid").write_text(str(os.getpid()))
    for i in range(3000):
        Path(out_dir, "beat").write_text(str(i))
        time.sleep(0.1)
'''


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _running_in(run_dir: Path) -> list[int]:
    """Processes whose command line names the run directory (papermill writes its notebook there)."""
    out = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if str(run_dir).encode() in (d / "cmdline").read_bytes() and not _gone(int(d.name)):
                out.append(int(d.name))
        except OSError:
            continue
    return out


def _wait_for(cond, seconds: float, what: str):
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {seconds:g} s: {what}")


@pytest.mark.timeout(180)
def test_a_sweep_run_from_another_thread_stops_its_children_when_it_raises(tmp_path):
    """Signal handlers exist in the main thread only; a sweep started from a widget's thread still never leaves a
    child behind on its exception path: a progress callback that raises stops the running papermill child and its
    kernel, the run is recorded as interrupted with the reason, and the exception comes out of `run_sweep`."""
    import threading

    _needs_papermill()
    (tmp_path / "qb.py").write_text(QUICK_OR_BEATS)
    cfg = tmp_path / "qb.yaml"
    cfg.write_text("name: qb\nnotebook: qb.py\ngrid: {x: [1, 2]}\njobs: 2\n")
    runs = tmp_path / "runs"

    def stop_here(i, n, run):
        _wait_for(lambda: list(runs.glob("qb/*/beat")), 120, "the second run's kernel beating")
        raise RuntimeError("stop the sweep")

    raised = []

    def in_thread():
        try:
            run_sweep(cfg, out_root=runs, progress=stop_here)
        except BaseException as e:  # what the thread's owner would see
            raised.append(e)

    t = threading.Thread(target=in_thread)
    t.start()
    t.join(170)
    assert not t.is_alive() and len(raised) == 1 and str(raised[0]) == "stop the sweep", raised
    (beat,) = list(runs.glob("qb/*/beat"))
    pid = int((beat.parent / "kernel.pid").read_text())
    assert _gone(pid) and not _running_in(beat.parent)
    last = beat.read_text()
    import time

    time.sleep(0.5)
    assert beat.read_text() == last
    m = json.loads((beat.parent / "manifest.json").read_text())
    assert m["status"] == "failed" and m["error"] == "interrupted: the sweep stopped on RuntimeError: stop the sweep"


SWEEP_IN_A_THREAD = """
import sys, threading
from workbench.lab.sweep import run_sweep
t = threading.Thread(target=run_sweep, args=(sys.argv[1],), kwargs={"out_root": sys.argv[2]}, daemon=True)
t.start()
t.join()
"""


@pytest.mark.timeout(180)
def test_a_sweeps_children_die_with_its_process_however_it_ends(tmp_path):
    """A process running a sweep in a thread, killed by SIGKILL (nothing of it runs after): papermill is sent
    SIGTERM by the kernel (it asked for it when it started) and the notebook's kernel follows it; nothing keeps
    writing into the run directory."""
    import signal
    import subprocess
    import sys

    _needs_papermill()
    (tmp_path / "beats.py").write_text(BEATS)
    cfg = tmp_path / "beats.yaml"
    cfg.write_text("name: beats\nnotebook: beats.py\ngrid: {x: [1]}\njobs: 1\n")
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-c", SWEEP_IN_A_THREAD, str(cfg), str(runs)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: list(runs.glob("beats/*/beat")) or proc.poll() is not None, 120, "the kernel beating")
        assert proc.poll() is None
        (beat,) = list(runs.glob("beats/*/beat"))
        pid = int((beat.parent / "kernel.pid").read_text())
        assert _running_in(beat.parent)  # papermill, under the sweep
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        _wait_for(lambda: _gone(pid) and not _running_in(beat.parent), 15, "papermill and its kernel ending")
        last = beat.read_text()
        import time

        time.sleep(0.5)
        assert beat.read_text() == last
    finally:
        if proc.poll() is None:
            proc.kill()
