"""The harness's CUDA-graph launch: a candidate that declares `LAUNCH_MODE = "cuda_graph"` has its forward replayed as
one captured CUDA graph on a CUDA device.

Why: a network of many small kernels is bound by launching them from Python, not by the GPU (the H100 of session 35:
ConvViT's ~90 kernels at 0.37x eager, a 256-step RNN loop at 180 us a step against eager's 56 us). One graph replay
launches them all at once. The harness owns the graph, not the candidate: the static stage still refuses streams and
graphs in candidate code, since those can move work out of the timed window; here every call's work is on the
caller's stream, inside the window.

What a call keeps, so a replayed forward means what the plain one does:
- inputs are copied into the graph's own buffers on every call (the copy is timed with the rest), so new data is seen;
- outputs are cloned out of the graph's buffers, so a caller's earlier outputs are never overwritten by a later call;
- the first call of each input signature (shapes, strides, dtypes, scalar values, the model's parameter addresses and
  mode) runs the plain forward, which compiles its kernels; the second runs it plain again with torch's
  synchronising-operation warnings on (a host sync cannot be captured); the third captures and replays;
- a forward that reassigns a tensor attribute (state carried between calls, like an RNN's `self.hidden`) cannot be
  replayed (the graph would read the old tensor forever), nor can one that synchronises with the host or has
  non-flat inputs, or one that writes its inputs in place (a replay would write the graph's copies): it runs plain,
  and `describe` says why, so a record never claims a graph that did not run.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ..launch_mode import CUDA_GRAPH, EAGER, declared_mode
from .sandbox import cuda_context_broken

SCALARS = (int, float, bool, str, type(None))
MAX_GRAPHS = 4  # signatures kept; a caller whose inputs change shape on every call runs plain after these


def _cuda_capture(fn: Callable[[], Any]) -> tuple[Callable[[], None], Any]:
    """Capture fn's kernels as one CUDA graph on a side stream forked from the current one; returns (replay, the
    outputs the replay writes). Not `torch.cuda.graph`: when a capture fails, that context manager's exit raises
    before it restores the current stream, and every later call would run on the capture's stream; here the stream
    context is always left. `thread_local`: only this thread's unsafe calls end the capture."""
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    caller, stream = torch.cuda.current_stream(), torch.cuda.Stream()
    stream.wait_stream(caller)
    with torch.cuda.stream(stream):
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            out = fn()
        finally:
            graph.capture_end()
    caller.wait_stream(stream)
    return graph.replay, out


def _host_syncs(fn: Callable[[], Any]) -> tuple[Any, str | None]:
    """fn() with torch's synchronising-operation warnings on: (its result, the first warning) . A forward that
    synchronises with the host (`.item()`, `.cpu()`, `nonzero`) cannot be captured, and a failed capture is
    costly, so it is found on a plain call instead."""
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            out = fn()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    # torch's own notice on enabling the mode ("Synchronization debug mode is a prototype feature and does not yet
    # detect all synchronizing operations") names synchronising too: it is not a sync (seen on the H100, torch 2.11)
    syncs = [str(w.message) for w in caught
             if "synchroniz" in str(w.message) and "debug mode is a prototype" not in str(w.message)]
    return out, (syncs[0][:200] if syncs else None)


def _check_usable(error: Exception) -> None:
    """After a failed capture: a synchronise and a random draw must work, or the worker is replaced (the message
    reads as a broken CUDA context, which device_stages treats so). A failed capture can leave torch's default
    generator in capture mode (seen on the H100: the next `get_inputs()` raised "Offset increment outside graph
    capture"); host syncs, the usual cause, are found on a plain call before any capture (`_host_syncs`)."""
    try:
        torch.cuda.synchronize()
        torch.empty(1, device="cuda").normal_()
    except Exception as e:
        raise RuntimeError(f"CUDA error: a failed CUDA-graph capture ({type(error).__name__}: {str(error)[:200]}) "
                           f"left the worker unusable ({type(e).__name__}: {str(e)[:200]}); declare "
                           f"LAUNCH_MODE = 'eager' for this forward") from None


def _on_cuda(x: torch.Tensor) -> bool:
    return x.device.type == "cuda"


class GraphLaunch(torch.nn.Module):
    """Wraps a constructed candidate; `model` stays a submodule so mode and device moves reach it."""

    def __init__(self, model: torch.nn.Module, capture: Callable | None = None, sync_check: Callable | None = None):
        super().__init__()
        self.model = model
        self._capture_fn = capture or _cuda_capture
        self._sync_check = sync_check or _host_syncs
        self._graphs: dict[tuple, tuple[Callable[[], None], list[Any], Any]] = {}
        self._seen: set[tuple] = set()  # signatures whose first plain call ran
        self._synced: set[tuple] = set()  # ... and whose second found no host synchronisation
        self._state_dicts: list[dict] | None = None
        self.replays = 0
        self.plain_reason: str | None = None  # why the forward runs plain (None while graphs run)

    def describe(self) -> dict[str, Any]:
        """What ran, for the stage's record."""
        if self.plain_reason is not None:
            return {"requested": CUDA_GRAPH, "ran": EAGER, "reason": self.plain_reason}
        return {"requested": CUDA_GRAPH, "ran": CUDA_GRAPH if self.replays else "not yet", "replays": self.replays,
                "graphs": len(self._graphs)}

    def _state_addresses(self) -> tuple[int, ...]:
        """Where every parameter and buffer lives (a graph reads those addresses). The submodules' parameter and
        buffer dicts are listed once: walking `parameters()` took 530 us a call for 300 tensors on the CPU, the
        dicts 55 us; a tensor replaced in them (a reassigned parameter, `.data =`) still changes the key."""
        if self._state_dicts is None:
            self._state_dicts = [d for m in self.model.modules() for d in (m._parameters, m._buffers)]
        return tuple(t.data_ptr() for d in self._state_dicts for t in d.values() if t is not None)

    def _signature(self, args: tuple) -> tuple | str:
        """A hashable key of what a captured graph depends on, or why these inputs cannot be replayed."""
        key: list[Any] = [self.model.training]
        for x in args:
            if isinstance(x, torch.Tensor):
                if not _on_cuda(x):
                    return f"an input is on {x.device}, not a CUDA device"
                key.append((tuple(x.shape), x.stride(), x.dtype, x.device))
            elif isinstance(x, SCALARS):
                key.append((type(x), x))
            else:
                return f"an input is a {type(x).__name__} (only tensors and Python scalars are replayed)"
        key.append(self._state_addresses())
        return tuple(key)

    def _attributes(self) -> dict[tuple[int, str], int]:
        """Every tensor a submodule holds, by owner and name -> the tensor object's id."""
        out = {}
        for m in self.model.modules():
            for name, v in list(vars(m).items()) + list(m._parameters.items()) + list(m._buffers.items()):
                if isinstance(v, torch.Tensor):
                    out[(id(m), name)] = id(v)
        return out

    def forward(self, *args: Any) -> Any:
        if self.plain_reason is not None:
            return self.model(*args)
        if torch.is_grad_enabled():  # a replay records no autograd graph: the plain forward does
            return self.model(*args)
        key = self._signature(args)
        if isinstance(key, str):  # inputs a graph cannot take: plain from now on
            self.plain_reason = key
            return self.model(*args)
        entry = self._graphs.get(key)
        if entry is None and key in self._seen and key not in self._synced:
            # the second plain call, its kernels compiled: does it synchronise with the host?
            out, sync = self._sync_check(lambda: self.model(*args))
            if sync:
                self.plain_reason = f"the forward synchronises with the host ({sync}): it cannot be captured"
            else:
                self._synced.add(key)
            return out
        if entry is None:
            if key not in self._seen:  # the plain call first: kernels compile, libraries pick their plans
                before = self._attributes()
                versions = [x._version if isinstance(x, torch.Tensor) else None for x in args]
                out = self.model(*args)
                changed = self._changed(before)
                written = [i for i, (x, v) in enumerate(zip(args, versions)) if v is not None and x._version != v]
                if changed:
                    self.plain_reason = f"forward reassigns {changed}: state carried between calls is not replayed"
                elif written:  # a replay would write the graph's copies, not the caller's tensors
                    self.plain_reason = f"forward writes its input(s) {written} in place"
                elif len(self._graphs) < MAX_GRAPHS:
                    self._seen.add(key)
                return out
            entry = self._capture(args)
            if entry is None:
                return self.model(*args)
            self._graphs[key] = entry
        replay, static_inputs, static_out = entry
        for dst, src in zip(static_inputs, args):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
        replay()
        self.replays += 1
        return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, static_out)

    def _changed(self, before: dict[tuple[int, str], int]) -> str | None:
        after = self._attributes()
        names = {id(m): n or "self" for n, m in self.model.named_modules()}
        moved = [f"{names.get(o, '?')}.{a}" for (o, a), i in after.items() if before.get((o, a)) != i]
        return ", ".join(sorted(moved)[:3]) or None

    def _capture(self, args: tuple) -> tuple | None:
        static = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
        before = self._attributes()
        try:
            replay, out = self._capture_fn(lambda: self.model(*static))
        except Exception as e:  # a host sync (.item(), .cpu()) or an op that cannot be captured: run plain
            if cuda_context_broken(e) and "capture" not in str(e).lower():
                raise
            if self._capture_fn is _cuda_capture:
                _check_usable(e)
            self.plain_reason = f"the forward cannot be captured as a CUDA graph: {type(e).__name__}: {str(e)[:200]}"
            return None
        changed = self._changed(before)
        if changed:
            self.plain_reason = f"forward reassigns {changed}: state carried between calls is not replayed"
            return None
        leaves = tree_flatten(out)[0]
        if not all(isinstance(x, torch.Tensor) or isinstance(x, SCALARS) for x in leaves):
            self.plain_reason = "the forward returns values other than tensors and Python scalars"
            return None
        return replay, static, out


def wrap(model: torch.nn.Module, module: Any, device: torch.device) -> torch.nn.Module:
    """The model as the harness runs it: under GraphLaunch when its module declares cuda_graph and the device is a
    CUDA GPU (on the CPU, where the interpreter runs kernels, the declaration changes nothing)."""
    if declared_mode(module) == CUDA_GRAPH and device.type == "cuda":
        return GraphLaunch(model)
    return model


def describe(model: torch.nn.Module) -> dict[str, Any] | None:
    """The launch record of a model the harness runs (None for a plain model)."""
    return model.describe() if isinstance(model, GraphLaunch) else None
