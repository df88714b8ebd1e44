"""The harness's CUDA-graph launch (`workbench/harness/child/graph_launch.py`), its static declaration and the offline
proposer's launch default, on the CPU: the graph capture is injected (a recorded closure stands in for
`torch.cuda.graph`) and the device check is given a CUDA-looking tensor signature, so every rule that decides what runs
is exercised here. That a real graph replays correctly and faster is the GPU test's (tests/test_gpu.py)."""
from __future__ import annotations

import types
import warnings

import pytest
import torch

from workbench.harness.child import graph_launch
from workbench.harness.launch_mode import CUDA_GRAPH, EAGER, declared_mode
from workbench.harness.static import check_static
from workbench.proposers.choice import Choice, distance
from workbench.proposers.launch import LaunchEstimate


class Recorder:
    """A capture that runs fn once into static outputs and replays by re-running it on the same static inputs (what a
    CUDA graph's replay computes), counting captures."""

    def __init__(self, fail: Exception | None = None):
        self.captures, self.fail = 0, fail

    def __call__(self, fn):
        if self.fail is not None:
            raise self.fail
        self.captures += 1
        out = fn()

        def replay():
            new = fn()
            for dst, src in zip(torch.utils._pytree.tree_leaves(out), torch.utils._pytree.tree_leaves(new)):
                dst.copy_(src)
        return replay, out


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))

    def forward(self, x, scale=1.0):
        return (x @ self.w) * scale


@pytest.fixture
def cuda_looking(monkeypatch):
    """CPU tensors pass the launch's CUDA-device check (the rules under test are what follows it)."""
    monkeypatch.setattr(graph_launch, "_on_cuda", lambda x: True)


def no_syncs(fn):
    return fn(), None


def launched(model, capture, sync_check=no_syncs):
    return graph_launch.GraphLaunch(model, capture=capture, sync_check=sync_check)


def test_warm_up_then_capture_then_replay_with_fresh_inputs_and_cloned_outputs(cuda_looking):
    rec = Recorder()
    g = launched(Affine(), rec)
    with torch.no_grad():
        xs = [torch.randn(3, 4) for _ in range(4)]
        outs = [g(x) for x in xs]
    # call 1 plain, call 2 plain with the host-sync check, call 3 captures and replays, call 4 replays
    assert rec.captures == 1 and g.replays == 2
    for x, out in zip(xs, outs):  # every call saw its own input, and later calls did not overwrite earlier outputs
        torch.testing.assert_close(out, x @ g.model.w)
    assert g.describe() == {"requested": CUDA_GRAPH, "ran": CUDA_GRAPH, "replays": 2, "graphs": 1}


def test_a_new_signature_is_a_new_graph_and_scalars_are_part_of_it(cuda_looking):
    rec = Recorder()
    g = launched(Affine(), rec)
    with torch.no_grad():
        for _ in range(3):
            g(torch.randn(3, 4))
        for _ in range(3):
            g(torch.randn(5, 4))
        for _ in range(3):
            out = g(torch.ones(5, 4), 2.0)
    assert rec.captures == 3 and g.describe()["graphs"] == 3
    torch.testing.assert_close(out, (torch.ones(5, 4) @ g.model.w) * 2.0)


def test_new_parameter_storage_is_a_new_signature(cuda_looking):
    rec = Recorder()
    g = launched(Affine(), rec)
    with torch.no_grad():
        g(torch.randn(3, 4)), g(torch.randn(3, 4)), g(torch.randn(3, 4))
        g.model.w = torch.nn.Parameter(torch.zeros(4, 4))  # a load that replaced the tensor, not its values
        out = g(torch.randn(3, 4))
    assert rec.captures == 1 and out.abs().sum() == 0  # the plain forward ran on the new weights


def test_grad_enabled_runs_plain_without_giving_up(cuda_looking):
    rec = Recorder()
    g = launched(Affine(), rec)
    for _ in range(3):
        g(torch.randn(3, 4))
    assert rec.captures == 0 and g.plain_reason is None
    with torch.no_grad():
        g(torch.randn(3, 4)), g(torch.randn(3, 4)), g(torch.randn(3, 4))
    assert rec.captures == 1


class Stateful(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.zeros(3, 4)

    def forward(self, x):
        self.hidden = self.hidden + x
        return self.hidden


class WritesInput(torch.nn.Module):
    def forward(self, x):
        return x.relu_()


class HostSync(torch.nn.Module):
    def forward(self, x):
        return x * float(x.sum())


@pytest.mark.parametrize("model, capture, reason", [
    (Stateful(), Recorder(), "forward reassigns self.hidden"),
    (WritesInput(), Recorder(), "forward writes its input(s) [0] in place"),
    (HostSync(), Recorder(RuntimeError("operation not permitted when stream is capturing")),
     "cannot be captured as a CUDA graph: RuntimeError: operation not permitted"),
])
def test_what_cannot_be_replayed_runs_plain_and_says_why(cuda_looking, model, capture, reason):
    g = launched(model, capture)
    ref = type(model)()
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(3, 4)
            torch.testing.assert_close(g(x.clone()), ref(x.clone()))
    d = g.describe()
    assert d["ran"] == EAGER and reason in d["reason"] and g.replays == 0


def test_a_forward_that_synchronises_with_the_host_is_never_captured(cuda_looking):
    rec = Recorder()
    g = launched(Affine(), rec, sync_check=lambda fn: (fn(), "called a synchronizing CUDA operation"))
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(3, 4)
            torch.testing.assert_close(g(x), x @ g.model.w)
    assert rec.captures == 0 and "synchronises with the host" in g.describe()["reason"]


def test_torchs_notice_on_enabling_sync_warnings_is_not_a_sync(monkeypatch):
    """On the H100 (torch 2.11) enabling the mode warns once per process that it is a prototype, in words that name
    synchronising operations; the first graph candidate of a worker then ran plain. Only a real sync counts."""
    mode = {"now": 0}

    def set_mode(m):
        if m == "warn" and mode["now"] == 0:
            warnings.warn("Synchronization debug mode is a prototype feature and does not yet detect all "
                          "synchronizing operations (Triggered internally at Module.cpp:1003.)")
        mode["now"] = m
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: mode["now"])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", set_mode)
    out, sync = graph_launch._host_syncs(lambda: 3)
    assert (out, sync) == (3, None)

    def syncing():
        warnings.warn("called a synchronizing CUDA operation")
        return 4
    assert graph_launch._host_syncs(syncing) == (4, "called a synchronizing CUDA operation")


def test_non_tensor_inputs_run_plain(cuda_looking):
    class Takes(torch.nn.Module):
        def forward(self, x, shape):
            return x.reshape(shape)
    g = launched(Takes(), Recorder())
    with torch.no_grad():
        g(torch.randn(3, 4), [4, 3])
    assert "an input is a list" in g.describe()["reason"]


def test_cpu_inputs_run_plain_and_cpu_devices_are_never_wrapped():
    g = launched(Affine(), Recorder())
    with torch.no_grad():
        g(torch.randn(3, 4))
    assert "not a CUDA device" in g.describe()["reason"]
    module = types.SimpleNamespace(LAUNCH_MODE=CUDA_GRAPH)
    assert isinstance(graph_launch.wrap(Affine(), module, torch.device("cuda")), graph_launch.GraphLaunch)
    plain = Affine()
    assert graph_launch.wrap(plain, module, torch.device("cpu")) is plain
    assert graph_launch.describe(plain) is None


def test_unknown_declarations_are_refused():
    assert declared_mode(types.SimpleNamespace()) == EAGER
    with pytest.raises(ValueError, match="expected one of"):
        declared_mode(types.SimpleNamespace(LAUNCH_MODE="streams"))


CANDIDATE = '''import torch
import triton
import triton.language as tl
{decl}

@triton.jit
def _k(x_ptr, n, B: tl.constexpr):
    o = tl.arange(0, B)
    tl.store(x_ptr + o, tl.load(x_ptr + o, mask=o < n), mask=o < n)


class ModelNew(torch.nn.Module):
    def forward(self, x):
{body}
        _k[(1,)](x, x.numel(), B=128)
        return x
'''


@pytest.mark.parametrize("decl, body, ok, launch", [
    ('LAUNCH_MODE = "cuda_graph"', "        pass", True, CUDA_GRAPH),
    ("", "        pass", True, EAGER),
    ('LAUNCH_MODE = "eager"', "        pass", True, EAGER),
    ('LAUNCH_MODE = "cudagraph"', "        pass", False, None),
    ('LAUNCH_MODE = MODE', "        pass", False, None),
    ('LAUNCH_MODE = "cuda_graph"\nLAUNCH_MODE = "eager"', "        pass", False, None),
    ('LAUNCH_MODE = "eager"', "        global LAUNCH_MODE\n        LAUNCH_MODE = 'cuda_graph'", False, None),
])
def test_the_static_stage_reads_the_declaration(decl, body, ok, launch):
    rec = check_static(CANDIDATE.format(decl=decl, body=body))
    assert (rec.verdict == "pass") is ok, rec.reason
    if ok:
        assert rec.data["launch"] == launch
    else:
        assert any(f["check"] == "launch" for f in rec.flags)


def test_a_candidate_capturing_its_own_graph_is_still_refused():
    src = CANDIDATE.format(decl="", body="        g = torch.cuda.CUDAGraph()")
    assert any(f["check"] == "stream" for f in check_static(src).flags)


def test_choices_keep_their_identity_when_eager():
    eager = Choice((("a", True),), (("g0", '{"B": 1}'),))
    graph = Choice((("a", True),), (("g0", '{"B": 1}'),), CUDA_GRAPH)
    assert "launch" not in eager.to_dict() and eager.canonical == '{"configs": {"g0": {"B": 1}}, "fuse": {"a": true}}'
    assert Choice.from_dict(graph.to_dict()) == graph and Choice.from_dict(eager.to_dict()) == eager
    assert distance(eager, graph) == 1


@pytest.mark.parametrize("est, mode", [
    (LaunchEstimate(100, 800e-6, 100e-6, 5e-6, None), CUDA_GRAPH),  # many launches, little GPU work
    (LaunchEstimate(100, 800e-6, 2e-3, 5e-6, None), EAGER),  # the GPU is the bottleneck: launches overlap it
    (LaunchEstimate(4, 32e-6, 1e-6, 0.0, None), EAGER),  # too few launches for a replay to pay
    (LaunchEstimate(100, 800e-6, 100e-6, 400e-6, None), EAGER),  # copying inputs/outputs costs more than it saves
    (LaunchEstimate(100, 800e-6, 100e-6, 5e-6, "random op aten.rand"), EAGER),
])
def test_the_default_launch_rule(est, mode):
    assert est.mode == mode


TINY_MLP = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def get_inputs():
    return [torch.randn(4, 32)]


def get_init_inputs():
    return [32, 8]
'''


def test_the_proposer_graphs_a_launch_bound_forward_and_offers_the_other_mode(tmp_path):
    import random

    from workbench.problems.problem import Problem
    from workbench.proposers.offline import OfflineProposer
    path = tmp_path / "tiny_mlp.py"
    path.write_text(TINY_MLP)
    prop = OfflineProposer(Problem.load(path))
    first = prop.default_choice()
    est = prop.launch_estimate(first)
    assert first.launch == CUDA_GRAPH and est["launches"] >= 8 and est["host_s"] > est["gpu_s"], est
    cand = prop.render(first)
    assert 'LAUNCH_MODE = "cuda_graph"' in cand.source.replace("'", '"')
    static = check_static(cand.source)
    assert static.verdict == "pass" and static.data["launch"] == CUDA_GRAPH, static.reason
    moves = dict(prop.plain_moves(first, random.Random(0)))
    assert moves["launch:eager"].launch == EAGER and moves["launch:eager"].configs == first.configs
    assert "LAUNCH_MODE" not in prop.render(moves["launch:eager"]).source
    assert all(c.launch == CUDA_GRAPH for c in prop.sample(4, seed=1))
