"""Where a candidate's time goes, kernel by kernel, beside eager's (torch.profiler on one GPU; a diagnosis tool, not a
measurement the benchmark reports): for each KernelBench-format file, the offline proposer's first N candidates
(the default first) and the reference, each run a few times under the profiler, their CUDA kernels summed per name.

    python experiments/kernel_breakdown.py FILE... --n 2 --out breakdown.json
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.problems import Problem  # noqa: E402
from workbench.proposers.offline import OfflineProposer  # noqa: E402

ITERS = 3


def kernel_table(fn, iters: int = ITERS) -> dict:
    """Per kernel name: CUDA microseconds per call of `fn`, and the wall time of one call (synchronised)."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    kernels: dict[str, float] = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            kernels[ev.name] = kernels.get(ev.name, 0.0) + ev.device_time / iters
    top = sorted(kernels.items(), key=lambda kv: -kv[1])
    return {"wall_ms": round(wall_ms, 3), "gpu_ms": round(sum(kernels.values()) / 1e3, 3),
            "kernels": [[name[:120], round(us, 1)] for name, us in top[:12]]}


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"cand_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def breakdown(file: str, n: int, tmp: Path) -> dict:
    problem = Problem.load(file)
    torch.manual_seed(0)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.inputs()]
    init = problem.init_inputs()
    ref = problem.make_reference(init).cuda()
    row: dict = {"file": file, "eager": kernel_table(lambda: ref(*inputs)), "candidates": []}
    proposer = OfflineProposer(problem)
    default = proposer.default_choice()
    # the default, then the other algorithms of its groups (a library convolution, ...) and the other launch mode
    choices = [("default", default)] + proposer.algorithm_moves(default) + proposer.launch_moves(default)
    for i, (move, choice) in enumerate(choices[:n]):
        cand = proposer.render(choice)
        path = tmp / f"{Path(file).stem}_{i}.py"
        path.write_text(cand.source)
        entry = {"move": move, "choice": choice.canonical}
        try:
            model = _module(path).ModelNew(*init).cuda()
            model.load_state_dict(ref.state_dict(), strict=False)
            entry.update(kernel_table(lambda: model(*inputs)))
        except Exception as e:  # a candidate that fails here is reported, the next one runs
            entry["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        row["candidates"].append(entry)
        print(json.dumps({"file": file, **entry})[:2000], flush=True)
    print(json.dumps({"file": file, "eager": row["eager"]})[:2000], flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--n", type=int, default=2,
                    help="candidates per file: the default, then its algorithm and launch moves")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("kernel_breakdown needs a CUDA GPU", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for f in args.files:
            try:
                rows.append(breakdown(f, args.n, Path(tmp)))
            except Exception as e:
                rows.append({"file": f, "error": f"{type(e).__name__}: {str(e)[:300]}"})
                print(rows[-1], flush=True)
            Path(args.out).write_text(json.dumps(rows, indent=1))
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
