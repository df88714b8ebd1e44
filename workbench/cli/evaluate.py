"""`workbench eval`, `propose`, `profile` and `demo`: one candidate (or the shipped examples) on a device."""
from __future__ import annotations

import json
from pathlib import Path

from ..core.candidate import Candidate
from ..devices import get_device
from ..devices.resolve import REPLAY, resolve_name
from ..examples import EXAMPLES
from ..harness.ladder import Ladder
from ..problems import Problem, ProblemError
from ..profiling import format_report, profile_candidate
from ..proposers.offline import OfflineProposer
from .common import load_problem, open_store, problem_error_text

# how a worker's stage record says the problem failed: device stages, and the compile probe's raised ProblemError
PROBLEM_ERRORS = ("problem error: ", "ProblemError: ")


def _device(args):
    """The device `--device` names, with the `--timeout STAGE=S` values of its workers."""
    timeouts = dict(getattr(args, "timeouts", None) or [])
    if timeouts and resolve_name(args.device) == REPLAY:
        raise ValueError("--timeout: the replay device answers from recordings; it has no worker timeouts")
    return get_device(args.device, **({"timeouts": timeouts} if timeouts else {}))


def _problem_error(ev, problem) -> str | None:
    """The problem's own failure, seen only once a worker ran it (for real, or the compile probe on meta tensors)."""
    last = ev.stages[-1] if ev.stages and not ev.ok else None
    for prefix in PROBLEM_ERRORS:
        if last is not None and last.reason.startswith(prefix):
            return problem_error_text(problem, last.reason[len(prefix):], last.name)
    return None


def cmd_eval(args) -> int:
    problem = load_problem(args)  # checked in its own process: a broken problem exits 2 before any candidate work
    candidate = Candidate.from_file(args.candidate)
    device = _device(args)
    try:
        ladder = Ladder(device, store=open_store(args), seeds=args.seeds)
        ev = ladder.evaluate(problem, candidate, up_to=args.up_to, force_full=True)
    finally:
        device.close()
    err = _problem_error(ev, problem)
    if err:  # the problem's fault, not the candidate's verdict
        raise ProblemError(err)
    if args.json:
        print(ev.to_json())
        return 0
    verdict = f"OK up to {ev.fidelity}" if ev.ok else f"REJECTED at {ev.stages[-1].name}"
    cached = " (cached: the store's answer, nothing re-run; --no-store to re-run)" \
        if ev.provenance.get("from_store") else ""
    print(f"{problem.name} / {Path(args.candidate).name} on {ev.device}: {verdict}{cached}")
    for s in ev.stages:
        print(f"  {s.name:13s} {s.verdict:12s} {s.cost_s:7.2f}s  {s.reason}")
        for f in s.flags:
            print(f"  {'':13s} {f.get('severity', ''):12s} {'':8s} {f.get('reason', '')}")
    return 0


def cmd_propose(args) -> int:
    problem = load_problem(args)
    proposer = OfflineProposer(problem)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    groups = proposer.groups({p: True for p in proposer.fusion_points})
    print(f"{problem.name}: {len(groups)} group(s) [{', '.join(g.family for g in groups)}], "
          f"fusion points {proposer.fusion_points or 'none'}, space size {proposer.space_size():,}")
    for i, cand in enumerate(proposer.propose(args.n, seed=args.seed)):
        origin = dict(cand.origin)
        path = cand.write(out)
        cfg = json.loads(origin["config"])
        print(f"  {path}  coverage flops {origin['coverage_flops']:.0%} bytes {origin['coverage_bytes']:.0%}  "
              f"fuse {cfg['fuse'] or '-'}  {json.dumps(cfg['configs'], sort_keys=True)}")
    return 0


def cmd_profile(args) -> int:
    """Static reading and roofline verdict always; counters and expert findings where a GPU with ncu is present."""
    name = resolve_name(args.device)
    if name not in ("cuda", "cpu") and not name.startswith("cuda:"):
        raise ValueError(f"profile runs on this machine: --device local, cuda, cuda:N or cpu, not '{args.device}'")
    report = profile_candidate(load_problem(args), args.candidate, device=args.device, ms=args.ms,
                               counters=not args.no_counters, asm_dir=args.asm_dir)
    print(json.dumps(report, default=str) if args.json else format_report(report))
    return 0


def cmd_demo(args) -> int:
    """The ladder over the shipped example candidates on this machine: what each stage says about each."""
    device = _device(args)
    print(f"device: {device.name}" + ("" if device.kind == "cuda" else
                                      " (no GPU: static, compile and interpreter correctness at small shapes; "
                                      "timing is refused, never faked)"))
    try:
        ladder = Ladder(device, store=open_store(args))
        for ex in EXAMPLES:
            problem = Problem.load(ex.problem, [] if device.kind == "cuda" else ex.cpu_overrides)
            ev = ladder.evaluate(problem, Candidate.from_file(ex.path))
            last = ev.stages[-1]
            speedup = ev.summary().get("speedup_vs_eager")
            speed = f"  {speedup:.3g}x eager" if speedup is not None else ""
            print(f"{problem.name:18s} {ex.path.name:28s} fidelity={ev.fidelity:12s}{speed}  [{last.name}: "
                  f"{last.verdict}] {last.reason}")
        print(f"GPU budget spent: {ladder.budget.gpu_spent:.2f} s")
    finally:
        device.close()
    return 0
