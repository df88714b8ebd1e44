"""`Candidate`: the full source text of a module that defines `class ModelNew(nn.Module)`.

Candidates are keyed by a hash of their source, written to a real file (Triton's @jit reads source from disk), and
imported only inside worker processes, never in the parent: a candidate is untrusted code.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from .paths import candidate_dir


@dataclasses.dataclass(frozen=True)
class Candidate:
    source: str
    parent: str | None = None  # hash of the candidate this one was derived from
    origin: tuple[tuple[str, Any], ...] = ()  # e.g. (("kind", "template"), ("config", ...)) or an LLM call id

    @property
    def hash(self) -> str:
        return content_hash(self.source)

    @classmethod
    def from_file(cls, path: str | Path, **kw: Any) -> "Candidate":
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as e:
            raise ValueError(f"{p}: cannot read candidate ({e.strerror})") from None
        except UnicodeDecodeError as e:
            raise ValueError(f"{p}: not a Python source file (not UTF-8 text at byte {e.start})") from None
        return cls(text, origin=tuple(sorted({"file": str(p), **kw}.items())))

    def write(self, directory: str | Path | None = None) -> Path:
        """Write the source to <directory>/cand_<hash>.py (idempotent) and return the path."""
        d = Path(directory) if directory else candidate_dir()
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"cand_{self.hash}.py"
        if not path.exists() or path.read_text() != self.source:
            fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(self.source)
            os.replace(tmp, path)  # atomic: a concurrent reader never sees half a file
        return path


def content_hash(source: str) -> str:
    # Line endings and trailing whitespace do not make a different kernel.
    norm = "\n".join(line.rstrip() for line in source.strip().splitlines())
    return hashlib.sha256(norm.encode()).hexdigest()[:16]


