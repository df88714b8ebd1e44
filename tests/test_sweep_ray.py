"""Sweeps whose runs use the Ray device: one local cluster started by the sweep and shared by its runs, each taking
its part of it ($WORKBENCH_RAY_SHARE), shut down at the end; and RayDevice's pool sizing and partial start, checked on
a fake `ray` (no cluster started: each start costs seconds).

Not skipped when ray is missing: CI installs it (the `test` extra), as for tests/test_ray_device.py."""
from __future__ import annotations

import json
import socket
import sys
import time

import pytest
import ray

import workbench.devices.ray_device as rd
import workbench.lab.sweep as sweep_mod
from workbench.lab.sweep import SweepError, run_sweep
from workbench.lab.sweep_config import SweepConfig

RAY_NB = '''# %% tags=["parameters"]
device = "cpu"
x = 0
out_dir = ""

# %%
import json, os
from pathlib import Path
from workbench.devices import get_device

dev = get_device(device, kind="cpu", start_timeout=150)  # actors import torch: slow on a loaded 2-core machine
try:
    Path(out_dir, "ray.json").write_text(json.dumps({
        "address": dev.provenance()["ray_address"], "workers": dev.info["workers"], "started": len(dev._pool.meta),
        "share": os.environ.get("WORKBENCH_RAY_SHARE")}))
finally:
    dev.close()
'''


@pytest.fixture
def no_ray_env(monkeypatch):
    for k in ("WORKBENCH_RAY_ADDRESS", "RAY_ADDRESS", "WORKBENCH_RAY_SHARE"):
        monkeypatch.delenv(k, raising=False)


def _closed(address: str, wait_s: float = 15.0) -> bool:
    host, port = address.rsplit(":", 1)
    t_end = time.monotonic() + wait_s
    while time.monotonic() < t_end:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except OSError:
            return True
        time.sleep(0.2)
    return False


@pytest.mark.timeout(330)
def test_ray_runs_share_one_cluster_started_by_the_sweep(tmp_path, monkeypatch, no_ray_env):
    for m in ("papermill", "jupytext", "ipykernel", "nbformat"):
        pytest.importorskip(m)
    assert not ray.is_initialized()  # else the sweep would hand the runs this process's cluster
    # two CPUs whatever the machine: with a share of 2 each run gets one actor (without it each would ask for both,
    # and one run's actor could not be scheduled)
    monkeypatch.setitem(sweep_mod.RAY_INIT_KWARGS, "num_cpus", 2)
    monkeypatch.setitem(sweep_mod.RAY_INIT_KWARGS, "num_gpus", 0)
    nb = tmp_path / "ray_nb.py"
    nb.write_text(RAY_NB)
    cfg = SweepConfig("ray", str(nb), base={"device": "ray"}, grid={"x": [1, 2]}, jobs=2)
    s = run_sweep(cfg, out_root=tmp_path / "runs")
    assert len(s.ok) == 2, s.text() + "\n" + "\n".join(
        (r.dir / "papermill.log").read_text()[-3000:] for r in s.failed)

    seen = [json.loads((r.dir / "ray.json").read_text()) for r in s.runs]
    manifests = [json.loads((r.dir / "manifest.json").read_text()) for r in s.runs]
    address = manifests[0]["ray_address"]
    assert address and address != "local"
    assert [v["address"] for v in seen] == [m["ray_address"] for m in manifests] == [address, address]
    assert [m["ray_share"] for m in manifests] == [2, 2] and [v["share"] for v in seen] == ["2", "2"]
    assert [(v["workers"], v["started"]) for v in seen] == [(1, 1), (1, 1)]  # 2 CPUs // share 2, all started

    # the sweep's cluster is gone: this process is no longer connected and nothing listens at its address
    assert not ray.is_initialized()
    assert _closed(address), f"the sweep's Ray cluster at {address} still answers"


def test_ray_planning_and_missing_ray(tmp_path, monkeypatch, no_ray_env):
    nb = tmp_path / "ray_nb.py"
    nb.write_text(RAY_NB)
    cfg = SweepConfig("r", str(nb), grid={"device": ["ray", "cpu", "ray:10.0.0.1:6379"], "x": [1, 2, 3]})
    specs = sweep_mod.expand(cfg)
    targets = sweep_mod._ray_targets(specs, {"device": "cpu"})
    assert [targets.get(s.run_id) for s in specs] == [""] * 3 + [None] * 3 + ["10.0.0.1:6379"] * 3
    # the share: how many runs on one cluster may run at once
    assert {e["WORKBENCH_RAY_SHARE"] for e in sweep_mod._ray_envs(targets, jobs=2).values()} == {"2"}
    assert {e["WORKBENCH_RAY_SHARE"] for e in sweep_mod._ray_envs(targets, jobs=8).values()} == {"3"}
    one = {specs[0].run_id: "", specs[6].run_id: "10.0.0.1:6379"}  # one run on each cluster
    assert {e["WORKBENCH_RAY_SHARE"] for e in sweep_mod._ray_envs(one, jobs=2).values()} == {"1"}
    monkeypatch.setenv("WORKBENCH_RAY_SHARE", "5")  # set by the user: kept
    assert {e["WORKBENCH_RAY_SHARE"] for e in sweep_mod._ray_envs(targets, jobs=2).values()} == {"5"}
    monkeypatch.delenv("WORKBENCH_RAY_SHARE")
    # the notebook's default counts when the sweep does not set the parameter
    assert list(sweep_mod._ray_targets(sweep_mod.expand(SweepConfig("d", "nb.py")), {"device": "ray"}).values()) == [""]
    # no ray installed: refused before anything is written
    monkeypatch.setitem(sys.modules, "ray", None)
    out = tmp_path / "runs"
    with pytest.raises(SweepError, match=r"pip install 'workbench\[ray\]'"):
        run_sweep(SweepConfig("r", str(nb), base={"device": "ray"}), out_root=out)
    assert not out.exists()
    monkeypatch.setenv("WORKBENCH_RAY_SHARE", "two")
    with pytest.raises(SweepError, match="WORKBENCH_RAY_SHARE"):
        run_sweep(SweepConfig("r", str(nb), base={"device": "ray:10.0.0.1:6379"}), out_root=out)


# ---------------------------------------------------------------------------------------------- a fake ray


class _Ref:
    def __init__(self, ok: bool):
        self.ok = ok


class _FakeActor:
    def __init__(self, ok: bool):
        self.ready = type("M", (), {"remote": lambda _self, *a: _Ref(ok)})()
        self.close = type("M", (), {"remote": lambda _self, *a: _Ref(True)})()


class _FakeRay:
    class exceptions:
        class GetTimeoutError(Exception):
            pass

    def __init__(self, res=None):
        self.res, self.killed = res or {}, []

    def is_initialized(self):
        return True  # the device joins "this process's" cluster: no init, no shutdown

    def cluster_resources(self):
        return dict(self.res)

    def get(self, ref, timeout=None):
        if not ref.ok:
            raise self.exceptions.GetTimeoutError("Get timed out: the actor could not be scheduled")
        return {"node": "n1", "host": "h", "pid": 1, "info": {}, "name": "cpu", "gpu_name": None, "provenance": {}}

    def kill(self, actor, no_restart=True):
        self.killed.append(actor)

    def wait(self, refs, num_returns=1, timeout=None):
        return refs, []

    def remote(self, cls):
        fake = self

        class Handle:
            def options(self, **kw):
                fake.last_options = kw
                return self

            def remote(self, *a):
                return _FakeActor(True)

        return Handle()


@pytest.fixture
def fake_pools(monkeypatch):
    """RayDevice on a fake ray: (the fake, the size of each pool it creates)."""
    sizes: list[int] = []
    fake = _FakeRay()

    class Pool(rd._Pool):
        def __init__(self, ray, make, size, start_timeout, warm):
            sizes.append(size)
            super().__init__(ray, make, size, start_timeout, warm)

    monkeypatch.setattr(rd, "_ray", lambda: fake)
    monkeypatch.setattr(rd, "_Pool", Pool)
    monkeypatch.delenv("WORKBENCH_RAY_SHARE", raising=False)
    return fake, sizes


@pytest.mark.parametrize("kind, res, share, workers, expect", [
    ("cpu", {"CPU": 8}, None, None, [8]),  # unset: the whole cluster, as before
    ("cpu", {"CPU": 8}, "3", None, [2]),
    ("cpu", {"CPU": 2}, "4", None, [1]),  # never less than one actor
    ("cpu", {"CPU": 8}, "4", 5, [5]),  # explicit workers win
    ("cuda", {"CPU": 64, "GPU": 8}, None, None, [8, 56]),  # eval actors, then compile actors (CPUs - eval)
    ("cuda", {"CPU": 64, "GPU": 8}, "4", None, [2, 14]),  # 8 GPUs / 4; 64 / 4 CPUs, 2 of them for the eval actors
    ("cuda", {"CPU": 256, "GPU": 8}, "2", None, [4, 40]),  # ~10 compile actors per GPU at most
])
def test_ray_device_pool_sizes_honour_the_share(fake_pools, monkeypatch, kind, res, share, workers, expect):
    fake, sizes = fake_pools
    fake.res = res
    if share:
        monkeypatch.setenv("WORKBENCH_RAY_SHARE", share)
    dev = rd.RayDevice(kind=kind, workers=workers)
    assert sizes == expect and dev.info["workers"] == expect[0]


def test_ray_device_refuses_a_malformed_share_before_joining(fake_pools, monkeypatch):
    fake, sizes = fake_pools
    fake.is_initialized = lambda: pytest.fail("joined a cluster with a malformed share")
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("WORKBENCH_RAY_SHARE", bad)
        with pytest.raises(ValueError, match="WORKBENCH_RAY_SHARE"):
            rd.RayDevice(kind="cpu")
    assert not sizes


def test_pool_starts_with_the_actors_that_could_be_scheduled():
    # slots whose actor is not scheduled in time are given up; the pool serves with the others
    fake = _FakeRay()
    oks = iter([True, False, False])
    pool = rd._Pool(fake, lambda: _FakeActor(next(oks)), 3, start_timeout=1.0, warm=(True, True))
    assert pool.live == 1 and pool.idle == [0] and len(fake.killed) == 2
    assert len(pool.errors) == 2 and "could not be scheduled" in pool.errors[0]
    assert pool.checkout() == (0, pool.actors[0])
    # none scheduled: the device cannot start
    with pytest.raises(RuntimeError, match="no Ray actor started"):
        rd._Pool(fake, lambda: _FakeActor(False), 2, start_timeout=1.0, warm=(True, True))


def test_sweep_cluster_is_shut_down_on_error():
    # the cluster context on a fake ray: started, its address handed out, shut down though the sweep raised; one
    # this process was already connected to is handed out and left running
    calls = []

    class Ctx:
        gcs_address = "10.0.0.2:6379"

    class Fake:
        initialized = False

        def is_initialized(self):
            return self.initialized

        def init(self, **kw):
            calls.append(("init", kw))

        def shutdown(self):
            calls.append(("shutdown",))

        def get_runtime_context(self):
            return Ctx()

    with pytest.raises(KeyError):
        with sweep_mod._sweep_ray_cluster(Fake()) as address:
            assert address == "10.0.0.2:6379"
            raise KeyError("a run failed to start")
    assert calls == [("init", sweep_mod.RAY_INIT_KWARGS), ("shutdown",)]
    assert sweep_mod.RAY_INIT_KWARGS["address"] == "local"  # a fresh cluster, never one found on the machine
    calls.clear()
    connected = Fake()
    connected.initialized = True
    with sweep_mod._sweep_ray_cluster(connected) as address:
        assert address == "10.0.0.2:6379"
    assert calls == []
