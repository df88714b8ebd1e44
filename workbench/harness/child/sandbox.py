"""Child-side guards: the original timing and sync functions, tamper detection, and candidate loading.

Imported only inside worker processes. At worker start we keep references to the functions the harness relies on
(events, synchronisation, clocks, comparisons). The harness calls those saved originals, so a candidate that patches
`torch.cuda.Event.elapsed_time` cannot change a measurement, and after every task we compare the live attributes with
the saved ones: any difference is tampering, the task fails and the worker is replaced.
"""
from __future__ import annotations

import builtins
import inspect
import itertools
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

from ...problems.loader import import_file

# (owner, attribute) pairs a cheating candidate would want to patch.
_SENSITIVE: list[tuple[Any, str]] = [
    (time, "perf_counter"), (time, "perf_counter_ns"), (time, "time"), (time, "monotonic"),
    (torch, "allclose"), (torch, "equal"), (torch, "isclose"), (torch, "manual_seed"),
    (torch.Tensor, "clone"), (torch.Tensor, "copy_"), (torch.Tensor, "__eq__"),
    (torch.nn.Module, "__call__"), (builtins, "isinstance"), (builtins, "print"),
]  # tf32 switches are not here: the harness sets them itself before every reference run
if hasattr(torch, "cuda"):
    _SENSITIVE += [(torch.cuda, "synchronize"), (torch.cuda, "Event"), (torch.cuda.Event, "record"),
                   (torch.cuda.Event, "elapsed_time"), (torch.cuda.Event, "synchronize"),
                   (torch.cuda, "current_stream"), (torch.cuda, "Stream")]

_saved: dict[tuple[int, str], Any] = {}
_names: dict[tuple[int, str], str] = {}
_counter = itertools.count()

# Saved originals the harness calls (bound before any candidate is imported).
perf_counter = time.perf_counter
Event = torch.cuda.Event
event_record = torch.cuda.Event.record
event_elapsed = torch.cuda.Event.elapsed_time
event_sync = torch.cuda.Event.synchronize
cuda_sync = torch.cuda.synchronize


def snapshot_sensitive() -> None:
    for owner, attr in _SENSITIVE:
        key = (id(owner), attr)
        _saved[key] = getattr(owner, attr, None)
        _names[key] = f"{getattr(owner, '__name__', type(owner).__name__)}.{attr}"
    _SENSITIVE_OWNERS.update({id(o): o for o, _ in _SENSITIVE})


_SENSITIVE_OWNERS: dict[int, Any] = {}


def tampered() -> list[str]:
    """Names of sensitive attributes that changed since the snapshot (restored, so the report is not repeated)."""
    changed = []
    for (oid, attr), value in _saved.items():
        owner = _SENSITIVE_OWNERS[oid]
        if getattr(owner, attr, None) is not value:
            changed.append(_names[(oid, attr)])
    return changed


def run_harness_code(fn):
    """Run harness code that legitimately patches torch (torch.compile wraps torch.manual_seed, for one) and accept
    its changes, after first checking that nothing before it tampered. Returns (tampered names, fn's result)."""
    before = tampered()
    if before:
        return before, None
    try:
        result = fn()
    finally:
        snapshot_sensitive()
    return [], result


def describe_environment() -> dict[str, Any]:
    import triton

    info: dict[str, Any] = {"torch_version": torch.__version__, "triton_version": triton.__version__,
                            "python": platform.python_version(), "cuda": torch.cuda.is_available()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu_name=props.name, sm_count=props.multi_processor_count,
                    l2_bytes=getattr(props, "L2_cache_size", 0), capability=f"{props.major}.{props.minor}",
                    cuda_runtime=torch.version.cuda)
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            drv = pynvml.nvmlSystemGetDriverVersion()
            info["driver"] = drv.decode() if isinstance(drv, bytes) else drv
        except Exception:
            info["driver"] = None
    return info


def import_candidate(path: str | Path) -> Any:
    """Import a candidate file under a fresh module name; return its ModelNew class."""
    p = Path(path)
    mod = import_file(p, f"_wb_cand_{p.stem}_{next(_counter)}")
    cls = getattr(mod, "ModelNew", None)
    if cls is None or not isinstance(cls, type) or not issubclass(cls, torch.nn.Module):
        raise CandidateError(f"{p.name} does not define class ModelNew(torch.nn.Module)")
    return cls


def check_constructor(cls: Any, init_inputs: list[Any]) -> None:
    """ModelNew must take the reference's constructor arguments (the KernelBench convention)."""
    try:
        inspect.signature(cls).bind(*init_inputs)
    except TypeError as e:
        raise CandidateError(f"ModelNew's constructor does not accept get_init_inputs() "
                             f"({len(init_inputs)} argument(s)): {e}") from None
    except ValueError:  # no signature available (a C extension type): let construction decide
        pass


class CandidateError(Exception):
    """The candidate is malformed (no ModelNew, wrong constructor)."""


def cuda_context_broken(exc: BaseException) -> bool:
    """True for errors after which the CUDA context cannot be trusted (the worker must be replaced)."""
    text = str(exc).lower()
    return any(s in text for s in ("illegal memory access", "illegal address", "device-side assert",
                                   "unspecified launch failure", "misaligned address", "cuda error",
                                   "an illegal instruction", "uncorrectable ecc"))


def drop_modules(prefix: str = "_wb_cand_") -> None:
    for name in [n for n in sys.modules if n.startswith(prefix)]:
        sys.modules.pop(name, None)
