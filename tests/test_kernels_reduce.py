"""CPU tests of the reduction and memory-movement kernel families (workbench/kernels/reduce.py, memory.py).

Every case is rendered here into a module file (the usual header imports + kernel_src + launcher_src) and run
under the Triton interpreter on CPU tensors in worker subprocesses: TRITON_INTERPRET must be set before triton is
imported, which this process may already have done without it. The cases are split over a few workers started
together (one per core, at most four) so the whole file stays fast; each test then looks up its cases' results.

Configs per spec: the default, the first and last valid config of `space` and three more drawn with a fixed seed;
outputs are compared with torch in float64: relative error norm < 1e-5 (fp32 inputs) or 1e-2 (16-bit), exact for
argmax, permute and gather; nan / inf positions must agree.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from workbench.kernels import memory as M
from workbench.kernels import reduce as R
from workbench.kernels.base import Epilogue, EpilogueInput, valid_space

HEADER = "import torch\nimport triton\nimport triton.language as tl\n\n"
SEED = 1234
WIDTHS = (1, 7, 100, 1000)

# ----------------------------------------------------------------------------------------------- worker script

RUNNER = r'''
import importlib.util, json, math, os, sys, time, traceback, warnings
if (sys.argv[3] if len(sys.argv) > 3 else "cpu") == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
import numpy as np
np.seterr(all="ignore")
warnings.filterwarnings("ignore")
import torch
import torch.nn.functional as F
torch.set_num_threads(1)

DT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64,
      "int64": torch.int64, "int32": torch.int32}


def load(path, fn):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, fn)


def rel_err(out, ref):
    if tuple(out.shape) != tuple(ref.shape):
        return math.inf, f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    out, ref = out.double(), ref.double()
    if not torch.equal(out.isnan(), ref.isnan()):
        return math.inf, "nan positions differ"
    inf = ref.isinf()
    if not torch.equal(out.isinf(), inf) or not torch.equal(out[inf], ref[inf]):
        return math.inf, "inf positions differ"
    fin = torch.isfinite(ref)
    d, n = (out[fin] - ref[fin]).norm().item(), ref[fin].norm().item()
    return (d / n if n > 0 else d), ""


def tol(dtype):
    return 1e-5 if dtype == "float32" else 1e-2


def dev(args):
    return [a.to(DEVICE) if torch.is_tensor(a) else a for a in args]


def run_row(case, f, g):
    s = case["spec"]
    op, n, dt = s["op"], s["n_cols"], DT[s["dtype"]]
    shape = tuple(case["shape"])
    if case.get("ties"):
        x = torch.randint(-4, 5, shape, generator=g).float()
    else:
        x = torch.randn(shape, generator=g) * 2
    if case.get("neginf"):
        x2 = x.view(-1, n)
        x2[0] = -math.inf
        x2[1, ::2] = -math.inf
    x = x.to(dt)
    args = [x]
    if op == "cross_entropy":
        rows = x.shape[0]
        t = torch.randint(0, n, (rows,), generator=g)
        if s["ignore_index"] is not None:
            t[::3] = s["ignore_index"]
        args.append(t)
    w = b = None
    if s["has_weight"]:
        w = torch.randn(n, generator=g).to(dt)
        args.append(w)
    if s["has_bias"]:
        b = torch.randn(n, generator=g).to(dt)
        args.append(b)
    exact = op == "argmax"
    ref_dtype = torch.float32 if exact else torch.float64  # argmax: ties as the kernel sees them (fp32 math)
    ref_x = x.to(ref_dtype)
    pro = s["prologue"]
    if pro is not None:
        env = {"acc": ref_x}
        for i, inp in enumerate(pro["inputs"]):
            if inp["kind"] == "full":
                v = torch.randn(shape, generator=g).to(dt)
            elif inp["kind"] == "col":
                v = torch.randn(n, generator=g).to(dt)
            elif inp["kind"] == "row":
                v = torch.randn(shape[:-1], generator=g).to(dt)
            else:
                v = 0.75 if i % 2 == 0 else torch.tensor([1.5], dtype=dt)  # a Python number or a 1-element tensor
            args.append(v)
            ref_v = v.to(ref_dtype) if torch.is_tensor(v) else v
            env[inp["name"]] = ref_v[..., None] if inp["kind"] == "row" else ref_v
        ref_x = eval(pro["expr"], {}, env)
    out = f(*dev(args))
    out = torch.stack([o.cpu() for o in out]) if isinstance(out, tuple) else out.cpu()  # var_mean: (var, mean)
    wd = None if w is None else w.double()
    bd = None if b is None else b.double()
    if op == "softmax":
        ref, want = torch.softmax(ref_x, -1), dt
    elif op == "log_softmax":
        ref, want = torch.log_softmax(ref_x, -1), dt
    elif op == "logsumexp":
        ref, want = torch.logsumexp(ref_x, -1), dt
    elif op == "layernorm":
        ref, want = F.layer_norm(ref_x, (n,), wd, bd, s["eps"]), dt
    elif op == "rmsnorm":
        ref, want = F.rms_norm(ref_x, (n,), wd, s["eps"]), dt
    elif op == "sum":
        ref, want = ref_x.sum(-1), dt
    elif op == "mean":
        ref, want = ref_x.mean(-1), dt
    elif op == "max":
        ref, want = ref_x.amax(-1), dt
    elif op == "var":
        ref, want = torch.var(ref_x, -1, correction=s["correction"]), dt
    elif op == "var_mean":
        ref, want = torch.stack(torch.var_mean(ref_x, -1, correction=s["correction"], keepdim=s["keepdim"])), dt
    elif op == "argmax":
        ref, want = torch.argmax(ref_x, -1), torch.int64
    elif op == "cross_entropy":
        ii = -100 if s["ignore_index"] is None else s["ignore_index"]
        ref = F.cross_entropy(ref_x, args[1], reduction=s["reduction"], ignore_index=ii)
        want = torch.float32
    else:
        raise ValueError(op)
    if out.dtype != want:
        return False, math.inf, f"dtype {out.dtype} != {want}"
    if exact:
        ok = tuple(out.shape) == tuple(ref.shape) and torch.equal(out, ref)
        return ok, 0.0 if ok else math.inf, "" if ok else "argmax differs"
    err, msg = rel_err(out, ref)
    return err < tol(s["dtype"]), err, msg


def run_col(case, f, g):
    s = case["spec"]
    dt = DT[s["dtype"]]
    shape = (s["n_rows"], s["n_cols"])
    if case.get("transposed"):
        x = (torch.randn(shape[::-1], generator=g) * 2).to(dt).t()
    else:
        x = (torch.randn(shape, generator=g) * 2).to(dt)
    out = f(*dev([x])).cpu()
    xd = x.double()
    ref = {"sum": lambda: xd.sum(0), "mean": lambda: xd.mean(0), "max": lambda: xd.amax(0)}[s["op"]]()
    if out.dtype != dt:
        return False, math.inf, f"dtype {out.dtype}"
    err, msg = rel_err(out, ref)
    return err < tol(s["dtype"]), err, msg


def run_scan(case, f, g):
    s = case["spec"]
    dt = DT[s["dtype"]]
    x = torch.randn(tuple(case["shape"]), generator=g).to(dt)
    out = f(*dev([x])).cpu()
    if out.dtype != dt:
        return False, math.inf, f"dtype {out.dtype}"
    err, msg = rel_err(out, x.double().cumsum(-1))
    return err < tol(s["dtype"]), err, msg


def run_permute(case, f, g):
    s = case["spec"]
    dt = DT[s["dtype"]]
    shape = tuple(s["shape"])
    if dt.is_floating_point:
        x = torch.randn(shape, generator=g).to(dt)
    else:
        x = torch.randint(-10**6, 10**6, shape, generator=g).to(dt)
    out = f(*dev([x])).cpu()
    ref = x.permute(tuple(s["perm"])).contiguous()
    ok = out.dtype == dt and out.is_contiguous() and tuple(out.shape) == tuple(ref.shape) and torch.equal(out, ref)
    return ok, 0.0 if ok else math.inf, "" if ok else "permute differs"


def run_gather(case, f, g):
    s = case["spec"]
    w = torch.randn(s["num_embeddings"], s["dim"], generator=g).to(DT[s["dtype"]])
    idx = torch.randint(0, s["num_embeddings"], tuple(case["idx_shape"]), generator=g).to(DT[s["index_dtype"]])
    out = f(*dev([idx, w])).cpu()
    ref = F.embedding(idx.long(), w)
    ok = out.dtype == w.dtype and tuple(out.shape) == tuple(ref.shape) and torch.equal(out, ref)
    return ok, 0.0 if ok else math.inf, "" if ok else "gather differs"


DEVICE = sys.argv[3] if len(sys.argv) > 3 else "cpu"
RUN = {"row": run_row, "col": run_col, "scan": run_scan, "permute": run_permute, "gather": run_gather}
cases = json.load(open(sys.argv[1]))
results = {}
for case in cases:
    g = torch.Generator().manual_seed(case["seed"])
    t0 = time.perf_counter()
    try:
        ok, err, msg = RUN[case["family"]](case, load(case["path"], case["fn"]), g)
    except Exception:
        ok, err, msg = False, math.inf, traceback.format_exc(limit=4)[-2000:]
    results[case["id"]] = {"ok": bool(ok), "err": float(err) if math.isfinite(err) else None, "msg": msg,
                           "seconds": time.perf_counter() - t0}
json.dump(results, open(sys.argv[2], "w"))
'''


# -------------------------------------------------------------------------------------------------------- cases

def _key(config: dict) -> tuple:
    return tuple(sorted(config.items()))


def pick_configs(family, spec, n_random: int = 3, seed: int = SEED) -> list[dict]:
    """The default, the first and last valid config in `space`, and `n_random` more drawn with a fixed seed."""
    valid = valid_space(family, spec)
    assert valid, f"no valid config for {spec}"
    picked = [family.default(spec), valid[0], valid[-1]]
    picked += random.Random(f"{seed}-{spec}").sample(valid, min(n_random, len(valid)))
    out, seen = [], set()
    for c in picked:
        if _key(c) not in seen:
            seen.add(_key(c))
            out.append(c)
    return out


def _spec_json(spec) -> dict:
    return json.loads(json.dumps(dataclasses.asdict(spec)))


@dataclasses.dataclass
class Case:
    group: str  # the test that owns it
    family: str  # runner kind
    spec: object
    config: dict
    extra: dict


def _row_cases() -> list[Case]:
    cases = []
    fam = R.ROW_REDUCE

    def add(group, spec, configs, shape, **extra):
        for c in configs:
            cases.append(Case(group, "row", spec, c, {"shape": shape, **extra}))

    for op in R.ROW_OPS:
        ties = op in ("argmax", "max")  # small integers: many ties, first index must win
        variants = [{}]
        if op in ("layernorm",):
            variants = [{"has_weight": True, "has_bias": True}, {}]
        elif op == "rmsnorm":
            variants = [{"has_weight": True}, {}]
        elif op == "var":
            variants = [{"correction": 1}, {"correction": 0}]
        elif op == "var_mean":
            variants = [{"correction": 1}, {"correction": 0, "keepdim": True}]
        elif op == "cross_entropy":
            variants = [{}, {"reduction": "mean"}, {"reduction": "mean", "ignore_index": -100}]
        for vi, var in enumerate(variants):
            for n in WIDTHS:
                shape = [6, n] if op == "cross_entropy" else [2, 3, n]
                spec = R.RowSpec(op, n, "float32", **var)
                configs = pick_configs(fam, spec) if vi == 0 else pick_configs(fam, spec, n_random=1)
                add(op, spec, configs, shape, ties=ties)
            for dtype in ("bfloat16", "float16"):
                for n in (7, 1000):
                    shape = [6, n] if op == "cross_entropy" else [2, 3, n]
                    spec = R.RowSpec(op, n, dtype, **var)
                    add(op, spec, pick_configs(fam, spec, n_random=1), shape, ties=ties)
        if op in ("softmax", "log_softmax", "logsumexp", "cross_entropy"):  # -inf entries and a whole -inf row
            for n in (7, 1000):
                spec = R.RowSpec(op, n, "float32")
                shape = [6, n] if op == "cross_entropy" else [2, 3, n]
                if op != "cross_entropy":
                    add(op, spec, pick_configs(fam, spec, n_random=1), shape, neginf=True)
    # wider rows: several chunks for the loop strategy
    for op in ("softmax", "log_softmax", "layernorm", "rmsnorm", "var", "var_mean", "argmax", "cross_entropy", "sum",
               "max"):
        spec = R.RowSpec(op, 3000, "float32", has_weight=op in ("layernorm", "rmsnorm"), has_bias=op == "layernorm")
        loop = [c for c in valid_space(fam, spec) if c["strategy"] == "loop"]
        configs = [loop[0], loop[-1]] + random.Random(SEED).sample(loop, 2)
        add(op, spec, configs, [3, 3000] if op == "cross_entropy" else [1, 3, 3000], ties=op == "argmax")
    # prologues: softmax(x * scale + y), layernorm(x + c), sum(x * r), cross_entropy(x * scale), rmsnorm(x * s + t)
    prologues = {
        "softmax": Epilogue("acc * scale + y", (EpilogueInput("scale", "scalar"), EpilogueInput("y", "full"))),
        "layernorm": Epilogue("acc + c", (EpilogueInput("c", "col"),)),
        "sum": Epilogue("acc * r", (EpilogueInput("r", "row"),)),
        "cross_entropy": Epilogue("acc * scale", (EpilogueInput("scale", "scalar"),)),
        "rmsnorm": Epilogue("acc * s + t", (EpilogueInput("s", "scalar"), EpilogueInput("t", "scalar"))),
        "logsumexp": Epilogue("acc - c * 0.5", (EpilogueInput("c", "col"),)),
    }
    for op, pro in prologues.items():
        for n, dtype in ((7, "float32"), (1000, "float32"), (100, "bfloat16")):
            spec = R.RowSpec(op, n, dtype, has_weight=op == "layernorm", prologue=pro)
            add(op, spec, pick_configs(fam, spec, n_random=1), [6, n] if op == "cross_entropy" else [2, 3, n])
    return cases


def _col_cases() -> list[Case]:
    cases = []
    for op in R.COL_OPS:
        for (rows, cols), transposed in (((1, 7), False), ((7, 1), False), ((100, 7), False), ((37, 100), True),
                                         ((130, 33), False)):
            spec = R.ColSpec(op, rows, cols, "float32")
            for c in pick_configs(R.COL_REDUCE, spec):
                cases.append(Case(f"col_{op}", "col", spec, c, {"transposed": transposed}))
        for dtype in ("bfloat16", "float16"):
            spec = R.ColSpec(op, 130, 33, dtype)
            split = [c for c in valid_space(R.COL_REDUCE, spec) if c["SPLIT_M"] > 1]
            for c in pick_configs(R.COL_REDUCE, spec, n_random=1) + split[-1:]:
                cases.append(Case(f"col_{op}", "col", spec, c, {}))
    return cases


def _scan_cases() -> list[Case]:
    cases = []
    for n in WIDTHS + (3000,):
        spec = R.ScanSpec("cumsum", n, "float32")
        for c in pick_configs(R.SCAN, spec):
            cases.append(Case("scan", "scan", spec, c, {"shape": [2, 3, n]}))
    for dtype in ("bfloat16", "float16"):
        spec = R.ScanSpec("cumsum", 1000, dtype)
        for c in pick_configs(R.SCAN, spec, n_random=1):
            cases.append(Case("scan", "scan", spec, c, {"shape": [5, 1000]}))
    return cases


FULL_PERMS = {(3, 70): [(1, 0)], (2, 3, 17): [(0, 2, 1), (2, 0, 1)], (3, 4, 5, 6): [(0, 2, 3, 1), (0, 2, 1, 3),
                                                                                   (3, 1, 0, 2), (0, 1, 2, 3)]}


def _permute_cases() -> list[Case]:
    cases = []
    for shape in ((5,), (3, 70), (1, 40), (2, 3, 17), (2, 1, 5, 33), (3, 4, 5, 6)):
        perms = list(itertools.permutations(range(len(shape))))
        if shape == (2, 1, 5, 33):
            perms = perms[::4]  # size-1 axis dropped: a sample
        for perm in perms:
            spec = M.PermuteSpec(shape, perm, "float32")
            full = perm in FULL_PERMS.get(shape, [])
            configs = pick_configs(M.PERMUTE, spec) if full else [M.PERMUTE.default(spec)]
            for c in configs:
                cases.append(Case("permute", "permute", spec, c, {}))
    for dtype in ("bfloat16", "float16", "int64", "int32"):
        for shape, perm in (((3, 70), (1, 0)), ((2, 5, 40), (1, 0, 2)), ((2, 3, 4, 33), (0, 3, 1, 2))):
            spec = M.PermuteSpec(shape, perm, dtype)
            for c in pick_configs(M.PERMUTE, spec, n_random=1):
                cases.append(Case("permute", "permute", spec, c, {}))
    return cases


def _gather_cases() -> list[Case]:
    cases = []
    for dim in (1, 7, 100, 300):
        for dtype, index_dtype in (("float32", "int64"), ("bfloat16", "int32")):
            spec = M.GatherSpec(50, dim, dtype, index_dtype)
            n_random = 3 if dtype == "float32" else 1
            for c in pick_configs(M.GATHER, spec, n_random=n_random):
                cases.append(Case("gather", "gather", spec, c, {"idx_shape": [3, 5]}))
    spec = M.GatherSpec(1000, 64, "float16")
    for c in pick_configs(M.GATHER, spec, n_random=1):
        cases.append(Case("gather", "gather", spec, c, {"idx_shape": [40]}))
    return cases


FAMILY_OF = {"row": R.ROW_REDUCE, "col": R.COL_REDUCE, "scan": R.SCAN, "permute": M.PERMUTE, "gather": M.GATHER}


def all_cases() -> list[Case]:
    return _row_cases() + _col_cases() + _scan_cases() + _permute_cases() + _gather_cases()


def run_cases(root: Path, cases: list[Case], device: str = "cpu", workers: int = 2,
              timeout: float = 280) -> dict[str, list[tuple[str, dict]]]:
    """Render `cases` into module files under `root` and run them in `workers` parallel subprocesses on `device`
    ("cpu": the Triton interpreter); returns {group: [(case id, result)]}."""
    manifest = []
    for i, case in enumerate(cases):
        fn = f"k{i}"
        rendered = FAMILY_OF[case.family].render(case.spec, case.config, fn)
        path = root / f"{fn}.py"
        path.write_text(HEADER + rendered.kernel_src + "\n\n" + rendered.launcher_src)
        manifest.append({"id": f"{i}:{case.group}:{case.spec}:{case.config}", "family": case.family,
                         "path": str(path), "fn": fn, "spec": _spec_json(case.spec), "seed": i, **case.extra})
    runner = root / "runner.py"
    runner.write_text(RUNNER)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    procs = []
    for w in range(workers):
        part = manifest[w::workers]
        mpath, opath = root / f"manifest{w}.json", root / f"out{w}.json"
        mpath.write_text(json.dumps(part))
        procs.append((subprocess.Popen([sys.executable, str(runner), str(mpath), str(opath), device], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), opath))
    merged = {}
    for proc, opath in procs:
        output, _ = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, output[-4000:]
        merged.update(json.loads(Path(opath).read_text()))
    by_group = defaultdict(list)
    for entry, case in zip(manifest, cases):
        by_group[case.group].append((entry["id"], merged[entry["id"]]))
    return by_group


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Every case, run under the interpreter in parallel workers (one per core, at most four)."""
    root = tmp_path_factory.mktemp("kernels_reduce")
    return run_cases(root, all_cases(), "cpu", workers=max(1, min(4, os.cpu_count() or 1)))


def _assert_group(results, group):
    entries = results[group]
    assert entries, f"no cases for {group}"
    failed = [(cid, r) for cid, r in entries if not r["ok"]]
    assert not failed, f"{len(failed)}/{len(entries)} failed:\n" + "\n".join(
        f"{cid}: err={r['err']} {r['msg']}" for cid, r in failed[:10])


@pytest.mark.parametrize("op", R.ROW_OPS)
def test_row_op(results, op):
    _assert_group(results, op)


@pytest.mark.parametrize("op", R.COL_OPS)
def test_col_op(results, op):
    _assert_group(results, f"col_{op}")


@pytest.mark.parametrize("group", ["scan", "permute", "gather"])
def test_scan_and_memory(results, group):
    _assert_group(results, group)


# ---------------------------------------------------------------------------------------- space, check, default

def _specs():
    return [
        (R.ROW_REDUCE, R.RowSpec("softmax", 1000, "float32")),
        (R.ROW_REDUCE, R.RowSpec("layernorm", 4096, "bfloat16", has_weight=True, has_bias=True)),
        (R.ROW_REDUCE, R.RowSpec("argmax", 7, "float16")),
        (R.ROW_REDUCE, R.RowSpec("cross_entropy", 50257, "bfloat16", reduction="mean")),
        (R.COL_REDUCE, R.ColSpec("sum", 4096, 1024, "float32")),
        (R.COL_REDUCE, R.ColSpec("max", 3, 5, "bfloat16")),
        (R.SCAN, R.ScanSpec("cumsum", 1000, "float32")),
        (R.SCAN, R.ScanSpec("cumsum", 65536, "float32")),
        (M.PERMUTE, M.PermuteSpec((8, 64, 32, 32), (0, 2, 3, 1), "bfloat16")),
        (M.PERMUTE, M.PermuteSpec((2, 128, 16, 64), (0, 2, 1, 3), "bfloat16")),
        (M.PERMUTE, M.PermuteSpec((4096,), (0,), "float32")),
        (M.GATHER, M.GatherSpec(50257, 768, "bfloat16")),
        (M.GATHER, M.GatherSpec(10, 3, "float32", "int32")),
    ]


@pytest.mark.parametrize("family,spec", _specs())
def test_space_deterministic_and_default_valid(family, spec):
    first = family.space(spec)
    assert first == family.space(spec) == type(family)().space(spec)
    assert len({_key(c) for c in first}) == len(first), "duplicate configs"
    assert [family.check(spec, c) for c in first] == [family.check(spec, c) for c in family.space(spec)]
    default = family.default(spec)
    assert family.check(spec, default) is None
    assert _key(default) in {_key(c) for c in first}
    valid = valid_space(family, spec)
    assert valid and pick_configs(family, spec) == pick_configs(family, spec)
    r1, r2 = family.render(spec, default, "fn"), family.render(spec, default, "fn")
    assert r1 == r2 and "def fn(" in r1.launcher_src and "def fn_" in r1.kernel_src


def _row(**kw):
    base = {"strategy": "single", "BLOCK": 1024, "ROWS_PER_PROGRAM": 1, "num_warps": 4, "num_stages": 1}
    return {**base, **kw}


def test_row_check_rejects():
    fam = R.ROW_REDUCE
    s1000 = R.RowSpec("softmax", 1000, "float32")
    assert fam.check(s1000, _row()) is None
    assert "BLOCK" in fam.check(s1000, _row(BLOCK=512))  # single must cover the row
    # single too wide for registers: 32768 fp32, but 16-bit is fine up to 32768
    assert "loop" in fam.check(R.RowSpec("softmax", 20000, "float32"), _row(BLOCK=32768, num_warps=32))
    assert fam.check(R.RowSpec("softmax", 20000, "bfloat16"), _row(BLOCK=32768, num_warps=32)) is None
    assert fam.check(R.RowSpec("softmax", 40000, "bfloat16"), _row(BLOCK=65536, num_warps=32)) is not None
    # register budget: 16384 fp32 over 1 warp = 512 elements a thread
    assert "registers" in fam.check(R.RowSpec("sum", 16384, "float32"), _row(BLOCK=16384, num_warps=1))
    # 128 a thread fits for softmax, not for layernorm (more tiles alive); 16 warps halve the budget
    assert fam.check(R.RowSpec("softmax", 16384, "float32"), _row(BLOCK=16384, num_warps=4)) is None
    assert "registers" in fam.check(R.RowSpec("layernorm", 16384, "float32"), _row(BLOCK=16384, num_warps=4))
    assert fam.check(R.RowSpec("layernorm", 16384, "float32"), _row(BLOCK=16384, num_warps=8)) is None
    assert fam.check(R.RowSpec("softmax", 32768, "bfloat16"), _row(BLOCK=32768, num_warps=16)) is None
    assert "registers" in fam.check(R.RowSpec("layernorm", 32768, "bfloat16"), _row(BLOCK=32768, num_warps=16))
    # idle threads: 32 warps for an 8-element row
    assert "idle" in fam.check(R.RowSpec("sum", 7, "float32"), _row(BLOCK=8, num_warps=32))
    assert fam.check(R.RowSpec("sum", 7, "float32"), _row(BLOCK=8, num_warps=1)) is None
    # multi-row tiles are capped; loop takes one row per program and must not cover the row
    assert fam.check(R.RowSpec("sum", 1000, "float32"), _row(ROWS_PER_PROGRAM=32, num_warps=16)) is not None
    loop = _row(strategy="loop", BLOCK=256, num_stages=2)
    assert fam.check(s1000, loop) is None
    assert fam.check(s1000, {**loop, "ROWS_PER_PROGRAM": 2}) is not None
    assert "single" in fam.check(s1000, {**loop, "BLOCK": 1024})
    assert fam.check(s1000, {**loop, "strategy": "persistent"}) is not None
    # spec problems
    assert fam.check(R.RowSpec("median", 1000, "float32"), _row()) is not None
    assert fam.check(R.RowSpec("softmax", 1000, "int32"), _row()) is not None
    assert fam.check(R.RowSpec("softmax", 1000, "float32", has_weight=True), _row()) is not None
    assert fam.check(R.RowSpec("rmsnorm", 1000, "float32", has_bias=True), _row()) is not None
    assert fam.check(R.RowSpec("sum", 1000, "float32", reduction="mean"), _row()) is not None
    bad = Epilogue("acc + y", (EpilogueInput("y", "diagonal"),))
    assert fam.check(R.RowSpec("softmax", 1000, "float32", prologue=bad), _row()) is not None
    clash = Epilogue("acc + acc", (EpilogueInput("acc", "full"),))
    assert fam.check(R.RowSpec("softmax", 1000, "float32", prologue=clash), _row()) is not None
    with pytest.raises(ValueError):
        fam.render(s1000, _row(BLOCK=512), "fn")
    # every op has both strategies for a wide row, only single for a narrow one
    for op in R.ROW_OPS:
        strategies = {c["strategy"] for c in valid_space(fam, R.RowSpec(op, 5000, "float32"))}
        assert strategies == {"single", "loop"}, op
        assert {c["strategy"] for c in valid_space(fam, R.RowSpec(op, 100, "float32"))} == {"single"}
    assert {c["strategy"] for c in valid_space(fam, R.RowSpec("softmax", 50000, "float32"))} == {"loop"}


def test_col_scan_memory_check_rejects():
    col = R.COL_REDUCE
    spec = R.ColSpec("sum", 100, 7, "float32")
    ok = {"BLOCK_N": 16, "BLOCK_M": 16, "SPLIT_M": 2, "num_warps": 1}
    assert col.check(spec, ok) is None
    assert "BLOCK_N" in col.check(spec, {**ok, "BLOCK_N": 64})  # wider than the 7 columns
    assert "SPLIT_M" in col.check(spec, {**ok, "SPLIT_M": 16})  # 16 splits of 7 row blocks
    assert "idle" in col.check(spec, {**ok, "num_warps": 8, "BLOCK_M": 4})
    assert "registers" in col.check(R.ColSpec("sum", 4096, 4096, "float32"),
                                    {"BLOCK_N": 512, "BLOCK_M": 128, "SPLIT_M": 1, "num_warps": 1})
    assert col.check(R.ColSpec("min", 100, 7, "float32"), ok) is not None

    scan = R.SCAN
    assert scan.check(R.ScanSpec("cumprod", 100, "float32"), R.SCAN.default(R.ScanSpec("cumsum", 100))) is not None
    assert scan.check(R.ScanSpec("cumsum", 100, "float32"), _row(BLOCK=128)) is None
    assert scan.check(R.ScanSpec("cumsum", 100, "float32"), _row(BLOCK=64)) is not None

    perm = M.PERMUTE
    assert perm.check(M.PermuteSpec((3, 4), (0, 0), "float32"), {"BLOCK_A": 16, "BLOCK_B": 16, "num_warps": 1})
    assert perm.check(M.PermuteSpec((2, 2, 2, 2, 2), (4, 3, 2, 1, 0), "float32"),
                      {"BLOCK_A": 16, "BLOCK_B": 16, "num_warps": 1})
    t = M.PermuteSpec((3, 70), (1, 0), "float32")
    assert perm.plan(t).kind == "transpose"
    assert perm.check(t, {"BLOCK_A": 128, "BLOCK_B": 16, "num_warps": 1}) is None
    assert perm.check(t, {"BLOCK_A": 128, "BLOCK_B": 32, "num_warps": 1}) is not None  # B has 3 elements
    assert perm.check(t, {"BLOCK_A": 16, "BLOCK_B": 16, "num_warps": 8}) is None
    c = M.PermuteSpec((2, 3, 64), (1, 0, 2), "float32")
    assert perm.plan(c).kind == "copy"
    assert perm.check(c, {"BLOCK_A": 4, "BLOCK_B": 64, "num_warps": 4}) is None
    assert perm.check(c, {"BLOCK_A": 8, "BLOCK_B": 64, "num_warps": 4}) is None  # 6 rows in one tile
    assert perm.check(c, {"BLOCK_A": 16, "BLOCK_B": 64, "num_warps": 4}) is not None  # 6 rows
    assert perm.check(c, {"BLOCK_A": 4, "BLOCK_B": 128, "num_warps": 4}) is not None  # 64 columns
    assert "idle" in perm.check(c, {"BLOCK_A": 1, "BLOCK_B": 16, "num_warps": 4})
    # NCHW -> NHWC merges H and W; size-1 axes drop out
    assert perm.plan(M.PermuteSpec((8, 64, 32, 32), (0, 2, 3, 1), "float32")).perm == (0, 2, 1)
    assert perm.plan(M.PermuteSpec((2, 1, 5, 33), (1, 0, 2, 3), "float32")).kind == "copy"

    gather = M.GATHER
    g = M.GatherSpec(10, 100, "float32")
    assert gather.check(g, {"BLOCK_D": 128, "ROWS_PER_PROGRAM": 4, "num_warps": 4}) is None
    assert gather.check(g, {"BLOCK_D": 256, "ROWS_PER_PROGRAM": 4, "num_warps": 4}) is not None
    assert gather.check(M.GatherSpec(10, 100, "float32", "int16"),
                        {"BLOCK_D": 128, "ROWS_PER_PROGRAM": 4, "num_warps": 4}) is not None
    assert gather.check(M.GatherSpec(10, 4096, "float32"),
                        {"BLOCK_D": 4096, "ROWS_PER_PROGRAM": 32, "num_warps": 1}) is not None


def test_space_sizes():
    """Guard against accidental blow-ups or collapses of the spaces for typical specs."""
    sizes = {
        "row softmax 4096 bf16": (R.ROW_REDUCE, R.RowSpec("softmax", 4096, "bfloat16")),
        "col sum 4096x1024": (R.COL_REDUCE, R.ColSpec("sum", 4096, 1024, "float32")),
        "scan 1000": (R.SCAN, R.ScanSpec("cumsum", 1000)),
        "permute NCHW->NHWC": (M.PERMUTE, M.PermuteSpec((8, 64, 32, 32), (0, 2, 3, 1), "bfloat16")),
        "gather 50257x768": (M.GATHER, M.GatherSpec(50257, 768, "bfloat16")),
    }
    for label, (family, spec) in sizes.items():
        n_all, n_valid = len(family.space(spec)), len(valid_space(family, spec))
        assert 10 <= n_valid <= n_all <= 2000, (label, n_all, n_valid)


# ------------------------------------------------------------------------------------------------------------ GPU

def _gpu_subset(cases: list[Case], per_spec: int = 3) -> list[Case]:
    """The first `per_spec` configs of each spec: its default, first and last valid config (a loop one where valid)."""
    count: dict = defaultdict(int)
    out = []
    for case in cases:
        key = (case.group, case.spec, json.dumps(case.extra, sort_keys=True))
        if count[key] < per_spec:
            count[key] += 1
            out.append(case)
    return out


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_families_on_gpu(tmp_path, gpu_to_itself):
    """The same comparisons compiled for the GPU (three configs per spec), where a CUDA GPU is visible."""
    from workbench.devices import cuda_gpu_count

    if cuda_gpu_count() == 0:
        pytest.skip("needs a CUDA GPU (run on the H200)")
    by_group = run_cases(tmp_path, _gpu_subset(all_cases()), "cuda", workers=max(1, min(8, os.cpu_count() or 1)),
                         timeout=540)
    for group in by_group:
        _assert_group(by_group, group)


def _bench_specs():
    """(label, family, spec, inputs(torch, device), torch reference, bytes moved) for the default configs."""
    import torch
    import torch.nn.functional as F

    bf = torch.bfloat16
    ln_pro = Epilogue("acc * scale + y", (EpilogueInput("scale", "scalar"), EpilogueInput("y", "full")))
    return [
        ("softmax 8192x4096 bf16", R.ROW_REDUCE, R.RowSpec("softmax", 4096, "bfloat16"),
         lambda d: [torch.randn(8192, 4096, dtype=bf, device=d)], lambda x: torch.softmax(x, -1), 2 * 2 * 8192 * 4096),
        ("softmax(x*s+y) 8192x4096 bf16", R.ROW_REDUCE, R.RowSpec("softmax", 4096, "bfloat16", prologue=ln_pro),
         lambda d: [torch.randn(8192, 4096, dtype=bf, device=d), 0.5, torch.randn(8192, 4096, dtype=bf, device=d)],
         lambda x, s, y: torch.softmax(x * s + y, -1), 3 * 2 * 8192 * 4096),
        ("layernorm 8192x4096 bf16", R.ROW_REDUCE, R.RowSpec("layernorm", 4096, "bfloat16", has_weight=True,
                                                             has_bias=True),
         lambda d: [torch.randn(8192, 4096, dtype=bf, device=d), torch.randn(4096, dtype=bf, device=d),
                    torch.randn(4096, dtype=bf, device=d)],
         lambda x, w, b: F.layer_norm(x, (4096,), w, b), 2 * 2 * 8192 * 4096),
        ("rmsnorm 8192x8192 bf16", R.ROW_REDUCE, R.RowSpec("rmsnorm", 8192, "bfloat16", has_weight=True),
         lambda d: [torch.randn(8192, 8192, dtype=bf, device=d), torch.randn(8192, dtype=bf, device=d)],
         lambda x, w: F.rms_norm(x, (8192,), w, 1e-5), 2 * 2 * 8192 * 8192),
        ("softmax 1024x65536 fp32 (loop)", R.ROW_REDUCE, R.RowSpec("softmax", 65536, "float32"),
         lambda d: [torch.randn(1024, 65536, device=d)], lambda x: torch.softmax(x, -1), 2 * 4 * 1024 * 65536),
        ("cross_entropy 8192x50257 bf16", R.ROW_REDUCE, R.RowSpec("cross_entropy", 50257, "bfloat16"),
         lambda d: [torch.randn(8192, 50257, dtype=bf, device=d), torch.randint(0, 50257, (8192,), device=d)],
         lambda x, t: F.cross_entropy(x.float(), t, reduction="none"), 2 * 8192 * 50257),
        ("sum rows 16384x1024 fp32", R.ROW_REDUCE, R.RowSpec("sum", 1024, "float32"),
         lambda d: [torch.randn(16384, 1024, device=d)], lambda x: x.sum(-1), 4 * 16384 * 1024),
        ("argmax 4096x32000 bf16", R.ROW_REDUCE, R.RowSpec("argmax", 32000, "bfloat16"),
         lambda d: [torch.randn(4096, 32000, dtype=bf, device=d)], lambda x: x.argmax(-1), 2 * 4096 * 32000),
        ("col sum 16384x4096 bf16", R.COL_REDUCE, R.ColSpec("sum", 16384, 4096, "bfloat16"),
         lambda d: [torch.randn(16384, 4096, dtype=bf, device=d)], lambda x: x.sum(0), 2 * 16384 * 4096),
        ("col sum 65536x64 fp32", R.COL_REDUCE, R.ColSpec("sum", 65536, 64, "float32"),
         lambda d: [torch.randn(65536, 64, device=d)], lambda x: x.sum(0), 4 * 65536 * 64),
        ("cumsum 4096x4096 fp32", R.SCAN, R.ScanSpec("cumsum", 4096, "float32"),
         lambda d: [torch.randn(4096, 4096, device=d)], lambda x: x.cumsum(-1), 2 * 4 * 4096 * 4096),
        ("permute NCHW->NHWC 32x256x56x56 bf16", M.PERMUTE, M.PermuteSpec((32, 256, 56, 56), (0, 2, 3, 1),
                                                                           "bfloat16"),
         lambda d: [torch.randn(32, 256, 56, 56, dtype=bf, device=d)],
         lambda x: x.permute(0, 2, 3, 1).contiguous(), 2 * 2 * 32 * 256 * 56 * 56),
        ("permute 0213 16x1024x32x128 bf16", M.PERMUTE, M.PermuteSpec((16, 1024, 32, 128), (0, 2, 1, 3), "bfloat16"),
         lambda d: [torch.randn(16, 1024, 32, 128, dtype=bf, device=d)],
         lambda x: x.permute(0, 2, 1, 3).contiguous(), 2 * 2 * 16 * 1024 * 32 * 128),
        ("transpose 8192x8192 fp32", M.PERMUTE, M.PermuteSpec((8192, 8192), (1, 0), "float32"),
         lambda d: [torch.randn(8192, 8192, device=d)], lambda x: x.t().contiguous(), 2 * 4 * 8192 * 8192),
        ("embedding 50257x4096 bf16, 16384 ids", M.GATHER, M.GatherSpec(50257, 4096, "bfloat16"),
         lambda d: [torch.randint(0, 50257, (16384,), device=d), torch.randn(50257, 4096, dtype=bf, device=d)],
         lambda i, w: F.embedding(i, w), 2 * 2 * 16384 * 4096),
    ]


def bench_defaults(root: Path, configs: dict | None = None) -> list[tuple[str, float, float, float]]:
    """Time each default config (or configs[label]) against torch on the GPU: (label, ms, torch ms, GB/s)."""
    import importlib.util

    import torch
    import triton.testing

    rows = []
    for i, (label, family, spec, make, ref, nbytes) in enumerate(_bench_specs()):
        config = (configs or {}).get(label) or family.default(spec)
        rendered = family.render(spec, config, f"b{i}")
        path = root / f"b{i}.py"
        path.write_text(HEADER + rendered.kernel_src + "\n\n" + rendered.launcher_src)
        mod_spec = importlib.util.spec_from_file_location(f"b{i}", path)
        mod = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(mod)
        fn = getattr(mod, f"b{i}")
        args = make("cuda")
        out, want = fn(*args), ref(*args)
        assert out.shape == want.shape, label
        ms = triton.testing.do_bench(lambda: fn(*args))  # noqa: F821 (timed before the del below)
        ref_ms = triton.testing.do_bench(lambda: ref(*args))  # noqa: F821
        rows.append((label, ms, ref_ms, nbytes / ms / 1e6))
        del args, out, want
        torch.cuda.empty_cache()
    return rows


@pytest.mark.gpu
def test_default_configs_speed(tmp_path, gpu_to_itself):
    """Default configs within 2x of torch's time on typical shapes (a loose guard; prints the table)."""
    from workbench.devices import cuda_gpu_count

    if cuda_gpu_count() == 0:
        pytest.skip("needs a CUDA GPU (run on the H200)")
    rows = bench_defaults(tmp_path)
    for label, ms, ref_ms, gbs in rows:
        print(f"{label:40s} {ms * 1e3:9.1f} us  torch {ref_ms * 1e3:9.1f} us  {gbs:7.0f} GB/s")
    slow = [r for r in rows if r[1] > 2 * r[2]]
    assert not slow, slow
