"""The package's shape, checked: layers import only downwards, the light layers load no torch, and function-local
imports of workbench modules stay where they have a reason (an optional extra, or a worker's import order)."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"

# Lowest first: a package may import only packages before it (and the package root, for HARNESS_VERSION).
LAYERS = ["core", "metrics", "problems", "examples", "kernels", "store", "harness", "devices", "profiling", "proposers",
          "surrogates", "llm", "search", "viz", "widgets", "lab", "cli"]

# Modules allowed to import workbench modules inside functions, and why.
LOCAL_IMPORTS = {
    "workbench.devices.worker": "the child sets CUDA_VISIBLE_DEVICES/TRITON_INTERPRET before torch is imported",
    "workbench.harness.ladder": "the roofline floor's counting loads torch: in the parent only once a GPU stage asks",
    "workbench.profiling.report": "its probe runs inside a compile worker (torch and triton load there only)",
    "workbench.profiling.ncu": "its --drive entry runs under ncu in a fresh process",
    "workbench.profiling.energy": "worker side: runs inside a GPU worker",
}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent)
        if "builtin" in rel.parts or ("examples" in rel.parts and path.name != "__init__.py"):
            continue  # problem files and example candidates: modules the harness loads, not the package's code
        name = ".".join(rel.with_suffix("").parts)
        yield (name[: -len(".__init__")] if name.endswith(".__init__") else name), path


def _layer(module: str) -> str:
    parts = module.split(".")
    return "" if len(parts) == 1 else parts[1]


def _imports(module: str, path: Path):
    """(target module, line, function-local) for every import of a workbench module outside TYPE_CHECKING."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"

    def walk(node, local):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module.split(".")[: len(module.split(".")) - child.level + (1 if is_pkg else 0)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.split(".")[0] == "workbench":
                    yield target, child.lineno, inner
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == "workbench":
                        yield alias.name, child.lineno, inner
            yield from walk(child, inner)

    yield from walk(tree, False)


def test_every_package_has_a_layer():
    found = {_layer(m) for m, _ in _modules()} - {""}
    assert found <= set(LAYERS), f"packages without a place in LAYERS: {sorted(found - set(LAYERS))}"


def test_layers_import_only_downwards():
    wrong = []
    for module, path in _modules():
        src = _layer(module)
        for target, line, _ in _imports(module, path):
            dst = _layer(target)
            if dst and src and dst != src and LAYERS.index(dst) > LAYERS.index(src):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({src}) imports {target} ({dst})")
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_function_local_imports_have_a_reason():
    found = sorted({f"{module} ({path.relative_to(PACKAGE.parent)}:{line} imports {target})"
                    for module, path in _modules() for target, line, local in _imports(module, path)
                    if local and module not in LOCAL_IMPORTS})
    assert not found, "function-local imports of workbench modules (import at module level, or add the module to " \
                      "LOCAL_IMPORTS with its reason):\n" + "\n".join(found)


@pytest.mark.parametrize("modules", [
    ["workbench.core.candidate", "workbench.core.records", "workbench.core.outcomes", "workbench.core.paths",
     "workbench.core.target", "workbench.core.contracts", "workbench.core.ceilings", "workbench.core.events"],
    ["workbench.metrics"],
    ["workbench.viz", "workbench.lab.runs"],
])
def test_light_layers_load_no_torch(modules):
    code = (f"import sys, importlib; [importlib.import_module(m) for m in {modules!r}]; "
            "heavy = sorted(m for m in ('torch', 'triton') if m in sys.modules); "
            "assert not heavy, f'{heavy} imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
