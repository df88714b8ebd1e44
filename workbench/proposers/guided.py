"""Findings-guided moves: what a profiler finding's `move` means as a concrete change of the offline proposer's point.

An expert tool names a move ("increase_block", "reduce_num_stages", "fuse_epilogue", ...) and, where it can, the
kernel it is about. Here that kernel is tied to its group (rendered kernels are named `_<gid>_<family>...`), and the
move becomes a *direction* on that group's configuration: a predicate that says whether another configuration goes the
way the finding asks (a larger tile, fewer stages, fewer values per thread, ...). A guided move is then the point,
among those the proposer offers (`config_alternatives`, `fusion_alternatives`), that goes that way while changing the
fewest fields; ties are broken by the search's RNG. A finding about the candidate as a whole applies to every group
whose configuration has the fields the move needs. Moves with no knob in a family's space (use_tensor_cores: the GEMM
family always uses tl.dot and its precision is the problem's; swizzle_shared: Triton picks the layout) map to nothing,
and the proposer's plain moves fill their place.

Configuration fields differ by family (workbench/kernels/): BLOCK (elementwise, row reductions, scans), BM/BN/BK
(GEMM), BLOCK_M/BLOCK_N (column reductions, attention), BLOCK_A/BLOCK_B (permute), BLOCK_D and ROWS_PER_PROGRAM
(gather, row reductions). A direction reads whichever are present.
"""
from __future__ import annotations

import dataclasses
import json
import math
import random
from typing import Any, Callable, Iterable

from ..profiling.findings import SEVERITIES, Finding, sort_findings
from .choice import distance

GUIDED_SHARE = 0.5  # share of a parent's moves taken from its findings when it has some
# findings acted on: an "info" finding is one its tool judges harmless or by design (a Hopper GEMM's low occupancy,
# strict fp32 on CUDA cores), so following it would steer away from good points
MIN_SEVERITY = "warning"

# fields whose product is the tile one program covers
BLOCK_FIELDS = ("BLOCK", "BM", "BN", "BK", "BLOCK_M", "BLOCK_N", "BLOCK_A", "BLOCK_B", "BLOCK_D", "ROWS_PER_PROGRAM")
# the block along the contiguous (fastest-varying) dimension, first present wins: permute's inner block, gather's row,
# a column reduction's columns, an elementwise/row block, a GEMM's K tile (A is row-major [M, K])
CONTIGUOUS_FIELDS = ("BLOCK_B", "BLOCK_D", "BLOCK_N", "BLOCK", "BK")


def tile(cfg: dict[str, Any]) -> int | None:
    sizes = [cfg[f] for f in BLOCK_FIELDS if isinstance(cfg.get(f), int) and not isinstance(cfg.get(f), bool)]
    return math.prod(sizes) if sizes else None


def threads(cfg: dict[str, Any]) -> int:
    return int(cfg.get("num_warps", 4)) * 32


def contiguous(cfg: dict[str, Any]) -> int | None:
    return next((cfg[f] for f in CONTIGUOUS_FIELDS if isinstance(cfg.get(f), int)), None)


def _more(field: str) -> Callable[[dict, dict], bool | None]:
    """A direction that raises a numeric (or boolean) field; None when the family has no such field."""
    def direction(cur: dict, new: dict) -> bool | None:
        if field not in cur or field not in new:
            return None
        return new[field] > cur[field]
    return direction


def _ratio(num: Callable[[dict], int | None], up: bool) -> Callable[[dict, dict], bool | None]:
    """A direction on num(cfg) / threads(cfg): up or down."""
    def direction(cur: dict, new: dict) -> bool | None:
        a, b = num(cur), num(new)
        if a is None or b is None:
            return None
        x, y = a / threads(cur), b / threads(new)
        return y > x if up else y < x
    return direction


def _tile(up: bool) -> Callable[[dict, dict], bool | None]:
    def direction(cur: dict, new: dict) -> bool | None:
        a, b = tile(cur), tile(new)
        if a is None or b is None:
            return None
        return b > a if up else b < a
    return direction


def _fewer_stages(cur: dict, new: dict) -> bool | None:
    if "num_stages" not in cur or "num_stages" not in new:
        return None
    return new["num_stages"] < cur["num_stages"]


def _split(cur: dict, new: dict) -> bool | None:
    # GEMM: split K; column reduction: split the rows it reduces over
    field = next((f for f in ("SPLIT_K", "SPLIT_M") if f in cur and f in new), None)
    return None if field is None else new[field] > cur[field]


def _persistent(cur: dict, new: dict) -> bool | None:
    field = next((f for f in ("PERSISTENT", "PERSISTENT_WAVES") if f in cur and f in new), None)
    return None if field is None else bool(new[field]) and not bool(cur[field])


def _wgmma(cur: dict, new: dict) -> bool | None:
    # Triton emits Hopper wgmma when BM >= 64 and num_warps is a multiple of 4 (the tensor_cores tool's advice)
    if "BM" not in cur or "BM" not in new:
        return None
    ok = lambda c: c["BM"] >= 64 and int(c.get("num_warps", 4)) % 4 == 0  # noqa: E731
    return ok(new) and not ok(cur)


def _coalesce(cur: dict, new: dict) -> bool | None:
    a, b = contiguous(cur), contiguous(new)
    return None if a is None or b is None else b > a


# finding move -> direction on one group's configuration
CONFIG_DIRECTIONS: dict[str, Callable[[dict, dict], bool | None]] = {
    "increase_block": _tile(up=True),
    "decrease_block": _tile(up=False),
    "reduce_num_stages": _fewer_stages,
    "reduce_registers": _ratio(tile, up=False),  # fewer values per thread: a smaller tile or more warps
    "vectorize_loads": _ratio(contiguous, up=True),  # more contiguous elements per thread: wider accesses
    "coalesce_access": _coalesce,
    "swizzle_group_m": _more("GROUP_M"),
    "split_k": _split,
    "persistent": _persistent,
    "use_wgmma": _wgmma,
}
FUSION_MOVES = ("fuse_epilogue", "fuse_kernels")  # fuse a fusion point that is split now
UNMAPPED = ("use_tensor_cores", "swizzle_shared")  # no knob in the families' spaces


@dataclasses.dataclass(frozen=True)
class Suggestion:
    move: str
    group: str | None  # the group the finding is about; None: the candidate as a whole
    severity: str
    tool: str


def group_of(kernel: str | None, gids: Iterable[str]) -> str | None:
    """The group whose kernel this is: rendered kernels are named `_<gid>_<family>_...`."""
    if not kernel:
        return None
    return next((g for g in sorted(gids, key=len, reverse=True) if kernel.startswith(f"_{g}_")), None)


def _finding(f: Finding | dict[str, Any]) -> Finding:
    if isinstance(f, Finding):
        return f
    if isinstance(f, dict):
        return Finding.from_dict(f)
    raise TypeError(f"a finding must be a Finding or its dict, got {type(f).__name__}")


def suggestions(findings: Iterable[Finding | dict[str, Any]], gids: Iterable[str], memory=None,
                min_severity: str = MIN_SEVERITY) -> list[Suggestion]:
    """The distinct (move, group) pairs the findings of at least `min_severity` ask for, most severe first; with a
    search memory, moves that paid off more often first within a severity. Findings without a move are skipped."""
    if min_severity not in SEVERITIES:
        raise ValueError(f"min_severity must be one of {SEVERITIES}, got {min_severity!r}")
    gids = list(gids)
    out: list[Suggestion] = []
    for f in sort_findings(_finding(x) for x in findings):
        if not f.move or f.rank < SEVERITIES.index(min_severity):
            continue
        s = Suggestion(f.move, group_of(f.kernel, gids), f.severity, f.tool)
        if all((s.move, s.group) != (o.move, o.group) for o in out):
            out.append(s)
    if memory is not None and out:
        weights = memory.move_weights(sorted({s.move for s in out}))
        out.sort(key=lambda s: (-SEVERITIES.index(s.severity), -weights[s.move]))  # stable: tool order within ties
    return out


def _configs(choice) -> dict[str, dict[str, Any]]:
    return {g: json.loads(c) for g, c in choice.configs}


def _ranked(proposer, choice, s: Suggestion, rng: random.Random) -> list[tuple[str, Any]]:
    """Points that follow one suggestion, fewest changed fields first: (label, choice)."""
    cur_fuse, cur = dict(choice.fuse), _configs(choice)
    scored: list[tuple[int, float, str, Any]] = []
    if s.move in FUSION_MOVES:
        for c in proposer.fusion_alternatives(choice):
            fused = [p for p, v in c.fuse if v and not cur_fuse.get(p, False)]
            if fused:
                scored.append((distance(choice, c), rng.random(), f"{s.move}:{fused[0]}", c))
    elif s.move in CONFIG_DIRECTIONS:
        direction = CONFIG_DIRECTIONS[s.move]
        groups = [s.group] if s.group is not None else sorted(cur)
        for g in groups:
            if g not in cur:
                continue
            for c in proposer.config_alternatives(choice, g):
                new = _configs(c).get(g)
                if new is not None and direction(cur[g], new):
                    scored.append((distance(choice, c), rng.random(), f"{s.move}:{g}", c))
    scored.sort(key=lambda t: t[:2])
    return [(label, c) for _, _, label, c in scored]


def guided_moves(proposer, choice, findings: Iterable[Finding | dict[str, Any]], rng: random.Random, k: int,
                 memory=None, min_severity: str = MIN_SEVERITY) -> list[tuple[str, Any]]:
    """Up to k labelled moves ("<finding move>:<group or fusion point>") that follow the findings: suggestions taken
    round robin, most severe first, each offering its nearest unused point."""
    groups = [g for g, _ in choice.configs]
    queues = [q for s in suggestions(findings, groups, memory, min_severity)
              if (q := _ranked(proposer, choice, s, rng))]
    out: list[tuple[str, Any]] = []
    taken = {choice}
    while queues and len(out) < k:
        for q in list(queues):
            while q and q[0][1] in taken:
                q.pop(0)
            if not q:
                queues.remove(q)
                continue
            label, c = q.pop(0)
            out.append((label, c))
            taken.add(c)
            if len(out) >= k:
                break
    return out


def interleave(guided: list[tuple[str, Any]], plain: list[tuple[str, Any]], share: float,
               k: int) -> list[tuple[str, Any]]:
    """Up to k moves in which every prefix holds about `share` guided ones (strategies keep a prefix), the plain
    moves filling in where the guided run out; no point twice."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"guided share must be within [0, 1], got {share}")
    out: list[tuple[str, Any]] = []
    seen: set = set()
    g, p = list(guided), list(plain)
    n_guided = 0
    while (g or p) and len(out) < k:
        want_guided = n_guided < share * (len(out) + 1)
        src = g if (want_guided and g) or not p else p
        label, c = src.pop(0)
        if c in seen:
            continue
        seen.add(c)
        out.append((label, c))
        n_guided += src is g
    return out
