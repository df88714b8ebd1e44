"""Measure a GPU's ceilings (copy bandwidth, matrix rates per dtype) for the roofline floor.

    python experiments/measure_ceilings.py [--out results/ceilings]

Copy: a device-to-device copy of a 2 GiB buffer, bytes read plus written, median of 20 timed copies.
Matrix rates: 8192^3 products on random data (never zeros), fp32 with tf32 off, tf32, bf16, fp16; median of 10 timed
products after warm-up. Times with CUDA events. Clocks and settings are left as found.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from workbench.core.ceilings import slug  # noqa: E402


def timed(fn, reps: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results" / "ceilings"))
    args = ap.parse_args()
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    n = 1 << 29  # 2 GiB of fp32
    src = torch.randn(n, device=dev)
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src), 20)  # noqa: F821 (called before the del below)
    copy_gbps = 2 * src.numel() * 4 / (ms / 1e3) / 1e9
    del src, dst
    tflops = {}
    size = 8192
    for label, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                               ("bf16", torch.bfloat16, False), ("fp16", torch.float16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(size, size, device=dev, dtype=dtype)
        b = torch.randn(size, size, device=dev, dtype=dtype)
        ms = timed(lambda: torch.mm(a, b), 10)  # noqa: F821 (called before the del below)
        tflops[label] = 2 * size ** 3 / (ms / 1e3) / 1e12
        del a, b
    torch.backends.cuda.matmul.allow_tf32 = False
    props = torch.cuda.get_device_properties(dev)
    out = {"device": name, "copy_gbps": copy_gbps, "tflops": tflops,
           "sm_count": props.multi_processor_count, "l2_bytes": getattr(props, "L2_cache_size", None),
           "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch.__version__, "method": "copy: 2 GiB d2d, read+write bytes, median of 20; "
                                                  "GEMM: 8192^3 random, median of 10 (cuda events)"}
    path = Path(args.out) / f"{slug(name)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
