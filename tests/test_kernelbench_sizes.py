"""The sizes rule's inline literals (`workbench.lab.kernelbench_sizes`): int literals of module-level tuples that mix
names and literals and of get_inputs / get_init_inputs shrink like constants, in a rewritten copy of the file; a model
tied to its inline image size falls back to the constants alone; one whose channel divisibility the rule cannot see
falls back to what get_inputs alone reads. The constants' rule itself is tested in tests/test_kernelbench.py."""
from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.lab.kernelbench_sizes import literal_sites, model_names, rewrite, shrink

HEAD = "import torch\nimport torch.nn as nn\n\n"

# a ResNet-like file: the image size sits in a tuple mixing a name and literals (the classifier is pooled to 1x1)
MIXED_TUPLE = HEAD + """class Model(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, kernel_size=7, stride=2, padding=3)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))

batch_size = 2
num_classes = 1000
input_shape = (batch_size, 3, 224, 224)  # the literals the constants' rule cannot reach

def get_inputs():
    return [torch.rand(input_shape)]

def get_init_inputs():
    return [num_classes]
"""

# a MobileNet-like file: the image size written inline in get_inputs
INLINE = HEAD + """class Model(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))

batch_size = 10
num_classes = 1000

def get_inputs():
    return [torch.rand(batch_size, 3, 224, 224)]

def get_init_inputs():
    return [num_classes]
"""

# a VGG-like file: the classifier's width is tied to the inline image size (64 / 4 = 16)
TIED = HEAD + """class Model(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(4)
        self.fc = nn.Linear(4 * 16 * 16, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.conv(x)), 1))

batch_size = 10
num_classes = 1000

def get_inputs():
    return [torch.rand(batch_size, 3, 64, 64)]

def get_init_inputs():
    return [num_classes]
"""

# a ShuffleNet-unit-like file: out_channels // 4 must be a multiple of groups, which the rule cannot see; the
# forward's locals share the constants' names (they are not the module's)
GROUPED = HEAD + """class Model(nn.Module):
    def __init__(self, in_channels, out_channels, groups=3):
        super().__init__()
        mid = out_channels // 4
        self.conv1 = nn.Conv2d(in_channels, mid, 1, groups=groups)
        self.conv2 = nn.Conv2d(mid, out_channels, 1, groups=groups)

    def forward(self, x):
        batch_size, channels, height, width = x.size()
        return self.conv2(torch.relu(self.conv1(x))).view(batch_size, -1, height, width)

batch_size = 10
input_channels = 240
out_channels = 480
groups = 3
height = 224
width = 224

def get_inputs():
    return [torch.rand(batch_size, input_channels, height, width)]

def get_init_inputs():
    return [input_channels, out_channels, groups]
"""


def _write(tmp_path: Path, name: str, source: str) -> Path:
    f = tmp_path / name
    f.write_text(source)
    return f


def test_literal_sites_are_sizes_outside_the_model():
    src = HEAD + """class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(512 * 7 * 7, 4096)  # the model's own literals: never sites

    def forward(self, x):
        return self.fc(x)

dim = 4096
shape = (dim, 3, 224)
pair = (16, 32)  # a tuple of ints alone: a constant (int_literals), not a site
layers = [3, 4, 23, 3]  # a list of ints: sites (the loader would make it a tuple)

def get_inputs():
    n = 1000
    idx = torch.randint(0, 1000, (16, 2048))  # the bounds are values
    x = torch.randn(8 * 4, 2048).view(16, -1)  # the view is not a factory
    return [x, torch.full((64, 64), 1000.0), torch.zeros(n)[0, 1000], idx, 12]

def get_init_inputs():
    return [128, dim]
"""
    sites = literal_sites(src)
    got = [(s.where, s.value) for s in sites]
    assert got == [("shape", 3), ("shape", 224), ("layers", 3), ("layers", 4), ("layers", 23), ("layers", 3),
                   ("get_inputs", 1000), ("get_inputs", 16), ("get_inputs", 2048), ("get_inputs", 32),
                   ("get_inputs", 2048), ("get_inputs", 64), ("get_inputs", 64), ("get_inputs", 12),
                   ("get_init_inputs", 128)]
    # rewriting changes the spans only (the folded `8 * 4` as one), comments and formatting stay
    new = rewrite(src, {s: 7 for s in sites if s.value in (224, 32, 128)})
    assert "shape = (dim, 3, 7)" in new and "torch.randn(7, 2048).view(16, -1)  # the view" in new
    assert "return [7, dim]" in new and "nn.Linear(512 * 7 * 7, 4096)  # the model's" in new
    assert len(new.splitlines()) == len(src.splitlines())


MLP_LIST = HEAD + """class Model(nn.Module):
    def __init__(self, input_size, layer_sizes, output_size):
        super().__init__()
        sizes = [input_size] + layer_sizes + [output_size]  # needs a list: a tuple here raises TypeError
        self.net = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])])

    def forward(self, x):
        return self.net(x)

batch_size = 128
input_size = 16384
hidden_layer_sizes = [32768, 32768]
output_size = 16384

def get_inputs():
    return [torch.rand(batch_size, input_size)]

def get_init_inputs():
    return [input_size, hidden_layer_sizes, output_size]
"""


def test_a_list_of_int_sizes_shrinks_and_stays_a_list(tmp_path):
    # a wide MLP's hidden sizes written as a list: left at 32768 they made the CPU check's GEMMs time out
    sizes, problem, proposer = shrink(_write(tmp_path, "wide_mlp.py", MLP_LIST))
    assert sizes.cap == 8 and problem.init_inputs() == [8, [8, 8], 8]
    assert "hidden_layer_sizes literal 32768->8 x2" in sizes.describe() and proposer.captured is not None


def test_model_names_skip_get_inputs_and_a_functions_own_locals():
    assert model_names(GROUPED) >= {"input_channels", "out_channels", "groups"}
    assert not model_names(GROUPED) & {"batch_size", "height", "width"}
    assert "num_classes" in model_names(MIXED_TUPLE) and "input_shape" not in model_names(MIXED_TUPLE)


def test_a_tuple_mixing_names_and_literals_shrinks_in_a_copy_named_as_the_file(tmp_path):
    f = _write(tmp_path, "9_resnet_like.py", MIXED_TUPLE)
    sizes, problem, proposer = shrink(f)
    assert sizes.cap == 8 and problem.inputs()[0].shape == (2, 3, 8, 8)
    assert sizes.describe() == "cap 8: num_classes=8, input_shape literal 224->8 x2 (line 16)"
    assert problem.name == "9_resnet_like" and problem.path == sizes.path and Path(problem.path).parent != tmp_path
    copy = Path(problem.path)
    text = copy.read_text()
    assert "input_shape = (batch_size, 3, 8, 8)  # the literals" in text and f.read_text() == MIXED_TUPLE
    assert proposer.captured is not None
    del problem, proposer
    gc.collect()
    assert not copy.exists() and not copy.parent.exists()  # the copy goes with the problem


def test_an_inline_get_inputs_literal_shrinks_with_the_constants(tmp_path):
    f = _write(tmp_path, "inline.py", INLINE)
    sizes, problem, _ = shrink(f)
    assert problem.inputs()[0].shape == (2, 3, 8, 8) and problem.constants()["num_classes"] == 8
    assert sizes.describe() == "cap 8: batch_size=2, num_classes=8, get_inputs literal 224->8 x2 (line 17)"


def test_a_literal_equal_to_a_constant_stays_equal_to_it(tmp_path):
    src = INLINE.replace("batch_size = 10\n", "batch_size = 10\nheight = 224\n").replace(
        "torch.rand(batch_size, 3, 224, 224)", "torch.rand(batch_size, 3, height, 224)")
    sizes, problem, _ = shrink(_write(tmp_path, "eq.py", src))
    assert problem.constants()["height"] == 8 and problem.inputs()[0].shape == (2, 3, 8, 8)
    assert sizes.overrides["height"] == "8" and "get_inputs literal 224->8 (line 18)" in sizes.describe()


def test_a_classifier_tied_to_the_inline_size_falls_back_to_the_constants(tmp_path):
    f = _write(tmp_path, "vgg_like.py", TIED)
    sizes, problem, proposer = shrink(f)
    # every cap with the literals fails to trace (the Linear's width); the constants alone shrink, in the file itself
    assert [t.split(":")[0] for t in sizes.tried] == ["cap 8", "cap 16", "cap 32"]
    assert sizes.describe() == "cap 8: batch_size=2, num_classes=8" and not sizes.literals and sizes.path is None
    assert problem.path == str(f.resolve()) and problem.inputs()[0].shape == (2, 3, 64, 64)
    assert proposer.captured is not None


def test_a_model_whose_channels_cannot_shrink_shrinks_its_inputs_only(tmp_path):
    sizes, problem, _ = shrink(_write(tmp_path, "shuffle_like.py", GROUPED))
    assert sizes.inputs_only and sizes.describe() == "inputs only, cap 8: batch_size=2, height=8, width=8"
    assert problem.init_inputs() == [240, 480, 3] and problem.inputs()[0].shape == (2, 240, 8, 8)


def test_a_file_without_literals_is_loaded_as_before(tmp_path):
    src = INLINE.replace("torch.rand(batch_size, 3, 224, 224)", "torch.rand(batch_size, 3, 8, 8)")
    sizes, problem, _ = shrink(_write(tmp_path, "plain.py", src))
    assert sizes.describe() == "cap 8: batch_size=2, num_classes=8" and sizes.path is None
    assert problem.path == str((tmp_path / "plain.py").resolve())


@pytest.mark.timeout(300)
def test_the_cpu_check_runs_the_copy_under_the_files_name(tmp_path):
    root = tmp_path / "kb" / "level3"
    root.mkdir(parents=True)
    _write(root, "1_inline.py", INLINE)
    out = tmp_path / "run"
    assert main(["kernelbench", str(root.parent), "--device", "cpu", "--out", str(out), "--no-store",
                 "--skip-compile"]) == 0
    row = json.loads((out / "files" / "level3__1_inline.py.json").read_text())
    assert row["file"] == "level3/1_inline.py" and row["level"] == "level3"
    assert row["correct"] and row["generated"], row["reason"]
    assert "get_inputs literal 224->8 x2" in row["sizes"]
