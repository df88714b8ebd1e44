"""Bad option values are refused by the parser with a message naming the option (exit 2, no traceback), and the
options that reach a device say what they mean (`--timeout STAGE=S`, a budget of 0)."""
from __future__ import annotations

import pytest

from workbench.cli import evaluate, main
from workbench.examples import EXAMPLES

CAND = str(EXAMPLES[0].path)


def parse_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err
    return err


@pytest.mark.parametrize("argv, option, says", [
    (["search", "softmax_rows", "--budget-gpu-s", "nan"], "--budget-gpu-s", "finite"),
    (["search", "softmax_rows", "--budget-gpu-s", "inf"], "--budget-gpu-s", "finite"),
    (["search", "softmax_rows", "--budget-gpu-s", "-1"], "--budget-gpu-s", ">= 0"),
    (["search", "softmax_rows", "--budget-wall-s", "-0.5"], "--budget-wall-s", ">= 0"),
    (["search", "softmax_rows", "--budget-gpu-s", "lots"], "--budget-gpu-s", "expected a number"),
    (["search", "softmax_rows", "--per-step", "0"], "--per-step", "at least 1"),
    (["search", "softmax_rows", "--steps", "-2"], "--steps", "at least 1"),
    (["search", "softmax_rows", "--tau", "nan"], "--tau", "finite"),
    (["kernelbench", "somewhere", "--budget-gpu-s", "-3"], "--budget-gpu-s", ">= 0"),
    (["eval", "softmax_rows", CAND, "--seeds", "0"], "--seeds", "at least 1"),
    (["eval", "softmax_rows", CAND, "--timeout", "compile=0"], "--timeout", "more than 0"),
    (["eval", "softmax_rows", CAND, "--timeout", "static=5"], "--timeout", "STAGE=SECONDS"),
    (["eval", "softmax_rows", CAND, "--timeout", "compile"], "--timeout", "STAGE=SECONDS"),
    (["problems", "show", "softmax_rows", "--problem-timeout-s", "0"], "--problem-timeout-s", "more than 0"),
    (["propose", "softmax_rows", "--n", "0", "--out", "x"], "--n", "at least 1"),
    (["sweep", "x.yaml", "--jobs", "0"], "--jobs", "at least 1"),
    (["search", "softmax_rows", "--timeout", "correctness=-1"], "--timeout", ">= 0"),
    (["kernelbench", "somewhere", "--file-timeout-s", "0"], "--file-timeout-s", "more than 0"),
    (["kernelbench", "somewhere", "--timeout", "nope=3"], "--timeout", "STAGE=SECONDS"),
    (["eval", "softmax_rows", CAND, "--timeout", "trace=0"], "--timeout", "more than 0"),
    (["search", "softmax_rows", "--timeout", "call=nan"], "--timeout", "finite"),
    (["eval", "softmax_rows", CAND, "--timeout", "construct=5"], "--timeout", "watchdog window (trace, call)"),
])
def test_bad_values_name_the_option(capsys, argv, option, says):
    err = parse_error(capsys, argv)
    assert f"argument {option}" in err and says in err, err


def test_budget_zero_is_explained_in_help(capsys):
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "0 allows none" in out and "0 is not 'no limit'" in out


def test_timeouts_reach_the_device(monkeypatch, capsys):
    seen = {}

    def fake_device(name, **kw):
        seen.clear()
        seen.update(name=name, **kw)
        raise ValueError("stop here")

    monkeypatch.setattr(evaluate, "get_device", fake_device)
    assert main(["eval", "softmax_rows", CAND, "--device", "cpu", "--no-store",
                 "--timeout", "compile=600", "--timeout", "correctness=90.5", "--timeout", "trace=45",
                 "--timeout", "call=7"]) == 2
    assert seen == {"name": "cpu", "timeouts": {"compile": 600.0, "correctness": 90.5, "trace": 45.0, "call": 7.0}}
    assert main(["eval", "softmax_rows", CAND, "--device", "cpu", "--no-store"]) == 2
    assert seen == {"name": "cpu"}  # none given: the device's own defaults
    assert main(["eval", "softmax_rows", CAND, "--device", "replay", "--timeout", "compile=60"]) == 2
    assert "--timeout: the replay device" in capsys.readouterr().err


def test_search_timeouts_are_refused_on_the_replay_device(capsys):
    rc = main(["search", "softmax_rows", "--device", "replay", "--no-store", "--steps", "1",
               "--timeout", "compile=30"])
    err = capsys.readouterr().err
    assert rc == 2 and "--timeout" in err and "replay" in err and "Traceback" not in err
