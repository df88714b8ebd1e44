"""The dataset's collection and export with problems given as files: a KernelBench file's rows say where it came from
("level<N>/<file>"), the export loads it again under the KernelBench checkout it is given, writes its level, and uses
the measuring card's ceilings for the floors."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from workbench.core.records import Evaluation, StageRecord
from workbench.problems import Problem
from workbench.proposers.offline import OfflineProposer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import collect_dataset  # noqa: E402
import export_dataset  # noqa: E402

KB_FILE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0

def get_inputs():
    return [torch.randn(64, 256)]

def get_init_inputs():
    return []
'''


def test_problem_source_names_a_kernelbench_file_by_its_level(tmp_path):
    assert collect_dataset.problem_source("softmax_rows") == {}
    assert collect_dataset.problem_source(".kbc/level2/4_Conv2d_Mish_Mish.py") == {
        "source": "level2/4_Conv2d_Mish_Mish.py", "level": "level2"}
    other = tmp_path / "mine.py"
    assert collect_dataset.problem_source(str(other)) == {"source": str(other)}


def _rows(problem: Problem, source: dict, gpu_name: str) -> list[dict]:
    """Collector-shaped rows for two candidates of `problem`: one timed, one failing correctness."""
    proposer = OfflineProposer(problem)
    cands = proposer.propose(2, seed=0)
    device = {"gpu_name": gpu_name, "device": f"cuda:{gpu_name}"}
    rows = []
    for i, c in enumerate(cands):
        if i == 0:
            stages = [StageRecord("static", "pass"), StageRecord("compile", "pass", data={"kernels": []}),
                      StageRecord("correctness", "pass", data={"worst_rel_err": 1e-6}),
                      StageRecord("quick_timing", "pass", gpu_s=0.2,
                                  data={"candidate_ms": 0.5, "eager_ms": 1.0, "speedup_vs_eager": 2.0,
                                        "spread": 0.01, "reps": 50})]
        else:
            stages = [StageRecord("static", "pass"), StageRecord("correctness", "fail", reason="mismatch")]
        ev = Evaluation(problem=problem.key, candidate_hash=c.hash, device=device["device"], stages=stages)
        rows.append({"kind": "candidate", "problem": problem.name, "problem_key": problem.key, **source,
                     "candidate": c.hash, "origin": dict(c.origin), "space_size": proposer.space_size(),
                     "evaluation": ev.summary(), "gpu": 0, "device": device, "t": 1.0 + i})
    return rows


def test_export_loads_kernelbench_rows_from_the_checkout_it_is_given(tmp_path, monkeypatch):
    kb = tmp_path / "kb"
    (kb / "level1").mkdir(parents=True)
    (kb / "level1" / "7_ReluScale.py").write_text(KB_FILE)
    problem = Problem.load(str(kb / "level1" / "7_ReluScale.py"))
    raw = tmp_path / "raw"
    raw.mkdir()
    source = collect_dataset.problem_source(str(kb / "level1" / "7_ReluScale.py"))
    rows = _rows(problem, source, "NVIDIA H100 80GB HBM3") + _rows(Problem.load("swish"), {}, "NVIDIA H100 80GB HBM3")
    (raw / "rows-gpu0.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
    out = tmp_path / "ds"
    monkeypatch.setattr(sys, "argv", ["export_dataset.py", "--raw", str(raw), "--out", str(out),
                                      "--kernelbench-root", str(kb)])
    export_dataset.main()

    cands = pd.read_parquet(out / "candidates.parquet")
    probs = pd.read_parquet(out / "problems.parquet").set_index("problem")
    kb_rows = cands[cands["problem"] == "7_ReluScale"]
    assert list(kb_rows["outcome"]) == ["ok", "fails"]
    assert set(kb_rows["level"]) == {"level1"} and set(kb_rows["source"]) == {"level1/7_ReluScale.py"}
    assert kb_rows["regenerates"].all()  # its choices rendered again from the file under --kernelbench-root
    assert probs.loc["7_ReluScale", "level"] == "level1"
    assert not probs.loc["7_ReluScale", "key_matches_builtin"] and probs.loc["swish", "key_matches_builtin"]
    # the floors come from the measuring card's ceilings (the H100's, shipped in results/ceilings)
    from workbench.core import ceilings
    from workbench.problems.analysis import count, roofline_floor
    expected = roofline_floor(count(problem), ceilings.load("NVIDIA H100 80GB HBM3")).ms
    assert probs.loc["7_ReluScale", "floor_ms"] == pytest.approx(expected)
    summary = (out / "SUMMARY.md").read_text()
    assert summary.startswith("# H100 80GB HBM3 measurement dataset")


def test_export_says_which_checkout_a_kernelbench_row_needs(tmp_path, monkeypatch):
    monkeypatch.setattr(export_dataset, "KERNELBENCH_ROOT", None)
    with pytest.raises(FileNotFoundError, match="--kernelbench-root"):
        export_dataset.load_problem("7_ReluScale", "level1/7_ReluScale.py")


KB_DATASET = ROOT / "results" / "dataset" / "kernelbench_h100"


def test_the_shipped_kernelbench_rows_still_render_their_measured_kernels(monkeypatch):
    """The KernelBench slice of the dataset (collected from development-set files, which are not shipped) answers
    replay only while its choices render the kernels that were measured: one row per problem is re-rendered from the
    file under the KernelBench checkout. A template change that orphans them must re-export (`--recheck`)."""
    from workbench.surrogates.splits import kernelbench_root

    root = kernelbench_root()
    if root is None:
        pytest.skip("no KernelBench checkout (../shared/kernelbench or $WORKBENCH_KERNELBENCH): the rows' problems "
                    "are its files")
    monkeypatch.setattr(export_dataset, "KERNELBENCH_ROOT", root)
    cands = pd.read_parquet(KB_DATASET / "candidates.parquet")
    assert cands["regenerates"].all() and set(cands["level"]) <= {"level1", "level2"}
    one = cands.groupby("problem_key", as_index=False).first()
    ok, keys, _ = export_dataset.check_identities(one)
    assert all(ok), [p for p, k in zip(one["problem"], ok) if not k]
    assert keys == list(one["identity"])


def _failed_row(reason: str, harness: str, ok: bool = False) -> dict:
    stages = [{"name": "static", "ok": True, "reason": "no issues"},
              {"name": "correctness", "ok": ok, "reason": reason}]
    return {"kind": "candidate", "problem": "p", "problem_key": "p@1", "candidate": "c",
            "evaluation": {"ok": ok, "stages": stages, "provenance": {"harness_version": harness}}}


def test_a_machine_fault_under_an_older_harness_is_measured_again_and_the_new_row_wins(tmp_path):
    from workbench import HARNESS_VERSION

    oom = "raised OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 GiB."
    old = _failed_row(oom, "9")
    assert collect_dataset.superseded(old)
    assert not collect_dataset.superseded(_failed_row(oom, HARNESS_VERSION))  # same rules, same verdict: it stands
    assert not collect_dataset.superseded(_failed_row("output mismatch: relative error 0.3 > 0.0001", "9"))
    assert not collect_dataset.superseded({"kind": "noise", "problem_key": "p@1", "candidate": "noise"})
    redo = _failed_row("", HARNESS_VERSION, ok=True)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "rows-gpu0.jsonl").write_text(json.dumps(old) + "\n")
    assert collect_dataset.done_keys(raw) == set()  # so the collection measures it again
    (raw / "rows-gpu0.jsonl").write_text(json.dumps(old) + "\n" + json.dumps(redo) + "\n")
    assert collect_dataset.done_keys(raw) == {("p@1", "c", "candidate")}
    assert [r["evaluation"]["ok"] for r in export_dataset.read_rows(raw)] == [True]
