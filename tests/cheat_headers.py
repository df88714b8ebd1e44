"""Read the comment header of a planted-cheat or honest candidate file (tests/cheats/*.py, tests/candidates/*.py).

Each file starts with lines like
    # cheat: <one-line description>
    # problem: <built-in problem name>
    # set: <NAME=VALUE overrides for a small CPU shape>
    # caught-by: <static|correctness|timing|none>
    # reason: <lower-case substring the rejecting stage's reason must contain, or ->
"""
from __future__ import annotations

from pathlib import Path

KEYS = ("cheat", "problem", "set", "caught-by", "reason")
HERE = Path(__file__).parent
CHEATS_DIR = HERE / "cheats"
CANDIDATES_DIR = HERE / "candidates"


def read_header(path: str | Path) -> dict:
    """{'cheat', 'problem', 'set' (list of 'N=V'), 'caught_by', 'reason'} from the file's leading comment lines."""
    found: dict[str, str] = {}
    for line in Path(path).read_text().splitlines():
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].partition(":")
        if sep and key.strip() in KEYS:
            found[key.strip()] = value.strip()
    missing = [k for k in KEYS if k not in found]
    if missing:
        raise ValueError(f"{path}: header lacks {', '.join('# ' + k + ':' for k in missing)}")
    return {"cheat": found["cheat"], "problem": found["problem"], "set": found["set"].split(),
            "caught_by": found["caught-by"], "reason": found["reason"]}


def cheat_files() -> list[Path]:
    return sorted(CHEATS_DIR.glob("*.py"))


def candidate_files() -> list[Path]:
    return sorted(CANDIDATES_DIR.glob("*.py"))
