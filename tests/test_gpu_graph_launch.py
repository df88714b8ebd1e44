"""GPU tests of the harness's CUDA-graph launch (`pytest -m gpu`; skipped where no CUDA GPU is visible): a generated
candidate declaring `LAUNCH_MODE = "cuda_graph"` is judged correct through real graph replays and its timing record
says the graph ran; one whose forward synchronises with the host falls back to its plain forward, says why, and
leaves the worker's CUDA context usable."""
from __future__ import annotations

import dataclasses

import pytest
from test_graph_launch import TINY_MLP

from workbench.core.candidate import Candidate
from workbench.devices import cuda_gpu_count
from workbench.devices.local import LocalDevice
from workbench.harness.ladder import Ladder
from workbench.problems import Problem
from workbench.proposers.offline import OfflineProposer

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(cuda_gpu_count() == 0, reason="needs a CUDA GPU (run on the H200)")]

HOST_SYNC = '''import torch
import triton
import triton.language as tl

LAUNCH_MODE = "cuda_graph"


@triton.jit
def _relu(x_ptr, y_ptr, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y_ptr + o, tl.maximum(tl.load(x_ptr + o, mask=o < n), 0.0), mask=o < n)


class ModelNew(torch.nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
            if x.abs().max().item() > 1e30:  # a host sync: cannot be captured
                raise ValueError("overflow")
            y = torch.empty_like(x)
            _relu[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), B=1024)
            x = y
        return x
'''


@pytest.fixture(scope="module")
def gpu():
    dev = LocalDevice("cuda", timeouts={"compile": 60, "correctness": 120, "quick_timing": 120})
    yield dev
    dev.close()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("graph") / "tiny_mlp.py"
    path.write_text(TINY_MLP)
    return Problem.load(path)


def test_a_graph_candidate_is_correct_and_its_record_says_the_graph_ran(gpu, tiny):
    prop = OfflineProposer(tiny)
    graph = prop.default_choice()
    assert graph.launch == "cuda_graph"
    ladder = Ladder(gpu)
    runs = {}
    for choice in (graph, dataclasses.replace(graph, launch="eager")):
        ev = ladder.evaluate(tiny, prop.render(choice), force_full=True)
        assert ev.ok, [(s.name, s.verdict, s.reason) for s in ev.stages]
        runs[choice.launch] = ev
    launch = runs["cuda_graph"].stage("full_timing").data["launch"]
    assert launch["ran"] == "cuda_graph" and launch["replays"] > 0, launch
    assert runs["cuda_graph"].stage("correctness").data["launch"]["ran"] == "cuda_graph"
    assert "launch" not in runs["eager"].stage("full_timing").data
    # the numbers, for the log (speed claims live in the KernelBench benchmark's rows, not in a unit test)
    for mode, ev in runs.items():
        d = ev.stage("full_timing").data
        print(f"{mode}: candidate {d['candidate_ms'] * 1e3:.1f} us, eager {d['eager_ms'] * 1e3:.1f} us, "
              f"speedup {d['speedup_vs_eager']:.2f}x")


def test_a_forward_that_syncs_with_the_host_runs_plain_and_says_why(gpu, tiny):
    ladder = Ladder(gpu)
    ev = ladder.evaluate(tiny, Candidate(HOST_SYNC), up_to="quick_timing")
    assert ev.ok, [(s.name, s.verdict, s.reason) for s in ev.stages]
    launch = ev.stage("quick_timing").data["launch"]
    assert launch["ran"] == "eager" and "cannot be captured" in launch["reason"], launch
    prop = OfflineProposer(tiny)  # the worker's context survived the failed capture
    again = ladder.evaluate(tiny, prop.render(prop.default_choice()), up_to="quick_timing")
    assert again.ok and again.stage("quick_timing").data["launch"]["ran"] == "cuda_graph"


def test_a_failed_capture_leaves_the_stream_and_host_syncs_are_found_before_capture():
    import torch

    from workbench.harness.child import graph_launch
    x = torch.randn(1024, device="cuda")
    before = torch.cuda.current_stream()
    with pytest.raises(Exception):
        graph_launch._cuda_capture(lambda: x * float(x.sum()))  # .item() inside a capture
    assert torch.cuda.current_stream() == before
    _, sync = graph_launch._host_syncs(lambda: x.sum().item())
    assert sync is not None and "synchroniz" in sync
    _, none = graph_launch._host_syncs(lambda: x * 2)
    assert none is None
