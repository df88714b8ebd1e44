"""The built-in suite: every problem loads, counts at full size on meta tensors, meets the sizing rule (H200 floor
>= 0.3 ms) and runs its reference on the CPU at tiny sizes with finite outputs of the intended dtype."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils._pytree import tree_flatten

from workbench.core import ceilings
from workbench.problems import Problem, builtin_names
from workbench.problems.analysis import count, roofline_floor

MIN_FLOOR_MS = 0.3  # the sizing rule: no built-in finishes faster than this on an H200, even at the roofline
MAX_IO_BYTES = 8 * 10 ** 9  # inputs + parameters + outputs of one problem at full size

# Tiny sizes for a CPU run of the reference: every size constant of every problem, set to 4..64 (odd sizes where the
# problem allows them, so nothing relies on powers of two).
SMALL: dict[str, list[str]] = {
    "attention": ["batch_size=2", "num_heads=3", "seq_len=17", "head_dim=16"],
    "bias_gelu_residual": ["batch_size=5", "dim=33"],
    "bmm_bf16": ["batch_size=3", "M=17", "N=24", "K=40"],
    "causal_attention": ["batch_size=2", "num_heads=3", "seq_len=17", "head_dim=16"],
    "column_sum": ["batch_size=37", "dim=20"],
    "conv_net": ["batch_size=2", "in_channels=3", "height=16", "width=12", "channels1=4", "channels2=8"],
    "cross_entropy": ["batch_size=6", "num_classes=37"],
    "cumsum_rows": ["batch_size=4", "dim=45"],
    "embedding_gather": ["num_embeddings=50", "embedding_dim=24", "batch_size=3", "seq_len=7"],
    "layernorm": ["batch_size=4", "dim=33"],
    "linear_gelu": ["batch_size=16", "in_features=32", "out_features=8"],
    "linear_relu_scale": ["batch_size=9", "in_features=32", "out_features=24"],
    "linear_softmax": ["batch_size=9", "in_features=32", "out_features=24"],
    "log_softmax_rows": ["batch_size=4", "dim=33"],
    "matmul_bf16": ["M=64", "N=48", "K=80"],
    "matmul_fp16": ["M=64", "N=48", "K=80"],
    "matmul_fp32": ["M=64", "N=48", "K=80"],
    "matmul_small_k_bf16": ["M=48", "N=64", "K=8"],
    "matmul_tall_skinny_bf16": ["M=64", "N=8", "K=16"],
    "mlp": ["batch_size=5", "layer_sizes=[16, 32, 24, 8]"],
    "permute_copy_4d": ["batch_size=2", "seq_len=5", "num_heads=3", "head_dim=8"],
    "residual_layernorm": ["batch_size=4", "dim=33"],
    "rmsnorm": ["batch_size=4", "dim=33"],
    "row_argmax": ["batch_size=6", "dim=37"],
    "row_max": ["batch_size=6", "dim=37"],
    "row_sum": ["batch_size=6", "dim=37"],
    "row_var_mean": ["batch_size=6", "dim=37"],
    "scale_shift_relu": ["batch_size=4", "dim=64"],
    "silu_and_mul": ["batch_size=5", "hidden_dim=24"],
    "softmax_rows": ["batch_size=4", "dim=33"],
    "swiglu_mlp": ["batch_size=6", "dim=16", "hidden_dim=40"],
    "swish": ["batch_size=4", "dim=33"],
    "transformer_block": ["batch_size=2", "seq_len=9", "d_model=32", "num_heads=4", "d_ff=64"],
    "transpose_copy": ["rows=13", "cols=24"],
}

# The dtype of every output; problems not listed return fp32 tensors.
OUT_DTYPES: dict[str, list[torch.dtype]] = {
    "attention": [torch.float16],
    "bmm_bf16": [torch.bfloat16],
    "causal_attention": [torch.bfloat16],
    "linear_relu_scale": [torch.bfloat16],
    "matmul_bf16": [torch.bfloat16],
    "matmul_fp16": [torch.float16],
    "matmul_small_k_bf16": [torch.bfloat16],
    "matmul_tall_skinny_bf16": [torch.bfloat16],
    "permute_copy_4d": [torch.bfloat16],
    "rmsnorm": [torch.bfloat16],
    "row_argmax": [torch.int64],
    "row_var_mean": [torch.float32, torch.float32],
    "silu_and_mul": [torch.bfloat16],
    "swiglu_mlp": [torch.bfloat16],
    "transformer_block": [torch.bfloat16],
}

NAMES = builtin_names()


def tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


@pytest.fixture(scope="module")
def h200():
    c = ceilings.load("NVIDIA H200")
    assert c is not None, "results/ceilings/nvidia-h200.json is missing"
    return c


def test_suite_has_at_least_30_problems():
    assert len(NAMES) >= 30
    for name in ("scale_shift_relu", "softmax_rows", "matmul_fp32", "matmul_bf16", "linear_gelu"):
        assert name in NAMES


def test_every_problem_has_small_sizes():
    assert sorted(SMALL) == NAMES, "add tiny-size overrides for new built-ins (and drop removed ones)"
    assert set(OUT_DTYPES) <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_file_starts_with_a_description(name):
    first = Path(Problem.load(name).path).read_text().splitlines()[0]
    assert first.startswith("# ") and len(first) > 20, f"{name}: the first line must describe the problem"
    assert any(d in first for d in ("fp32", "bf16", "fp16")), f"{name}: the first line must name the dtype"


@pytest.mark.parametrize("name", NAMES)
def test_full_size_counts_and_floor(name, h200):
    p = Problem.load(name)
    c = count(p)  # meta tensors: no memory used
    assert c.min_bytes > 0 and c.eager_bytes >= c.min_bytes
    assert c.min_bytes < MAX_IO_BYTES, f"{name}: {c.min_bytes / 1e9:.2f} GB of inputs, parameters and outputs"
    f = roofline_floor(c, h200)
    assert f.ms >= MIN_FLOOR_MS, f"{name}: H200 floor {f.ms:.3f} ms < {MIN_FLOOR_MS} ms; make it bigger"


@pytest.mark.parametrize("name", NAMES)
def test_reference_runs_at_small_sizes(name):
    p = Problem.load(name, SMALL[name])
    torch.manual_seed(0)
    model = p.make_reference().eval()
    inputs = p.inputs()
    assert inputs and all(x.device.type == "cpu" for x in inputs if isinstance(x, torch.Tensor))
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            assert not bool((x == x.flatten()[0]).all()), f"{name}: constant input"
    with torch.no_grad():
        out = model(*inputs)
        again = model(*inputs)
    outs = tensors(out)
    assert [t.dtype for t in outs] == OUT_DTYPES.get(name, [torch.float32])
    for t in outs:
        assert t.numel() > 0
        if t.is_floating_point():
            assert bool(torch.isfinite(t).all()), f"{name}: non-finite output at small sizes"
    for a, b in zip(outs, tensors(again)):
        assert torch.equal(a, b), f"{name}: forward is not deterministic"
    # The overrides shrink everything: no size is hard-coded outside the module-level constants.
    elements = sum(t.numel() for t in tensors(inputs) + list(model.parameters()) + outs)
    assert elements < 2 ** 16, f"{name}: {elements} elements at small sizes; a size is not a module-level constant"


def test_small_counts_follow_overrides():
    # A few spot checks that counting at small sizes agrees with the shapes (FLOPs of the matmul-based problems).
    c = count(Problem.load("bmm_bf16", SMALL["bmm_bf16"]))
    assert c.flops == 2 * 3 * 17 * 24 * 40 and c.compute_dtype == "bf16"
    c = count(Problem.load("swiglu_mlp", SMALL["swiglu_mlp"]))
    assert c.flops == 3 * 2 * 6 * 16 * 40 and c.parameters == 3 * 16 * 40
    c = count(Problem.load("mlp", SMALL["mlp"]))
    assert c.flops == 2 * 5 * (16 * 32 + 32 * 24 + 24 * 8) and c.compute_dtype == "tf32"
    c = count(Problem.load("attention", SMALL["attention"]))
    assert c.flops == 2 * (2 * 2 * 3 * 17 * 17 * 16) and c.compute_dtype == "fp16"
    c = count(Problem.load("row_argmax", SMALL["row_argmax"]))
    assert c.outputs == [{"shape": [6], "dtype": "int64"}]
