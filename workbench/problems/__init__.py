"""Problems: KernelBench-format references, size overrides, counts and the roofline floor."""
from .loader import ProblemError, builtin_names, resolve_path
from .problem import PRECISIONS, Problem

__all__ = ["Problem", "ProblemError", "PRECISIONS", "builtin_names", "resolve_path"]
