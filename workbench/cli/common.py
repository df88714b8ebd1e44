"""What several commands share: the problem and store an invocation names, the LLM client."""
from __future__ import annotations

import os
import shutil
import subprocess

from ..devices.resolve import resolve_name
from ..devices.worker import memory_limit_bytes
from ..llm import CallRecorder, LLMClient, LLMConfig
from ..problems.check import load_checked
from ..store import Store


def load_problem(args):
    """The problem, checked in a separate process first (`problems.check`): a broken file exits 2 naming it, and so
    does one whose inputs and parameters cannot fit in the memory of the device `--device` names."""
    return load_checked(args.problem, args.overrides, args.precision, getattr(args, "problem_timeout_s", None),
                        memory=device_memory(getattr(args, "device", None)))


def device_memory(spec: str | None) -> tuple[int, str] | None:
    """(bytes, what they are) that a worker of the device `spec` names can hold: a GPU's total memory (inputs and the
    reference are built on it), the CPU worker's memory limit (past it the parent kills the worker); None where this
    machine cannot say (replay allocates nothing; a Ray cluster's workers are elsewhere; no nvidia-smi)."""
    if spec is None:
        return None
    name = resolve_name(spec)
    if name == "cpu":
        return memory_limit_bytes(), "the CPU worker's memory limit (WORKBENCH_WORKER_MEMORY_GB, default 60 % of RAM)"
    if name == "cuda" or name.startswith("cuda:"):
        try:
            index = int(name.split(":")[1]) if ":" in name else 0
        except ValueError:
            return None  # not a device name: opening the device says so
        total = gpu_total_memory(index)
        return None if total is None else (total, f"GPU {index} ({name})")
    return None


def gpu_total_memory(index: int) -> int | None:
    """The total memory of visible GPU `index`, asked through nvidia-smi: no CUDA context in this (parent) process,
    like `devices.local.cuda_gpu_count`."""
    if shutil.which("nvidia-smi") is None:
        return None
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    target = visible[index] if index < len(visible) else str(index)  # nvidia-smi -i takes an index or a UUID
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i",
                              target], capture_output=True, text=True, timeout=30).stdout
        return int(out.split()[0]) * 2**20  # MiB
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def problem_error_text(problem, reason: str, stage: str) -> str:
    """A problem's error that a worker met (its reason names no file: the worker's code does not know the path), as
    the command line says problem errors: the file first, the `--set` values it was loaded with, the stage."""
    path = str(problem.path)
    text = reason if reason.startswith(path) else f"{path}: {reason}"
    sets = ", ".join(f"--set {k}={v}" for k, v in problem.overrides)
    return f"{text} (in the {stage} stage" + (f"; loaded with {sets})" if sets else ")")


def open_store(args):
    if args.no_store:
        return None
    return Store(args.store)


def llm_client(store=None, model: str | None = None):
    """The `LLMClient` behind --proposer llm and --surrogate llm: the Anthropic SDK, ANTHROPIC_API_KEY read from the
    environment (without it `LLMUnavailable` says so and the command exits 2), each call recorded in the store's
    `llm_calls` table when a store is open. `main(llm_client_factory=...)` replaces it (tests: recorded replies)."""
    recorder = CallRecorder(store) if store is not None else None
    return LLMClient(LLMConfig(model=model) if model else LLMConfig(), recorder=recorder)
