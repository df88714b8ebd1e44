"""`CallRecorder`: every LLM call as one row of `llm_calls`, in the store's own SQLite file (or in memory only).

The table is created with `CREATE TABLE IF NOT EXISTS` next to the store's tables and never touched by the Store
itself, so the store's schema version is unchanged. Text is redacted by the client before it reaches here; the
recorder redacts again (it may be handed entries from elsewhere). The API key is never a column.
"""
from __future__ import annotations

import datetime
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from .client import redact

COLUMNS = ("id", "created_at", "purpose", "model", "input_tokens", "output_tokens", "cache_read_tokens",
           "cache_write_tokens", "cost_usd", "latency_s", "retries", "stop_reason", "ok", "error", "prompt", "reply")

_SCHEMA = """CREATE TABLE IF NOT EXISTS llm_calls (
    id TEXT PRIMARY KEY, created_at TEXT NOT NULL, purpose TEXT, model TEXT,
    input_tokens INTEGER, output_tokens INTEGER, cache_read_tokens INTEGER, cache_write_tokens INTEGER,
    cost_usd REAL, latency_s REAL, retries INTEGER, stop_reason TEXT, ok INTEGER, error TEXT, prompt TEXT, reply TEXT
)"""


class CallRecorder:
    """`record(entry) -> id`; `calls()` reads them back (oldest first). path None: kept in memory only."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path).expanduser() if path is not None else None
        self.entries: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._execute(lambda c: c.execute(_SCHEMA))

    @classmethod
    def for_store(cls, store: Any) -> "CallRecorder":
        return cls(store.path)

    def _execute(self, fn: Any) -> Any:
        delay = 0.01
        for attempt in range(200):  # the store's writers hold the lock briefly; wait rather than lose a record
            try:
                conn = sqlite3.connect(str(self.path), timeout=30)
                try:
                    conn.row_factory = sqlite3.Row
                    with conn:
                        return fn(conn)
                finally:
                    conn.close()
            except sqlite3.OperationalError as e:
                if "locked" not in str(e).lower() and "busy" not in str(e).lower():
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise RuntimeError(f"{self.path}: database stayed locked; LLM call record lost")

    def record(self, entry: dict[str, Any]) -> str:
        row = {k: redact(entry.get(k)) for k in COLUMNS}
        row["created_at"] = row["created_at"] or datetime.datetime.now(datetime.timezone.utc).isoformat()
        row["ok"] = int(bool(row["ok"]))
        with self._lock:
            self.entries.append(row)
            if self.path is not None:
                sql = f"INSERT OR REPLACE INTO llm_calls ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
                self._execute(lambda c: c.execute(sql, tuple(row[k] for k in COLUMNS)))
        return row["id"]

    def calls(self) -> list[dict[str, Any]]:
        if self.path is None:
            return list(self.entries)
        rows = self._execute(lambda c: c.execute("SELECT * FROM llm_calls ORDER BY created_at, id").fetchall())
        return [dict(r) for r in rows]

    def total_cost(self) -> float:
        return sum(c["cost_usd"] or 0.0 for c in self.calls())
