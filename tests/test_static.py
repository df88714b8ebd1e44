"""The static stage: each check on small inline snippets, then the planted-cheat suite and the honest candidates."""
from __future__ import annotations

import textwrap

import pytest
from cheat_headers import candidate_files, cheat_files, read_header

from workbench.core.records import FAIL, PASS
from workbench.harness import static
from workbench.problems import Problem

HEAD = """\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


"""
FP32_PROBLEM = "import torch\nclass Model(torch.nn.Module):\n    pass\n"


def cand(body: str, head: str = HEAD) -> str:
    """A candidate: the header above plus `body` (dedented)."""
    return head + textwrap.dedent(body)


def model(forward: str, extra: str = "") -> str:
    """A candidate whose ModelNew.forward body is `forward` (dedented, 8-space indented)."""
    fwd = textwrap.indent(textwrap.dedent(forward), " " * 8)
    return cand(extra) + f"\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n{fwd}"


STUB = "\n\nclass ModelNew(nn.Module):\n    pass\n"
LAUNCH = "y = torch.empty_like(x)\nk[(1,)](x, y, x.numel(), BLOCK=1024)\n"


def checks(source: str, severity: str | None = "error", **kw) -> set[str]:
    rec = static.check_static(source, **kw)
    return {f["check"] for f in rec.flags if severity is None or f["severity"] == severity}


# ---------------------------------------------------------------- record shape, kernels, ModelNew

def test_clean_candidate_passes_with_facts():
    rec = static.check_static(model(LAUNCH + "return y\n"))
    assert rec.name == "static" and rec.verdict == PASS and rec.reason == "no issues" and rec.flags == []
    assert rec.data["kernels"] == 1 and rec.data["kernel_names"] == ["k"]
    assert rec.data["has_model_new"] and not rec.data["load_inline"]


def test_syntax_error_fails_with_line():
    rec = static.check_static("import torch\n\ndef f(:\n    pass\n")
    assert rec.verdict == FAIL and "line 3" in rec.reason and rec.flags[0]["line"] == 3


def test_flag_dicts_have_the_documented_keys():
    rec = static.check_static(model("import threading\nreturn x\n"))
    assert rec.verdict == FAIL
    for f in rec.flags:
        assert set(f) == {"check", "severity", "line", "reason"} and isinstance(f["line"], int)
        assert f["severity"] in ("error", "warning") and f["reason"]


def test_no_model_new_is_an_error():
    rec = static.check_static(cand("class Other(nn.Module):\n    pass\n"))
    assert rec.verdict == FAIL and "no_model_new" in checks(cand("x = 1\n"))


def test_torch_only_candidate_warns_no_kernel():
    src = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    rec = static.check_static(src)
    assert rec.verdict == PASS and "no custom kernel: the candidate only calls torch" in rec.reason
    assert rec.data["kernels"] == 0


def test_kernel_forms_are_counted():
    src = cand("""
        from triton import jit

        @triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])
        @triton.jit
        def tuned(x_ptr, n, BLOCK: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, BLOCK), 0.0)

        @jit(do_not_specialize=["n"])
        def plain(x_ptr, n):
            tl.store(x_ptr, 1.0)

        def _raw(x_ptr):
            tl.store(x_ptr, 2.0)

        wrapped = triton.jit(_raw)
        """)
    rec = static.check_static(src)
    assert rec.data["kernel_names"] == ["k", "plain", "tuned", "wrapped"]


def test_load_inline_counts_as_a_custom_kernel():
    src = ("import torch\nfrom torch.utils.cpp_extension import load_inline\n"
           "mod = load_inline('m', '', cuda_sources='')\n"
           "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return mod.f(x)\n")
    rec = static.check_static(src)
    assert rec.data["load_inline"] and "no_kernel" not in checks(src, None)


def test_kernel_that_stores_nothing_warns():
    src = model(LAUNCH + "return y\n", extra="""
        @triton.jit
        def idle(x_ptr, BLOCK: tl.constexpr):
            x = tl.load(x_ptr + tl.arange(0, BLOCK))

        @triton.jit
        def helper(x):
            return x * 2
        """)
    flags = [f for f in static.check_static(src).flags if f["check"] == "no_store"]
    assert len(flags) == 1 and "idle" in flags[0]["reason"] and flags[0]["severity"] == "warning"


# ---------------------------------------------------------------- try/except fallback

def test_try_except_fallback_in_forward():
    src = model("try:\n" + textwrap.indent(LAUNCH, "    ") + "    return y\n"
                "except Exception:\n    return torch.relu(x)\n")
    rec = static.check_static(src)
    assert rec.verdict == FAIL and "fallback" in rec.reason and "fallback" in checks(src)


def test_try_in_helper_called_by_forward_is_flagged():
    src = model("return self._go(x)\n") + "\n    def _go(self, x):\n        try:\n            return x + 1\n" \
                                          "        except Exception:\n            pass\n"
    assert "fallback" in checks(src)


def test_contextlib_suppress_is_flagged():
    src = model("import contextlib\nwith contextlib.suppress(Exception):\n" + textwrap.indent(LAUNCH, "    ")
                + "return x\n")
    assert "fallback" in checks(src)


def test_reraising_and_import_guards_are_fine():
    guard = cand("try:\n    import numpy\nexcept ImportError:\n    numpy = None\n")
    assert "fallback" not in checks(guard)
    reraise = model("try:\n" + textwrap.indent(LAUNCH, "    ") + "except RuntimeError as e:\n"
                    "    raise RuntimeError('kernel failed') from e\nreturn y\n")
    assert "fallback" not in checks(reraise)


# ---------------------------------------------------------------- streams, threads

@pytest.mark.parametrize("code", [
    "s = torch.cuda.Stream()\nreturn x\n",
    "with torch.cuda.stream(torch.cuda.current_stream()):\n    return x\n",
    "torch.cuda.set_stream(None)\nreturn x\n",
    "g = torch.cuda.CUDAGraph()\nreturn x\n",
    "with torch.cuda.graph(None):\n    pass\nreturn x\n",
    "from torch.cuda import ExternalStream\nreturn x\n",
])
def test_streams_and_graphs_are_errors(code):
    rec = static.check_static(model(code))
    assert rec.verdict == FAIL and "stream" in checks(model(code)) and "stream" in rec.reason


def test_current_stream_and_synchronize_are_fine():
    assert "stream" not in checks(model("torch.cuda.synchronize()\ns = torch.cuda.current_stream()\nreturn x\n"))


@pytest.mark.parametrize("code", [
    "import threading\nthreading.Thread(target=print).start()\nreturn x\n",
    "from concurrent.futures import ThreadPoolExecutor\nreturn x\n",
    "import multiprocessing\nreturn x\n",
    "import asyncio\nreturn x\n",
    "import subprocess\nreturn x\n",
    "import os\nos.system('true')\nreturn x\n",
    "import os\nos.fork()\nreturn x\n",
])
def test_threads_and_processes_are_errors(code):
    rec = static.check_static(model(code))
    assert rec.verdict == FAIL and "thread" in checks(model(code)) and "thread" in rec.reason


def test_os_exit_and_abort_are_not_flagged():
    assert checks(model("import os\nos._exit(1)\nos.abort()\nreturn x\n"), None) == set()


def test_a_local_variable_named_like_a_module_is_not_flagged():
    assert checks(model("signal = x * 2\nsignal.add_(1)\nreturn signal\n"), None) == set()


# ---------------------------------------------------------------- patching

@pytest.mark.parametrize("code", [
    "torch.cuda.Event.elapsed_time = lambda self, e: 1e-3\n",
    "import time\ntime.perf_counter = lambda: 0.0\n",
    "setattr(torch.cuda, 'synchronize', lambda: None)\n",
    "delattr(triton.testing, 'do_bench')\n",
    "torch.backends.cuda.matmul.allow_tf32 = True\n",
    "torch.set_float32_matmul_precision('high')\n",
    "torch.use_deterministic_algorithms(False)\n",
    "torch.manual_seed(0)\n",
    "torch.random.set_rng_state(torch.ByteTensor())\n",
    "from unittest import mock\n",
    "import numpy as np\nnp.random.seed(1)\n",
    "ev = torch.cuda.Event\nev.elapsed_time = None\n",
    "import builtins\nbuiltins.print = None\n",
    "tl.dot = None\n",
])
def test_patching_is_an_error(code):
    src = cand(code) + STUB
    rec = static.check_static(src)
    assert rec.verdict == FAIL and "patch" in checks(src) and "patch" in rec.reason


def test_own_attributes_and_backend_queries_are_fine():
    src = cand("ok = torch.backends.cuda.is_built()\n") + \
        "\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.scale = 2.0\n"
    assert "patch" not in checks(src)


# ---------------------------------------------------------------- identity caches

def test_data_ptr_passed_to_a_launch_is_fine():
    src = model("y = torch.empty_like(x)\nptr = x.data_ptr()\nassert x.data_ptr() % 16 == 0\n"
                "k[(1,)](ptr, y.data_ptr(), x.numel(), BLOCK=1024)\nreturn y\n")
    assert checks(src, None) == set()


@pytest.mark.parametrize("code", [
    "c = {}\nc[x.data_ptr()] = x\nreturn x\n",
    "key = (x.data_ptr(), x.shape)\nif key in self.cache:\n    return self.cache[key]\nreturn x\n",
    "if self.last is not None and id(x) == self.last:\n    return x\nreturn x\n",
    "self._last_ptr = x.data_ptr()\nreturn x\n",
    "d = {id(x): x}\nreturn x\n",
    "return self.cache.get(x.data_ptr(), x)\n",
])
def test_address_keys_are_errors(code):
    rec = static.check_static(model(code))
    assert rec.verdict == FAIL and "address" in checks(model(code)) and "address" in rec.reason


def test_tensor_keyed_container_and_lru_cache_are_errors():
    src = cand("_memo = {}\n") + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
        "        if x in _memo:\n            return _memo[x]\n        return x\n"
    assert "address" in checks(src)
    cached = cand("import functools\n\n@functools.lru_cache(maxsize=None)\ndef run(x):\n    return torch.relu(x)\n"
                  "\n\n@functools.cache\ndef config(n: int):\n    return n // 2\n")
    flags = [f for f in static.check_static(cached).flags if f["check"] == "address"]
    assert len(flags) == 1 and "run" in flags[0]["reason"]


def test_state_cache_is_a_warning():
    src = model("if self._out is not None:\n    return self._out\nself._out = x\nreturn x\n")
    rec = static.check_static(src)
    assert rec.verdict == PASS and "state_cache" in checks(src, "warning") and "self._out" in rec.reason
    module_cache = cand("_OUT = []\n") + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
        "        _OUT.append(x)\n        return x\n"
    assert "state_cache" in checks(module_cache, "warning") and not checks(module_cache)


def test_common_honest_idioms_are_not_flagged():
    src = cand("""
        import functools
        try:
            from triton.language.extra import libdevice
        except ImportError:
            from triton.language.extra.cuda import libdevice

        @functools.lru_cache(maxsize=None)
        def num_sms(index: int = 0) -> int:
            return torch.cuda.get_device_properties(index).multi_processor_count

        @functools.lru_cache
        def block_for(n):
            return min(4096, triton.next_power_of_2(n))
        """) + "\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" + textwrap.indent(
        "assert x.is_contiguous() and x.data_ptr() % 16 == 0\nwith torch.cuda.device(x.device):\n"
        + textwrap.indent(LAUNCH, "    ") + "return y\n", " " * 8)
    assert static.check_static(src).flags == []


def test_getattr_with_a_constant_name_is_resolved():
    assert "stream" in checks(cand("s = getattr(torch.cuda, 'Stream')()\n" + STUB))
    assert "patch" in checks(cand("import time\nsetattr(getattr(torch, 'cuda'), 'synchronize', None)\n" + STUB))


# ---------------------------------------------------------------- reads of the reference / caller

@pytest.mark.parametrize("code", [
    "class ModelNew(Model):\n    pass\n",
    "from reference import Model\nclass ModelNew(nn.Module):\n    pass\n",
    "import gc\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return gc.get_objects()\n",
    "import sys\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return sys._getframe(1).f_locals\n",
    "import inspect\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return inspect.stack()\n",
    "import sys\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return sys.modules['__main__']\n",
    "class ModelNew(nn.Module):\n    def forward(self, x):\n        return nn.Module.__subclasses__()\n",
    "import workbench\nclass ModelNew(nn.Module):\n    pass\n",
    "class ModelNew(nn.Linear):\n    def forward(self, x):\n        return super().forward(x)\n",
])
def test_reading_the_reference_is_an_error(code):
    rec = static.check_static(cand(code))
    assert rec.verdict == FAIL and "reference" in checks(cand(code)) and "reference" in rec.reason


def test_super_init_and_a_local_base_class_are_fine():
    src = cand("class Base(nn.Module):\n    def forward(self, x):\n        return x\n\n"
               "class ModelNew(Base):\n    def __init__(self):\n        super().__init__()\n"
               "    def forward(self, x):\n        return super().forward(x)\n")
    assert "reference" not in checks(src)


# ---------------------------------------------------------------- side effects, dynamic code

@pytest.mark.parametrize("code,severity", [
    ("open('/tmp/out.txt', 'w').write('x')", "error"),
    ("open('/tmp/out.txt', mode='a')", "error"),
    ("import os\nos.environ['CUDA_LAUNCH_BLOCKING'] = '1'", "error"),
    ("import os\nos.putenv('A', 'B')", "error"),
    ("import os\nos.environ.update(A='1')", "error"),
    ("import socket", "error"),
    ("import urllib.request", "error"),
    ("torch.save(torch.zeros(1), '/tmp/t.pt')", "error"),
    # the routes a fault probe found accepted (issue 18, item 4)
    ("import numpy as np\nnp.zeros(3).tofile('/tmp/x.bin')", "error"),
    ("import numpy as np\nnp.savetxt('/tmp/x.txt', np.zeros(3))", "error"),
    ("import sqlite3\nsqlite3.connect('/tmp/x.db')", "error"),
    ("import logging\nlogging.getLogger().addHandler(logging.FileHandler('/tmp/x.log'))", "error"),
    ("import io\nio.FileIO('/tmp/x', 'w')", "error"),
    ("t = torch.from_file('/tmp/x', shared=True, size=4)", "error"),
    ("o = open\no('/tmp/x', 'w')", "error"),
    ("from pathlib import Path\ngetattr(Path('/tmp/x'), 'write_' + 'bytes')(b'1')", "error"),
    ("m = torch.hub.load('a/b', 'c')", "error"),
    ("from os import remove", "error"),
    ("open('/etc/hostname').read()", "warning"),
    ("from pathlib import Path\nPath('/etc/hostname').read_text()", "warning"),
])
def test_side_effects(code, severity):
    assert "side_effect" in checks(cand(code + "\n"), severity)


def test_computed_getattr_on_layers_is_fine():
    code = "class ModelNew(nn.Module):\n    def forward(self, x):\n        return getattr(self, f'conv{1}')(x)\n"
    assert "side_effect" not in checks(cand(code), None)


def test_reading_the_environment_is_fine():
    assert "side_effect" not in checks(cand("import os\nflag = os.environ.get('X', '0')\n"), None)


@pytest.mark.parametrize("code", [
    "exec('y = 1')", "eval('1 + 1')", "code = compile('1', 's', 'eval')", "import importlib",
    "import ctypes", "m = __import__('os')",
])
def test_dynamic_code_is_an_error(code):
    assert "dynamic" in checks(cand(code + "\n"))


def test_torch_compile_and_re_compile_are_not_dynamic_code():
    assert "dynamic" not in checks(cand("import re\npat = re.compile('a')\nf = torch.compile(lambda x: x)\n"))


# ---------------------------------------------------------------- precision

def precision_flags(source: str, **kw) -> list[dict]:
    kw.setdefault("problem_source", FP32_PROBLEM)
    return [f for f in static.check_static(source, **kw).flags if f["check"] in ("precision", "tf32_dot")]


@pytest.mark.parametrize("code", [
    "y = x.half()", "y = x.bfloat16()", "y = x.to(torch.bfloat16)", "d = tl.float16",
    "y = tl.dot(a, b, input_precision='tf32')", "y = tl.dot(a, b)", "y = tl.dot(a, b, allow_tf32=True)",
])
def test_precision_downgrades_warn_in_strict_fp32(code):
    flags = precision_flags(cand(code + "\n"))
    assert flags and all(f["severity"] == "warning" for f in flags)
    assert static.check_static(cand(code + "\n" + STUB), problem_source=FP32_PROBLEM).verdict == PASS


def test_precision_is_quiet_when_not_strict_fp32():
    code = cand("y = x.half()\nz = tl.dot(a, b)\n")
    assert precision_flags(code, problem_source=FP32_PROBLEM + "# torch.bfloat16\n") == []
    assert precision_flags(code, precision="tf32") == []
    assert precision_flags(code, problem_source=None) == []


def test_tf32_in_a_problem_whose_convolutions_run_cudnn_tf32_still_warns_and_says_why():
    # tf32 is the reference's own math for its convolutions, a downgrade for its matmuls: correctness judges
    flags = precision_flags(cand("y = tl.dot(a, b, input_precision='tf32')\nz = x.half()\n"), precision="cudnn_tf32")
    assert {f["severity"] for f in flags} == {"warning"} and len(flags) == 2
    assert any("reference's convolutions run tf32, its matmuls fp32" in f["reason"] for f in flags)
    assert any("(.half())" in f["reason"] for f in flags)  # a half type is a downgrade either way


def test_ieee_dot_and_fp32_are_fine():
    assert precision_flags(cand("y = tl.dot(a, b, acc, input_precision='ieee')\nz = tl.dot(a, b, allow_tf32=False)\n"
                                "w = x.to(torch.float32)\n")) == []


def test_matmul_operator_in_a_kernel_warns():
    src = cand("@triton.jit\ndef mm(a_ptr, c_ptr):\n    a = tl.load(a_ptr)\n    tl.store(c_ptr, a @ a)\n")
    assert any(f["check"] == "tf32_dot" for f in precision_flags(src))


# ---------------------------------------------------------------- the planted cheats and honest candidates

def _problem_source(header: dict) -> tuple[str, str]:
    p = Problem.load(header["problem"], header["set"])
    return p.source, p.effective_precision


@pytest.mark.parametrize("path", cheat_files(), ids=lambda p: p.stem)
def test_cheat_suite(path):
    h = read_header(path)
    assert h["caught_by"] in ("static", "compile", "correctness", "timing") and h["reason"] and h["set"]
    source, precision = _problem_source(h)
    rec = static.check_static(path.read_text(), source, precision)
    errors = [f for f in rec.flags if f["severity"] == "error"]
    assert rec.data["has_model_new"] and rec.data["kernels"] >= 1
    if h["caught_by"] == "static":
        assert rec.verdict == FAIL and h["reason"] in rec.reason.lower(), rec.reason
    else:
        assert not errors and rec.verdict == PASS, rec.reason


@pytest.mark.parametrize("path", candidate_files(), ids=lambda p: p.stem)
def test_honest_candidates_pass(path):
    h = read_header(path)
    assert h["caught_by"] == "none" and h["reason"] == "-"
    source, precision = _problem_source(h)
    rec = static.check_static(path.read_text(), source, precision)
    assert rec.verdict == PASS and not [f for f in rec.flags if f["severity"] == "error"], rec.reason
    assert rec.data["kernels"] >= 1


def test_suite_is_complete():
    names = {p.stem for p in cheat_files()}
    assert len(names) >= 13 and {"cache_by_address", "hang", "crash", "degenerate_output"} <= names
    assert {p.stem for p in candidate_files()} >= {"scale_shift_relu_ok", "softmax_rows_ok", "matmul_fp32_ok"}


def test_read_header_parses_fields(tmp_path):
    f = tmp_path / "c.py"
    f.write_text("# cheat: x\n# problem: softmax_rows\n# set: batch_size=4 dim=8\n# caught-by: static\n"
                 "# reason: stream\nimport torch\n")
    assert read_header(f) == {"cheat": "x", "problem": "softmax_rows", "set": ["batch_size=4", "dim=8"],
                              "caught_by": "static", "reason": "stream"}
    f.write_text("# cheat: x\nimport torch\n")
    with pytest.raises(ValueError, match="problem"):
        read_header(f)
