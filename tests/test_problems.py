"""Problems: built-ins, KernelBench files with --set overrides, malformed files, identity, counts, floor, ceilings."""
from __future__ import annotations

import json
import pickle
import textwrap
from pathlib import Path

import pytest
import torch

from workbench.core import ceilings
from workbench.problems import PRECISIONS, Problem, ProblemError, builtin_names
from workbench.problems.analysis import Floor, ProblemCounts, count, roofline_floor

BUILTINS = ["linear_gelu", "matmul_bf16", "matmul_fp32", "scale_shift_relu", "softmax_rows"]


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


PLAIN = """\
    import torch
    import torch.nn as nn

    batch = 4
    dim = 16


    class Model(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale

        def forward(self, x):
            return x * self.scale


    def get_inputs():
        return [torch.randn(batch, dim)]


    def get_init_inputs():
        return [2.0]
    """


def kb(body: str, get_inputs: str = "[torch.randn(4, 4)]", get_init_inputs: str = "[]",
       model: str = "class Model(nn.Module):\n    def forward(self, x):\n        return x\n") -> str:
    """A KernelBench file: imports, `body` (module-level constants), Model and the two factories."""
    return ("import torch\nimport torch.nn as nn\n\n" + textwrap.dedent(body) + "\n\n" + model +
            f"\n\ndef get_inputs():\n    return {get_inputs}\n\n\n"
            f"def get_init_inputs():\n    return {get_init_inputs}\n")


# ---------------------------------------------------------------- built-ins and their counts

def test_builtin_names_are_the_shipped_files():
    assert set(BUILTINS) <= set(builtin_names()) and builtin_names() == sorted(builtin_names())


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_loads_and_counts(name):
    p = Problem.load(name)
    assert p.name == name
    assert Path(p.path).name == f"{name}.py" and Path(p.path).is_absolute()
    assert p.key.startswith(f"{name}@") and len(p.key) == len(name) + 1 + 16
    c = count(p)
    assert c.min_bytes > 0
    assert c.eager_bytes >= c.min_bytes
    assert len(c.outputs) == 1 and c.outputs[0]["shape"]  # one tensor output with a known shape
    assert c.to_dict()["intensity"] == pytest.approx(c.flops / c.min_bytes)


def test_builtin_loads_with_py_suffix_too():
    assert Problem.load("matmul_fp32.py") == Problem.load("matmul_fp32")


def test_matmul_fp32_counts_exact():
    p = Problem.load("matmul_fp32")
    m, n, k = p.module.M, p.module.N, p.module.K
    c = count(p)
    assert c.flops == 2 * m * n * k == 2 * 4096 ** 3
    assert c.min_bytes == 4 * (m * k + k * n + m * n)
    assert c.compute_dtype == "fp32"
    assert c.inputs == [{"shape": [m, k], "dtype": "float32"}, {"shape": [k, n], "dtype": "float32"}]
    assert c.outputs == [{"shape": [m, n], "dtype": "float32"}]
    assert c.parameters == 0


def test_matmul_counts_follow_overrides():
    c = count(Problem.load("matmul_bf16", ["M=64", "N=48", "K=80"]))
    assert c.flops == 2 * 64 * 48 * 80
    assert c.min_bytes == 2 * (64 * 80 + 80 * 48 + 64 * 48)
    assert c.compute_dtype == "bf16"


def test_scale_shift_relu_counts():
    p = Problem.load("scale_shift_relu")
    b, d = p.module.batch_size, p.module.dim
    c = count(p)
    assert c.flops == 0  # elementwise arithmetic is not counted
    assert c.min_bytes == 2 * 4 * b * d == 2 * 2 ** 30  # one read, one write: 2 GiB
    assert c.intensity == 0.0


def test_linear_gelu_counts():
    p = Problem.load("linear_gelu")
    m = p.module
    c = count(p)
    assert c.flops == 2 * m.batch_size * m.in_features * m.out_features  # addmm; bias and gelu uncounted
    weights = m.in_features * m.out_features + m.out_features
    assert c.parameters == weights
    assert c.min_bytes == 4 * (m.batch_size * m.in_features + weights + m.batch_size * m.out_features)
    assert c.eager_bytes > c.min_bytes  # the unfused reference writes and re-reads the linear's output
    assert c.compute_dtype == "tf32"  # the file declares WORKBENCH_PRECISION = "tf32"
    assert count(Problem.load("linear_gelu", precision="strict")).compute_dtype == "fp32"


# ---------------------------------------------------------------- KernelBench files and overrides

def test_plain_kernelbench_file_loads(tmp_path):
    path = write(tmp_path, "plain.py", PLAIN)
    p = Problem.load(path)
    assert p.path == str(path.resolve()) and p.name == "plain" and p.overrides == ()
    assert p.effective_precision == "strict"
    assert p.init_inputs() == [2.0]
    (x,) = p.inputs()
    assert x.shape == (4, 16)
    ref = p.make_reference()
    assert torch.equal(ref(x), x * 2.0)
    assert p.constants() == {"batch": 4, "dim": 16}
    assert p.source == path.read_text()  # no overrides: the file as written


def test_override_literal_list_builds_layers(tmp_path):
    path = write(tmp_path, "mlp.py", """\
        import torch
        import torch.nn as nn

        batch_size = 2
        in_dim = 32
        layer_sizes = [16, 8, 4]


        class Model(nn.Module):
            def __init__(self, in_dim, layer_sizes):
                super().__init__()
                dims = [in_dim] + list(layer_sizes)
                self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))

            def forward(self, x):
                for layer in self.layers:
                    x = torch.relu(layer(x))
                return x


        def get_inputs():
            return [torch.randn(batch_size, in_dim)]


        def get_init_inputs():
            return [in_dim, layer_sizes]
        """)
    assert len(Problem.load(path).make_reference().layers) == 3
    p = Problem.load(path, ["layer_sizes=[64,64]"])
    assert p.overrides == (("layer_sizes", "[64, 64]"),)  # the value's canonical source
    model = p.make_reference()
    assert [(layer.in_features, layer.out_features) for layer in model.layers] == [(32, 64), (64, 64)]
    assert model(*p.inputs()).shape == (2, 64)


DERIVED = """\
    channels = 8
    batch = 2
    shape = (batch, channels, 32)
    """


def test_override_is_followed_by_derived_constants(tmp_path):
    path = write(tmp_path, "derived.py", kb(DERIVED, get_inputs="[torch.randn(*shape)]"))
    assert Problem.load(path).module.shape == (2, 8, 32)
    p = Problem.load(path, ["channels=3"])
    assert p.module.channels == 3
    assert p.module.shape == (2, 3, 32)
    assert p.inputs()[0].shape == (2, 3, 32)
    assert p.constants()["shape"] == (2, 3, 32)


def test_chained_assignment_override_changes_only_the_named_target(tmp_path):
    path = write(tmp_path, "chained.py", kb("height = width = 128\n", get_inputs="[torch.randn(height, width)]"))
    p = Problem.load(path, ["height=64"])
    assert (p.module.height, p.module.width) == (64, 128)
    assert p.inputs()[0].shape == (64, 128)
    both = Problem.load(path, ["height=64", "width=32"])
    assert both.inputs()[0].shape == (64, 32)
    assert Problem.load(path).inputs()[0].shape == (128, 128)


def test_expression_override_dtype(tmp_path):
    path = write(tmp_path, "dt.py", kb("dtype = torch.float32\nn = 8\n", get_inputs="[torch.randn(n, dtype=dtype)]"))
    assert Problem.load(path).inputs()[0].dtype == torch.float32
    p = Problem.load(path, ["dtype=torch.float16"])
    assert p.module.dtype is torch.float16
    assert p.inputs()[0].dtype == torch.float16
    assert p.constants()["dtype"] == "torch.float16"
    assert count(p).compute_dtype == "fp16"


def test_annotated_assignment_override(tmp_path):
    path = write(tmp_path, "ann.py", kb("n: int = 4\n", get_inputs="[torch.randn(n)]"))
    assert Problem.load(path).inputs()[0].shape == (4,)
    p = Problem.load(path, ["n=7"])
    assert p.module.n == 7 and p.inputs()[0].shape == (7,)


def test_dict_overrides_equal_list_overrides(tmp_path):
    path = write(tmp_path, "plain.py", PLAIN)
    a = Problem.load(path, {"batch": 3, "dim": "5"})
    b = Problem.load(path, ["dim=5", "batch=3"])
    assert a == b and a.key == b.key
    assert a.overrides == (("batch", "3"), ("dim", "5"))  # sorted, values as source text
    assert a.inputs()[0].shape == (3, 5)


# ---------------------------------------------------------------- malformed files

def load_error(path, *args, **kw) -> str:
    with pytest.raises(ProblemError) as info:
        Problem.load(path, *args, **kw)
    return str(info.value)


def test_syntax_error_names_file_and_line(tmp_path):
    path = write(tmp_path, "broken.py", "import torch\n\ndef get_inputs(:\n    return []\n")
    msg = load_error(path)
    assert "broken.py" in msg and "syntax error" in msg and "line 3" in msg
    assert "line 3" in load_error(path, ["x=1"])  # the override path parses first, same message


@pytest.mark.parametrize("missing", ["get_inputs", "get_init_inputs"])
def test_missing_factory(tmp_path, missing):
    text = kb("").replace(f"def {missing}():", "def other():")
    path = write(tmp_path, f"no_{missing}.py", text)
    msg = load_error(path)
    assert f"no_{missing}.py" in msg and f"missing {missing}" in msg


def test_missing_model(tmp_path):
    path = write(tmp_path, "nomodel.py", kb("", model="class Other(nn.Module):\n    pass\n"))
    msg = load_error(path)
    assert "nomodel.py" in msg and "missing Model" in msg


def test_model_not_a_module(tmp_path):
    path = write(tmp_path, "plainclass.py", kb("", model="class Model:\n    pass\n"))
    msg = load_error(path)
    assert "plainclass.py" in msg and "Model must be a subclass of torch.nn.Module" in msg


def test_factory_not_callable(tmp_path):
    text = kb("").replace("def get_init_inputs():\n    return []\n", "get_init_inputs = [1, 2]\n")
    msg = load_error(write(tmp_path, "notfn.py", text))
    assert "notfn.py" in msg and "get_init_inputs must be a function" in msg


def test_module_level_exception(tmp_path):
    msg = load_error(write(tmp_path, "raises.py", kb("raise RuntimeError('no sizes today')\n")))
    assert "raises.py" in msg and "RuntimeError: no sizes today" in msg


def test_get_inputs_raising_fails_when_called(tmp_path):
    path = write(tmp_path, "boom.py", kb("def _fail():\n    raise RuntimeError('boom')\n", get_inputs="_fail()"))
    p = Problem.load(path)  # loading only checks the module; the factories run on demand
    with pytest.raises(ProblemError, match=r"boom\.py: get_inputs\(\) raised RuntimeError: boom"):
        p.inputs()
    with pytest.raises(ProblemError, match=r"get_inputs\(\) raised RuntimeError"):
        count(p)


def test_get_inputs_returning_non_list(tmp_path):
    p = Problem.load(write(tmp_path, "single.py", kb("", get_inputs="torch.randn(4)")))
    with pytest.raises(ProblemError, match=r"single\.py: get_inputs\(\) must return a list or tuple, got Tensor"):
        p.inputs()
    p2 = Problem.load(write(tmp_path, "tup.py", kb("", get_inputs="(torch.randn(4),)")))
    assert isinstance(p2.inputs(), list) and len(p2.inputs()) == 1  # a tuple is accepted, as a list


def test_model_constructor_raising(tmp_path):
    model = ("class Model(nn.Module):\n    def __init__(self, a):\n        super().__init__()\n"
             "        raise ValueError('bad a')\n")
    p = Problem.load(write(tmp_path, "ctor.py", kb("", model=model, get_init_inputs="[1]")))
    with pytest.raises(ProblemError, match=r"ctor\.py: Model\(\*get_init_inputs\(\)\) raised ValueError: bad a"):
        p.make_reference()


def test_unknown_override_lists_available_constants(tmp_path):
    path = write(tmp_path, "plain.py", PLAIN)
    msg = load_error(path, ["bacth=8"])
    assert "plain.py" in msg and "cannot override bacth" in msg
    assert "available: batch, dim" in msg


def test_bad_override_syntax(tmp_path):
    path = write(tmp_path, "plain.py", PLAIN)
    msg = load_error(path, ["dim=(1,"])
    assert "--set dim" in msg and "'(1,'" in msg and "not a Python literal" in msg
    assert "expects NAME=VALUE" in load_error(path, ["dim"])
    assert "not a valid constant name" in load_error(path, ["2dim=3"])


def test_override_value_that_is_a_name_is_refused(tmp_path):
    msg = load_error(write(tmp_path, "plain.py", PLAIN), ["dim=undefined_name"])
    assert "--set dim" in msg and "'undefined_name'" in msg and "a name is not a literal" in msg


def test_override_of_unpacked_name_is_refused(tmp_path):
    # a literal tuple (`a, b = 2, 3`) is split and can be overridden; a computed one cannot
    path = write(tmp_path, "unpack.py", kb("a, b = divmod(7, 2)\n"))
    msg = load_error(path, ["a=5"])
    assert "unpack.py" in msg and "line 4 binds a by unpacking" in msg


def test_missing_file_and_unknown_builtin_list_builtins(tmp_path):
    for target in (tmp_path / "nope.py", "no_such_problem"):
        msg = load_error(target)
        assert str(target) in msg and "no problem file" in msg
        assert "built-ins: " in msg and all(name in msg for name in builtin_names())


def test_non_py_path_refused(tmp_path):
    txt = tmp_path / "problem.txt"
    txt.write_text(PLAIN)
    msg = load_error(txt)
    assert "problem.txt" in msg and "must be a .py file" in msg


# ---------------------------------------------------------------- identity, pickling, precision

def test_key_changes_with_overrides_and_precision(tmp_path):
    base = Problem.load("matmul_fp32")
    small = Problem.load("matmul_fp32", ["M=64"])
    assert base.key != small.key
    assert small.key != Problem.load("matmul_fp32", ["M=65"]).key
    assert small.key == Problem.load("matmul_fp32", {"M": 64}).key
    assert base.key != Problem.load("matmul_fp32", precision="tf32").key
    assert base != small and hash(small) == hash(Problem.load("matmul_fp32", ["M=64"]))
    # the key hashes the effective source: the same file copied elsewhere has the same key
    copy = tmp_path / "matmul_fp32.py"
    copy.write_text(Path(base.path).read_text())
    assert Problem.load(copy).key == base.key


def test_problem_pickles_and_equals_after_round_trip():
    p = Problem.load("linear_gelu", ["batch_size=16", "in_features=32", "out_features=8"], precision="strict")
    q = pickle.loads(pickle.dumps(p))
    assert q == p and hash(q) == hash(p)
    assert (q.path, q.overrides, q.precision) == (p.path, p.overrides, "strict")
    assert q.key == p.key and q.effective_precision == "strict"
    assert q.inputs()[0].shape == (16, 32)


def test_precision_from_file_and_override(tmp_path):
    assert PRECISIONS == ("torch", "strict", "tf32")
    assert Problem.load("linear_gelu").effective_precision == "tf32"  # declared in the file
    assert Problem.load("matmul_fp32").effective_precision == "strict"  # default "torch": no cuDNN layer
    assert Problem.load("linear_gelu", precision="strict").effective_precision == "strict"
    assert Problem.load("matmul_fp32", precision="tf32").effective_precision == "tf32"
    path = write(tmp_path, "declares.py", kb('WORKBENCH_PRECISION = "tf32"\n'))
    assert Problem.load(path).effective_precision == "tf32"


CONV_FILE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return {body}

def get_inputs():
    return [torch.randn(2, 8, 8, 8)]

def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("body, effective", [
    ("self.lin(x)", "strict"),
    ("F.conv2d(x, torch.ones(8, 8, 1, 1))", "cudnn_tf32"),
    ("torch.conv_transpose2d(x, torch.ones(8, 8, 1, 1))", "cudnn_tf32"),
    ("self.lin(x)  # not nn.Conv2d: a comment names no layer", "strict"),
    ("self.lin(x) if 'Conv2d' else x", "strict"),  # nor does a string
])
def test_torch_precision_is_cudnn_tf32_only_where_the_reference_calls_cudnn(tmp_path, body, effective):
    # PyTorch's defaults: torch.backends.cudnn.allow_tf32 is True (convolutions and recurrent layers run tf32 on
    # tensor cores), torch.backends.cuda.matmul.allow_tf32 False: a KernelBench reference computes exactly that
    path = write(tmp_path, "conv_or_not.py", CONV_FILE.format(body=body))
    assert Problem.load(path).effective_precision == effective
    assert Problem.load(path, precision="torch").effective_precision == effective
    assert Problem.load(path, precision="strict").effective_precision == "strict"
    assert Problem.load(path, precision="tf32").effective_precision == "tf32"
    # the key follows the effective precision: a file with no cuDNN layer keeps its key under the "torch" default
    same = Problem.load(path).key == Problem.load(path, precision="strict").key
    assert same == (effective == "strict")


@pytest.mark.parametrize("layer", ["nn.Conv1d(8, 8, 3)", "nn.Conv3d(8, 8, 3)", "nn.ConvTranspose2d(8, 8, 3)",
                                   "nn.LSTM(8, 8)", "nn.GRU(8, 8)", "nn.RNN(8, 8)"])
def test_cudnn_layers_are_recognised(layer):
    from workbench.problems.problem import calls_cudnn

    assert calls_cudnn(f"import torch.nn as nn\nm = {layer}\n")
    assert not calls_cudnn("import torch.nn as nn\nm = nn.LSTMCell(8, 8)\n")  # the cells are cuBLAS matmuls


def test_invalid_precision_rejected(tmp_path):
    msg = load_error("matmul_fp32", precision="fp16")
    assert "precision must be one of" in msg and "fp16" in msg
    path = write(tmp_path, "badprec.py", kb('WORKBENCH_PRECISION = "loose"\n'))
    msg = load_error(path)  # rejected at load, not later when the key is first asked for
    assert "badprec.py" in msg and "WORKBENCH_PRECISION must be one of" in msg and "loose" in msg
    # the caller's precision overrides the file
    assert Problem.load(path, precision="strict").effective_precision == "strict"


# ---------------------------------------------------------------- roofline floor

CEILINGS = {"device": "Test GPU", "copy_gbps": 4000.0, "tflops": {"fp32": 50.0, "bf16": 800.0}}


def test_roofline_floor_compute_bound():
    c = count(Problem.load("matmul_fp32"))
    f = roofline_floor(c, CEILINGS)
    assert f.device == "Test GPU"
    assert f.compute_ms == pytest.approx(2 * 4096 ** 3 / 50e12 * 1e3, rel=1e-12)  # 2.749 ms
    assert f.compute_ms == pytest.approx(2.74877906944, rel=1e-9)
    assert f.memory_ms == pytest.approx(3 * 4 * 4096 ** 2 / 4000e9 * 1e3, rel=1e-12)  # 0.0503 ms
    assert f.memory_ms == pytest.approx(0.050331648, rel=1e-9)
    assert f.bound == "compute" and f.ms == f.compute_ms
    d = f.to_dict()
    assert d == {"device": "Test GPU", "floor_ms": f.compute_ms, "compute_ms": f.compute_ms,
                 "memory_ms": f.memory_ms, "bound": "compute"}


def test_roofline_floor_memory_bound():
    f = roofline_floor(count(Problem.load("scale_shift_relu")), CEILINGS)
    assert f.compute_ms == 0.0
    assert f.memory_ms == pytest.approx(2 ** 31 / 4000e9 * 1e3, rel=1e-12)  # 0.537 ms
    assert f.bound == "memory" and f.ms == f.memory_ms


def test_roofline_floor_hand_made_counts():
    c = ProblemCounts(flops=10 ** 12, min_bytes=10 ** 9, eager_bytes=10 ** 9, compute_dtype="bf16",
                      inputs=[], outputs=[], parameters=0)
    f = roofline_floor(c, CEILINGS)
    assert f.compute_ms == pytest.approx(1.25)  # 1e12 / 800e12 s
    assert f.memory_ms == pytest.approx(0.25)  # 1e9 B / 4000e9 B/s
    assert f.bound == "compute" and f.ms == pytest.approx(1.25)
    assert Floor("x", 1.0, 1.0).bound == "compute"  # a tie counts as compute-bound


def test_roofline_floor_missing_dtype_rate():
    c = count(Problem.load("linear_gelu"))  # tf32: not measured in CEILINGS
    with pytest.raises(KeyError, match="no measured tf32 rate for Test GPU"):
        roofline_floor(c, CEILINGS)


# ---------------------------------------------------------------- measured ceilings on disk

def test_ceilings_slug():
    assert ceilings.slug("NVIDIA H200") == "nvidia-h200"
    assert ceilings.slug("NVIDIA A100-SXM4-80GB") == "nvidia-a100-sxm4-80gb"
    assert ceilings.slug("  GeForce RTX 4090 (laptop) ") == "geforce-rtx-4090-laptop"


def test_ceilings_load_and_available(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CEILINGS", str(tmp_path))
    assert ceilings.ceilings_dir() == tmp_path
    assert ceilings.available() == {}
    assert ceilings.load("NVIDIA H200") is None
    data = {"device": "NVIDIA H200", "copy_gbps": 4200.0, "tflops": {"bf16": 750.0, "fp32": 51.0}}
    (tmp_path / "nvidia-h200.json").write_text(json.dumps(data))
    (tmp_path / "notes.txt").write_text("not a ceilings file")
    assert ceilings.load("NVIDIA H200") == data
    assert ceilings.load("NVIDIA A100") is None
    assert ceilings.available() == {"NVIDIA H200": data}
    f = roofline_floor(count(Problem.load("matmul_bf16")), ceilings.load("NVIDIA H200"))
    assert f.device == "NVIDIA H200"
    assert f.compute_ms == pytest.approx(2 * 8192 ** 3 / 750e12 * 1e3)


def test_ceilings_dir_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_CEILINGS", str(tmp_path / "absent"))
    assert ceilings.available() == {}
    assert ceilings.load("NVIDIA H200") is None
