"""The convolution family's layouts side by side on one GPU: for a few KernelBench-sized convolutions, the fastest
of a small grid of tile configurations per algorithm ("gemm", "gemm_tap": NC(D)HW gathers; "gemm_cl": channels-last
operands) against torch's own convolution under the same precision (cuDNN, tf32 allowed for "tf32" specs), every
time from triton.testing.do_bench in one process. Each kernel's result is checked against torch first.

    python experiments/conv_layout_ab.py --out results/kernelbench/conv_layout_ab.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton

from workbench.kernels import conv
from workbench.kernels.base import Epilogue, EpilogueInput

BIAS = Epilogue("acc + b", (EpilogueInput("b", "col"),))
# (name, dims, N, C_in, C_out, kernel, stride, padding, spatial shape): KernelBench development-set sizes and two
# common layers
SHAPES = [
    ("4_Conv2d_Mish_Mish", 2, 64, 64, 128, 3, 1, 0, (256, 256)),
    ("50_conv_standard_2D", 2, 256, 3, 96, 11, 4, 2, (224, 224)),
    ("resnet_3x3", 2, 32, 128, 128, 3, 1, 1, (56, 56)),
    ("67_conv_standard_1D", 1, 32, 64, 128, 3, 1, 0, (131072,)),
    ("conv3d_3x3x3", 3, 16, 32, 64, 3, 1, 1, (16, 64, 64)),
]
SMOKE = [("smoke_2d", 2, 2, 8, 16, 3, 1, 1, (6, 7)), ("smoke_1d", 1, 2, 32, 16, 3, 2, 0, (11,))]
GRID = [dict(BM=bm, BN=bn, BK=bk, GROUP_M=8, num_warps=w, num_stages=s)
        for bm, bn, bk, w, s in [(128, 128, 32, 8, 3), (128, 64, 32, 4, 3), (64, 128, 32, 4, 3), (128, 128, 16, 8, 4),
                                 (256, 128, 32, 8, 3), (64, 64, 32, 4, 4), (128, 32, 32, 4, 4), (128, 128, 64, 8, 2)]]


def load(src: str, tag: str):
    path = Path(tempfile.mkdtemp()) / f"{tag}.py"
    path.write_text("import torch\nimport triton\nimport triton.language as tl\n" + src)
    spec = importlib.util.spec_from_file_location(tag, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _wall_ms(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated shape names")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (TRITON_INTERPRET=1): the script's "
                                                         "own check, no timing worth reading")
    args = ap.parse_args()
    dev = "cpu" if args.smoke else "cuda"
    bench = (lambda fn: _wall_ms(fn)) if args.smoke else triton.testing.do_bench
    if not args.smoke and not torch.cuda.is_available():
        sys.exit("conv_layout_ab.py times kernels on a CUDA GPU; none is visible here")
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for name, dims, n, ci, co, k, st, pad, sp in (SMOKE if args.smoke else SHAPES):
        if args.only and name not in args.only.split(","):
            continue
        spec = conv.ConvSpec("float32", "float32", dims, ci, co, (1,) * (3 - dims) + (k,) * dims,
                             (1,) * (3 - dims) + (st,) * dims,
                             (0,) * (3 - dims) + (pad,) * dims, (1, 1, 1), 1, "tf32", BIAS)
        x = torch.randn(n, ci, *sp, device=dev)
        w = torch.randn(co, ci, *(k,) * dims, device=dev) / (ci * k ** dims) ** 0.5
        b = torch.randn(co, device=dev)
        f = getattr(torch.nn.functional, f"conv{dims}d")
        ref = f(x, w, b, st, pad)
        torch_ms = bench(lambda: f(x, w, b, st, pad))
        row = {"shape": name, "torch_ms": torch_ms, "algos": {}}
        for algo in ("gemm", "gemm_tap", "gemm_cl"):
            best = None
            configs = [c for c in (dict(g, ALGO=algo) for g in GRID) if conv.check(spec, c) is None]
            for cfg in configs or [c for c in [conv.algorithm_default(spec, algo)] if c]:
                r = conv.render(spec, cfg, "cv")
                try:
                    fn = load(r.kernel_src + "\n\n" + r.launcher_src, f"cv_{algo}").cv
                    err = ((fn(x, w, b) - ref).abs().max() / ref.abs().max()).item()
                    if not err < 2e-2:
                        print(name, algo, cfg, "wrong", err, flush=True)
                        continue
                    ms = bench(lambda: fn(x, w, b))
                except Exception as e:  # a config that fails to build or launch is reported, not fatal
                    print(name, algo, cfg, "error", type(e).__name__, str(e)[:200], flush=True)
                    continue
                if best is None or ms < best["ms"]:
                    best = {"ms": ms, "config": cfg, "rel_err": err}
            row["algos"][algo] = best
            if best:
                print(f"{name:22s} {algo:9s} {best['ms']:8.3f} ms  torch {torch_ms:8.3f} ms  "
                      f"x{torch_ms / best['ms']:.2f}  {best['config']}", flush=True)
        rows.append(row)
        x = ref = None  # free the layer's tensors before the next one
        if dev == "cuda":
            torch.cuda.empty_cache()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
                                          "torch": torch.__version__,
                                          "triton": triton.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
