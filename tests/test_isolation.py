"""The OS isolation of candidate workers: no network, a read-only file system but for the worker's own directory,
no way back to the privileges, captured and bounded output, a memory limit and a CPU-time limit.

Runs on the CPU (the GPU worker is isolated the same way; tests/test_gpu.py runs every GPU stage through it). Where
the OS refuses namespaces the tests skip naming the OS's reason: the workbench then says the same once and keeps the
static stage as the only barrier."""
from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from workbench.devices import cuda_gpu_count
from workbench.devices.local import LocalDevice
from workbench.devices.worker import Worker, describe_exit
from workbench.problems.problem import Problem

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def worker():
    w = Worker({"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}, name="iso")
    w.start()
    iso = w.info["isolation"]
    if not iso["active"]:
        w.stop()
        pytest.skip(f"the OS refuses worker isolation on this machine: {iso['reason']}")
    yield w
    w.stop()


def test_a_file_outside_the_worker_cannot_be_written(worker, tmp_path):
    target = tmp_path / "escaped.txt"
    r = worker.call("isolation_probe:write_file", 60, path=str(target))
    assert "Read-only file system" in r["outcome"]
    assert not target.exists()


def test_the_network_cannot_be_reached(worker):
    with socket.socket() as server:  # a listener on this machine's loopback: reachable from anywhere but the worker
        server.bind(("127.0.0.1", 0))
        server.listen()
        r = worker.call("isolation_probe:connect", 60, port=server.getsockname()[1])
    assert "unreachable" in r["outcome"] or "refused" in r["outcome"], r


def test_the_private_tmpdir_is_writable_and_private(worker):
    r = worker.call("isolation_probe:scratch", 60)
    assert r["read_back"] == "mine"
    assert not Path(r["path"]).exists()  # a tmpfs in the worker's mount namespace: the parent sees an empty dir


def test_root_in_the_worker_cannot_undo_the_mounts(worker):
    assert worker.call("isolation_probe:remount", 60)["returncode"] != 0


def test_prints_are_captured_and_bounded(worker, capfd):
    r = worker.call("isolation_probe:shout", 60, n_bytes=1_000_000)
    out, err = capfd.readouterr()
    assert "xxxx" not in out and "to stderr" not in err  # nothing reached this process's stdout or stderr
    assert r["output"]["bytes"] > 1_000_000
    assert len(r["output"]["tail"]) <= 4000 and r["output"]["tail"].rstrip().endswith("to stderr")
    assert "output" not in worker.call("isolation_probe:scratch", 60)  # emptied after each answer


def test_a_worker_over_its_memory_limit_is_killed(worker):
    import os

    from workbench.devices.worker import process_tree_rss

    worker.memory_limit = process_tree_rss(worker.proc.pid) + 300 * 2**20
    r = worker.call("isolation_probe:hold_memory", 60, n_bytes=800 * 2**20, seconds=20)
    assert r.get("memory_exceeded") and r["crashed"] and "over its limit" in r["error"], r
    assert r["_wall_s"] < 15
    worker.memory_limit = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def test_cpu_time_past_the_limit_is_killed_by_the_kernel():
    code = ("from workbench.harness.child import isolation\nisolation.allow_cpu_seconds(1)\n"
            "while True:\n    pass\n")
    proc = subprocess.run([sys.executable, "-c", code], timeout=60, cwd=HERE.parent)
    assert "SIGXCPU" in describe_exit(proc.returncode)


def _writer(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "leak.txt"
    cand = tmp_path / "writer.py"
    cand.write_text(textwrap.dedent(f"""
        import torch
        import torch.nn as nn


        class ModelNew(nn.Module):
            def __init__(self, scale, shift):
                super().__init__()
                self.scale, self.shift = scale, shift

            def forward(self, x):
                with open({str(target)!r}, "a") as f:
                    f.write("leak")
                return torch.relu(x * self.scale + self.shift)
        """))
    return target, cand


def test_a_candidate_that_writes_a_file_fails_its_stage_and_writes_nothing(tmp_path):
    """The whole device path, static stage bypassed: the sandbox is the barrier behind it."""
    target, cand = _writer(tmp_path)
    dev = LocalDevice("cpu")
    try:
        if not dev.info["isolation"]["active"]:
            pytest.skip(f"the OS refuses worker isolation here: {dev.info['isolation']['reason']}")
        problem = Problem.load("scale_shift_relu", overrides={"batch_size": 4, "dim": 64})
        rec = dev.run_stages(problem, cand, ["correctness"])[-1]
    finally:
        dev.close()
    assert rec.verdict == "fail" and "Read-only file system" in rec.reason, rec
    assert not target.exists()


@pytest.mark.gpu
@pytest.mark.skipif(cuda_gpu_count() == 0, reason="needs a CUDA GPU (run on the H200)")
def test_the_gpu_worker_is_isolated_and_cuda_and_nvml_still_work(tmp_path):
    from workbench.examples import EXAMPLES

    target, cand = _writer(tmp_path)
    dev = LocalDevice("cuda")
    try:
        info = dev.info
        print("GPU worker isolation:", info["isolation"])
        assert info["isolation"]["active"], info["isolation"]
        assert info["cuda"] and info["driver"], info  # the driver version comes from NVML inside the worker
        problem = Problem.load("scale_shift_relu", overrides={"batch_size": 4, "dim": 64})
        rec = dev.run_stages(problem, cand, ["correctness"])[-1]
        assert rec.verdict == "fail" and "Read-only file system" in rec.reason, rec
        ex = next(e for e in EXAMPLES if e.problem == "scale_shift_relu")
        recs = dev.run_stages(Problem.load(ex.problem), ex.path, ["correctness", "quick_timing"])
        assert [r.verdict for r in recs] == ["pass", "pass"], recs
    finally:
        dev.close()
    assert not target.exists()


def test_a_gpu_worker_gets_the_strongest_level_its_probe_passes(monkeypatch, tmp_path):
    """The probe runs each level strongest first; the first that works is kept for the machine, with the reasons
    the stronger ones failed (here "full" is made to fail as a driver needing a capability would)."""
    import types

    from workbench.devices import worker as wk

    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    monkeypatch.delenv("WORKBENCH_ISOLATION_LEVEL", raising=False)
    monkeypatch.setattr(wk, "uses_gpu", lambda env: True)
    tried = []

    def fake_run(cmd, **kw):
        tried.append(cmd[4])
        ok = cmd[4] != "full"
        return types.SimpleNamespace(returncode=0 if ok else 1, stdout="ok\n" if ok else "",
                                     stderr="" if ok else "RuntimeError: CUDA error: operation not permitted")

    monkeypatch.setattr(wk.subprocess, "run", fake_run)
    level, refused = wk.isolation_level({"CUDA_VISIBLE_DEVICES": "0"})
    assert (level, tried) == ("files", ["full", "files"])
    assert "operation not permitted" in refused["full"]
    assert wk.isolation_level({"CUDA_VISIBLE_DEVICES": "0"}) == (level, refused) and tried == ["full", "files"]


def test_the_network_level_keeps_files_writable_but_not_the_network(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_ISOLATION_LEVEL", "network")
    w = Worker({"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}, name="iso-net")
    try:
        w.start()
        if not w.info["isolation"]["active"]:
            pytest.skip(f"the OS refuses worker isolation here: {w.info['isolation']['reason']}")
        assert w.info["isolation"]["level"] == "network"
        target = tmp_path / "allowed.txt"
        assert w.call("isolation_probe:write_file", 60, path=str(target))["outcome"] == "done" and target.exists()
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen()
            r = w.call("isolation_probe:connect", 60, port=server.getsockname()[1])
        assert "unreachable" in r["outcome"] or "refused" in r["outcome"], r
    finally:
        w.stop()
