"""A broken problem file, or a bad `--set` value, is the problem's error: every command exits 2 naming the file (or
the option), prints no traceback, and nothing is evaluated or stored against a candidate. The file is loaded and
checked in its own process first (`workbench.problems.check`), so a loop or a `sys.exit` at module level cannot hang
or end the command."""
from __future__ import annotations

import pytest

from workbench.cli import main
from workbench.examples import EXAMPLES
from workbench.problems import ProblemError
from workbench.problems.literal import LiteralError, literal, literal_source

HEAD = "import torch\nimport torch.nn as nn\n\nbatch_size = 8\ndim = 16\n\n"
MODEL = ("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
         "    def forward(self, x):\n        return torch.relu(x)\n\n")
FACTORIES = "def get_inputs():\n    return [torch.randn(batch_size, dim)]\n\ndef get_init_inputs():\n    return []\n"
GOOD = HEAD + MODEL + FACTORIES
RELU_CANDIDATE = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                  "    def forward(self, x):\n        return torch.relu(x)\n")


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text) if isinstance(text, str) else p.write_bytes(text)
    return p


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def refused(capsys, *argv, says=()):
    rc, out, err = run(capsys, *argv)
    assert rc == 2, (out, err)
    assert "Traceback" not in err + out and "REJECTED" not in out
    for s in says:
        assert s in err, err
    return err


BROKEN = {
    "inputs_raise.py": (GOOD.replace("return [torch.randn(batch_size, dim)]", "raise RuntimeError('no data')"),
                        "get_inputs() raised RuntimeError: no data"),
    "inputs_tensor.py": (GOOD.replace("return [torch.randn(batch_size, dim)]", "return torch.randn(4)"),
                         "get_inputs() must return a list or tuple, got Tensor"),
    "ctor_raises.py": (GOOD.replace("super().__init__()", "raise ValueError('bad init')"),
                       "Model(*get_init_inputs()) raised ValueError: bad init"),
    "forward_raises.py": (GOOD.replace("return torch.relu(x)", "raise KeyError('fwd')"),
                          "Model's forward raised KeyError"),
    "forward_none.py": (GOOD.replace("return torch.relu(x)", "return None"), "forward returned NoneType, no tensor"),
    "module_exit.py": ("import sys\nsys.exit(3)\n" + GOOD, "sys.exit(3)"),
    "module_os_exit.py": ("import os\nos._exit(3)\n" + GOOD, "exited with code 3"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_problem_file_exits_2_naming_it(tmp_path, capsys, name):
    text, says = BROKEN[name]
    path = write(tmp_path, name, text)
    refused(capsys, "problems", "show", path, says=(str(path), says))


def test_eval_of_a_broken_problem_stores_nothing_and_blames_no_candidate(tmp_path, capsys):
    path = write(tmp_path, "inputs_raise.py", BROKEN["inputs_raise.py"][0])
    store = tmp_path / "s.sqlite"
    refused(capsys, "eval", path, EXAMPLES[0].path, "--device", "cpu", "--store", store, "--json",
            says=(str(path), "get_inputs() raised"))
    assert not store.exists()  # refused before the store was opened: nothing stored against the candidate


def test_search_of_a_broken_problem_exits_2(tmp_path, capsys):
    path = write(tmp_path, "ctor_raises.py", BROKEN["ctor_raises.py"][0])
    refused(capsys, "search", path, "--device", "cpu", "--steps", "1", "--no-store", says=(str(path), "bad init"))


def test_module_level_loop_times_out_naming_the_file(tmp_path, capsys):
    path = write(tmp_path, "spins.py", "while True:\n    pass\n" + GOOD)
    refused(capsys, "problems", "show", path, "--problem-timeout-s", "1",
            says=(str(path), "did not finish within 1 s", "--problem-timeout-s"))


def test_binary_problem_file_is_named(tmp_path, capsys):
    path = write(tmp_path, "binary.py", b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    refused(capsys, "problems", "show", path, says=(str(path), "not a UTF-8 text file"))


@pytest.mark.parametrize("value, says", [
    ("[1,2]", "got (list, int)"), ("'abc'", "got (str, int)"), ("256.5", "got (float, int)"),
    ("-5", "get_inputs() raised"), ("0", "input 0 of get_inputs() is empty"),
])
def test_set_value_that_breaks_the_problem_exits_2(tmp_path, capsys, value, says):
    path = write(tmp_path, "plain.py", GOOD)
    refused(capsys, "eval", path, EXAMPLES[0].path, "--device", "cpu", "--no-store", "--set", f"batch_size={value}",
            says=(str(path), says, f"--set batch_size={literal_source(value)}"))


@pytest.mark.parametrize("value, says", [
    ("10**12", "out of range"), ("2**2**40", "out of range"), ("__import__('os').system('true')", "a call"),
    ("open('x')", "a call"), ("dim", "a name"), ("torch.ones", "an attribute"), ("1e999", "not a finite number"),
    ("(1,", "not a Python literal"),
])
def test_set_refuses_code_and_absurd_sizes_before_loading(tmp_path, capsys, value, says):
    path = write(tmp_path, "plain.py", GOOD)
    refused(capsys, "problems", "show", path, "--set", f"batch_size={value}", says=("--set batch_size", says))


def test_literal_values_and_arithmetic():
    assert literal("2**20") == 1 << 20 and literal("4*1024") == 4096 and literal("-5") == -5
    assert literal("1 << 20") == 2**20 and literal("[64, 64]") == [64, 64] and literal("(1, -2.5)") == (1, -2.5)
    assert literal("'abc'") == "abc" and literal("None") is None and literal("True") is True
    assert literal_source("4*1024") == "4096" and literal_source("torch.float16") == "torch.float16"
    assert literal_source("[torch.bfloat16, 2**3]") == "[torch.bfloat16, 8]"
    for bad in ("torch.float16 * 2", "'a' * 3", "(-8) ** 0.5", "1 / 0", "{1: 2}", "x.y", "lambda: 0"):
        with pytest.raises(LiteralError):
            literal(bad)


def test_overridden_value_is_canonical_in_the_problem(tmp_path):
    from workbench.problems import Problem

    path = write(tmp_path, "plain.py", GOOD)
    a, b = Problem.load(path, ["batch_size=2*4"]), Problem.load(path, ["batch_size=8"])
    assert a == b and a.key == b.key and a.overrides == (("batch_size", "8"),)
    with pytest.raises(ProblemError, match="a call is not a literal"):
        Problem.load(path, {"batch_size": "int('8')"})


def test_problem_failing_only_in_a_worker_still_exits_2(tmp_path, capsys):
    """A step the meta-device check cannot run (`.item()`) is left to the workers; when the problem fails there, the
    stage's record says so and `eval` exits 2 with the problem's error instead of printing a candidate verdict (the
compile stage, which builds inputs on meta tensors, is inconclusive on such a problem and the climb goes on)."""
    text = GOOD.replace("return [torch.randn(batch_size, dim)]",
                        "x = torch.randn(batch_size, dim)\n    x.sum().item()\n    raise RuntimeError('late')")
    path = write(tmp_path, "late.py", text)
    cand = write(tmp_path, "cand.py", RELU_CANDIDATE)
    refused(capsys, "eval", path, cand, "--device", "cpu", "--no-store", "--up-to", "correctness",
            says=(str(path), "get_inputs() raised RuntimeError: late"))


def test_a_reference_forward_failing_only_on_real_tensors_is_the_problems_error(tmp_path, capsys):
    """Past the meta check (the forward raises only on real data), the correctness stage blames the reference: the
    verdict is the problem's error, `eval` exits 2, and the store keeps nothing against the candidate."""
    from workbench.store.sqlite import Store

    text = GOOD.replace("return torch.relu(x)", "if not x.is_meta:\n            raise KeyError('real data')\n"
                                                 "        return torch.relu(x)")
    path = write(tmp_path, "late_forward.py", text)
    cand = write(tmp_path, "cand.py", RELU_CANDIDATE)
    store = tmp_path / "store.sqlite"
    refused(capsys, "eval", path, cand, "--device", "cpu", "--store", store, "--up-to", "correctness",
            "--set", "batch_size=8", says=(f"{path}: the reference Model's forward raised KeyError",
                                           "(in the correctness stage; loaded with --set batch_size=8)"))
    assert Store(store).evaluations_frame().empty


def test_a_search_on_a_problem_failing_only_in_a_worker_stops_and_exits_2_naming_the_file(tmp_path, capsys):
    """The same problem under `search`: the first step's evaluations meet the reference's error, the search stops
    there (every candidate would meet it) and exits 2 naming the file; nothing is stored against a candidate."""
    from workbench.store.sqlite import Store

    text = GOOD.replace("return torch.relu(x)", "if not x.is_meta:\n            raise KeyError('real data')\n"
                                                 "        return torch.relu(x)")
    path = write(tmp_path, "late_search.py", text)
    store = tmp_path / "store.sqlite"
    err = refused(capsys, "search", path, "--device", "cpu", "--steps", "3", "--per-step", "1", "--store", store,
                  "--json", says=(f"{path}: the reference Model's forward raised KeyError",
                                  "(in the correctness stage"))
    assert err.count("workbench: error:") == 1
    assert Store(store).evaluations_frame().empty


def test_inputs_larger_than_the_devices_memory_exit_2_before_any_worker(tmp_path, capsys, monkeypatch):
    """Sizes under the absolute cap but over what the target device's worker holds (here the CPU worker's memory
    limit, set to 1 GiB) are the problem's error, found on meta tensors: no worker allocates them (one would be
    killed by the memory watchdog, which reads like a crash of the machine), nothing is stored."""
    monkeypatch.setenv("WORKBENCH_WORKER_MEMORY_GB", "1")
    path = write(tmp_path, "plain.py", GOOD)
    store = tmp_path / "store.sqlite"
    for cmd in (("eval", path, EXAMPLES[0].path), ("search", path, "--steps", "1")):
        refused(capsys, *cmd, "--device", "cpu", "--store", store, "--set", "batch_size=2**25",
                says=(str(path), "need 2.0 GiB (2,147,483,648 bytes)", "the CPU worker's memory limit",
                      "(1.0 GiB)", "--set batch_size=33554432"))
        assert not store.exists()  # refused before the store was opened: nothing ran, nothing stored
    # the same sizes with no device to hold them to (problems show) are not refused by this rule
    rc, out, err = run(capsys, "problems", "show", path, "--set", "batch_size=2**25", "--json")
    assert rc == 0 and "Traceback" not in err, err


def test_device_memory_names_what_each_device_holds(monkeypatch):
    from workbench.cli.common import device_memory
    from workbench.problems.check import check_fits

    monkeypatch.setenv("WORKBENCH_WORKER_MEMORY_GB", "2")
    assert device_memory("cpu") == (2 * 2**30, device_memory("cpu")[1]) and "CPU worker" in device_memory("cpu")[1]
    assert device_memory("replay") is None and device_memory(None) is None
    check_fits("p.py", {}, 2 * 2**30, device_memory("cpu"))  # exactly the limit fits
    check_fits("p.py", {}, None, device_memory("cpu"))  # nothing counted (meta construction not possible): no refusal
    with pytest.raises(ProblemError, match=r"p\.py: the inputs and parameters need 2\.0 GiB .* \(loaded with --set "
                                           r"n=4\)"):
        check_fits("p.py", {"n": "4"}, 2 * 2**30 + 1, device_memory("cpu"))
