"""Load KernelBench-format problem files, unchanged, with size overrides.

A problem file defines `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`, usually with module-level size
constants (`batch_size = 16`). `--set NAME=VALUE` (VALUE a literal or constant arithmetic: `problems.literal`)
overrides such a constant by rewriting its assignment in the module's syntax tree and executing the rewritten source,
so everything computed from it later at module level (a shape tuple built from a channel count) follows the override.
In a chained assignment (`height = width = 128`) only the named target changes; set both to change both.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import itertools
import sys
import types
from pathlib import Path
from typing import Any, Mapping

from .literal import LiteralError, literal_source

BUILTIN_DIR = Path(__file__).parent / "builtin"
REQUIRED = ("Model", "get_inputs", "get_init_inputs")

_counter = itertools.count()


class ProblemError(ValueError):
    """A problem file that cannot be used, with a message that names what is missing or wrong."""


def resolve_path(name_or_path: str | Path) -> Path:
    """A file path, or the name of a built-in problem (with or without `.py`)."""
    p = Path(name_or_path)
    if p.suffix == ".py" and p.exists():
        return p.resolve()
    stem = p.name[:-3] if p.name.endswith(".py") else p.name
    builtin = BUILTIN_DIR / f"{stem}.py"
    if builtin.exists() and len(p.parts) == 1:
        return builtin
    if p.exists():
        raise ProblemError(f"{p}: a problem must be a .py file in KernelBench format")
    names = ", ".join(builtin_names())
    raise ProblemError(f"no problem file at '{name_or_path}' and no built-in problem of that name (built-ins: {names})")


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.py") if not p.name.startswith("_"))


def parse_override(text: str) -> tuple[str, str]:
    """'NAME=VALUE' -> (NAME, VALUE's canonical source). VALUE is a literal or constant arithmetic (`[64,64]`,
    `2**20`, `torch.float16`; `workbench.problems.literal`): never a call or a name, so `--set` runs no code."""
    if "=" not in text:
        raise ProblemError(f"--set expects NAME=VALUE, got '{text}'")
    name, value = text.split("=", 1)
    name, value = name.strip(), value.strip()
    if not name.isidentifier():
        raise ProblemError(f"--set: '{name}' is not a valid constant name")
    try:
        return name, literal_source(value)
    except LiteralError as e:
        raise ProblemError(f"--set {name}: '{value}' is refused: {e}") from None


def module_constants(tree: ast.Module) -> dict[str, int]:
    """Top-level names bound by plain assignments, with the line of their (last) binding."""
    found: dict[str, int] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    found[n.id] = node.lineno
    return found


def apply_overrides(source: str, overrides: Mapping[str, str], filename: str = "<problem>") -> str:
    """Rewrite module-level assignments of the overridden names; return the new source."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as e:
        raise ProblemError(f"{filename}: syntax error at line {e.lineno}: {e.msg}") from None
    if not overrides:
        return source
    try:  # every caller's values are literals: no override executes code
        overrides = {n: literal_source(v) for n, v in overrides.items()}
    except LiteralError as e:
        raise ProblemError(f"{filename}: an override is refused: {e}") from None
    consts = module_constants(tree)
    unknown = [n for n in overrides if n not in consts]
    if unknown:
        avail = ", ".join(sorted(n for n in consts if not n.startswith("_"))) or "none"
        raise ProblemError(
            f"{filename}: cannot override {', '.join(unknown)}: not a module-level constant (available: {avail})")
    new_body: list[ast.stmt] = []
    for node in _split_literal_unpacking(tree.body, set(overrides)):
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            names = [t.id for t in node.targets]  # type: ignore[attr-defined]
            hit = [n for n in names if n in overrides]
            if hit:
                keep = [n for n in names if n not in overrides]
                if keep:  # chained assignment: the other targets keep their original value
                    new_body.append(ast.copy_location(ast.Assign(
                        targets=[ast.Name(n, ast.Store()) for n in keep], value=node.value), node))
                for n in hit:
                    new_body.append(ast.copy_location(ast.Assign(
                        targets=[ast.Name(n, ast.Store())],
                        value=ast.parse(overrides[n], mode="eval").body), node))
                continue
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in overrides:
            node.value = ast.parse(overrides[node.target.id], mode="eval").body
        elif isinstance(node, ast.Assign):
            names = {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if names & set(overrides):
                raise ProblemError(
                    f"{filename}: line {node.lineno} binds {', '.join(sorted(names & set(overrides)))} by unpacking;"
                    " override a constant that is assigned on its own")
        new_body.append(node)
    tree.body = new_body
    ast.fix_missing_locations(tree)
    return ast.unparse(tree)


def _split_literal_unpacking(body: list[ast.stmt], names: set[str]) -> list[ast.stmt]:
    """`a, b = 1, 2` as `a = 1` and `b = 2` where an overridden name is among the targets: a literal tuple unpacked
    into names binds each name independently, so each can be overridden on its own."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], (ast.Tuple, ast.List)) \
                and isinstance(node.value, (ast.Tuple, ast.List)) \
                and len(node.targets[0].elts) == len(node.value.elts) \
                and all(isinstance(t, ast.Name) for t in node.targets[0].elts) \
                and not any(isinstance(v, ast.Starred) for v in node.value.elts) \
                and {t.id for t in node.targets[0].elts} & names:
            # the values are evaluated before any target is bound: a value naming one of the targets keeps the old
            # binding, so such a statement is left whole
            targets = {t.id for t in node.targets[0].elts}
            reads = {n.id for v in node.value.elts for n in ast.walk(v) if isinstance(n, ast.Name)}
            if not targets & reads:
                out += [ast.copy_location(ast.Assign(targets=[ast.Name(t.id, ast.Store())], value=v), node)
                        for t, v in zip(node.targets[0].elts, node.value.elts)]
                continue
        out.append(node)
    return out


def exec_module(source: str, filename: str, module_name: str | None = None) -> types.ModuleType:
    """Execute source as a fresh module (registered in sys.modules so dataclasses/pickle inside it work)."""
    name = module_name or f"_wb_problem_{next(_counter)}"
    mod = types.ModuleType(name)
    mod.__file__ = filename
    sys.modules[name] = mod
    try:
        code = compile(source, filename, "exec")
        exec(code, mod.__dict__)
    except SyntaxError as e:
        sys.modules.pop(name, None)
        raise ProblemError(f"{filename}: syntax error at line {e.lineno}: {e.msg}") from None
    except SystemExit as e:  # a problem file must not end the caller (the CLI, a notebook's kernel)
        sys.modules.pop(name, None)
        raise ProblemError(f"{filename}: the file called sys.exit({e.code!r}) while loading") from None
    except Exception as e:
        sys.modules.pop(name, None)
        raise ProblemError(f"{filename}: executing the file raised {type(e).__name__}: {e}") from e
    return mod


def check_module(mod: types.ModuleType, filename: str) -> None:
    import torch

    missing = [n for n in REQUIRED if not hasattr(mod, n)]
    if missing:
        raise ProblemError(f"{filename}: missing {', '.join(missing)} (a KernelBench problem defines "
                           "class Model(nn.Module), get_inputs() and get_init_inputs())")
    if not (isinstance(mod.Model, type) and issubclass(mod.Model, torch.nn.Module)):
        raise ProblemError(f"{filename}: Model must be a subclass of torch.nn.Module, got {mod.Model!r}")
    for fn in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(mod, fn)):
            raise ProblemError(f"{filename}: {fn} must be a function")


def read_source(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise ProblemError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise ProblemError(f"{path}: not a UTF-8 text file (byte {e.start}: {e.reason}); a problem is a Python "
                           "source file") from None


def load_module(path: Path, overrides: Mapping[str, str] | None = None) -> tuple[types.ModuleType, str]:
    """Load a problem file with overrides; return (module, effective source)."""
    source = read_source(path)
    effective = apply_overrides(source, dict(overrides or {}), str(path))
    mod = exec_module(effective, str(path))
    check_module(mod, str(path))
    return mod, effective


def call_factory(mod: types.ModuleType, fn: str, filename: str) -> list[Any]:
    try:
        out = getattr(mod, fn)()
    except SystemExit as e:
        raise ProblemError(f"{filename}: {fn}() called sys.exit({e.code!r})") from None
    except Exception as e:
        raise ProblemError(f"{filename}: {fn}() raised {type(e).__name__}: {e}") from e
    if not isinstance(out, (list, tuple)):
        raise ProblemError(f"{filename}: {fn}() must return a list or tuple, got {type(out).__name__}")
    return list(out)


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def import_file(path: Path, module_name: str) -> types.ModuleType:
    """Import a module from a real file (Triton's @jit needs the source on disk). Workers only."""
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    spec.loader.exec_module(mod)
    return mod
