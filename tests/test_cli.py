"""The command line, as a researcher calls it (a subprocess, the installed console script's module)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.devices import cuda_gpu_count
from workbench.examples import EXAMPLES

ROOT = Path(__file__).resolve().parents[1]


def wb(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_problems_list_and_show():
    r = wb("problems", "list")
    assert r.returncode == 0 and "matmul_bf16" in r.stdout and "softmax_rows" in r.stdout
    r = wb("problems", "show", "matmul_fp32", "--set", "M=256", "--set", "N=128", "--set", "K=64", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["flops"] == 2 * 256 * 128 * 64
    assert info["inputs"][0]["shape"] == [256, 64] and info["outputs"][0]["shape"] == [256, 128]
    assert info["min_bytes"] == 4 * (256 * 64 + 64 * 128 + 256 * 128)
    # the committed H200 ceilings give a floor for that device
    h200 = info["floors"].get("NVIDIA H200")
    assert h200 is not None and h200["floor_ms"] > 0 and h200["bound"] in ("memory", "compute")
    r = wb("problems", "show", "scale_shift_relu")
    assert r.returncode == 0 and "floor on NVIDIA H200" in r.stdout and "memory-bound" in r.stdout


def test_eval_json_on_cpu(tmp_path):
    ex = EXAMPLES[1]
    args = ["eval", ex.problem, str(ex.path), "--device", "cpu", "--json", "--store", str(tmp_path / "s.sqlite")]
    for o in ex.cpu_overrides:
        args += ["--set", o]
    r = wb(*args)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] is True and out["fidelity"] == "correctness"
    assert [s["name"] for s in out["stages"]] == ["static", "compile", "correctness", "quick_timing"]
    assert all({"name", "ok", "reason"} <= set(s) for s in out["stages"])
    assert out["stages"][-1]["verdict"] == "refused"
    # a second call is answered from the store, not re-run
    again = json.loads(wb(*args).stdout)
    assert again["provenance"].get("from_store") is True
    text = wb(*[a for a in args if a != "--json"]).stdout  # and the text output says so
    assert "OK up to correctness (cached: the store's answer" in text


def test_eval_rejected_candidate_exits_zero(tmp_path):
    cheat = ROOT / "tests" / "cheats" / "side_stream.py"
    r = wb("eval", "scale_shift_relu", str(cheat), "--device", "cpu", "--json", "--no-store",
           "--set", "batch_size=4", "--set", "dim=64")
    assert r.returncode == 0
    out = json.loads(r.stdout)
    assert out["ok"] is False and out["stages"][-1]["name"] == "static" and "stream" in out["stages"][-1]["reason"]


def test_bad_inputs_exit_2_with_a_reason(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\ndef get_inputs():\n    return []\n")
    r = wb("problems", "show", str(bad))
    assert r.returncode == 2 and "missing Model" in r.stderr and "get_init_inputs" in r.stderr
    r = wb("problems", "show", "no_such_problem")
    assert r.returncode == 2 and "built-ins" in r.stderr
    r = wb("problems", "show", "matmul_fp32", "--set", "Q=3")
    assert r.returncode == 2 and "not a module-level constant" in r.stderr
    r = wb("eval", "matmul_fp32", str(tmp_path / "missing.py"), "--device", "cpu")
    assert r.returncode == 2 and "cannot read candidate" in r.stderr


@pytest.mark.skipif(cuda_gpu_count() > 0, reason="checks the message on a machine without a GPU")
def test_cuda_requested_without_gpu():
    r = wb("eval", "matmul_fp32", str(EXAMPLES[0].path), "--device", "cuda")
    assert r.returncode == 2 and "no CUDA GPU" in r.stderr


def test_search_on_cpu_reports_honestly():
    r = wb("search", "softmax_rows", "--set", "batch_size=8", "--set", "dim=100", "--device", "cpu", "--steps", "1",
           "--no-store", "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # no GPU: candidates are checked for correctness but never timed, so there is no best and no GPU time
    assert out["best"] is None and out["gpu_seconds"] == 0.0 and out["by_status"] == {"refused": 1}
    assert "quick_timing" not in out["evaluations"] and out["evaluations"]["correctness"]["runs"] == 1
    assert out["skipped_by_surrogate"] == 0 and out["surrogate"] is None


def test_sweep_rejects_unknown_parameters_before_running(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("name: bad\nnotebook: notebooks/01_explore_search.py\nbase: {problem: softmax_rows}\n"
                   "grid: {no_such_parameter: [1, 2]}\n")
    r = wb("sweep", str(cfg), "--out", str(tmp_path / "runs"))
    assert r.returncode == 2 and "no_such_parameter" in r.stderr and "problem" in r.stderr
    assert not (tmp_path / "runs").exists()


def test_llm_proposer_without_key_says_so(monkeypatch):
    import os

    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    r = subprocess.run([sys.executable, "-m", "workbench.cli", "search", "softmax_rows", "--set", "batch_size=8",
                        "--set", "dim=100", "--device", "cpu", "--proposer", "llm", "--steps", "1", "--no-store"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 2 and "ANTHROPIC_API_KEY" in r.stderr


def test_search_auto_without_gpu_replays_and_says_so(monkeypatch, capsys):
    """`--device auto` (the default) with no GPU visible replays the recorded H200 measurements and says so on
    stderr; the report counts what replay answered."""
    from workbench.cli import main
    from workbench.devices import resolve

    monkeypatch.setattr(resolve, "cuda_gpu_count", lambda: 0)
    assert main(["search", "cross_entropy", "--steps", "1", "--no-store", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "no GPU visible: replaying recorded NVIDIA H200 measurements" in err
    report = json.loads(out)
    assert report["device"] == "replay:cuda:NVIDIA H200" and report["replay"]["answered"] > 0
