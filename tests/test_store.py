"""The SQLite store: round trips, idempotence, cache-lookup semantics, parquet export and concurrent writers."""
from __future__ import annotations

import json
import multiprocessing
import pickle
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

import workbench
from workbench.core.candidate import Candidate
from workbench.core.records import FAIL, INCONCLUSIVE, PASS, STAGES, Evaluation, StageRecord
from workbench.problems import Problem
from workbench.store import Store, default_store_path
from workbench.store.sqlite import SCHEMA_VERSION

DEVICE = "cuda:NVIDIA H200"
SOURCE = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n"


def provenance(**kw):
    p = {"gpu_name": "NVIDIA H200", "driver": "550.1", "torch_version": "2.13.0", "triton_version": "3.6.0",
         "harness_version": workbench.HARNESS_VERSION, "timing_method": "cuda_events", "reps": 100, "spread": 0.02}
    p.update(kw)
    return p


def ladder(problem_key: str, cand_hash: str, upto: str, *, fail_at: str | None = None, device: str = DEVICE,
           prov: dict | None = None) -> Evaluation:
    """Stages passed up to `upto` (inclusive), or passed before `fail_at` and failed there."""
    stages = []
    for name in STAGES:
        if name == fail_at:
            stages.append(StageRecord(name, FAIL, reason="wrong answer"))
            break
        data = {}
        if name in ("quick_timing", "full_timing"):
            data = {"candidate_ms": 0.5, "eager_ms": 1.0, "compile_ms": 0.8, "speedup_vs_eager": 2.0,
                    "speedup_vs_compile": 1.6}
        stages.append(StageRecord(name, PASS, cost_s=0.1, data=data, flags=[{"kind": "note", "text": "x"}]))
        if name == upto:
            break
    return Evaluation(problem_key, cand_hash, device, stages, provenance() if prov is None else prov)


@pytest.fixture(scope="module")
def problem():
    return Problem.load("scale_shift_relu", ["batch_size=8", "dim=16"])


@pytest.fixture
def store(tmp_path, problem):
    with Store(tmp_path / "s" / "store.sqlite") as s:
        s.put_problem(problem)
        yield s


@pytest.fixture
def cand(store):
    c = Candidate(SOURCE, parent="abc", origin=(("kind", "template"), ("config", {"BLOCK": 128})))
    store.put_candidate(c)
    return c


def test_default_path(monkeypatch, tmp_path):
    monkeypatch.delenv("WORKBENCH_STORE", raising=False)
    monkeypatch.delenv("WORKBENCH_HOME", raising=False)
    assert default_store_path() == Path.home() / ".workbench" / "store.sqlite"
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / "store.sqlite"
    monkeypatch.setenv("WORKBENCH_STORE", str(tmp_path / "x.sqlite"))
    assert default_store_path() == tmp_path / "x.sqlite"
    with Store() as s:
        assert s.path == tmp_path / "x.sqlite" and s.path.exists()


def test_pragmas(store):
    conn = sqlite3.connect(store.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()
    assert store._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    Store(store.path).close()  # reopening an existing store is harmless


def test_round_trip(store, problem, cand):
    ev = ladder(problem.key, cand.hash, "full_timing")
    rid = store.put_evaluation(ev)
    assert isinstance(rid, int)

    p = store.frame("problems").iloc[0]
    assert (p.key, p["name"], p.policy) == (problem.key, "scale_shift_relu", "strict")
    assert p.source == problem.source and "batch_size = 8" in p.source
    assert json.loads(p.overrides) == {"batch_size": "8", "dim": "16"} and p.counts is None

    c = store.frame("candidates").iloc[0]
    assert (c.hash, c.source, c.parent) == (cand.hash, SOURCE, "abc")

    e = store.evaluations_frame(problem.key).iloc[0]
    assert e.id == rid and e.ok == 1 and e.fidelity == "full_timing" and e.problem_name == "scale_shift_relu"
    assert (e.candidate_ms, e.speedup_vs_compile, e.reps, e.spread) == (0.5, 1.6, 100, 0.02)
    assert (e.gpu_name, e.harness_version, e.timing_method) == ("NVIDIA H200", workbench.HARNESS_VERSION,
                                                                 "cuda_events")

    back = store.find_evaluation(problem.key, cand.hash, DEVICE, "full_timing")
    assert back == ev  # dataclass equality: stages, data, flags and provenance all survive


def test_idempotent_puts(store, problem, cand):
    store.put_problem(problem)
    store.put_candidate(cand)
    store.put_candidate(Candidate(SOURCE + "   \n"))  # same hash: whitespace does not make a new kernel
    assert len(store.frame("problems")) == 1 and len(store.frame("candidates")) == 1
    store.put_problem(problem, counts={"flops": 128, "bytes": 1024})
    store.put_problem(problem)  # no counts given: the stored ones stay
    assert json.loads(store.frame("problems").counts[0]) == {"flops": 128, "bytes": 1024}
    ids = [store.put_evaluation(ladder(problem.key, cand.hash, "compile")) for _ in range(3)]
    assert len(set(ids)) == 1 and len(store.frame("evaluations")) == 1  # the same record is stored once


def test_an_evaluation_equal_but_for_its_wall_clock_is_stored_once_anything_else_is_appended(store, problem, cand):
    """A replayed search asked again re-evaluates what is not served (a budget-refused or unrecorded full timing):
    the same answer, which must not become a second row. Whatever differs in what the record says is a new row."""
    first = ladder(problem.key, cand.hash, "quick_timing")
    rid = store.put_evaluation(first)
    again = ladder(problem.key, cand.hash, "quick_timing")
    for s in again.stages:
        s.cost_s, s.gpu_s = s.cost_s + 0.37, s.gpu_s + 0.2  # another run's seconds
    assert store.put_evaluation(again) == rid and len(store.frame("evaluations")) == 1
    slower = ladder(problem.key, cand.hash, "quick_timing")
    slower.stages[-1].data = {**slower.stages[-1].data, "candidate_ms": 0.51}  # a measurement differs
    other_prov = ladder(problem.key, cand.hash, "quick_timing", prov=provenance(promotion="promoted"))
    refused = ladder(problem.key, cand.hash, "quick_timing")
    refused.stages.append(StageRecord("full_timing", "refused", "not run: budget", retry=True))
    newer_harness = ladder(problem.key, cand.hash, "quick_timing", prov=provenance(harness_version="older"))
    other_device = ladder(problem.key, cand.hash, "quick_timing", device="cuda:NVIDIA A100")
    ids = [store.put_evaluation(ev) for ev in (slower, other_prov, refused, newer_harness, other_device)]
    assert len({rid, *ids}) == 6 and len(store.frame("evaluations")) == 6
    assert store.put_evaluation(refused) == ids[2]  # a refused (retry) record asked again: still one row
    # the newest that reaches the fidelity (the refused one does not, the others are another device or harness)
    assert store.find_evaluation(problem.key, cand.hash, DEVICE, "quick_timing") == other_prov


def test_evaluation_needs_its_problem_and_candidate(store, problem):
    with pytest.raises(ValueError, match="put_problem and put_candidate first"):
        store.put_evaluation(ladder(problem.key, "0" * 16, "static"))
    assert len(store.frame("evaluations")) == 0


def test_find_evaluation_semantics(store, problem, cand):
    key, h = problem.key, cand.hash
    assert store.find_evaluation(key, h, DEVICE, "static") is None

    store.put_evaluation(ladder(key, h, "correctness"))
    assert store.find_evaluation(key, h, DEVICE, "correctness").fidelity == "correctness"
    assert store.find_evaluation(key, h, DEVICE, "quick_timing") is None  # passed correctness only: not far enough

    store.put_evaluation(ladder(key, h, "full_timing"))
    assert store.find_evaluation(key, h, DEVICE, "quick_timing").fidelity == "full_timing"

    other = Candidate(SOURCE.replace("relu", "abs"))
    store.put_candidate(other)
    store.put_evaluation(ladder(key, other.hash, "", fail_at="compile"))
    failed = store.find_evaluation(key, other.hash, DEVICE, "full_timing")  # a failure need not be re-run
    assert failed is not None and not failed.ok and failed.stages[-1].name == "compile"

    # An inconclusive last stage is not a failure: it does not stand in for a higher fidelity.
    third = Candidate(SOURCE.replace("relu", "neg"))
    store.put_candidate(third)
    store.put_evaluation(Evaluation(key, third.hash, DEVICE, [StageRecord("static", PASS),
                                                             StageRecord("compile", INCONCLUSIVE)], provenance()))
    assert store.find_evaluation(key, third.hash, DEVICE, "correctness") is None
    assert store.find_evaluation(key, third.hash, DEVICE, "compile") is not None

    assert store.find_evaluation(key, h, "cpu", "static") is None  # another device class
    assert store.find_evaluation(key, h, "cuda:NVIDIA A100", "static") is None
    with pytest.raises(ValueError):
        store.find_evaluation(key, h, DEVICE, "turbo")


def test_find_evaluation_harness_version(store, problem, cand, monkeypatch):
    store.put_evaluation(ladder(problem.key, cand.hash, "full_timing", prov=provenance(harness_version="0")))
    store.put_evaluation(ladder(problem.key, cand.hash, "full_timing", prov={}))  # unknown version: never reused
    assert store.find_evaluation(problem.key, cand.hash, DEVICE, "static") is None
    assert store.find_evaluation(problem.key, cand.hash, DEVICE, "static", harness_version="0") is not None
    monkeypatch.setattr(workbench, "HARNESS_VERSION", "0")
    assert store.find_evaluation(problem.key, cand.hash, DEVICE, "full_timing") is not None


def test_find_returns_newest(store, problem, cand):
    store.put_evaluation(ladder(problem.key, cand.hash, "full_timing", prov=provenance(driver="old")))
    store.put_evaluation(ladder(problem.key, cand.hash, "full_timing", prov=provenance(driver="new")))
    assert store.find_evaluation(problem.key, cand.hash, DEVICE, "full_timing").provenance["driver"] == "new"


def test_parquet_export(store, problem, cand, tmp_path):
    for upto in ("static", "correctness", "full_timing"):
        store.put_evaluation(ladder(problem.key, cand.hash, upto))
    paths = store.export_parquet(tmp_path / "export")
    assert set(paths) == {"problems", "candidates", "evaluations"}
    counts = {t: len(pd.read_parquet(p)) for t, p in paths.items()}
    assert counts == {"problems": 1, "candidates": 1, "evaluations": 3}
    ev = pd.read_parquet(paths["evaluations"])
    assert list(ev.fidelity) == ["static", "correctness", "full_timing"]
    assert ev.candidate_ms.isna().tolist() == [True, True, False]
    assert store.counts_by_fidelity() == {"static": 1, "correctness": 1, "full_timing": 1}


def test_pickled_store_reopens(store):
    clone = pickle.loads(pickle.dumps(store))
    try:
        assert clone.path == store.path and len(clone.frame("problems")) == 1
    finally:
        clone.close()


def test_closed_store_refuses(tmp_path):
    s = Store(tmp_path / "c.sqlite")
    s.close()
    with pytest.raises(RuntimeError, match="closed"):
        s.frame("problems")


# ---- concurrent writers: separate processes, one file, every row kept ----
N_WRITERS, N_EACH = 4, 200


def _writer(path: str, problem_key: str, cand_hash: str, worker: int, start) -> list[int]:
    store = Store(path)  # each process opens (and races to initialise) the store itself
    start.wait()
    ids = []
    for i in range(N_EACH):
        ev = ladder(problem_key, cand_hash, STAGES[i % len(STAGES)], prov=provenance(worker=worker, i=i))
        ids.append(store.put_evaluation(ev))
    store.close()
    return ids


def test_concurrent_writers(tmp_path, problem):
    path = tmp_path / "shared.sqlite"
    with Store(path) as s:
        s.put_problem(problem)
        cand = Candidate(SOURCE)
        s.put_candidate(cand)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        start = manager.Barrier(N_WRITERS)
        with ctx.Pool(N_WRITERS) as pool:
            results = pool.starmap(_writer, [(str(path), problem.key, cand.hash, w, start) for w in range(N_WRITERS)])
    ids = [i for r in results for i in r]
    assert len(ids) == len(set(ids)) == N_WRITERS * N_EACH
    with Store(path) as s:
        ev = s.frame("evaluations")
        assert len(ev) == N_WRITERS * N_EACH and set(ev.id) == set(ids)
        pairs = {(p["worker"], p["i"]) for p in map(json.loads, ev.provenance)}
        assert pairs == {(w, i) for w in range(N_WRITERS) for i in range(N_EACH)}


def test_retryable_outcomes_are_not_final(tmp_path):
    """A budget refusal, a replay 'not measured' or an executor failure says nothing about the candidate: a later
    request must run it again rather than reuse that record."""
    from workbench.core.candidate import Candidate
    from workbench.core.records import Evaluation, StageRecord
    from workbench.problems import Problem
    from workbench.store import Store

    store = Store(tmp_path / "s.sqlite")
    problem = Problem.load("scale_shift_relu", ["batch_size=8", "dim=16"])
    store.put_problem(problem)
    for i, data in enumerate(({"retry": True}, {"executor_failure": "lost worker"}, {})):
        cand = Candidate(f"# {i}\n")
        store.put_candidate(cand)
        verdict = "refused" if i != 1 else "fail"
        ev = Evaluation(problem.key, cand.hash, "cuda:X", [StageRecord("static", "pass"),
                                                            StageRecord("correctness", verdict, "r", data=data)],
                        provenance={"harness_version": workbench.HARNESS_VERSION})
        store.put_evaluation(ev)
        found = store.find_evaluation(problem.key, cand.hash, "cuda:X", "full_timing")
        assert (found is None) == (i < 2), i


# the llm_calls table as the LLM recorder created it on its own connection before the store owned it
OLD_LLM_CALLS = """CREATE TABLE IF NOT EXISTS llm_calls (
    id TEXT PRIMARY KEY, created_at TEXT NOT NULL, purpose TEXT, model TEXT,
    input_tokens INTEGER, output_tokens INTEGER, cache_read_tokens INTEGER, cache_write_tokens INTEGER,
    cost_usd REAL, latency_s REAL, retries INTEGER, stop_reason TEXT, ok INTEGER, error TEXT, prompt TEXT, reply TEXT
)"""


def test_llm_calls_in_a_store_that_already_has_them(tmp_path):
    """A store file whose llm_calls table (and a row) the recorder wrote itself still opens; the store appends to
    that table and reads both rows back, oldest first, without touching its schema version."""
    path = tmp_path / "old.sqlite"
    Store(path).close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(OLD_LLM_CALLS)
        conn.execute("INSERT INTO llm_calls (id, created_at, purpose, cost_usd, ok) VALUES "
                     "('a', '2025-01-01T00:00:00+00:00', 'propose:x', 0.5, 1)")
    conn.close()
    with Store(path) as s:
        assert s.put_llm_call({"id": "b", "created_at": "2025-01-02T00:00:00+00:00", "purpose": "forecast:x",
                               "cost_usd": 0.25, "ok": 0, "error": "RateLimitError"}) == "b"
        calls = s.llm_calls()
        assert [(c["id"], c["purpose"], c["cost_usd"], c["ok"]) for c in calls] == [
            ("a", "propose:x", 0.5, 1), ("b", "forecast:x", 0.25, 0)]
        assert calls[1]["error"] == "RateLimitError" and calls[1]["model"] is None
        assert s._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
