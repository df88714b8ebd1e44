"""KernelBench files construct and behave like their reference: ModelNew carries the reference's class attributes,
methods and module-level helpers; the graph is captured (and judged) in the mode the file constructs, training mode;
constructors that need real values are built on the CPU; tensor constants render; in-place ops, 5-D chains and the
activations KernelBench uses lower to fused kernels (run under the Triton interpreter against torch); FLOPs are
counted per node; `--set` reaches constants bound by unpacking a literal tuple."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from workbench.problems import Problem
from workbench.problems.loader import ProblemError, apply_overrides
from workbench.proposers.graph import capture
from workbench.proposers.offline import OfflineProposer

REPO = Path(__file__).resolve().parents[1]
KB = REPO / ".." / "shared" / "kernelbench"


def _problem(tmp_path: Path, name: str, src: str, overrides: dict[str, str] | None = None) -> Problem:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(src))
    return Problem.load(path, overrides=overrides)


def _model_new(source: str, tmp_path: Path) -> type:
    """ModelNew of a candidate, imported from a file (Triton reads a kernel's source from its file)."""
    import importlib.util

    path = tmp_path / f"cand_{abs(hash(source))}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ModelNew


HELPERS = '''
    import torch
    import torch.nn as nn

    WIDTH_MULT = 2

    def widen(c):
        return c * WIDTH_MULT

    class Block(nn.Module):
        expansion = 1

        def __init__(self, c):
            super().__init__()
            self.fc = nn.Linear(c, widen(c) // 2 * self.expansion)

        def forward(self, x):
            return torch.relu(self.fc(x))

    class Model(nn.Module):
        expansion = 2

        def __init__(self, c):
            super(Model, self).__init__()
            self.layers = self._make_layers(c)
            self.head = nn.Linear(c, c * Model.expansion)

        def _make_layers(self, c):
            return nn.Sequential(*[Block(c) for _ in range(2)])

        def forward(self, x):
            return self.head(self.layers(x))

    batch_size = 4
    def get_inputs():
        return [torch.randn(batch_size, 8)]
    def get_init_inputs():
        return [8]
'''


def test_model_new_carries_class_attributes_methods_and_helpers(tmp_path):
    problem = _problem(tmp_path, "helpers", HELPERS)
    cand = OfflineProposer(problem).propose(1, seed=0)[0]
    cls = _model_new(cand.source, tmp_path)
    torch.manual_seed(0)
    ref = problem.make_reference(problem.init_inputs())
    torch.manual_seed(0)
    new = cls(*problem.init_inputs())
    assert cls.expansion == 2 and "def _make_layers" in cand.source and "def widen" in cand.source
    assert {k: v.shape for k, v in ref.state_dict().items()} == {k: v.shape for k, v in new.state_dict().items()}
    assert all(torch.equal(ref.state_dict()[k], v) for k, v in new.state_dict().items())  # same seed, same weights


@pytest.mark.parametrize("name", ["level3/9_ResNet18.py", "level3/27_RegNet.py", "level3/23_EfficientNetB1.py"])
def test_kernelbench_models_with_helpers_construct(name, tmp_path):
    path = KB / name
    if not path.exists():
        pytest.skip(f"KernelBench development set not at {KB}")
    problem = Problem.load(path, overrides={"batch_size": "2"})
    cand = OfflineProposer(problem).propose(1, seed=0)[0]
    cls = _model_new(cand.source, tmp_path)
    new = cls(*problem.init_inputs())
    ref = problem.make_reference(problem.init_inputs())
    assert list(new.state_dict()) == list(ref.state_dict())


def test_constructor_needing_real_values_is_built_on_the_cpu(tmp_path):
    problem = _problem(tmp_path, "item", '''
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.scale = float(torch.tensor([0.5, 1.5]).sum().item())
                self.fc = nn.Linear(n, n)
            def forward(self, x):
                return self.fc(x) * self.scale
        def get_inputs():
            return [torch.randn(4, 8)]
        def get_init_inputs():
            return [8]
    ''')
    cap = capture(problem)
    assert any(n.target == torch.ops.aten.mul.Tensor and 2.0 in n.args for n in cap.nodes)


def test_constructor_that_fails_everywhere_gets_both_reasons(tmp_path):
    problem = _problem(tmp_path, "broken", '''
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                raise RuntimeError("no way")
        def get_inputs():
            return [torch.randn(4)]
        def get_init_inputs():
            return []
    ''')
    with pytest.raises(ProblemError, match="meta device .*no way.* nor on the CPU .*no way"):
        capture(problem)


def test_literal_tuple_unpacking_can_be_overridden():
    src = "depth, height, width = 16, 32, 32\nx = 1\n"
    ns: dict = {}
    exec(apply_overrides(src, {"height": "4"}), ns)
    assert (ns["depth"], ns["height"], ns["width"]) == (16, 4, 32)
    with pytest.raises(ProblemError, match="unpacking"):
        apply_overrides("a, b = b0, a0 = 1, 2\n", {"a": "3"})


def test_flop_coverage_counts_the_ops_left_to_torch(tmp_path):
    problem = _problem(tmp_path, "conv", '''
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3).double()  # float64: outside every kernel family, left to torch
            def forward(self, x):
                return torch.relu(self.conv(x)) * 2.0
        def get_inputs():
            return [torch.randn(2, 3, 16, 16, dtype=torch.float64)]
        def get_init_inputs():
            return []
    ''')
    cap = capture(problem)
    conv = next(n for n in cap.nodes if n.target == torch.ops.aten.convolution.default)
    assert cap.node_flops[conv.name] == 2 * 2 * 8 * 14 * 14 * 3 * 9
    cand = OfflineProposer(problem).propose(1, seed=0)[0]
    assert dict(cand.origin)["coverage_flops"] < 1.0


def test_training_mode_graph_updates_running_stats_and_dropout_is_called_random(tmp_path):
    """BatchNorm in training mode: the candidate's forward updates the running stats as the reference does; a
    reference with dropout is called random by the correctness stage, not judged."""
    from workbench.harness.child import correctness, execution

    problem = _problem(tmp_path, "bn", '''
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self, c, p):
                super().__init__()
                self.bn = nn.BatchNorm2d(c)
                self.drop = nn.Dropout(p)
            def forward(self, x):
                return self.drop(torch.relu(self.bn(x)))
        def get_inputs():
            return [torch.randn(2, 3, 4, 4)]
        def get_init_inputs():
            return [3, 0.0]
    ''')
    cand = OfflineProposer(problem).propose(1, seed=0)[0]
    assert "native_batch_norm" in cand.source
    path = tmp_path / "cand.py"
    path.write_text(cand.source)
    pair = execution.build_pair(problem, str(path), torch.device("cpu"))
    assert pair.reference.training and pair.candidate.training
    x = torch.randn(2, 3, 4, 4)
    # batch norm in training mode is the norm family's (batch statistics and the running-stat update in one kernel;
    # its numerics against torch are test_kernels_norm's "bn_train" cases); here the reference's side effect
    assert ":norm" in cand.source and "running" in cand.source
    with torch.no_grad():
        pair.reference(x.clone())
    assert not torch.equal(pair.reference.bn.running_mean, torch.zeros(3))
    assert int(pair.reference.bn.num_batches_tracked) == 1

    random = _problem(tmp_path, "drop", problem.source.replace("[3, 0.0]", "[3, 0.5]"))
    pair = execution.build_pair(random, str(path), torch.device("cpu"))
    why = correctness._unusable_reference(pair, [x], "strict", None)
    assert why is not None and "random" in why and "dropout" in why


def test_tensor_constants_render(tmp_path):
    problem = _problem(tmp_path, "const", '''
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.h = torch.randn(4, 8)
            def forward(self, x):
                return torch.min(x, torch.tensor(0.25)) + self.h + torch.tensor(-1.5, device=x.device)
        def get_inputs():
            return [torch.randn(4, 8)]
        def get_init_inputs():
            return []
    ''')
    cand = OfflineProposer(problem).propose(1, seed=0)[0]
    assert "torch.tensor(0.25, dtype=torch.float32).to(_device)" in cand.source
    assert "self.h.to(_device)" in cand.source
    assert "torch.tensor(-1.5, dtype=torch.float32).to(_device)" in cand.source  # made on the input's device


def test_state_kept_across_calls_is_written_back(tmp_path):
    """A forward that reassigns a tensor attribute (an RNN's `self.hidden`) is traced from the constructed value, and
    ModelNew makes the same assignment: its second call sees the state its first call left, as the reference's does."""
    problem = _problem(tmp_path, "rnn", '''
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.hidden = torch.randn(2, 8)
                self.lin = nn.Linear(16, 8)
            def forward(self, x):
                self.hidden = torch.tanh(self.lin(torch.cat((x, self.hidden), dim=1)))
                return self.hidden * 2
        def get_inputs():
            return [torch.randn(2, 8)]
        def get_init_inputs():
            return []
    ''')
    captured = capture(problem)
    assert captured.state_writes == ["hidden"]
    cand = OfflineProposer(problem).propose(1, seed=0)[0]
    assert "self.hidden.to(_device)" in cand.source and "        self.hidden = " in cand.source
    # ModelNew against the reference, call after call, on the Triton interpreter (in its own process: the
    # interpreter is chosen when triton is first imported)
    script = textwrap.dedent(f"""
        import os, sys
        os.environ["TRITON_INTERPRET"] = "1"
        import importlib.util
        import torch
        from workbench.problems import Problem
        problem = Problem.load({str(problem.path)!r})
        spec = importlib.util.spec_from_file_location("cand_rnn", {str(tmp_path / "cand_rnn.py")!r})
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        torch.manual_seed(0)
        ref = problem.make_reference(problem.init_inputs())
        torch.manual_seed(0)
        new = mod.ModelNew()
        new.load_state_dict(ref.state_dict())
        assert torch.allclose(new.hidden, ref.hidden)
        x = torch.randn(2, 8)
        with torch.no_grad():
            for _ in range(3):
                torch.testing.assert_close(new(x), ref(x))
        print("ok")
    """)
    (tmp_path / "cand_rnn.py").write_text(cand.source)
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300,
                          cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


# ---- lowering, run under the Triton interpreter ----

ACTIVATIONS = {  # name: forward body over x (4-D unless said), and the aten op that must not stay a torch call
    "selu": ("torch.selu(x)", "elu"),
    "selu_inplace": ("torch.selu_(x * 1.0)", "selu"),
    "celu": ("torch.nn.functional.celu(x, 0.7)", "celu"),
    "elu": ("torch.nn.functional.elu(x, 0.5)", "elu"),
    "logsigmoid": ("torch.nn.functional.logsigmoid(x)", "log_sigmoid"),
    "softsign": ("torch.nn.functional.softsign(x)", "div"),
    "hardshrink": ("torch.nn.functional.hardshrink(x, 0.3)", "hardshrink"),
    "softshrink": ("torch.nn.functional.softshrink(x, 0.3)", "softshrink"),
    "threshold": ("torch.nn.functional.threshold(x, 0.1, -2.0)", "threshold"),
    "relu6": ("torch.nn.functional.relu6(x * 4)", "hardtanh"),
    "erf_sign": ("torch.erf(x) + torch.sign(x)", "erf"),
    "clamp_tensor": ("torch.clamp(x, min=x * 0.5, max=x * 0.5 + 0.1)", "clamp"),
    "clamp_min": ("x.clamp_min(0.1) + x.clamp_max(0.2)", "clamp_min"),
    "where_gt": ("torch.where(x > 0, x, x * 0.1)", "where"),
    "pow": ("x ** 3 + x ** -2 + 2 ** x", "pow"),
    "inplace": ("torch.relu_(x * 2).add_(1).mul_(3).clamp_(max=4.0)", "relu_"),
    "iadd": ("(lambda y: (y.__iadd__(x), y)[1])(x * 2)", "add_"),
    "leaky_inplace": ("torch.nn.functional.leaky_relu(x - 1, 0.2, inplace=True)", "leaky_relu_"),
    "rank5_bias": ("x5 * self.b5 + 1.0", "add"),
    "rank5_strided": ("x5.transpose(1, 2) + 1.0", "add"),
}

SCRIPT = r'''
import json, os, sys, textwrap
os.environ["TRITON_INTERPRET"] = "1"
import torch
from workbench.problems import Problem
from workbench.proposers.offline import OfflineProposer
cases, tmp = json.loads(sys.argv[1]), sys.argv[2]
report = {}
for name, (body, op) in cases.items():
    path = os.path.join(tmp, name + ".py")
    with open(path, "w") as f:
        f.write(textwrap.dedent(f"""
            import torch
            import torch.nn as nn
            class Model(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.b5 = nn.Parameter(torch.randn(3, 1, 1, 1))
                def forward(self, x, x5):
                    return {body}
            def get_inputs():
                return [torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5, 6)]
            def get_init_inputs():
                return []
        """))
    problem = Problem.load(path)
    cand = OfflineProposer(problem).propose(1, seed=0)[0]
    forward = cand.source.split("def forward", 1)[1]
    import importlib.util
    with open(path + "_cand.py", "w") as f:
        f.write(cand.source)
    spec = importlib.util.spec_from_file_location(name + "_cand", path + "_cand.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    ref = problem.make_reference([])
    torch.manual_seed(0)
    new = mod.ModelNew()
    torch.manual_seed(1)
    x, x5 = problem.inputs()
    with torch.no_grad():
        want = ref(x.clone(), x5.clone())
        got = new(x.clone(), x5.clone())
    err = float((got - want).abs().max())
    report[name] = {"err": err, "kernel": "_elementwise(" in forward,
                    "left": f"aten.{op}." in forward}
print(json.dumps(report))
'''


def test_activations_and_inplace_chains_lower_and_match_torch(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(ACTIVATIONS), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, r in report.items():
        assert r["kernel"] and not r["left"], (name, r)
        assert r["err"] <= 1e-5, (name, r)


def test_search_stops_when_the_reference_is_random(tmp_path):
    """Dropout in training mode: every candidate's correctness is inconclusive, so the search stops after the step
    that found it instead of spending the budget on candidates that can never be judged."""
    from workbench.devices.resolve import get_device
    from workbench.harness.budget import Budget
    from workbench.search.search import make_search

    problem = _problem(tmp_path, "drop", '''
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.drop = nn.Dropout(0.5)
            def forward(self, x):
                return self.drop(torch.relu(x))
        def get_inputs():
            return [torch.randn(8, 64)]
        def get_init_inputs():
            return []
    ''')
    device = get_device("cpu")
    try:
        search = make_search(problem, device, budget=Budget(30.0), per_step=2)
        search.run(steps=5)
    finally:
        device.close()
    assert search.steps == 1
    assert search.stopped().startswith("no candidate can be judged: the reference is random")
