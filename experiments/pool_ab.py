"""Pooling template A/B on the GPU: the current `workbench.kernels.pool` against an earlier version of the module
(a file path), on KernelBench-sized pooling layers, the best of the wide-tile configurations of each, beside eager and
torch.compile, timed by `triton.testing.do_bench` in one process. Prints and writes one JSON line per layer.

    python experiments/pool_ab.py OLD_POOL_MODULE.py [--out pool_ab.jsonl]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.kernels import pool as NEW  # noqa: E402

HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n"
# (label, spec fields, input shape, the torch call)
LAYERS = [
    ("avg1d k8 s1 p4 (44_AvgPool1D)", dict(op="avg", rank=1, kernel=(1, 1, 8), stride=(1, 1, 1), padding=(0, 0, 4)),
     (64, 128, 65536), lambda x: F.avg_pool1d(x, 8, 1, 4)),
    ("max1d k8 s1 p4 d3", dict(op="max", rank=1, kernel=(1, 1, 8), stride=(1, 1, 1), padding=(0, 0, 4),
                               dilation=(1, 1, 3)), (64, 192, 65536), lambda x: F.max_pool1d(x, 8, 1, 4, 3)),
    ("avg2d k11 s11 (45-like)", dict(op="avg", rank=2, kernel=(1, 11, 11), stride=(1, 11, 11)),
     (16, 64, 1024, 1024), lambda x: F.avg_pool2d(x, 11, 11)),
    ("max2d k4 s2 p1 d1", dict(op="max", rank=2, kernel=(1, 4, 4), stride=(1, 2, 2), padding=(0, 1, 1)),
     (32, 64, 512, 512), lambda x: F.max_pool2d(x, 4, 2, 1)),
    ("avg3d k3 s2 p1", dict(op="avg", rank=3, kernel=(3, 3, 3), stride=(2, 2, 2), padding=(1, 1, 1)),
     (16, 32, 128, 128, 128), lambda x: F.avg_pool3d(x, 3, 2, 1)),
]


def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def launcher(fam, spec, config, tmp: Path, tag: str):
    r = fam.render(spec, config, "k")
    f = tmp / f"{tag}.py"
    f.write_text(HEADER + r.kernel_src + "\n\n" + r.launcher_src)
    return load_module(f, tag).k


def out_size(fam, shape, fields):
    rank = fields["rank"]
    ins = (1,) * (3 - rank) + tuple(shape[2:])
    k, s, p = fields["kernel"], fields["stride"], fields.get("padding", (0, 0, 0))
    d = fields.get("dilation", (1, 1, 1))
    return ins, tuple(fam.window_out_size(i, k_, s_, p_, d_, False) for i, k_, s_, p_, d_ in zip(ins, k, s, p, d))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("--out", default="pool_ab.jsonl")
    args = ap.parse_args()
    old = load_module(Path(args.old), "pool_old")
    tmp = Path(tempfile.mkdtemp())
    with open(args.out, "w") as fh:
        for label, fields, shape, ref in LAYERS:
            x = torch.rand(shape, device="cuda")
            want = ref(x)
            row = {"layer": label, "shape": shape,
                   "eager_ms": triton.testing.do_bench(lambda x=x: ref(x), warmup=50, rep=300)}
            comp = torch.compile(ref)
            comp(x)
            row["compile_ms"] = triton.testing.do_bench(lambda x=x: comp(x), warmup=50, rep=300)
            for tag, fam in (("old", old), ("new", NEW)):
                ins, outs = out_size(fam, shape, fields)
                spec = fam.PoolSpec(dtype="float32", in_size=ins, out_size=outs, **fields)
                best = None
                for i, cfg in enumerate(c for c in fam.space(spec) if fam.check(spec, c) is None
                                        and c["num_warps"] in (4, 8) and c["BLOCK_O"] in (512, 1024, 2048)
                                        and c["BLOCK_NC"] in (1, 2, 4)):  # the wide tiles a search keeps
                    fn = launcher(fam, spec, cfg, tmp, f"{tag}{len(row)}_{i}")
                    got = fn(x)
                    if not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
                        raise SystemExit(f"{label} {tag} {cfg}: wrong result")
                    ms = triton.testing.do_bench(lambda x=x, fn=fn: fn(x), warmup=25, rep=100)
                    if best is None or ms < best[0]:
                        best = (ms, cfg)
                row[f"{tag}_ms"], row[f"{tag}_config"] = best
            row["new_vs_old"] = row["old_ms"] / row["new_ms"]
            row["new_vs_compile"] = row["compile_ms"] / row["new_ms"]
            print(json.dumps(row), flush=True)
            fh.write(json.dumps(row) + "\n")
            del x, want
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
