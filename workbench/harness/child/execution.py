"""Worker-side execution helpers shared by the correctness and timing stages.

Builds the reference and the candidate on a device from the same seed (in the mode the file constructs, training
mode for KernelBench files, never switched to eval), makes fresh random input sets, clones them,
poisons freed memory, and synchronises every stream. A candidate that declares `LAUNCH_MODE = "cuda_graph"` runs
under the harness's own CUDA-graph launch on a GPU (`graph_launch`). Runs only inside worker processes.
"""
from __future__ import annotations

import copy
import dataclasses
import sys
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ...problems.loader import ProblemError
from ...problems.problem import Problem
from . import graph_launch, sandbox, watchdog

POISON_BYTE = 0xFF  # all-ones: NaN for fp32/fp16/bf16, -1 for signed integers


# The reference's own rounding error per output: (|reference - strict fp32 re-run| elementwise, or None for a
# non-floating output; ||reference - re-run|| / ||re-run||).
Rounding = tuple[list[Any], list[float]]


@dataclasses.dataclass
class ModelPair:
    """The problem's reference model and the candidate's model, built on one device from the same seed."""
    problem: Problem
    device: torch.device
    reference: torch.nn.Module
    candidate: torch.nn.Module
    init_inputs: list[Any]
    watch: dict[str, Any] | None = None  # the watchdog's settings for the candidate's calls (`watchdog.call_seconds`)

    @property
    def watch_key(self) -> tuple:
        return (self.problem.key, str(self.device))

    def call_seconds(self) -> float | None:
        """The watchdog's window for one call of the candidate's forward (None: none)."""
        return watchdog.call_seconds(self.watch, self.watch_key)


def set_precision(precision: str) -> None:
    """The math the reference runs: true fp32 for "strict"; tf32 everywhere for "tf32"; for "cudnn_tf32" PyTorch's
    defaults, fp32 matmuls strict and cuDNN's convolutions and recurrences tf32."""
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision in ("tf32", "cudnn_tf32")


# The candidate's construction may take this many times the reference's (and at least the "construct" seconds).
CONSTRUCT_FACTOR = 10.0


def build_pair(problem: Problem, cand_path: str, device: torch.device, seed: int = 0,
               watch: dict[str, Any] | None = None) -> ModelPair:
    """`watch`: the watchdog's settings (`watchdog`): the candidate's import and construction get a window of
    "construct" seconds, or CONSTRUCT_FACTOR times the reference's construction when that is longer."""
    init = problem.init_inputs()
    torch.manual_seed(seed)
    t0 = sandbox.perf_counter()
    # built on the device: large weights initialised on the host and copied over can cost more than the checks
    with torch.device(device):
        reference = problem.make_reference(init)
    # judged in the mode the file constructs (KernelBench never calls .eval(): training mode, BatchNorm on batch
    # statistics), the mode the offline proposer captures the graph in
    reference = reference.to(device)
    ref_s = sandbox.perf_counter() - t0
    floor = (watch or {}).get("construct")
    construct_s = max(float(floor), CONSTRUCT_FACTOR * ref_s) if floor else None
    with watchdog.window("constructing the candidate (import, ModelNew(*get_init_inputs()))", construct_s):
        cls = sandbox.import_candidate(cand_path)
        sandbox.check_constructor(cls, init)
        torch.manual_seed(seed)
        try:
            with torch.device(device):
                candidate = cls(*init)
        except Exception as e:
            raise sandbox.CandidateError(f"ModelNew(*get_init_inputs()) raised {type(e).__name__}: {e}") from e
        candidate = candidate.to(device).train(reference.training)
        _align_parameters(reference, candidate)
        try:
            candidate = graph_launch.wrap(candidate, sys.modules.get(cls.__module__), device)
        except ValueError as e:
            raise sandbox.CandidateError(str(e)) from None
    return ModelPair(problem, device, reference, candidate, init, watch)


def _align_parameters(reference: torch.nn.Module, candidate: torch.nn.Module) -> None:
    """Give the candidate the reference's weights when their state dicts match (KernelBench seeds both instead;
    copying also covers candidates that create parameters in another order)."""
    ref_sd, cand_sd = reference.state_dict(), candidate.state_dict()
    if ref_sd.keys() == cand_sd.keys() and all(ref_sd[k].shape == cand_sd[k].shape for k in ref_sd):
        candidate.load_state_dict(ref_sd)


def make_inputs(problem: Problem, device: torch.device, seed: int) -> list[Any]:
    torch.manual_seed(seed)
    with torch.device(device):
        inputs = problem.inputs()
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def degenerate_inputs(inputs: list[Any]) -> list[int]:
    """Indices of floating inputs that are constant (zeros hide unwritten outputs and wrong indexing)."""
    bad = []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 1:
            if bool((x == x.flatten()[0]).all()):
                bad.append(i)
    return bad


def empty_inputs(inputs: list[Any]) -> list[tuple[int, ...]]:
    """The shapes of the tensor inputs when every one is empty (a size set to 0), else []: nothing to compute on."""
    ts = tensors(inputs)
    return [tuple(t.shape) for t in ts] if ts and all(t.numel() == 0 for t in ts) else []


def judged_values(out: Any) -> int:
    """How many values an output offers to judge: tensor elements and Python numbers. None, strings and empty tensors
    are the same for every candidate that returns them, so an output of only those judges nothing."""
    leaves = tree_flatten(out)[0]
    return sum(x.numel() if isinstance(x, torch.Tensor) else isinstance(x, (int, float, complex)) for x in leaves)


def clone(tree: Any) -> Any:
    return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, tree)


def tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def sync(device: torch.device) -> None:
    """Wait for all work on the device, every stream included (the saved original, not a patchable one)."""
    if device.type == "cuda":
        sandbox.cuda_sync()


def poison(device: torch.device, sizes: list[int]) -> None:
    """Fill freed allocator blocks of these sizes with the poison pattern, so memory a candidate allocates and never
    writes (or memory that held a freed reference output) reads as NaN, not as a plausible answer."""
    blocks = [torch.full((n,), POISON_BYTE, dtype=torch.uint8, device=device) for n in sizes if n > 0]
    sync(device)
    del blocks


def run_model(model: torch.nn.Module, inputs: list[Any], device: torch.device) -> Any:
    with torch.no_grad():
        out = model(*inputs)
    sync(device)
    return out


CALL_LABEL = "a call of the candidate's forward"


def run_candidate(pair: ModelPair, inputs: list[Any]) -> Any:
    """The candidate's forward under the watchdog's call window."""
    with watchdog.window(CALL_LABEL, pair.call_seconds()):
        return run_model(pair.candidate, inputs, pair.device)


def run_pair_reference(pair: ModelPair, inputs: list[Any]) -> Any:
    """The reference's forward (`run_reference`), its time kept for the candidate's call windows."""
    t0 = sandbox.perf_counter()
    out = run_reference(pair.reference, inputs, pair.device)
    watchdog.note_reference(pair.watch_key, sandbox.perf_counter() - t0)
    return out


def run_reference(model: torch.nn.Module, inputs: list[Any], device: torch.device) -> Any:
    """The reference's forward; its own exception is the problem's error (ProblemError), never the candidate's,
    except a broken CUDA context, which may be anyone's and replaces the worker."""
    try:
        return run_model(model, inputs, device)
    except Exception as e:
        if sandbox.cuda_context_broken(e):
            raise
        raise ProblemError(f"the reference Model's forward raised {type(e).__name__}: {str(e).strip()[:300]}") from e


def same_inputs(before: list[Any], after: list[Any]) -> list[int]:
    """Indices of tensor inputs whose contents changed (exact comparison, NaN where NaN was counts as unchanged)."""
    changed = []
    for i, (a, b) in enumerate(zip(before, after)):
        if not isinstance(a, torch.Tensor):
            continue
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            changed.append(i)
        elif torch.equal(a, b):
            continue
        elif a.is_floating_point() or a.is_complex():
            na, nb = torch.isnan(a), torch.isnan(b)
            if not torch.equal(na, nb) or not torch.equal(a[~na], b[~nb]):
                changed.append(i)
        elif not torch.equal(a, b):
            changed.append(i)
    return changed


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def widenable(ref_out: Any, precision: str) -> bool:
    """Whether the reference may carry rounding error of its own: bf16/fp16 outputs, or a problem whose reference runs
    tf32 math (all of it, or cuDNN's)."""
    return precision in ("tf32", "cudnn_tf32") or any(t.dtype in (torch.bfloat16, torch.float16)
                                                      for t in tensors(ref_out))


# An fp32 reference rounds too, and where an output is the cancellation of much larger intermediates (the mean of a
# normalised tensor is 0 up to rounding) its own error is the whole output. Against its float64 re-run, its error sets
# an absolute floor: this many times the reference's largest deviation, for every element (the candidate sums in
# another order, so its rounding is of the same size, not the same values). A precision downgrade (bf16 or tf32 in
# an fp32 problem) errs by ~1e-3 of the intermediates, three or more orders above fp32 rounding: still caught.
# 16, not 4: on an output of two elements the reference's deviation is a sample of two and can be lucky-small; a
# correct H100 candidate of a Conv3d+GroupNorm+mean erred 7.5x the reference's own deviation. Still lucky-small on
# some seeds (the CPU reference's cascade sums erred 1e-9 where the interpreter's blocked sums erred 3e-8), so the
# deviation is sampled twice: the reference itself, and the reference on inputs and parameters nudged by half an
# ulp (ROUNDING_NUDGE), which re-rounds every intermediate as another summation order would; the larger one counts.
FP32_ROUNDING_FACTOR = 16.0
ROUNDING_NUDGE = 2.0 ** -24


def _nudged_run(pair: ModelPair, inputs: list[Any]) -> Any:
    """The fp32 reference on a copy whose parameters and floating inputs are scaled by 1 + u * ROUNDING_NUDGE (u
    uniform in [-1, 1], a fixed generator: the same judgement every time): a second sample of its rounding."""
    gen = torch.Generator(device=pair.device).manual_seed(0x5EED)

    def nudge(t: torch.Tensor) -> torch.Tensor:
        u = torch.rand(t.shape, generator=gen, device=t.device, dtype=t.dtype) * 2 - 1
        return t * (1 + u * ROUNDING_NUDGE)

    model = copy.deepcopy(pair.reference)
    with torch.no_grad():
        for prm in model.parameters():
            if prm.is_floating_point() and prm.dtype == torch.float32:
                prm.copy_(nudge(prm))
    args = [nudge(t) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t for t in clone(inputs)]
    return run_model(model, args, pair.device)


def reference_rounding(pair: ModelPair, inputs: list[Any], ref_out: Any) -> Rounding | None:
    """The reference's own error, per output: (elementwise slack, relative-norm slack). A bf16/fp16 or tf32 reference
    against its strict fp32 re-run (parameters and floating inputs widened to fp32, tf32 off): |reference - re-run|
    and ||reference - re-run|| / ||re-run||. A strict fp32 reference against its float64 re-run: FP32_ROUNDING_FACTOR
    times its largest deviation for every element, and that factor times ||reference - re-run|| / ||reference||; the
    deviation is the larger of the reference's and that of the reference on nudged inputs (`_nudged_run`).
    A tf32 reference's fp32 outputs get both, the larger per element: tf32's own error, and the fp32 rounding floor of
    its strict re-run (an output that is the cancellation of larger terms, the mean of a normalised tensor, is rounding
    whatever the math; without the floor such a file failed wherever tf32 added nothing, as on the CPU).
    None when the re-run is not possible (the model insists on its dtypes, memory) or its outputs do not line up."""
    precision = pair.problem.effective_precision
    if not widenable(ref_out, precision):
        return _rounding(pair, inputs, ref_out, True, precision)
    own = _rounding(pair, inputs, ref_out, False, precision)
    if own is None or precision not in ("tf32", "cudnn_tf32"):
        return own
    try:
        set_precision("strict")
        try:
            strict_out = run_model(copy.deepcopy(pair.reference), clone(inputs), pair.device)  # its state stays
            floor = _rounding(pair, inputs, strict_out, True, "strict")
        finally:
            set_precision(precision)
    except Exception:  # tf32's own error alone, then
        return own
    if floor is None:
        return own
    slacks = [b if a is None else a if b is None else torch.maximum(a, b.to(a.dtype))
              for a, b in zip(own[0], floor[0])]
    return slacks, [max(a, b) for a, b in zip(own[1], floor[1])]


def _rounding(pair: ModelPair, inputs: list[Any], ref_out: Any, fp32: bool, runs_under: str) -> Rounding | None:
    """`reference_rounding`'s measure of `ref_out`: against the float64 re-run (`fp32`) or the strict fp32 one; the
    nudged second sample runs under `runs_under`, the precision `ref_out` was computed in."""
    dtype = torch.float64 if fp32 else torch.float32
    try:
        wide = copy.deepcopy(pair.reference).to(dtype)
        args = [t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in clone(inputs)]
        set_precision("strict")
        try:
            hi = run_model(wide, args, pair.device)
        finally:
            set_precision(runs_under)
    except Exception:
        return None
    try:
        nudged = tensors(_nudged_run(pair, inputs)) if fp32 else None
    except Exception:  # the first sample alone, then
        nudged = None
    lo_t, hi_t = tensors(ref_out), tensors(hi)
    if len(lo_t) != len(hi_t) or any(a.shape != b.shape for a, b in zip(lo_t, hi_t)):
        return None
    if nudged is not None and [t.shape for t in nudged] != [t.shape for t in lo_t]:
        nudged = None
    slacks, rels = [], []
    for i, (a, b) in enumerate(zip(lo_t, hi_t)):
        if not a.is_floating_point():
            slacks.append(None)
            rels.append(0.0)
            continue
        if fp32 and a.dtype != torch.float32:  # a float64 output is judged as it is
            slacks.append(None)
            rels.append(0.0)
            continue
        d = (a.to(dtype) - b.to(dtype))
        finite = torch.isfinite(d)
        d = torch.where(finite, d, torch.zeros_like(d))
        if fp32:
            dev, dev_norm = float(d.abs().max()) if d.numel() else 0.0, float(torch.linalg.vector_norm(d))
            if nudged is not None and nudged[i].is_floating_point():
                dn = nudged[i].to(dtype) - b.to(dtype)
                dn = torch.where(torch.isfinite(dn), dn, torch.zeros_like(dn))
                dev = max(dev, float(dn.abs().max()) if dn.numel() else 0.0)
                dev_norm = max(dev_norm, float(torch.linalg.vector_norm(dn)))
            slacks.append(torch.full(a.shape, FP32_ROUNDING_FACTOR * dev, dtype=torch.float32, device=a.device))
            norm = float(torch.linalg.vector_norm(torch.where(finite, a.to(dtype), torch.zeros_like(d))))
            rels.append(FP32_ROUNDING_FACTOR * dev_norm / norm if norm > 0 else 0.0)
            continue
        norm = float(torch.linalg.vector_norm(torch.where(finite, b.float(), torch.zeros_like(d))))
        slacks.append(d.abs())
        rels.append(float(torch.linalg.vector_norm(d)) / norm if norm > 0 else 0.0)
    return slacks, rels
