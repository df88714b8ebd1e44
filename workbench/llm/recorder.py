"""`CallRecorder`: every LLM call as one row of the store's `llm_calls` table (or kept in memory without a store).

The store owns the table and its writes (retries, `BEGIN IMMEDIATE`: `workbench.store.sqlite`). Text is redacted by
the client before it reaches here; the recorder redacts again (it may be handed entries from elsewhere), so the store
only ever sees redacted text. The API key is never a column.
"""
from __future__ import annotations

import datetime
import threading
from typing import Any

from ..store.sqlite import LLM_CALL_COLUMNS, Store
from .client import redact


class CallRecorder:
    """`record(entry) -> id`; `calls()` reads them back (oldest first). `store` None: kept in memory only."""

    def __init__(self, store: Store | None = None):
        self.store = store
        self._entries: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def record(self, entry: dict[str, Any]) -> str:
        row = {k: redact(entry.get(k)) for k in LLM_CALL_COLUMNS}
        row["created_at"] = row["created_at"] or datetime.datetime.now(datetime.timezone.utc).isoformat()
        row["ok"] = int(bool(row["ok"]))
        if self.store is not None:
            return self.store.put_llm_call(row)
        with self._lock:
            self._entries.append(row)
        return row["id"]

    def calls(self) -> list[dict[str, Any]]:
        if self.store is not None:
            return self.store.llm_calls()
        with self._lock:
            return list(self._entries)

    def total_cost(self) -> float:
        return sum(c["cost_usd"] or 0.0 for c in self.calls())
