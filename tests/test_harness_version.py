"""HARNESS_VERSION against the code of the harness's rules.

A store reuses an evaluation only under the same HARNESS_VERSION, so a change to what the harness accepts or how it
times must come with a bump. The rules' code (the worker side, the tolerances, the static and compile judges) is held
here to a digest per version, normalised through `ast` so comments, docstrings and formatting do not count. When it
changes, decide: a change that could alter a verdict or a measured time bumps HARNESS_VERSION and records the new
digests under the new version; one that cannot (a rename, a refactor) records them under the same version.
"""
from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import workbench

HARNESS = Path(workbench.__file__).resolve().parent / "harness"
RULES = ("child/*.py", "tolerance.py", "static.py", "compile.py", "launch_mode.py")

# version -> {file under workbench/harness: digest of its normalised code}. Version "1"'s digests were recorded when
# the guard was added, after correctness and timing came to share one output judge (no verdict changed).
GOLDEN = {
    "1": {
        "child/__init__.py": "ad2e13b69c4fc1fd",
        "child/compile_probe.py": "0bcaf775ca369804",
        "child/correctness.py": "70d8b1ec472bb73a",
        "child/device_stages.py": "500464db89eeb6c9",
        "child/execution.py": "fd068145c3516ad9",
        "child/interpreter_fixes.py": "104c85e5e08bb0b6",
        "child/judge.py": "9576bddc6ba020b4",
        "child/sandbox.py": "1744c99df1ac00d5",
        "child/timing.py": "7828839d1493d3c6",
        "compile.py": "4222ebf92178a5f2",
        "static.py": "60d9de4ea2ebb2b8",
        "tolerance.py": "86c0579181a88d2e",
    },
    # 2: both models are judged in the mode the file constructs (no .eval(): KernelBench's training mode), and a
    # reference whose outputs differ between two runs on the same inputs (dropout) is inconclusive
    "2": {
        "child/__init__.py": "ad2e13b69c4fc1fd",
        "child/compile_probe.py": "0bcaf775ca369804",
        "child/correctness.py": "9e0d14070e95f9d2",
        "child/device_stages.py": "500464db89eeb6c9",
        "child/execution.py": "48087d89ad3b0189",
        "child/interpreter_fixes.py": "104c85e5e08bb0b6",
        "child/judge.py": "9576bddc6ba020b4",
        "child/sandbox.py": "1744c99df1ac00d5",
        "child/timing.py": "7828839d1493d3c6",
        "compile.py": "4222ebf92178a5f2",
        "static.py": "60d9de4ea2ebb2b8",
        "tolerance.py": "86c0579181a88d2e",
    },
    # 3: a strict-fp32 reference whose values miss is re-run in float64 and its own rounding sets an absolute floor
    # (outputs that are cancellations of larger terms); the pass reason says when a bound widened
    "3": {
        "child/__init__.py": "ad2e13b69c4fc1fd",
        "child/compile_probe.py": "0bcaf775ca369804",
        "child/correctness.py": "78843cb1d2b344cd",
        "child/device_stages.py": "500464db89eeb6c9",
        "child/execution.py": "0a208adee9e360cb",
        "child/interpreter_fixes.py": "104c85e5e08bb0b6",
        "child/judge.py": "462143b3a2f7b199",
        "child/sandbox.py": "1744c99df1ac00d5",
        "child/timing.py": "7828839d1493d3c6",
        "compile.py": "4222ebf92178a5f2",
        "static.py": "60d9de4ea2ebb2b8",
        "tolerance.py": "86c0579181a88d2e",
    },
    # 4: outputs judged over their whole structure (container kinds, dict keys, lengths, exact non-tensor leaves,
    # Python floats within the tensors' bounds); degenerate problems (every input empty, a reference output of None
    # or empty tensors only) are inconclusive; workers isolated by the OS (child/isolation.py: a write or a connect
    # now fails the stage where it used to succeed); the static stage names more file and network routes; the
    # reference's outputs for the fixed seeds kept across a problem's candidates, the last seed of each evaluation
    # fresh (a verdict can now differ between two evaluations of a candidate that is wrong only on some inputs)
    "4": {
        "child/__init__.py": "ad2e13b69c4fc1fd",
        "child/compile_probe.py": "1f23a77488717792",
        "child/correctness.py": "866798f752372869",
        "child/device_stages.py": "500464db89eeb6c9",
        "child/execution.py": "f0599c9d3a336089",
        "child/interpreter_fixes.py": "104c85e5e08bb0b6",
        "child/isolation.py": "8da6849a40a1c794",
        "child/judge.py": "df694b3a7740b7ce",
        "child/reference_cache.py": "472ff6dbe16fd0a1",
        "child/sandbox.py": "1744c99df1ac00d5",
        "child/timing.py": "7828839d1493d3c6",
        "compile.py": "3faea8ab74bed03e",
        "static.py": "cff284781f6f7df3",
        "tolerance.py": "b7a4ae1f7efa7f55",
    },
    # 5: correctness in two rungs on a device that times (the first seed before quick timing, the rest only for
    # a promoted candidate, each rung's seeds named in its record); watchdog windows inside a worker (tracing and
    # constructing a candidate, one call of its forward scaled to the reference's measured time, a kernel compile):
    # a candidate slower than them now fails as a hang; the reference's forward during timing is the problem's error
    "5": {
        "child/__init__.py": "ad2e13b69c4fc1fd",
        "child/compile_probe.py": "4979a133a9728b25",
        "child/correctness.py": "b17dd673f96ace02",
        "child/device_stages.py": "3b28d5db315c04bc",
        "child/execution.py": "e9e6245e5c21ba01",
        "child/interpreter_fixes.py": "104c85e5e08bb0b6",
        "child/isolation.py": "8da6849a40a1c794",
        "child/judge.py": "df694b3a7740b7ce",
        "child/reference_cache.py": "472ff6dbe16fd0a1",
        "child/sandbox.py": "1744c99df1ac00d5",
        "child/timing.py": "6c80f88821424b18",
        "child/watchdog.py": "1fa577482a152db2",
        "compile.py": "3faea8ab74bed03e",
        "static.py": "cff284781f6f7df3",
        "tolerance.py": "b7a4ae1f7efa7f55",
    },
    # 6: a strict-fp32 reference's own rounding floor is 16x its deviation from the float64 re-run, not 4x (an
    # output of two elements that is pure rounding noise failed a correct candidate on the H100)
    "6": {
        "child/__init__.py": "ad2e13b69c4fc1fd",
        "child/compile_probe.py": "4979a133a9728b25",
        "child/correctness.py": "b17dd673f96ace02",
        "child/device_stages.py": "3b28d5db315c04bc",
        "child/execution.py": "9f66c96b79074253",
        "child/interpreter_fixes.py": "104c85e5e08bb0b6",
        "child/isolation.py": "8da6849a40a1c794",
        "child/judge.py": "df694b3a7740b7ce",
        "child/reference_cache.py": "472ff6dbe16fd0a1",
        "child/sandbox.py": "1744c99df1ac00d5",
        "child/timing.py": "6c80f88821424b18",
        "child/watchdog.py": "1fa577482a152db2",
        "compile.py": "3faea8ab74bed03e",
        "static.py": "cff284781f6f7df3",
        "tolerance.py": "b7a4ae1f7efa7f55",
    },
    # 7: a candidate declaring LAUNCH_MODE = "cuda_graph" is replayed by the harness as one CUDA graph on a GPU
    # (copy-in, replay, clone-out; plain where it cannot be replayed, and the record says which ran); the static
    # stage judges the declaration
    "7": {
        "child/__init__.py": "ad2e13b69c4fc1fd",
        "child/compile_probe.py": "4979a133a9728b25",
        "child/correctness.py": "f277c830d345d5ef",
        "child/device_stages.py": "3b28d5db315c04bc",
        "child/execution.py": "f7033f3601b97f8b",
        "child/graph_launch.py": "5b52e8df5404ece0",
        "child/interpreter_fixes.py": "104c85e5e08bb0b6",
        "child/isolation.py": "8da6849a40a1c794",
        "child/judge.py": "df694b3a7740b7ce",
        "child/reference_cache.py": "472ff6dbe16fd0a1",
        "child/sandbox.py": "1744c99df1ac00d5",
        "child/timing.py": "dcb611dda8b5a358",
        "child/watchdog.py": "1fa577482a152db2",
        "compile.py": "3faea8ab74bed03e",
        "launch_mode.py": "03b6537c1d6a6ac6",
        "static.py": "e788dd4771d20d17",
        "tolerance.py": "b7a4ae1f7efa7f55",
    },
    # 8: a strict-fp32 reference's rounding is sampled twice (itself, and itself on inputs and parameters nudged
    # by half an ulp; the larger deviation sets the floor), and an all-zero reference output is judged by the
    # elementwise bound alone (its relative error is undefined); later under the same version, outputs judged in
    # chunks with float64 accumulators (memory only: the same verdicts and facts)
    "8": {
        "child/__init__.py": "ad2e13b69c4fc1fd",
        "child/compile_probe.py": "4979a133a9728b25",
        "child/correctness.py": "f277c830d345d5ef",
        "child/device_stages.py": "3b28d5db315c04bc",
        "child/execution.py": "ded76e67b4033970",
        "child/graph_launch.py": "5b52e8df5404ece0",
        "child/interpreter_fixes.py": "104c85e5e08bb0b6",
        "child/isolation.py": "8da6849a40a1c794",
        "child/judge.py": "df694b3a7740b7ce",
        "child/reference_cache.py": "472ff6dbe16fd0a1",
        "child/sandbox.py": "1744c99df1ac00d5",
        "child/timing.py": "dcb611dda8b5a358",
        "child/watchdog.py": "1fa577482a152db2",
        "compile.py": "3faea8ab74bed03e",
        "launch_mode.py": "03b6537c1d6a6ac6",
        "static.py": "e788dd4771d20d17",
        "tolerance.py": "12811084e2f3cff9",
    },
}
# 9: torch's once-per-process notice on enabling sync warnings no longer reads as a host sync (the first graph
# candidate of each worker ran plain on the H100); only graph_launch.py differs from 8
GOLDEN["9"] = {**GOLDEN["8"], "child/graph_launch.py": "7d0e911a554429db"}
# 10: correctness holds one copy of the inputs fewer and frees each seed's before the next (an input over a fifth of
# the card's memory had failed with CUDA out of memory: verdicts change)
GOLDEN["10"] = {**GOLDEN["9"], "child/correctness.py": "6597fad56be19bfd"}
# 11: a KernelBench file without WORKBENCH_PRECISION is judged as PyTorch computes it by default ("torch": fp32
# matmuls strict, cuDNN's convolutions and recurrent layers tf32, so tf32 bounds where the reference calls cuDNN);
# the reference runs under those flags (a tf32 reference's bounds widen by its own error and by its strict re-run's
# fp32 rounding floor), the static stage says why a tf32 dot is allowed there
GOLDEN["11"] = {**GOLDEN["10"], "child/execution.py": "4d5920e17e925d08", "static.py": "ecab061b399de731",
                "tolerance.py": "3a4d63aec244813c"}


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            if _is_docstring(node.body[0]):
                node.body = node.body[1:]
    return tree


def _canonical(node) -> str:
    """The tree as text, without positions and without empty fields (so Python versions that add a field, empty by
    default, give the same text)."""
    if isinstance(node, ast.AST):
        fields = [f"{name}={_canonical(value)}" for name, value in ast.iter_fields(node) if value not in (None, [])]
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(_canonical(v) for v in node)}]"
    return repr(node)


def normalised(source: str) -> str:
    return _canonical(_strip_docstrings(ast.parse(source)))


def rules_digests() -> dict[str, str]:
    files = sorted({p for pattern in RULES for p in HARNESS.glob(pattern)})
    return {p.relative_to(HARNESS).as_posix(): hashlib.sha256(normalised(p.read_text()).encode()).hexdigest()[:16]
            for p in files}


def test_the_harness_rules_match_their_version():
    version, digests = workbench.HARNESS_VERSION, rules_digests()
    table = "{\n" + "".join(f'        "{f}": "{d}",\n' for f, d in digests.items()) + "    }"
    golden = GOLDEN.get(version)
    assert golden is not None, (f"HARNESS_VERSION {version!r} has no recorded digests: record them in GOLDEN of "
                                f"{Path(__file__).name}:\n    \"{version}\": {table},")
    changed = sorted(f for f in digests.keys() | golden.keys() if digests.get(f) != golden.get(f))
    assert not changed, (
        f"the harness rules changed ({', '.join(changed)}) under HARNESS_VERSION {version!r}: bump HARNESS_VERSION "
        "if the change could alter a verdict or a measured time (stores would otherwise serve evaluations made under "
        f"other rules); then record these digests in GOLDEN of {Path(__file__).name} under the version "
        f"HARNESS_VERSION then names:\n    {table},")


def test_the_digest_ignores_comments_docstrings_and_layout_but_not_code():
    code = 'def f(x):\n    """Doubled."""\n    return x * 2  # the rule\n'
    assert normalised(code) == normalised('# a header\ndef f(x):\n    return (x *\n            2)\n')
    assert normalised(code) != normalised(code.replace("x * 2", "x * 3"))
    assert normalised(code) != normalised(code.replace("def f", "def g"))  # names are code: a rename is a decision
