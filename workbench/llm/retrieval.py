"""Retrieval for the LLM proposer: the kernel families most relevant to a problem, and past winners from the store.

Families are ranked by keyword overlap with the problem's source: strong hints (an op name that maps to one family:
matmul/linear -> gemm, softmax/norm/sum -> reduce, permute/embedding -> memory, scaled_dot_product/attention ->
attention, pointwise ops -> elementwise) count 3, other words shared with the family module's name and docstring count
1; elementwise wins ties, as the fallback. Each is shown as its module docstring plus one kernel rendered by the family
itself (its `default` configuration on a small representative spec), so the example is known to be valid.

Past winners: among stored problems whose name shares a token with this one's (split on "_"), the passing
evaluations with the best `speedup_vs_eager`, one per candidate.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

from ..kernels import attention, elementwise, gemm, memory, reduce

_WORD = re.compile(r"[a-z][a-z0-9]+")
HINTS = {
    "gemm": {"matmul", "mm", "bmm", "addmm", "linear", "einsum", "gemm", "baddbmm", "mlp"},
    "reduce": {"softmax", "log_softmax", "logsumexp", "layer_norm", "layernorm", "rms_norm", "rmsnorm", "norm", "sum",
               "mean", "amax", "max", "var", "argmax", "cumsum", "cross_entropy", "reduce", "reduction"},
    "memory": {"permute", "transpose", "contiguous", "embedding", "gather", "index_select", "copy"},
    "attention": {"scaled_dot_product_attention", "attention", "sdpa", "causal", "flash"},
    "elementwise": {"relu", "gelu", "silu", "sigmoid", "tanh", "add", "mul", "exp", "where", "clamp", "swish",
                    "elementwise", "pointwise"},
}
ORDER = ("elementwise", "gemm", "reduce", "memory", "attention")  # tie-break: earlier wins
MODULES = {"elementwise": elementwise, "gemm": gemm, "reduce": reduce, "memory": memory, "attention": attention}
_STOP = {"the", "and", "for", "with", "from", "that", "this", "one", "each", "are", "its", "into", "per", "when",
         "torch", "import", "return", "self", "def", "class", "none", "true", "false", "float32", "shape", "size"}


def _example(family: str) -> tuple[Any, Any, Any]:
    """(family object, spec, name) of a small representative kernel."""
    if family == "elementwise":
        return elementwise.ElementwiseFamily(), elementwise.ElementwiseSpec("tl.maximum(x * 2.0 + b, 0.0)", (
            elementwise.ElementwiseInput("x", "flat"), elementwise.ElementwiseInput("b", "lastdim")), "float32",
            1 << 20, 2), "scale_relu"
    if family == "gemm":
        return gemm, gemm.GemmSpec("bfloat16", "bfloat16"), "matmul"
    if family == "reduce":
        return reduce.ROW_REDUCE, reduce.RowSpec("softmax", 4096, "float32"), "softmax"
    if family == "memory":
        return memory.PERMUTE, memory.PermuteSpec((32, 64, 128), (0, 2, 1), "float32"), "transpose"
    return attention, attention.AttentionSpec(64, "bfloat16", True), "flash_attn"


@dataclasses.dataclass(frozen=True)
class FamilyDoc:
    name: str
    doc: str
    example: str  # rendered kernel + launcher ("" when rendering failed)

    def text(self) -> str:
        out = f"### Family `{self.name}` (workbench/kernels/{self.name}.py)\n{self.doc.strip()}\n"
        if self.example:
            out += f"\nExample rendered by this family:\n```python\n{self.example.strip()}\n```\n"
        return out


def family_doc(name: str) -> FamilyDoc:
    mod = MODULES[name]
    try:
        fam, spec, kname = _example(name)
        r = fam.render(spec, fam.default(spec), kname)
        example = r.kernel_src.strip() + "\n\n\n" + r.launcher_src.strip()
    except Exception:  # an example is a nicety; the docstring alone still teaches the pattern
        example = ""
    return FamilyDoc(name, mod.__doc__ or "", example)


def tokens(text: str) -> set[str]:
    words = set(_WORD.findall(text.lower()))
    return words | {p for w in words for p in w.split("_") if len(p) > 1}


def rank_families(problem_source: str, problem_name: str = "") -> list[tuple[str, int]]:
    """[(family, score)] best first, every family listed."""
    words = tokens(problem_source + " " + problem_name.replace("_", " ") + " " + problem_name)
    scores = {}
    for name in ORDER:
        doc = MODULES[name].__doc__ or ""
        doc_words = {w for w in tokens(doc + " " + name) if len(w) >= 4 and w not in _STOP}
        scores[name] = 3 * len(words & HINTS[name]) + len(words & doc_words - _STOP)
    return sorted(scores.items(), key=lambda kv: (-kv[1], ORDER.index(kv[0])))


def retrieve_families(problem_source: str, problem_name: str = "", k: int = 2) -> list[FamilyDoc]:
    return [family_doc(name) for name, _ in rank_families(problem_source, problem_name)[:k]]


@dataclasses.dataclass(frozen=True)
class Winner:
    problem: str
    speedup: float
    source: str


def past_winners(store: Any, problem_name: str, k: int = 2, max_chars: int = 6000,
                 source_of: Callable[[str], str | None] | None = None) -> list[Winner]:
    """Up to k best passing candidates of stored problems whose name shares a token with `problem_name`."""
    if store is None:
        return []
    mine = {t for t in problem_name.lower().split("_") if t}
    frame = store.evaluations_frame()
    if frame.empty:
        return []
    frame = frame[(frame["ok"] == 1) & frame["speedup_vs_eager"].notna()]
    similar = frame["problem_name"].fillna("").map(lambda n: bool(mine & set(n.lower().split("_"))))
    frame = frame[similar].sort_values("speedup_vs_eager", ascending=False)
    out, seen = [], set()
    source_of = source_of or store.candidate_source
    for row in frame.itertuples():
        if row.candidate_hash in seen:
            continue
        seen.add(row.candidate_hash)
        src = source_of(row.candidate_hash)
        if src and len(src) <= max_chars:
            out.append(Winner(row.problem_name, float(row.speedup_vs_eager), src))
        if len(out) >= k:
            break
    return out
