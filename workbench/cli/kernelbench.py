"""`workbench kernelbench DIR`: a search per KernelBench file under a per-problem GPU budget, the best candidate timed
against eager and torch.compile, KernelBench's metrics per level (the CPU device: correctness at small sizes only)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ..core import paths
from ..devices import get_device
from ..devices.resolve import AUTO, REPLAY, REPLAY_FALLBACK, resolve_name
from ..lab.kernelbench import CPU_TIMEOUTS, ProgressBar, RunConfig, discover, from_sample, run_files
from ..lab.kernelbench_report import summary_lines, write_report
from ..problems.loader import parse_override
from .common import open_store


def _levels(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x.strip().removeprefix("level")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--levels takes comma-separated level numbers such as 1,2,3, not '{text}'") from None


def _out_dir(args, device: str) -> Path:
    if args.out:
        return Path(args.out)
    name = args.run or (f"{device.replace(':', '_')}" + ("" if device == "cpu" else f"_{args.budget_gpu_s:g}gpus")
                        + f"_{time.strftime('%Y%m%d')}")
    try:
        root = paths.data_dir() / "kernelbench"
    except paths.DataNotFound:
        root = Path("results") / "kernelbench"
    return root / name


def _caps(text: str | None) -> tuple[int, ...] | None:
    """--size-caps "16,32": the caps the CPU device's small sizes try, small to large."""
    if not text:
        return None
    try:
        caps = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise ValueError(f"--size-caps {text!r}: comma-separated integers, e.g. 16,32,64") from None
    if any(c < 1 for c in caps) or list(caps) != sorted(caps):
        raise ValueError(f"--size-caps {text!r}: positive integers, small to large")
    return caps


def cmd_kernelbench(args) -> int:
    files = from_sample(args.dir, args.sample) if args.sample else discover(args.dir, _levels(args.levels), args.only)
    if args.sample and (args.levels or args.only):  # a sample narrowed further by --levels / --only
        keep = {f.resolve() for f in discover(args.dir, _levels(args.levels), args.only)}
        files = [f for f in files if f.resolve() in keep]
    if not files:
        raise ValueError(f"no KernelBench files under {args.dir} (expected level*/NAME.py or NAME.py)")
    overrides = dict(parse_override(t) for t in args.overrides)
    name = resolve_name(args.device)
    if args.device == AUTO and name == REPLAY:
        print(REPLAY_FALLBACK, file=sys.stderr)
    timeouts = dict(getattr(args, "timeouts", None) or [])
    if timeouts and name == REPLAY:
        raise ValueError("--timeout: the replay device answers from recordings; it has no worker timeouts")
    cfg = RunConfig(device="cpu" if name == "cpu" else name, budget_gpu_s=args.budget_gpu_s, strategy=args.strategy,
                    overrides=overrides, jobs=max(1, args.jobs), skip_compile=args.skip_compile,
                    timeout_s=args.file_timeout_s, timeouts=timeouts, size_caps=_caps(args.size_caps),
                    precision=args.precision)
    out = _out_dir(args, name)
    store = open_store(args)
    device = None
    if name != "cpu" or cfg.jobs == 1:  # CPU jobs > 1: each pool process opens its own
        base = CPU_TIMEOUTS if name == "cpu" else {}
        device = get_device(name, **({"timeouts": {**base, **timeouts}} if base or timeouts else {}))
    print(f"kernelbench: {len(files)} files on {device.name if device else 'cpu'} -> {out}", file=sys.stderr)
    try:
        rows = run_files(files, out, cfg, store=store, device=device, progress=ProgressBar())
    finally:
        if device is not None:
            device.close()
    run = {"name": out.name, "dir": str(args.dir), "device": device.name if device else "cpu",
           "strategy": args.strategy, "budget_gpu_s": args.budget_gpu_s, "levels": args.levels, "only": args.only,
           "sample": args.sample, "overrides": overrides, "skip_compile": args.skip_compile,
           "size_caps": _caps(args.size_caps), "precision": args.precision or "torch",
           "store": None if store is None else str(store.path) if hasattr(store, "path") else "default"}
    report = write_report(out, rows, run)
    if args.json:
        print(json.dumps(report, default=str))
    else:
        print(f"KernelBench: {len(rows)} files, timing {report['timing']}; report in {out}/report.md")
        for line in summary_lines(report):
            print(line)
    return 0
