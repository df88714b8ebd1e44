"""`LLMProposer`: candidates written by Claude from the problem, a parent, its measurements, findings and memory.

The prompt has two parts. The stable part, sent as the cached system block, is the instructions (the KernelBench
`ModelNew` convention and the harness's rules), the problem's effective source, its precision (what the harness's
bounds allow) and the two most relevant kernel families (`retrieval.py`); it is identical for every call on a
problem, so calls after the first read it from the prompt cache. The user turn carries what changes: the parent
candidate with its measurements, the profiler's findings (`workbench.profiling.findings.render`), the search memory
(`SearchMemory.render()`), up to two past winners from the store, and the request for one module plus a "Rationale:"
line.

A reply that cannot be read gives a `Proposal` with `candidate=None`, the reason and the raw reply kept.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import json
from typing import Any

from ..core.candidate import Candidate, content_hash
from .client import LLMClient, failure_text
from .parsing import extract_module, extract_rationale
from .retrieval import past_winners, retrieve_families

INSTRUCTIONS = """\
You write fast GPU kernels in Triton for an NVIDIA H200 (sm_90, 132 SMs, HBM3e), following the KernelBench convention.

The reference below defines `class Model(torch.nn.Module)` with `get_inputs()` and `get_init_inputs()`. You write a
complete Python module that defines `class ModelNew(torch.nn.Module)` computing the same outputs, faster:
- `ModelNew.__init__` takes exactly the same arguments as `Model.__init__` (it is built with `*get_init_inputs()`)
  and creates the same parameters in the same order (the harness copies the reference's state into it).
- `forward` takes the same inputs and returns the same shapes and dtypes. Write the heavy work as `@triton.jit`
  kernels launched from forward; torch may allocate outputs and make views.
- Import only torch, triton, triton.language as tl, math and the standard library's pure helpers.

The harness measures your module in a separate process and rejects, before running it:
- CUDA streams, CUDA graphs, events or synchronisation of your own; threads, processes or async work;
- try/except (or any fallback) around a kernel launch, and falling back to the reference or to torch for the whole op;
- caching results or inputs between calls (keys from data_ptr()/id(), functools caches, module-level state written
  in forward);
- patching torch, triton, timers, random state or the harness; reading the caller's frames or the reference module;
- writing files, environment variables or using the network; exec/eval or raw memory access.
Correctness is checked against the reference on several fresh input sets with per-dtype tolerances; outputs must not
alias inputs, and uninitialised memory reads as NaN.

Reply with exactly one line starting "Rationale:" (what you changed and why it should be faster, one sentence), then
the complete module in one ```python block. No other code blocks."""


# What the harness's bounds allow, per the problem's effective precision (`Problem.effective_precision`): a model that
# is not told writes plain-tf32 dots in a strict problem (rejected) or fp32 FMA loops where tf32 would pass.
PRECISION_TEXT = {
    "strict": "strict fp32: the reference runs every fp32 matmul and convolution in full fp32 (tf32 off) and fp32 "
              "outputs must match within a relative error of 1e-4. Pass input_precision=\"tf32x3\" (or \"ieee\") "
              "to tl.dot on fp32 operands, never plain tf32 or a cast to 16-bit types.",
    "cudnn_tf32": "PyTorch's defaults: the reference's convolutions (and recurrent layers) run on cuDNN in tf32, its "
                  "matmuls in full fp32, and fp32 outputs are judged at tf32 bounds (relative error 2e-3). A "
                  "convolution may use tl.dot with input_precision=\"tf32\"; keep matmuls fp32-accurate "
                  "(input_precision=\"tf32x3\" or \"ieee\"); no casts to 16-bit types.",
    "tf32": "tf32 accepted: fp32 matmuls and convolutions may use tl.dot with input_precision=\"tf32\"; fp32 outputs "
            "are judged at tf32 bounds (relative error 2e-3).",
}


def precision_text(problem: Any) -> str:
    """The prompt's line on precision (16-bit problems are judged per dtype, at 1e-2)."""
    return PRECISION_TEXT.get(getattr(problem, "effective_precision", "strict"), PRECISION_TEXT["strict"]) + \
        " bf16/fp16 outputs are judged at a relative error of 1e-2."


@dataclasses.dataclass(frozen=True)
class Proposal:
    candidate: Candidate | None
    rationale: str
    reply: str
    call_id: str | None
    failure: str | None = None  # why there is no candidate: "truncated", "no class ModelNew", an API error, ...

    @property
    def ok(self) -> bool:
        return self.candidate is not None


def _measurements_text(measurements: Any) -> str:
    if measurements is None:
        return ""
    if hasattr(measurements, "summary"):  # an Evaluation
        s = measurements.summary()
        keep = ("fidelity", "ok", "candidate_ms", "eager_ms", "compile_ms", "speedup_vs_eager", "speedup_vs_compile")
        measurements = {k: s[k] for k in keep if k in s}
        measurements["stages"] = [f"{st['name']}: {st['verdict']}" + (f" ({st['reason']})" if st.get("reason") else "")
                                  for st in s.get("stages", [])]
    if isinstance(measurements, dict):
        return json.dumps(measurements, indent=1, default=str)
    return str(measurements)


class LLMProposer:
    def __init__(self, problem: Any, client: LLMClient, store: Any = None, families: int = 2, winners: int = 2):
        self.problem, self.client, self.store = problem, client, store
        self.families = retrieve_families(problem.source, problem.name, k=families)
        self.n_winners = winners

    def stable_prompt(self) -> str:
        fams = "\n".join(f.text() for f in self.families)
        return (f"{INSTRUCTIONS}\n\n## Reference problem `{self.problem.name}`\n```python\n"
                f"{self.problem.source.strip()}\n```\n\n## Precision\n{precision_text(self.problem)}\n\n"
                f"## Kernel families of this workbench that fit this problem\n{fams}")

    def user_prompt(self, parent_source: str | None = None, measurements: Any = None, findings_text: str = "",
                    memory_text: str = "") -> str:
        parts = []
        if parent_source:
            parts.append(f"## Parent candidate (improve on it)\n```python\n{parent_source.strip()}\n```")
            m = _measurements_text(measurements)
            if m:
                parts.append(f"## Its measurements\n{m}")
        else:
            parts.append("## Parent candidate\nNone yet: write a first Triton version of the reference.")
        if findings_text.strip():
            parts.append(f"## Profiler findings on the parent\n{findings_text.strip()}")
        if memory_text.strip():
            parts.append(f"## What the search has tried so far\n{memory_text.strip()}")
        wins = past_winners(self.store, self.problem.name, k=self.n_winners)
        for w in wins:
            parts.append(f"## A past winner on the similar problem `{w.problem}` ({w.speedup:.3g}x eager)\n"
                         f"```python\n{w.source.strip()}\n```")
        parts.append("Write the improved module now: the Rationale line, then one ```python block defining ModelNew.")
        return "\n\n".join(parts)

    def propose(self, parent_source: str | None = None, measurements: Any = None, findings_text: str = "",
                memory_text: str = "", n: int = 1) -> list[Proposal]:
        stable = self.stable_prompt()
        user = self.user_prompt(parent_source, measurements, findings_text, memory_text)
        parent = content_hash(parent_source) if parent_source else None
        if n <= 1:
            return [self._one(stable, user, parent)]
        workers = min(n, max(1, self.client.config.concurrency))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda _: self._one(stable, user, parent), range(n)))

    def _one(self, stable: str, user: str, parent: str | None) -> Proposal:
        try:
            reply = self.client.complete(stable, user, purpose=f"propose:{self.problem.name}")
        except Exception as e:  # the client already retried what is worth retrying, and recorded the failure
            return Proposal(None, "", "", None, failure=failure_text(e))
        parsed = extract_module(reply.text, reply.stop_reason)
        rationale = extract_rationale(reply.text)
        if not parsed.ok:
            return Proposal(None, rationale, reply.text, reply.call_id, failure=parsed.failure)
        origin = (("call_id", reply.call_id), ("kind", "llm"), ("model", reply.model), ("rationale", rationale))
        return Proposal(Candidate(parsed.source, parent=parent, origin=origin), rationale, reply.text, reply.call_id)
