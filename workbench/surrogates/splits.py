"""Which problems a held-out split holds out together: a problem's kernel family and KernelBench level, derived from
what the dataset's rows carry, and the fold of every row for each split.

Splits (`split_folds`):
- "random": rows dealt to k folds at random (a test problem's other candidates were seen: the easy case);
- "problem": grouped k-fold over problems, whole problems held out (the headline: a search meets new problems);
- "family": leave one kernel family out (every problem of the family held out together);
- "level": leave one KernelBench level out (level1: single operators, level2: fused operator chains, level3: whole
  networks); the built-in suite counts as one more group, "builtin", so with KernelBench rows it is held out once too.

A split whose groups number fewer than two is a ValueError that names the groups found: it has nothing to hold out
against. Problems whose group cannot be derived ("unknown") are never held out: they train every fold and are
scored in none (`split_folds` gives them fold -1, and says how many there are through `held_out_rows`).

**A problem's family** (`candidate_family`, `problem_families`): each candidate's dominant group family -- its groups'
families read off the compiled kernels' names (`_g0_conv_transpose_kernel` -> "conv_transpose", matched against
`workbench.kernels.FAMILIES`, longest name first) and, failing that, off the group's config keys
(`family_from_config`); the dominant one is the first in `DOMINANCE` (the family doing the problem's main
work: attention, then convolutions, GEMMs, norms, pooling, reductions, data movement, elementwise last). The problem's
family is its candidates' most common dominant family (ties to the alphabetically first). On the shipped data this is
the same family `features.training_table` gave before the KernelBench families existed.

**A problem's level** (`problem_level`), first rule that applies:
1. a `level` recorded with the rows (a `level` column of candidates.parquet or problems.parquet: 1, "1", "level1");
2. a level in the problem's name ("level2/19_ReLU", "level2__19_ReLU", "level2-19_ReLU");
3. a built-in problem (the name is a file of `problems/builtin/`, or the problems.parquet row says
   `key_matches_builtin`) -> "builtin";
4. the name is a file stem of exactly one level directory of a KernelBench checkout (`$WORKBENCH_KERNELBENCH`, else
   `../shared/kernelbench` beside the checkout) -> that level;
5. otherwise "unknown" (trained on, never held out by the level split).
A problem's name is its file's stem (`Problem.name`), which does not say the level by itself (levels reuse numbers),
hence rules 1 and 4; an export of KernelBench rows should write the `level` column.
"""
from __future__ import annotations

import json
import math
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..kernels import FAMILIES as KERNEL_FAMILIES
from ..problems.loader import builtin_names

SPLITS = ("random", "problem", "family", "level")
GROUP_OF = {"family": "family", "level": "level"}  # split -> the table column naming its groups
UNKNOWN = "unknown"
BUILTIN = "builtin"
DOMINANCE = ("attention", "conv_transpose", "conv", "gemm", "norm", "pool", "reduce_nd", "scan_nd", "row", "scan",
             "col", "gather", "permute", "elementwise")
_BY_LENGTH = sorted(KERNEL_FAMILIES, key=len, reverse=True)
_GID = re.compile(r"^_(g\d+)_(.+)$")
_LEVEL_IN_NAME = re.compile(r"^level_?(\d+)(?:/|__|-|:)", re.IGNORECASE)


# ---- families ----

def family_from_config(cfg: Mapping[str, Any]) -> str | None:
    """A group's family from its config keys alone (when no compiled kernel names it); None when unclear."""
    k = set(cfg)
    if {"BM", "BN", "BK"} <= k:
        return "gemm"
    if "BLOCK_A" in k:
        return "permute"
    if "BLOCK_D" in k:
        return "gather"
    if "SPLIT_M" in k:
        return "col"
    if {"BLOCK_M", "BLOCK_N"} <= k:
        return "attention"
    if "strategy" in k:
        return "row"  # a scan has the same keys; only its kernel name tells them apart
    if "PERSISTENT_WAVES" in k:
        return "elementwise"
    return None


def kernel_family(kernel_name: str) -> tuple[str, str] | None:
    """(group id, family) of a compiled kernel named `_<gid>_<family>[_...]_kernel`, None for another name."""
    m = _GID.match(str(kernel_name))
    if not m:
        return None
    rest = m.group(2)
    fam = next((f for f in _BY_LENGTH if rest == f or rest.startswith(f + "_")), None)
    return (m.group(1), fam) if fam else None


def candidate_families(choice: Mapping[str, Any] | None, kernels: Sequence[Mapping[str, Any]]) -> list[str]:
    """The families of one candidate's groups, in `DOMINANCE` order (groups whose family is unknown left out)."""
    by_name: dict[str, str] = {}
    for k in kernels:
        hit = kernel_family(str(k.get("kernel", "")))
        if hit and hit[0] not in by_name:
            by_name[hit[0]] = hit[1]
    fams = {by_name.get(g) or family_from_config(cfg or {}) for g, cfg in ((choice or {}).get("configs") or {}).items()}
    return [f for f in DOMINANCE if f in fams]


def candidate_family(choice: Mapping[str, Any] | None, kernels: Sequence[Mapping[str, Any]]) -> str | None:
    """The dominant family of one candidate (see the module docstring); None when no group's family is known."""
    fams = candidate_families(choice, kernels)
    return fams[0] if fams else None


def row_families(candidates: pd.DataFrame) -> pd.Series:
    """Per candidates.parquet row, its groups' families joined by "+" in `DOMINANCE` order ("" when none is
    known): the `kernel_families` column of a training table."""
    return pd.Series(["+".join(candidate_families(_loads(c), list(_loads(k).get("kernels") or [])))
                      for c, k in zip(candidates["choice_json"], candidates["compile_json"])],
                     index=candidates.index, dtype=object)


def _loads(s: Any) -> dict[str, Any]:
    if isinstance(s, dict):
        return s
    if s is None or (isinstance(s, float) and math.isnan(s)) or s == "":
        return {}
    return json.loads(s)


def problem_families(candidates: pd.DataFrame, families: pd.Series | None = None) -> pd.Series:
    """problem_key -> family (`UNKNOWN` when none of its candidates has a known family), from candidates.parquet
    rows (`choice_json`, `compile_json`), or from their `row_families` when given."""
    fams = row_families(candidates) if families is None else families
    s = pd.Series([f.split("+")[0] if f else None for f in fams], index=candidates.index, dtype=object)
    return s.groupby(candidates["problem_key"]).agg(lambda x: x.dropna().mode().iloc[0] if x.notna().any()
                                                    else UNKNOWN)


# ---- levels ----

def kernelbench_root() -> Path | None:
    """`$WORKBENCH_KERNELBENCH`, else `../shared/kernelbench` beside the checkout; None when neither exists."""
    env = os.environ.get("WORKBENCH_KERNELBENCH")
    if env:
        return Path(env) if Path(env).is_dir() else None
    p = Path(__file__).resolve().parents[3] / "shared" / "kernelbench"
    return p if p.is_dir() else None


@lru_cache(maxsize=4)
def _kernelbench_levels(root: str) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for d in sorted(Path(root).glob("level*")):
        m = re.fullmatch(r"level(\d+)", d.name)
        if d.is_dir() and m:
            for f in d.glob("*.py"):
                out.setdefault(f.stem, []).append(f"level{int(m.group(1))}")
    return {k: tuple(sorted(set(v))) for k, v in out.items()}


def normalise_level(value: Any) -> str | None:
    """"level<N>" from 1, 1.0, "1", "level1", "L1"; None for a missing or unreadable value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    m = re.fullmatch(r"(?:level_?|l)?(\d+)(?:\.0)?", str(value).strip(), re.IGNORECASE)
    return f"level{int(m.group(1))}" if m else (BUILTIN if str(value).strip().lower() == BUILTIN else None)


def problem_level(name: str, recorded: Any = None, key_matches_builtin: Any = None,
                  kernelbench: Mapping[str, Sequence[str]] | None = None,
                  builtins: Sequence[str] | None = None) -> str:
    """The level group of one problem by the module docstring's rules. `kernelbench` maps a file stem to the levels
    that have a file of that name (default: read from `kernelbench_root()`), `builtins` the built-in names."""
    lv = normalise_level(recorded)
    if lv:
        return lv
    m = _LEVEL_IN_NAME.match(str(name))
    if m:
        return f"level{int(m.group(1))}"
    if key_matches_builtin is True or str(name) in (builtin_names() if builtins is None else builtins):
        return BUILTIN
    if kernelbench is None:
        root = kernelbench_root()
        kernelbench = _kernelbench_levels(str(root)) if root else {}
    stem = Path(str(name)).stem
    levels = kernelbench.get(stem, ())
    return levels[0] if len(levels) == 1 else UNKNOWN


def problem_levels(candidates: pd.DataFrame, problems: pd.DataFrame | None = None, **kw) -> pd.Series:
    """problem_key -> level group for every problem of `candidates` (see `problem_level`)."""
    prow = problems.set_index("problem_key") if problems is not None and "problem_key" in problems.columns else None
    first = candidates.groupby("problem_key", sort=True).first()
    out = {}
    for key, r in first.iterrows():
        rec = r.get("level") if "level" in first.columns else None
        kmb = None
        if prow is not None and key in prow.index:
            if normalise_level(rec) is None and "level" in prow.columns:
                rec = prow.at[key, "level"]
            if "key_matches_builtin" in prow.columns:
                kmb = bool(prow.at[key, "key_matches_builtin"])
        out[key] = problem_level(str(r["problem"]), rec, kmb, **kw)
    return pd.Series(out, dtype=object)


# ---- folds ----

def grouped_folds(groups, k: int, seed: int = 0) -> np.ndarray:
    """Fold index per row, whole groups to a fold (groups shuffled by `seed`, dealt round-robin)."""
    g = np.asarray(groups)
    uniq = np.array(sorted(set(g)))
    order = np.random.default_rng(seed).permutation(len(uniq))
    fold_of = {uniq[j]: i % k for i, j in enumerate(order)}
    return np.array([fold_of[x] for x in g])


def split_groups(table: pd.DataFrame, split: str) -> pd.Series:
    """The group each row of a training table belongs to under a grouped split (its problem for "problem")."""
    if split == "problem":
        return table["problem_key"]
    col = GROUP_OF.get(split)
    if col is None:
        raise ValueError(f"split must be one of {SPLITS[1:]} to have groups, not {split!r}")
    if col not in table.columns:
        raise ValueError(f"the {split} split needs a '{col}' column (features.training_table writes it)")
    return table[col].fillna(UNKNOWN).astype(str)


def _describe(groups: pd.Series, table: pd.DataFrame) -> str:
    per = table.groupby(groups.to_numpy())["problem_key"].nunique()
    return ", ".join(f"{g} ({n} problem{'s' if n != 1 else ''})" for g, n in per.items())


def split_folds(table: pd.DataFrame, split: str, k: int = 5, seed: int = 0) -> np.ndarray:
    """A fold id per row for one of SPLITS; -1 for rows never held out (their group is unknown)."""
    if split == "random":
        return np.random.default_rng(seed).permutation(np.arange(len(table)) % k)
    if split == "problem":
        n = table["problem_key"].nunique()
        if n < 2:
            raise ValueError("a held-out-problem split needs at least 2 problems, these rows have "
                             f"{n}: {_describe(table['problem_key'], table)}")
        return grouped_folds(table["problem_key"].to_numpy(), min(k, n), seed)
    if split not in GROUP_OF:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    groups = split_groups(table, split)
    known = sorted(g for g in groups.unique() if g != UNKNOWN)
    if len(known) < 2:
        what = {"family": "kernel families", "level": "KernelBench levels (the built-in suite counts as one, "
                                                       "'builtin')"}[split]
        found = _describe(groups, table) or "no rows"
        raise ValueError(f"a held-out-{split} split needs problems of at least 2 {what}; these rows have only "
                         f"{found}" + ("; KernelBench rows (with a `level` column, or found under "
                                       "$WORKBENCH_KERNELBENCH) give this split its groups" if split == "level"
                                       else ""))
    return groups.map({g: i for i, g in enumerate(known)}).fillna(-1).astype(int).to_numpy()


def held_out_rows(folds: np.ndarray) -> np.ndarray:
    """Rows a split scores (every fold but -1)."""
    return np.asarray(folds) >= 0
