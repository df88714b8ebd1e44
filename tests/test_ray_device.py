"""The Ray device on a local multi-node Ray cluster, CPU only: a sweep through the Ladder into the store with a worker
killed mid-run, a timeout, timing refused on kind 'cpu', and the fan-out helpers.

Not skipped when ray is missing: CI installs it (the `test` extra), so a failed import is a failure here.
"""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import ray
from cheat_headers import candidate_files, read_header
from ray.cluster_utils import Cluster

from workbench.core.candidate import Candidate
from workbench.core.records import FAIL, PASS, REFUSED
from workbench.devices import get_device
from workbench.devices.ray_device import RayDevice
from workbench.examples import EXAMPLES
from workbench.harness.ladder import Ladder
from workbench.problems import Problem
from workbench.store import Store

SLEEP_PER_FORWARD = 2.0  # x 5 seeds and more: the correctness call runs far longer than the kill delay


@pytest.fixture(scope="module")
def cluster():
    # A head node with no CPUs (so it runs no actor) and two worker nodes of one CPU each: two pool actors, one per
    # node, each its own raylet, so a lost actor and per-node provenance are exercised as on a real cluster while
    # the whole thing fits a 2-core CI machine. ray.cluster_utils.Cluster ships with ray (it is Ray's own test helper).
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(2):
            c.add_node(num_cpus=1)
        ray.init(address=c.address)
        c.wait_for_nodes()
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def device(cluster):
    # Short timeouts: correctness at these shapes takes ~1 s in the interpreter; grace covers a worker restart.
    dev = RayDevice(kind="cpu", timeouts={"compile": 60, "correctness": 20}, grace_s=60)
    try:
        yield dev
    finally:
        dev.close()


def _sweep_cases():
    cases = []
    for path in candidate_files():
        h = read_header(path)
        cases.append((Problem.load(h["problem"], h["set"]), Candidate.from_file(path)))
    for ex in EXAMPLES:
        cases.append((Problem.load(ex.problem, list(ex.cpu_overrides)), Candidate.from_file(ex.path)))
    return cases


def _slow_candidate() -> Candidate:
    """The shipped scale_shift_relu example, sleeping in forward on real tensors (never on meta: compile passes)."""
    src = EXAMPLES[0].path.read_text().replace("import torch\n", "import time\n\nimport torch\n", 1).replace(
        "        x = x.contiguous()\n",
        f"        if x.device.type != 'meta':\n            time.sleep({SLEEP_PER_FORWARD})\n"
        "        x = x.contiguous()\n")
    assert src.count("time.sleep") == 1
    return Candidate(src)


def _kill_when_running(dev: RayDevice, cand_path: str, killed: list, deadline_s: float = 60.0) -> None:
    t_end = time.monotonic() + deadline_s
    while time.monotonic() < t_end:
        for call in dev.running():
            if call["method"] == "run_stages" and call["cand_path"] == cand_path:
                time.sleep(1.0)  # inside the candidate's forward by now
                ray.kill(call["actor"])
                killed.append(call["actor"])
                return
        time.sleep(0.05)


def test_sweep_survives_a_killed_worker_and_stores_every_result(device, tmp_path):
    assert device.name == "cpu" and device.kind == "cpu"
    prov = device.provenance()
    assert prov["executor"] == "ray" and len(prov["ray_nodes"]) == 2 and prov["harness_version"]
    store = Store(tmp_path / "ray.sqlite")
    ladder = Ladder(device, store=store)
    slow = _slow_candidate()
    slow_problem = Problem.load(EXAMPLES[0].problem, list(EXAMPLES[0].cpu_overrides))
    cases = [(slow_problem, slow)] + _sweep_cases()
    assert len(cases) == 7

    killed: list = []
    killer = threading.Thread(target=_kill_when_running, args=(device, str(slow.write()), killed), daemon=True)
    killer.start()
    with ThreadPoolExecutor(2) as ex:  # two driver threads: both pool actors busy, as in map_stages
        evs = list(ex.map(lambda pc: ladder.evaluate(*pc), cases))
    killer.join(5)
    assert killed, "the slow candidate never ran"

    lost = evs[0]
    assert lost.stages[-1].verdict == FAIL and "lost worker" in lost.stages[-1].reason, lost.stages[-1].reason
    assert lost.stages[-1].executor_failure == "lost_worker"
    for ev in evs[1:]:  # the others complete; timing is refused on the CPU, exactly as LocalDevice refuses it
        assert [(s.name, s.verdict) for s in ev.stages] == [
            ("static", PASS), ("compile", PASS), ("correctness", PASS), ("quick_timing", REFUSED)], \
            [(s.name, s.reason) for s in ev.stages]
        assert "not a gpu time" in ev.stages[-1].reason.lower()
    nodes = {s.data.get("ray_node") for ev in evs for s in ev.stages if "ray_node" in s.data}
    assert len(nodes) == 2  # both workers took part

    # every finished evaluation is in the store, written by this (driver) process only
    frame = store.evaluations_frame()
    assert len(frame) == len(evs) == 7
    assert set(frame["candidate_hash"]) == {ev.candidate_hash for ev in evs}
    assert (frame["device"] == "cpu").all()
    assert sorted(frame["fidelity"]) == sorted(ev.fidelity for ev in evs)
    store.close()


def test_timeout_and_fan_out(device, tmp_path):
    problem = Problem.load("scale_shift_relu", ["batch_size=16", "dim=1024"])
    hang = tmp_path / "hang.py"
    hang.write_text(_slow_candidate().source.replace(f"time.sleep({SLEEP_PER_FORWARD})", "time.sleep(600)"))
    good = Candidate.from_file(EXAMPLES[0].path).write()
    t0 = time.monotonic()
    hung, fine = device.map_stages(problem, [(str(hang), ["correctness"]), (str(good), ["correctness"], {})])
    assert hung[-1].verdict == FAIL and "timed out" in hung[-1].reason, hung[-1].reason
    assert fine[-1].verdict == PASS, fine[-1].reason
    assert time.monotonic() - t0 < 60
    compiled = device.map_compile(problem, [good, hang])  # compile runs forward on meta only: the sleep is skipped
    assert [r.verdict for r in compiled] == [PASS, PASS] and all(r.name == "compile" for r in compiled)
    # the actor whose worker timed out serves again
    again = device.map_stages(problem, [(str(good), ["correctness"])] * 2)
    assert all(r[-1].ok for r in again), [r[-1].reason for r in again]
    # the driver's backstop: an actor that does not answer is killed and replaced (grace made negative so the
    # backstop fires at 2 s, before the actor's own 10 s timeout)
    grace, device.grace_s = device.grace_s, -8.0
    try:
        (rec,) = device.run_stages(problem, str(hang), ["correctness"])
    finally:
        device.grace_s = grace
    assert rec.verdict == FAIL and "timed out" in rec.reason and "actor killed" in rec.reason, rec.reason
    assert rec.executor_failure == "timeout"
    assert device.run_stages(problem, good, ["correctness"])[-1].ok  # the pool goes on


def test_timing_refused_on_cpu_kind(device):
    problem = Problem.load("scale_shift_relu", ["batch_size=16", "dim=1024"])
    good = Candidate.from_file(EXAMPLES[0].path).write()
    recs = device.run_stages(problem, good, ["correctness", "quick_timing"])
    assert [(r.name, r.verdict) for r in recs] == [("correctness", PASS), ("quick_timing", REFUSED)]
    recs = device.run_stages(problem, good, ["full_timing"])
    assert [(r.name, r.verdict) for r in recs] == [("full_timing", REFUSED)]
    assert "not a gpu time" in recs[0].reason.lower()


def test_get_device_ray_spec(monkeypatch):
    """'ray:ADDRESS' reaches RayDevice with that address; the local device stays the default."""
    seen = {}

    class Fake:
        def __init__(self, address=None, **kw):
            seen.update(address=address, **kw)

    import workbench.devices.ray_device as rd

    monkeypatch.setattr(rd, "RayDevice", Fake)
    get_device("ray:ray://head:10001", kind="cpu")
    assert seen == {"address": "ray://head:10001", "kind": "cpu"}
    get_device("ray")
    assert seen == {"address": None, "kind": "local"}
    local = get_device("cpu")
    assert type(local).__name__ == "LocalDevice"
    local.close()
    monkeypatch.setenv("WORKBENCH_RAY_ADDRESS", "10.0.0.1:6379")
    assert rd.resolve_address(None) == "10.0.0.1:6379" and rd.resolve_address("auto") == "auto"


def test_search_spreads_a_step_over_the_pool(device, tmp_path):
    """`Search` on the Ray device, unchanged: a step's candidates are evaluated on both actors at once (slots = 2),
    and every evaluation is stored by the driver."""
    from workbench.search import Search

    assert device.slots == 2
    t_end = time.monotonic() + 120
    while device.ready_slots() < 2 and time.monotonic() < t_end:  # an actor killed by an earlier test restarts
        time.sleep(0.5)
    assert device.ready_slots() == 2
    problem = Problem.load("scale_shift_relu", ["batch_size=16", "dim=1024"])
    store = Store(tmp_path / "search.sqlite")
    s = Search(problem, device, per_step=4, seed=0, store=store)
    s.run(steps=2)
    nodes = list(s.tree.nodes.values())
    assert len(nodes) >= 3  # the root, then a step of several children
    for n in nodes:  # timing is refused on the CPU kind; correctness ran on an actor and passed
        assert n.status == "refused" and n.stage == "quick_timing", (n.status, n.stage, n.reason)
    frame = store.evaluations_frame()
    assert len(frame) == len(nodes)
    hosts = set()
    for stages in frame["stages"]:
        hosts |= {st["data"].get("ray_node") for st in json.loads(stages) if st["name"] == "correctness"}
    assert len(hosts) == 2  # both actors (one per node) measured
    store.close()
