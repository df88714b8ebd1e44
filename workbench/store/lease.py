"""`SearchLease`: one writer per search id in a store, for as long as its process lives.

An exclusive `flock` on a file beside the store (`<store>.searches/<digest of the id>.lock`), chosen over a lease row
with a heartbeat: the kernel drops the lock when the holder's process ends, however it ends (kill -9 included), so a
crashed holder never blocks a resume and there is no stale-lease rule to get wrong. The store runs in WAL mode, which
works on one host only, so a host-local lock covers every writer the store can have. The holder writes who it is
into the file, for the message a second writer gets.

Within one process a newer lease of the same id takes over (a notebook cell run again builds a new `Search` while the
old one is still referenced); the older one is then no longer `current` and its search stops writing.
"""
from __future__ import annotations

import datetime
import fcntl
import hashlib
import os
import socket
import sys
import threading
from pathlib import Path
from typing import IO


class SearchLocked(ValueError):
    """Another writer holds the search id (a ValueError: the CLI exits 2 with the message)."""


_guard = threading.Lock()
_held: dict[tuple[int, Path], list] = {}  # (pid, lock file) -> [open file, current lease, leases alive]


class SearchLease:
    def __init__(self, store_path: str | Path, search_id: str):
        self.search_id = search_id
        digest = hashlib.sha256(search_id.encode()).hexdigest()[:32]
        self.path = Path(f"{Path(store_path).resolve()}.searches") / f"{digest}.lock"
        self._key = (os.getpid(), self.path)  # an entry inherited through fork is not this process's lock
        with _guard:
            entry = _held.get(self._key)
            if entry is None:
                entry = _held[self._key] = [self._acquire(), None, 0]
            entry[1], entry[2] = self, entry[2] + 1
        self._released = False

    def _acquire(self) -> IO[str]:
        self.path.parent.mkdir(exist_ok=True)
        f = open(self.path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise SearchLocked(f"search id {self.search_id!r} is being written by {holder}: wait for it to end, or "
                               "choose another search id (--search-id)") from None
        f.seek(0)
        f.truncate()
        now = datetime.datetime.now().isoformat(timespec="seconds")
        f.write(f"pid {os.getpid()} on {socket.gethostname()} since {now} ({' '.join(sys.argv)[:120]})\n")
        f.flush()
        return f

    @property
    def current(self) -> bool:
        """Whether this lease still holds the id (not released, not taken over by a newer one in this process)."""
        entry = _held.get(self._key)
        return not self._released and entry is not None and entry[1] is self

    def check(self) -> None:
        if not self.current:
            raise SearchLocked(f"search id {self.search_id!r} was reopened by a newer search in this process (or "
                               "closed): this one no longer writes its events")

    def release(self) -> None:
        with _guard:
            if self._released:
                return
            self._released = True
            entry = _held.get(self._key)
            if entry is None:
                return
            entry[2] -= 1
            if entry[1] is self:
                entry[1] = None
            if entry[2] <= 0:
                entry[0].close()  # closing the file drops the flock
                del _held[self._key]

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
