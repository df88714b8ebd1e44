"""Helpers the kernel families share: block sizes, the idle-threads and register-budget rules, usable input names."""
from __future__ import annotations

import keyword

from ..core.target import H200

# Names the rendered kernels use themselves (the accumulator, the modules, `float('inf')` literals): an epilogue or
# prologue input may not take them.
RESERVED_NAMES = frozenset({"acc", "tl", "triton", "torch", "float"})


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def threads_check(num_warps: int, elements: int) -> str | None:
    """Refuse a tile that leaves more than half of its threads without an element."""
    if num_warps > 1 and num_warps * 32 > 2 * elements:
        return f"{num_warps * 32} threads for a tile of {elements} elements: more than half the threads idle"
    return None


def register_budget(per_thread: float, num_warps: int) -> float:
    """Tile elements a thread may hold: `per_thread` where a thread can have all 255 registers, shrinking in
    proportion where the block's warps leave it fewer (16 warps: 128 registers a thread, 32 warps: 64)."""
    return per_thread * min(1.0, H200.max_regs_per_block / (32 * num_warps) / 256)


def usable_name(name: str) -> bool:
    """Can an epilogue/prologue input be called this in the rendered kernel?"""
    return name.isidentifier() and not keyword.iskeyword(name) and name not in RESERVED_NAMES
