"""Store faults end in one clear message (the store's path, what to do), exit 2, no traceback, before any work; a
locked store says once that it waits and for whom, then fails clearly; the evaluation cache does not serve a one-off
infrastructure failure as the candidate's verdict, and says when an answer is cached.

Read-only stores: these tests run as root, whom chmod does not stop, so a read-only file is simulated by opening it
the way SQLite opens a file it may not write (`mode=ro`); the chmod test runs only as another user."""
from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
import time

import pytest
from test_search import RecordingGPU
from test_store import DEVICE, SOURCE, ladder, provenance

from workbench.cli import main
from workbench.core.candidate import Candidate
from workbench.core.records import FAIL, PASS, StageRecord
from workbench.examples import EXAMPLES
from workbench.harness.ladder import Ladder
from workbench.problems import Problem
from workbench.store import Store
from workbench.store import sqlite as store_module
from workbench.store.sqlite import StoreError


def _filled(path):
    """A real store of several hundred pages (LLM calls with long prompts), its WAL folded into the file."""
    with Store(path) as s:
        for i in range(300):
            s.put_llm_call({"id": f"call{i}", "created_at": f"{i}", "prompt": f"prompt {i} " * 300, "ok": 1})
    assert not os.path.exists(f"{path}-wal") or os.path.getsize(f"{path}-wal") == 0
    return path


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _garbage_header(path):
    with open(path, "r+b") as f:
        f.write(b"this is not a database" * 8)


def _corrupt_middle(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        f.write(random.Random(0).randbytes(3 * 4096))


def _search(path, capsys, monkeypatch, *extra):
    """`workbench search` in-process; the device is never built (the store is checked before any work)."""
    import workbench.cli.search as cli_search

    def no_device(args):
        raise AssertionError("a device was opened before the store was checked")

    monkeypatch.setattr(cli_search, "_search_device", no_device)
    code = main(["search", "cross_entropy", "--steps", "1", "--store", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out + err


def _clear(text, path):
    return str(path) in text and "--no-store" in text and "WORKBENCH_STORE" in text and "Traceback" not in text


@pytest.mark.parametrize("damage", [_truncate, _garbage_header, _corrupt_middle])
def test_a_damaged_store_is_one_clear_message_before_any_work(tmp_path, capsys, monkeypatch, damage):
    path = _filled(tmp_path / "s.sqlite")
    damage(path)
    if damage is _corrupt_middle:  # opening alone reads none of these pages: the check on open is what finds them
        Store(path, check=False).close()
    code, text = _search(path, capsys, monkeypatch)
    assert code == 2 and _clear(text, path) and "damaged" in text, text


def test_eval_says_the_same_for_a_damaged_store(tmp_path, capsys):
    path = _filled(tmp_path / "s.sqlite")
    _garbage_header(path)
    ex = EXAMPLES[1]
    assert main(["eval", ex.problem, str(ex.path), "--device", "cpu", "--store", str(path)]) == 2
    _, err = capsys.readouterr()
    assert _clear(err, path) and "damaged" in err


def test_a_read_only_store_is_refused_on_open(tmp_path, capsys, monkeypatch):
    path = _filled(tmp_path / "s.sqlite")
    real = sqlite3.connect
    monkeypatch.setattr(store_module.sqlite3, "connect",
                        lambda p, **kw: real(f"file:{p}?mode=ro", uri=True, **kw))
    code, text = _search(path, capsys, monkeypatch)
    assert code == 2 and _clear(text, path) and "read-only" in text, text


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod (the mode=ro test covers it)")
@pytest.mark.parametrize("what", ["file", "directory"])
def test_a_chmod_read_only_store_is_refused_on_open(tmp_path, capsys, monkeypatch, what):
    path = _filled(tmp_path / "d" / "s.sqlite")
    target = path if what == "file" else path.parent
    target.chmod(0o444 if what == "file" else 0o555)
    try:
        code, text = _search(path, capsys, monkeypatch)
    finally:
        target.chmod(0o755)
    assert code == 2 and _clear(text, path), text


def test_an_unwritable_store_location_is_refused(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    path = blocker / "s.sqlite"  # its directory is a file
    code, text = _search(path, capsys, monkeypatch)
    assert code == 2 and _clear(text, path), text


HOLD = """
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(60)
"""


def test_a_locked_store_says_it_waits_for_whom_then_fails_clearly(tmp_path, capsys, monkeypatch):
    path = _filled(tmp_path / "s.sqlite")
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_MS", 100)
    monkeypatch.setattr(store_module, "LOCK_NOTICE_S", 0.3)
    monkeypatch.setattr(store_module, "LOCK_RETRY_S", 2.0)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        code, text = _search(path, capsys, monkeypatch)
        waited = time.monotonic() - t0
    finally:
        holder.kill()
        holder.wait()
    assert code == 2 and _clear(text, path), text
    assert text.count("waiting up to 2 s") == 1 and f"pid {holder.pid}" in text and "stayed locked" in text
    assert 2.0 <= waited < 10


# ---- the evaluation cache: infrastructure failures, and answers marked cached ----

def _crashed(key, h, reason="crashed: worker crashed (killed by SIGKILL); worker restarted"):
    ev = ladder(key, h, "compile", prov=provenance())
    ev.stages.append(StageRecord("correctness", FAIL, reason))
    return ev


@pytest.mark.parametrize("reason", ["crashed: worker crashed (killed by SIGKILL); worker restarted",
                                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                                    "worker error: worker did not start within 180 s"])
def test_a_one_off_infrastructure_failure_is_not_served_as_the_verdict(tmp_path, reason):
    problem = Problem.load("matmul_fp32", ["M=64", "N=64", "K=64"])
    cand = Candidate(SOURCE)
    with Store(tmp_path / "s.sqlite") as s:
        s.put_problem(problem)
        s.put_candidate(cand)
        s.put_evaluation(_crashed(problem.key, cand.hash, reason))
        assert s.find_evaluation(problem.key, cand.hash, DEVICE, "correctness") is None  # re-evaluated
        s.put_evaluation(_crashed(problem.key, cand.hash, reason))  # it happened again: the candidate's doing
        assert s.find_evaluation(problem.key, cand.hash, DEVICE, "correctness") is not None
        # an earlier clean verdict answers over a newer one-off crash
        other = Candidate(SOURCE + "# other\n")
        s.put_candidate(other)
        s.put_evaluation(ladder(problem.key, other.hash, "full_timing", prov=provenance()))
        s.put_evaluation(_crashed(problem.key, other.hash, reason))
        found = s.find_evaluation(problem.key, other.hash, DEVICE, "full_timing")
        assert found is not None and found.stages[-1].verdict == PASS


def test_a_cached_answer_says_so(tmp_path):
    problem = Problem.load("linear_gelu", ["batch_size=32", "in_features=48", "out_features=40"])
    cand = Candidate(SOURCE)
    store = Store(tmp_path / "s.sqlite")
    fresh = Ladder(RecordingGPU(), store=store).evaluate(problem, cand, up_to="correctness")
    again = Ladder(RecordingGPU(), store=store).evaluate(problem, cand, up_to="correctness")
    assert fresh.summary()["cached"] is False and again.summary()["cached"] is True


def test_store_errors_name_the_file(tmp_path):
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"x" * 5000)
    with pytest.raises(StoreError, match=str(path)):
        Store(path)
