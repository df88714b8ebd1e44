"""`Problem`: a KernelBench-format reference with its size overrides and precision.

A Problem is cheap to pickle (path, overrides, precision), so worker processes rebuild it from the same file; the parent
loads the reference module too (problem files are trusted, candidates are not).
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import re
import types
from pathlib import Path
from typing import Any, Mapping

from ..core.safe_ast import parse
from .loader import ProblemError, call_factory, load_module, parse_override, resolve_path, source_hash


@functools.lru_cache(maxsize=4096)
def _key(name: str, source: str, precision: str) -> str:
    # computed once per source: the key is read on every store lookup, from several threads on a multi-GPU device
    return f"{name}@{source_hash(ast.unparse(parse(source)) + '|' + precision)}"


# Precisions a problem can ask for. "torch" (the default): what PyTorch computes under its own defaults -- fp32
# matmuls in full fp32, fp32 convolutions and recurrent layers (cuDNN) in tf32 -- so it resolves to "cudnn_tf32" for a
# reference that calls cuDNN and to "strict" for one that does not; "strict": every fp32 result fp32-accurate (cuDNN's
# tf32 off as well); "tf32": tf32 matrix units accepted everywhere. A file declares one with WORKBENCH_PRECISION, or
# the caller passes it.
PRECISIONS = ("torch", "strict", "tf32")
# What a problem runs under once resolved (`Problem.effective_precision`).
EFFECTIVE_PRECISIONS = ("strict", "tf32", "cudnn_tf32")
# Layers PyTorch runs through cuDNN, whose fp32 math is tf32 by default (`torch.backends.cudnn.allow_tf32`): named as
# modules (nn.Conv2d, nn.LSTM) or functions (F.conv2d, torch.conv_transpose1d). The cells (nn.LSTMCell) are cuBLAS.
CUDNN_NAMES = re.compile(r"(Lazy)?Conv(Transpose)?[123]d|conv(_transpose)?[123]d|LSTM|GRU|RNN|lstm|gru|rnn_(tanh|relu)")


@functools.lru_cache(maxsize=1024)
def calls_cudnn(source: str) -> bool:
    """Whether a reference's source names a layer or function that PyTorch runs through cuDNN (comments and strings
    do not count: names and attributes of the syntax tree only)."""
    for node in ast.walk(parse(source)):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name is not None and CUDNN_NAMES.fullmatch(name):
            return True
    return False


@dataclasses.dataclass(frozen=True)
class Problem:
    path: str
    overrides: tuple[tuple[str, str], ...] = ()
    precision: str | None = None  # None: the file's WORKBENCH_PRECISION, else "torch"

    @classmethod
    def load(cls, name_or_path: str | Path, overrides: Mapping[str, Any] | list[str] | None = None,
             precision: str | None = None) -> "Problem":
        """Resolve, parse and check a problem; overrides as {'N': '64'} or ['N=64']."""
        if precision is not None and precision not in PRECISIONS:
            raise ProblemError(f"precision must be one of {PRECISIONS}, got '{precision}'")
        path = resolve_path(name_or_path)
        pairs: dict[str, str] = {}
        if isinstance(overrides, (list, tuple)):
            for text in overrides:
                k, v = parse_override(text)
                pairs[k] = v
        elif overrides:
            for k, v in overrides.items():
                k, pairs[k] = parse_override(f"{k}={v if isinstance(v, str) else repr(v)}")
        prob = cls(str(path), tuple(sorted(pairs.items())), precision)
        prob.module, prob.effective_precision  # parse and check now, so a malformed file fails here with its reason
        return prob

    def __reduce__(self):  # the cached module is not picklable; a worker reloads it from the file
        return (type(self), (self.path, self.overrides, self.precision))

    # ---- the reference, loaded lazily (cached per instance) ----
    @functools.cached_property
    def _loaded(self) -> tuple[types.ModuleType, str]:
        return load_module(Path(self.path), dict(self.overrides))

    @property
    def module(self) -> types.ModuleType:
        return self._loaded[0]

    @property
    def source(self) -> str:
        """The effective source (overrides applied)."""
        return self._loaded[1]

    @property
    def name(self) -> str:
        return Path(self.path).stem

    @property
    def key(self) -> str:
        """Identity of the problem at these sizes: name plus a hash of the effective source."""
        # hashed on the unparsed syntax tree: comments, formatting and an override equal to the default change nothing
        # (ast.dump is not used: its output differs between Python versions, ast.unparse's text does not)
        return _key(self.name, self.source, self.effective_precision)

    @property
    def effective_precision(self) -> str:
        """The precision the problem runs under (one of EFFECTIVE_PRECISIONS): the caller's, else the file's
        WORKBENCH_PRECISION, else "torch" -- which is "cudnn_tf32" where the reference calls cuDNN, else "strict"."""
        asked = self.precision
        if not asked:
            asked = getattr(self.module, "WORKBENCH_PRECISION", "torch")
            if asked not in PRECISIONS:
                raise ProblemError(f"{self.path}: WORKBENCH_PRECISION must be one of {PRECISIONS}, got '{asked}'")
        if asked == "torch":
            return "cudnn_tf32" if calls_cudnn(self.source) else "strict"
        return asked

    def init_inputs(self) -> list[Any]:
        return call_factory(self.module, "get_init_inputs", self.path)

    def inputs(self) -> list[Any]:
        return call_factory(self.module, "get_inputs", self.path)

    def make_reference(self, init_inputs: list[Any] | None = None):
        init = self.init_inputs() if init_inputs is None else init_inputs
        try:
            return self.module.Model(*init)
        except (Exception, SystemExit) as e:
            raise ProblemError(f"{self.path}: Model(*get_init_inputs()) raised {type(e).__name__}: {e}") from e

    def constants(self) -> dict[str, Any]:
        """Module-level constants of simple types (the sizes a researcher can --set)."""
        out = {}
        for k, v in vars(self.module).items():
            if k.startswith("_") or isinstance(v, (types.ModuleType, type)) or callable(v):
                continue
            if isinstance(v, (int, float, bool, str, tuple, list)) or type(v).__name__ == "dtype":
                out[k] = v if not type(v).__name__ == "dtype" else str(v)
        return out
