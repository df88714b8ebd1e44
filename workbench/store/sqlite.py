"""`Store`: the embedded SQLite store of problems, candidates and evaluations.

Where it lives: `$WORKBENCH_STORE` if set, else `store.sqlite` in the home (`workbench.core.paths`).

Many processes (notebook, CLI, worker pools) share one file. Each process opens its own connection (a Store that is
pickled or inherited across fork reopens one in the new process); the database runs in WAL mode so readers never
block the writer, and every write is one `BEGIN IMMEDIATE` transaction that waits on `busy_timeout` and retries with
backoff when the file is locked, so concurrent writers queue up and nothing is lost. A write is committed before
its method returns.

Tables (JSON kept as TEXT, timestamps as ISO-8601 UTC text):
  problems(key PK, name, path, source, overrides, policy (its precision), counts, created_at)
  candidates(hash PK, source, parent, origin, created_at)
  evaluations(id PK, problem_key -> problems, candidate_hash -> candidates, device, fidelity, ok, stages,
              candidate_ms, eager_ms, compile_ms, speedup_vs_eager, speedup_vs_compile,
              gpu_name, driver, torch_version, triton_version, harness_version, timing_method, reps, spread,
              provenance, created_at)
  search_events(search_id, seq, event, created_at; PK (search_id, seq)): a search's events, what it resumes from
  searches(search_id PK, config, created_at): the configuration a search id was created with (a resume must match)
  llm_calls(id PK, created_at, purpose, model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
            cost_usd, latency_s, retries, stop_reason, ok, error, prompt, reply): one row per LLM call, its text
            redacted by the caller (`workbench.llm.recorder`); the API key is never a column

Faults: every SQLite or file error comes out as one `StoreError` naming the file and what to do. Opening checks the
file (`PRAGMA quick_check`, and the schema write doubles as a write probe), so a corrupt, truncated or read-only store
fails before any work is spent, not when the first result is written. A store locked by another process is waited on
(up to LOCK_RETRY_S), saying once on stderr that it waits and for whom.
"""
from __future__ import annotations

import datetime
import json
import os
import random
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import workbench
from workbench.core import paths
from workbench.core.records import FAIL, REFUSED, STAGES, Evaluation, StageRecord

from .lease import SearchLease

SCHEMA_VERSION = 1  # PRAGMA user_version; bump with a migration when the tables change
# SQLite's own busy wait is kept short so that the retry loop (which can say that it waits) does the long wait
BUSY_TIMEOUT_MS = 2_000
LOCK_RETRY_S = 300.0  # give up on a locked database only after this long: losing a record is worse than waiting
LOCK_NOTICE_S = 5.0  # say so once a wait lasts this long (writers of a sweep collide briefly all the time)
WHAT_TO_DO = "point WORKBENCH_STORE (or --store) at another file, or run the command with --no-store"
# reasons of a last stage that blame the machine rather than the candidate: a worker that died, could not start, or
# ran out of memory a neighbour may hold. Served from the store only once a second evaluation confirms it
INFRASTRUCTURE_MARKERS = ("crashed:", "worker error:", "out of memory", "no cuda gpus are available",
                          "busy or unavailable", "cuda driver initialization failed")

SUMMARY_COLUMNS = ("candidate_ms", "eager_ms", "compile_ms", "speedup_vs_eager", "speedup_vs_compile")
PROVENANCE_TEXT = ("gpu_name", "driver", "torch_version", "triton_version", "harness_version", "timing_method")
TABLES = ("problems", "candidates", "evaluations")  # the measurement tables `frame` and `export_parquet` read
LLM_CALL_COLUMNS = ("id", "created_at", "purpose", "model", "input_tokens", "output_tokens", "cache_read_tokens",
                    "cache_write_tokens", "cost_usd", "latency_s", "retries", "stop_reason", "ok", "error", "prompt",
                    "reply")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS problems (
    key        TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    path       TEXT NOT NULL,
    source     TEXT NOT NULL,
    overrides  TEXT NOT NULL,
    policy     TEXT NOT NULL,
    counts     TEXT,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS candidates (
    hash       TEXT PRIMARY KEY,
    source     TEXT NOT NULL,
    parent     TEXT,
    origin     TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS evaluations (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    problem_key        TEXT NOT NULL REFERENCES problems(key),
    candidate_hash     TEXT NOT NULL REFERENCES candidates(hash),
    device             TEXT NOT NULL,
    fidelity           TEXT NOT NULL,
    ok                 INTEGER NOT NULL,
    stages             TEXT NOT NULL,
    candidate_ms       REAL,
    eager_ms           REAL,
    compile_ms         REAL,
    speedup_vs_eager   REAL,
    speedup_vs_compile REAL,
    gpu_name           TEXT,
    driver             TEXT,
    torch_version      TEXT,
    triton_version     TEXT,
    harness_version    TEXT,
    timing_method      TEXT,
    reps               INTEGER,
    spread             REAL,
    provenance         TEXT NOT NULL,
    created_at         TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS evaluations_lookup ON evaluations(problem_key, candidate_hash, device);
CREATE TABLE IF NOT EXISTS search_events (
    search_id  TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    event      TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (search_id, seq)
);
CREATE TABLE IF NOT EXISTS searches (
    search_id  TEXT PRIMARY KEY,
    config     TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS llm_calls (
    id TEXT PRIMARY KEY, created_at TEXT NOT NULL, purpose TEXT, model TEXT,
    input_tokens INTEGER, output_tokens INTEGER, cache_read_tokens INTEGER, cache_write_tokens INTEGER,
    cost_usd REAL, latency_s REAL, retries INTEGER, stop_reason TEXT, ok INTEGER, error TEXT, prompt TEXT, reply TEXT
);
"""


def default_store_path() -> Path:
    return paths.store_path()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def _json(value: Any) -> str:
    # default=str: provenance and stage data may hold dtypes, paths or numpy scalars; a readable string beats a crash.
    return json.dumps(value, default=str, sort_keys=True)


def _real(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _is_lock_error(e: sqlite3.OperationalError) -> bool:
    msg = str(e).lower()
    return "locked" in msg or "busy" in msg


class StoreError(OSError):
    """The store cannot be used; the message names the file and what to do. An OSError: the CLI exits 2 with it."""


def _holders(path: Path) -> str:
    """Who else has the store open (Linux /proc; best effort): "pid 123 (workbench search ...)", or ""."""
    names, out = {str(path.resolve()) + s for s in ("", "-wal", "-shm")}, []
    for proc in Path("/proc").glob("[0-9]*"):
        if int(proc.name) == os.getpid():
            continue
        try:
            if any(os.readlink(fd) in names for fd in (proc / "fd").iterdir()):
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                out.append(f"pid {proc.name} ({cmd[:80]})")
        except OSError:
            continue
    return ", ".join(out[:3])


def infrastructure_failure(evaluation: Evaluation) -> bool:
    """Whether the evaluation ended on a failure that may be the machine's (see INFRASTRUCTURE_MARKERS)."""
    last = evaluation.stages[-1] if evaluation.stages else None
    return last is not None and last.verdict == FAIL and any(m in last.reason.lower() for m in INFRASTRUCTURE_MARKERS)


# what a stage record holds that says how long this run took, not what it found: two runs equal but for these are
# one record
WALL_CLOCK_FIELDS = ("cost_s", "gpu_s")


def same_record(stages_a: str, provenance_a: str, stages_b: str, provenance_b: str) -> bool:
    """Whether two stored evaluations (their `stages` and `provenance` JSON) say the same: equal but for the stages'
    wall-clock costs (`WALL_CLOCK_FIELDS`)."""
    if provenance_a != provenance_b:  # both written by `_json` (sorted keys): equal values give equal text
        return False
    def verdicts(text: str) -> list[dict[str, Any]]:
        return [{k: v for k, v in d.items() if k not in WALL_CLOCK_FIELDS} for d in json.loads(text)]
    return stages_a == stages_b or verdicts(stages_a) == verdicts(stages_b)


def reaches(evaluation: Evaluation, fidelity: str) -> bool:
    """Whether a stored ladder answers a request at `fidelity`: it ran that stage or a later one, or it ended in a
    failure (a failed candidate need not be re-run). An inconclusive last stage is not a failure: it may pass later."""
    want = STAGES.index(fidelity)
    last = evaluation.stages[-1] if evaluation.stages else None
    if last is not None and not last.reusable:
        return False  # the budget ran out, replay had no record, or the executor lost the work: not the candidate's
    if any(s.name in STAGES and STAGES.index(s.name) >= want for s in evaluation.stages):
        return True
    return last is not None and last.verdict in (FAIL, REFUSED)


class Store:
    def __init__(self, path: str | Path | None = None, check: bool = True):
        """`check`: read the whole file once (`PRAGMA quick_check`, about 0.1 s per 100 MB) so that corruption is
        found now; a worker reopening a checked store skips it."""
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        self._lock = threading.RLock()  # one connection per process, shared by its threads one call at a time
        self._conn_obj: sqlite3.Connection | None = None
        self._pid = -1
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self._error(e) from e
        self._connect()
        if check:
            self.check()

    def check(self) -> None:
        """Raise `StoreError` unless every page of the file reads back sound."""
        rows = self._read(lambda conn: conn.execute("PRAGMA quick_check").fetchall())
        problems = [line for r in rows if r[0] != "ok" for line in r[0].splitlines() if not line.startswith("***")]
        if problems:
            raise self._error(sqlite3.DatabaseError(f"malformed: {problems[0]}"))

    def _error(self, e: BaseException) -> StoreError:
        """One message for a store that cannot be used: the file, what went wrong, what to do."""
        msg = str(e)
        unwritable = not os.access(self.path.parent, os.W_OK) or (self.path.exists() and not os.access(self.path,
                                                                                                      os.W_OK))
        if "readonly" in msg or isinstance(e, PermissionError) or unwritable:
            what, fix = "cannot be written: the file or its directory is read-only", "Make it writable, "
        elif "malformed" in msg or "not a database" in msg or (isinstance(e, sqlite3.DatabaseError) and
                                                                 not isinstance(e, sqlite3.OperationalError)):
            what, fix = "is damaged (truncated or corrupt)", f"Move it aside (sqlite3 {self.path} .recover saves " \
                                                             "what is left), "
        else:
            what, fix = "cannot be opened", ""
        todo = f"{fix}{WHAT_TO_DO}"
        return StoreError(f"the workbench store {self.path} {what} ({msg}). {todo[0].upper()}{todo[1:]}.")

    # ---- connection ----
    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so the write lock is taken up front and a
        # transaction never has to upgrade a read lock (which would fail with SQLITE_BUSY without waiting).
        try:
            conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as e:
            raise self._error(e) from e
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        self._conn_obj, self._pid = conn, os.getpid()
        # Switching to WAL takes a lock that the busy handler does not always cover; retry like any write.
        self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL"))
        self._write(self._create_schema)  # a write on every open: a read-only store fails here, before any work
        return conn

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._conn_obj is None:
            raise RuntimeError(f"store {self.path} is closed")
        if self._pid != os.getpid():  # inherited through fork: never share a connection across processes
            self._conn_obj = None
            return self._connect()
        return self._conn_obj

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"the workbench store {self.path} has schema version {version}; this workbench knows up "
                             f"to {SCHEMA_VERSION}. Upgrade workbench, or {WHAT_TO_DO}.")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _retry(self, fn: Callable[[], Any]) -> Any:
        """fn(), retried while another process holds the lock; every SQLite or file error as a `StoreError`."""
        start, delay, noticed = time.monotonic(), 0.01, False
        while True:
            try:
                return fn()
            except (sqlite3.IntegrityError, StoreError):
                raise  # a caller's mistake (a missing problem row), or already said
            except sqlite3.OperationalError as e:
                if not _is_lock_error(e):
                    raise self._error(e) from e
                waited = time.monotonic() - start
                if waited > LOCK_RETRY_S:
                    who = _holders(self.path) or "another process"
                    raise StoreError(f"the workbench store {self.path} stayed locked by {who} for {waited:.0f} s. "
                                     f"Let it finish, or {WHAT_TO_DO}.") from e
                if not noticed and waited >= LOCK_NOTICE_S:
                    noticed = True
                    who = _holders(self.path) or "another process"
                    print(f"workbench: the store {self.path} is locked by {who}; waiting up to {LOCK_RETRY_S:.0f} s",
                          file=sys.stderr, flush=True)
                time.sleep(delay * (0.5 + random.random()))  # jitter: writers that collided do not collide again
                delay = min(delay * 2, 1.0)
            except (sqlite3.DatabaseError, OSError) as e:
                raise self._error(e) from e

    def _read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        with self._lock:
            return self._retry(lambda: fn(self._conn))

    def _write(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run fn inside one BEGIN IMMEDIATE transaction, committed before returning; retried while locked."""
        def attempt() -> Any:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn)
                conn.execute("COMMIT")
                return out
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        with self._lock:
            return self._retry(attempt)

    def close(self) -> None:
        with self._lock:
            if self._conn_obj is not None and self._pid == os.getpid():
                self._conn_obj.close()
            self._conn_obj = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path}  # a worker gets the path and opens its own connection

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], check=False)  # checked where it was first opened

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    # ---- writes ----
    def put_problem(self, problem: Any, counts: dict[str, Any] | None = None) -> str:
        """Store a workbench.problems.Problem (idempotent); `counts`, when given, replaces the stored counts."""
        row = (problem.key, problem.name, str(problem.path), problem.source, _json(dict(problem.overrides)),
               problem.effective_precision, None if counts is None else _json(counts), _now())

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR IGNORE INTO problems (key, name, path, source, overrides, policy, counts, "
                         "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
            if counts is not None:
                conn.execute("UPDATE problems SET counts = ? WHERE key = ?", (row[6], row[0]))
        self._write(write)
        return problem.key

    def put_candidate(self, candidate: Any) -> str:
        """Store a workbench.core.candidate.Candidate (idempotent: the first source stored under a hash wins)."""
        row = (candidate.hash, candidate.source, candidate.parent, _json(dict(candidate.origin)), _now())
        self._write(lambda conn: conn.execute(
            "INSERT OR IGNORE INTO candidates (hash, source, parent, origin, created_at) VALUES (?, ?, ?, ?, ?)", row))
        return candidate.hash

    def put_evaluation(self, evaluation: Evaluation) -> int:
        """Append one evaluation and return its row id. Its problem and candidate must be stored first. One equal to
        an evaluation already stored (`same_record`: the same problem, candidate, device, harness version, fidelity,
        stages and provenance, the stages' wall-clock costs aside) is not stored again: that row's id is returned (a
        replayed search asked twice adds nothing). A possible infrastructure failure is always appended: a repeat is
        what confirms it as the candidate's (`find_evaluation`)."""
        s, prov = evaluation.summary(), evaluation.provenance or {}
        cols = {
            "problem_key": evaluation.problem, "candidate_hash": evaluation.candidate_hash,
            "device": evaluation.device, "fidelity": s["fidelity"], "ok": int(s["ok"]), "stages": _json(s["stages"]),
            **{k: _real(s.get(k)) for k in SUMMARY_COLUMNS},
            **{k: _text(prov.get(k)) for k in PROVENANCE_TEXT},
            "reps": _int(prov.get("reps")), "spread": _real(prov.get("spread")),
            "provenance": _json(prov), "created_at": _now(),
        }
        sql = (f"INSERT INTO evaluations ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})")
        dedupe = not infrastructure_failure(evaluation)

        def write(conn: sqlite3.Connection) -> int:
            if dedupe:  # looked up inside the write transaction: two writers of one record store it once
                for row in conn.execute(
                        "SELECT id, stages, provenance FROM evaluations WHERE problem_key = ? AND candidate_hash = ? "
                        "AND device = ? AND harness_version IS ? AND fidelity = ? ORDER BY id DESC",
                        (cols["problem_key"], cols["candidate_hash"], cols["device"], cols["harness_version"],
                         cols["fidelity"])):
                    if same_record(row["stages"], row["provenance"], cols["stages"], cols["provenance"]):
                        return row["id"]
            return conn.execute(sql, tuple(cols.values())).lastrowid
        try:
            return self._write(write)
        except sqlite3.IntegrityError as e:
            raise ValueError(f"cannot store evaluation of {evaluation.candidate_hash} on {evaluation.problem}: {e} "
                             "(put_problem and put_candidate first)") from e

    def put_search_event(self, search_id: str, seq: int, event: dict[str, Any]) -> None:
        """Append one event of a search (idempotent per (search, seq)): a killed search resumes from these."""
        row = (search_id, seq, _json(event), _now())
        self._write(lambda conn: conn.execute(
            "INSERT OR IGNORE INTO search_events (search_id, seq, event, created_at) VALUES (?, ?, ?, ?)", row))

    def search_events(self, search_id: str) -> list[dict[str, Any]]:
        rows = self._read(lambda conn: conn.execute("SELECT event FROM search_events WHERE search_id = ? ORDER BY "
                                                    "seq", (search_id,)).fetchall())
        return [json.loads(r[0]) for r in rows]

    def drop_search_events(self, search_id: str, from_seq: int) -> None:
        """Forget a search's events from `from_seq` on (a resumed search writes them again)."""
        self._write(lambda conn: conn.execute("DELETE FROM search_events WHERE search_id = ? AND seq >= ?",
                                              (search_id, from_seq)))

    def bind_search(self, search_id: str, config: dict[str, Any]) -> dict[str, Any] | None:
        """Record the configuration a search id is created with; when the id exists, return its stored one (the
        caller compares) and change nothing. One transaction: two searches creating one id cannot both bind."""
        def write(conn: sqlite3.Connection) -> dict[str, Any] | None:
            row = conn.execute("SELECT config FROM searches WHERE search_id = ?", (search_id,)).fetchone()
            if row is not None:
                return json.loads(row[0])
            conn.execute("INSERT INTO searches (search_id, config, created_at) VALUES (?, ?, ?)",
                         (search_id, _json(config), _now()))
            return None
        return self._write(write)

    def lease_search(self, search_id: str) -> SearchLease:
        """The one-writer lease of a search id in this store (`lease.SearchLease`); `SearchLocked` when held."""
        return SearchLease(self.path, search_id)

    def put_llm_call(self, call: dict[str, Any]) -> str:
        """Record one LLM call (a row of `llm_calls`, keyed by its id; LLM_CALL_COLUMNS missing from `call` are
        NULL). The text must be redacted already: the store writes what it is given."""
        row = tuple(call.get(k) for k in LLM_CALL_COLUMNS)
        sql = (f"INSERT OR REPLACE INTO llm_calls ({', '.join(LLM_CALL_COLUMNS)}) "
               f"VALUES ({', '.join('?' * len(LLM_CALL_COLUMNS))})")
        self._write(lambda conn: conn.execute(sql, row))
        return call["id"]

    def llm_calls(self) -> list[dict[str, Any]]:
        """Every recorded LLM call, oldest first."""
        rows = self._read(lambda conn: conn.execute("SELECT * FROM llm_calls ORDER BY created_at, id").fetchall())
        return [dict(r) for r in rows]

    def candidate_source(self, candidate_hash: str) -> str | None:
        row = self._read(lambda conn: conn.execute("SELECT source FROM candidates WHERE hash = ?",
                                                   (candidate_hash,)).fetchone())
        return row[0] if row else None

    # ---- reads ----
    def find_evaluation(self, problem_key: str, candidate_hash: str, device: str, fidelity: str, *,
                        harness_version: str | None = None) -> Evaluation | None:
        """The newest stored evaluation that makes re-running at `fidelity` unnecessary (see `reaches`), from the
        same harness version (default workbench.HARNESS_VERSION) and the same device string; None if there is none.
        An evaluation that ended on a possible infrastructure failure (`infrastructure_failure`: a crashed worker, an
        out-of-memory) answers only once another one of the same candidate ended that way too: a one-off is run
        again, a crash that repeats is the candidate's."""
        if fidelity not in STAGES:
            raise ValueError(f"fidelity must be one of {STAGES}, got '{fidelity}'")
        version = workbench.HARNESS_VERSION if harness_version is None else harness_version
        rows = self._read(lambda conn: conn.execute(
            "SELECT * FROM evaluations WHERE problem_key = ? AND candidate_hash = ? AND device = ? "
            "AND harness_version = ? ORDER BY id DESC", (problem_key, candidate_hash, device, version)).fetchall())
        evaluations = [self._evaluation(row) for row in rows]
        confirmed = sum(map(infrastructure_failure, evaluations)) >= 2
        for ev in evaluations:
            if reaches(ev, fidelity) and (confirmed or not infrastructure_failure(ev)):
                return ev
        return None

    @staticmethod
    def _evaluation(row: sqlite3.Row) -> Evaluation:
        return Evaluation(problem=row["problem_key"], candidate_hash=row["candidate_hash"], device=row["device"],
                          stages=[StageRecord.from_dict(d) for d in json.loads(row["stages"])],
                          provenance=json.loads(row["provenance"]))

    def counts_by_fidelity(self, problem_key: str | None = None) -> dict[str, int]:
        """How many stored evaluations ended at each fidelity (optionally for one problem)."""
        where, args = ("WHERE problem_key = ?", (problem_key,)) if problem_key else ("", ())
        rows = self._read(lambda conn: conn.execute(f"SELECT fidelity, COUNT(*) FROM evaluations {where} GROUP BY "
                                                    "fidelity", args).fetchall())
        return {r[0]: r[1] for r in rows}

    def frame(self, table: str):
        """One table as a pandas DataFrame, in insertion order."""
        if table not in TABLES:
            raise ValueError(f"table must be one of {TABLES}, got '{table}'")
        order = {"problems": "created_at, key", "candidates": "created_at, hash", "evaluations": "id"}[table]
        return self._query(f"SELECT * FROM {table} ORDER BY {order}")

    def evaluations_frame(self, problem_key: str | None = None):
        """Evaluations (optionally of one problem) with the problem's name alongside, oldest first."""
        where, args = ("WHERE e.problem_key = ?", (problem_key,)) if problem_key else ("", ())
        return self._query("SELECT e.*, p.name AS problem_name FROM evaluations e "
                           f"LEFT JOIN problems p ON p.key = e.problem_key {where} ORDER BY e.id", args)

    def _query(self, sql: str, args: tuple = ()):
        import pandas as pd  # imported late: the harness workers write records without needing pandas

        return self._read(lambda conn: pd.read_sql_query(sql, conn, params=args))

    def export_parquet(self, directory: str | Path) -> dict[str, Path]:
        """Write <directory>/<table>.parquet for every table; returns {table: path}."""
        d = Path(directory).expanduser()
        d.mkdir(parents=True, exist_ok=True)
        out = {}
        for table in TABLES:
            out[table] = d / f"{table}.parquet"
            self.frame(table).to_parquet(out[table], index=False)
        return out
