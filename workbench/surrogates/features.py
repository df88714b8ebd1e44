"""Features of a candidate kernel for the learned surrogate, from dataset rows or from live objects.

Both paths end in `candidate_features(problem, choice, coverage, compile_data, compile_verdict)`, so a model trained
on `results/dataset` sees, at search time, columns computed by the same code (train/serve parity):

- `features_from_rows(candidates, problems)`: the dataset's candidates.parquet / problems.parquet rows;
- `features_from_live(problem, candidates, compile_records)`: a `Problem`, its `Candidate`s (the offline proposer's
  origin carries the choice and coverage) and their compile `StageRecord`s, counted on meta tensors.

Columns (all floats, NaN where a fact is unknown; trees split on NaN):
- problem: log2 FLOPs / bytes / intensity, log2(eager_bytes / min_bytes) (what fusion can save), log2 floor_ms, the
  roofline headroom log2(eager roofline time / floor), compute-bound flag, compute-dtype one-hot;
- structure: groups, fusion points fused, coverage, groups per family (the family mix);
- configs: every group's config key under "<family>.<key>" (first group of a family), string values one-hot;
- dominant group (attention > gemm > row/scan/col > gather/permute > elementwise): family, warps, stages, tile
  elements, elements per thread, and an estimate of programs and waves on the device from the problem's size;
- compile facts: kernels, registers, shared memory, spills, wgmma/tma/v4, and an occupancy estimate (sm_90 limits).

A group's family comes from its kernels' names (`_g0_gemm_kernel` -> gemm) and, failing that, from its config keys.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.ceilings import load as load_ceilings
from ..core.records import FAIL, PASS
from ..core.target import H200
from ..problems import Problem
from ..problems.analysis import count, roofline_floor
from .splits import candidate_families, family_from_config, problem_families, problem_levels, row_families

FAMILIES = ("attention", "gemm", "row", "scan", "col", "gather", "permute", "elementwise")  # dominance order
DTYPES = ("fp32", "tf32", "bf16", "fp16")
ELT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
# sm_90 per-SM limits (the dataset's device), for the occupancy estimate
SM_REGS, SM_SHARED, SM_WARPS, SM_BLOCKS, SM_COUNT = (H200.regs_per_sm, H200.smem_per_sm, H200.max_warps_per_sm,
                                                     H200.max_blocks_per_sm, H200.sms)
_KERNEL = re.compile(r"^_(g\d+)_([a-z]+)_")


def _log2(x: Any) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return math.nan
    return math.log2(x) if x > 0 else math.nan


def group_families(choice: Mapping[str, Any], kernels: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
    """group id -> family, from kernel names first, then config keys."""
    by_name: dict[str, str] = {}
    for k in kernels:
        m = _KERNEL.match(str(k.get("kernel", "")))
        if m and m.group(2) in FAMILIES and m.group(1) not in by_name:
            by_name[m.group(1)] = m.group(2)
    return {g: by_name.get(g) or family_from_config(cfg or {}) for g, cfg in (choice.get("configs") or {}).items()}


def occupancy(kernel: Mapping[str, Any]) -> float:
    """Resident warps / 64 on one SM from the kernel's registers, shared memory and warps (an estimate)."""
    warps = int(kernel.get("num_warps") or 4)
    regs = int(kernel.get("reg") or 0)
    shared = int(kernel.get("shared") or kernel.get("shared_bytes") or 0)
    limits = [SM_BLOCKS, SM_WARPS // max(warps, 1)]
    if regs:
        limits.append(SM_REGS // (int(math.ceil(regs / 8) * 8) * 32 * warps))
    if shared:
        limits.append(SM_SHARED // shared)
    return min(limits) * warps / SM_WARPS


def problem_features(problem: Mapping[str, Any], ceilings: Mapping[str, Any] | None) -> dict[str, float]:
    """Problem-level columns from a problems.parquet row (or the same keys counted live)."""
    flops, min_b, eager_b = (float(problem.get(k) or 0) for k in ("flops", "min_bytes", "eager_bytes"))
    dtype = str(problem.get("compute_dtype") or "")
    floor_ms = float(problem.get("floor_ms") or math.nan)
    out = {"p.log2_flops": math.log2(1 + flops), "p.log2_min_bytes": _log2(min_b), "p.log2_eager_bytes": _log2(eager_b),
           "p.log2_intensity": math.log2(1 + float(problem.get("intensity") or 0)),
           "p.log2_eager_over_min": _log2(eager_b / min_b) if min_b else math.nan, "p.log2_floor_ms": _log2(floor_ms),
           "p.compute_bound": float(problem.get("floor_bound") == "compute"), "p.headroom": math.nan}
    for d in DTYPES:
        out[f"p.dtype_{d}"] = float(dtype == d)
    if ceilings and dtype in ceilings.get("tflops", {}) and floor_ms > 0:
        eager_ms = max(flops / (ceilings["tflops"][dtype] * 1e9), eager_b / (ceilings["copy_gbps"] * 1e6))
        out["p.headroom"] = _log2(eager_ms / floor_ms)
    return out


def _tile(family: str | None, cfg: Mapping[str, Any]) -> float:
    g = lambda k: float(cfg.get(k) or 1)  # noqa: E731
    return {"gemm": g("BM") * g("BN"), "attention": g("BLOCK_M") * g("BLOCK_N"), "col": g("BLOCK_M") * g("BLOCK_N"),
            "permute": g("BLOCK_A") * g("BLOCK_B"), "gather": g("BLOCK_D") * g("ROWS_PER_PROGRAM"),
            "row": g("BLOCK") * g("ROWS_PER_PROGRAM"), "scan": g("BLOCK") * g("ROWS_PER_PROGRAM"),
            "elementwise": g("BLOCK")}.get(family or "", math.nan)


def _shapes(value: Any) -> list[list[int]]:
    """Tensor shapes from a count's inputs/outputs ([{"shape": [...]}, ...], or its JSON)."""
    if isinstance(value, str):
        value = json.loads(value)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    return [list(x["shape"]) for x in value if isinstance(x, Mapping) and isinstance(x.get("shape"), list)]


def shape_facts(problem: Mapping[str, Any]) -> dict[str, float]:
    """Sizes from the problem's tensors (NaN when the problem row has no shapes): the largest tensor ("main") as
    rows x cols (its last dim), the largest output's rows x cols, and FLOPs per output element (2K for a GEMM)."""
    shapes = _shapes(problem.get("inputs")) + _shapes(problem.get("outputs"))
    outs = _shapes(problem.get("outputs"))
    nan = math.nan
    if not shapes:
        return {"main_numel": nan, "main_rows": nan, "main_cols": nan, "main_rank": nan, "out_numel": nan,
                "out_rows": nan, "out_cols": nan, "k": nan, "seq": nan}
    main = max(shapes, key=lambda s: (math.prod(s), len(s)))
    out = max(outs, key=lambda s: (math.prod(s), len(s))) if outs else []
    out_numel = float(math.prod(out)) if out else 1.0
    flops = float(problem.get("flops") or 0)
    return {"main_numel": float(math.prod(main)), "main_rows": float(math.prod(main[:-1])) if main else 1.0,
            "main_cols": float(main[-1]) if main else 1.0, "main_rank": float(len(main)), "out_numel": out_numel,
            "out_rows": float(math.prod(out[:-1])) if out else 1.0, "out_cols": float(out[-1]) if out else 1.0,
            "k": flops / (2 * out_numel) if flops else nan, "seq": float(main[-2]) if len(main) >= 2 else nan}


def _work(family: str | None, cfg: Mapping[str, Any], sh: Mapping[str, float], problem: Mapping[str, Any]):
    """(programs, inner-loop iterations per program, tile over the row length) of a group's main kernel, from the
    problem's shapes when known, else a rough estimate from its FLOPs / bytes (iterations then NaN)."""
    g = lambda k: float(cfg.get(k) or 1)  # noqa: E731
    cdiv = lambda a, b: math.ceil(a / b) if a == a and b == b else math.nan  # noqa: E731
    nan = math.nan
    if math.isnan(sh["main_numel"]):
        flops = float(problem.get("flops") or 0)
        tile = _tile(family, cfg)
        if family in ("gemm", "attention") and flops > 0:
            return (flops / 2) ** (2 / 3) / tile * (g("SPLIT_K") if family == "gemm" else 1), nan, nan
        return float(problem.get("min_bytes") or 0) / ELT_BYTES.get(str(problem.get("compute_dtype")), 4) / tile, \
            nan, nan
    rows, cols = sh["main_rows"], sh["main_cols"]
    if family == "gemm":
        split = g("SPLIT_K")
        return (cdiv(sh["out_rows"], g("BM")) * cdiv(sh["out_cols"], g("BN")) * split,
                cdiv(sh["k"] / split, g("BK")), nan)
    if family == "attention":  # main = q/k/v/out (B, H, S, D)
        return cdiv(rows, g("BLOCK_M")), cdiv(sh["seq"], g("BLOCK_N")), nan
    if family in ("row", "scan"):
        return cdiv(rows, g("ROWS_PER_PROGRAM")), cdiv(cols, g("BLOCK")), g("BLOCK") / cols
    if family == "col":
        return cdiv(cols, g("BLOCK_N")) * g("SPLIT_M"), cdiv(rows / g("SPLIT_M"), g("BLOCK_M")), nan
    if family == "gather":
        return cdiv(sh["out_rows"], g("ROWS_PER_PROGRAM")) * cdiv(sh["out_cols"], g("BLOCK_D")), nan, nan
    if family == "permute":
        return cdiv(sh["main_numel"], g("BLOCK_A") * g("BLOCK_B")), nan, nan
    if family == "elementwise":
        programs = cdiv(sh["out_numel"], g("BLOCK"))
        waves = g("PERSISTENT_WAVES") if cfg.get("PERSISTENT_WAVES") else 0
        return (min(programs, waves * SM_COUNT) if waves else programs), nan, nan
    return nan, nan, nan


def work_features(prefix: str, family: str | None, cfg: Mapping[str, Any], sh: Mapping[str, float],
                  problem: Mapping[str, Any]) -> dict[str, float]:
    """log2 programs, waves on the device's SMs, the last wave's fill (1 = no tail), log2 inner iterations, and
    log2(tile / row length) for row kernels."""
    programs, iters, over = _work(family, cfg, sh, problem) if family else (math.nan,) * 3
    fill = math.nan
    if programs == programs and programs > 0:
        fill = programs / (math.ceil(programs / SM_COUNT) * SM_COUNT)
    return {f"{prefix}.log2_programs": _log2(programs), f"{prefix}.log2_waves": _log2(programs / SM_COUNT),
            f"{prefix}.wave_fill": fill, f"{prefix}.log2_iters": _log2(iters), f"{prefix}.log2_tile_over_row":
            _log2(over)}


def candidate_features(problem: Mapping[str, Any], choice: Mapping[str, Any] | None, coverage: Mapping[str, Any],
                       compile_data: Mapping[str, Any] | None, compile_verdict: str | None,
                       ceilings: Mapping[str, Any] | None) -> dict[str, float]:
    """One candidate's feature dict (the single path behind both the dataset and the live features)."""
    choice = choice or {}
    kernels = list((compile_data or {}).get("kernels") or [])
    configs = {g: (c or {}) for g, c in (choice.get("configs") or {}).items()}
    fams = group_families(choice, kernels)
    fuse = choice.get("fuse") or {}
    f = problem_features(problem, ceilings)
    sh = shape_facts(problem)
    f.update({f"s.log2_{k}": _log2(v) for k, v in sh.items()})
    f.update({"c.n_groups": float(len(configs)), "c.fusion_points": float(len(fuse)),
              "c.fused_points": float(sum(bool(v) for v in fuse.values())),
              "c.coverage_flops": float(coverage.get("flops", math.nan) if coverage.get("flops") is not None
                                        else math.nan),
              "c.coverage_bytes": float(coverage.get("bytes", math.nan) if coverage.get("bytes") is not None
                                        else math.nan),
              "c.has_choice": float(bool(configs))})
    for fam in FAMILIES:
        f[f"mix.{fam}"] = float(sum(v == fam for v in fams.values()))
    for gid in sorted(configs, key=_gid_order):  # first group of each family names its columns
        fam = fams.get(gid) or "unknown"
        if f"{fam}.log2_programs" not in f and fam != "unknown":
            f.update(work_features(fam, fam, configs[gid], sh, problem))
        for key, v in configs[gid].items():
            col = f"{fam}.{key}"
            if isinstance(v, str):
                col = f"{col}={v}"
                v = 1.0
            if col in f or not isinstance(v, (bool, int, float)):
                continue
            f[col] = float(v)
    dom = min(configs, key=lambda g: (FAMILIES.index(fams[g]) if fams.get(g) in FAMILIES else len(FAMILIES),
                                      _gid_order(g)), default=None)
    dfam, dcfg = (fams.get(dom), configs[dom]) if dom is not None else (None, {})
    for fam in FAMILIES:
        f[f"dom.is_{fam}"] = float(dfam == fam)
    dk = [k for k in kernels if dom is not None and str(k.get("kernel", "")).startswith(f"_{dom}_")]
    warps = float(dcfg.get("num_warps") or (dk[0].get("num_warps") if dk else 0) or math.nan)
    tile = _tile(dfam, dcfg)
    f.update({"dom.warps": warps, "dom.stages": float(dcfg.get("num_stages") or (dk[0].get("num_stages") if dk
                                                                                  else 0) or math.nan),
              "dom.log2_tile": _log2(tile), "dom.log2_elems_per_thread": _log2(tile / (32 * warps)),
              "dom.regs": float(dk[0].get("reg") or 0) if dk else math.nan,
              "dom.shared": float(dk[0].get("shared") or dk[0].get("shared_bytes") or 0) if dk else math.nan,
              "dom.occupancy": occupancy(dk[0]) if dk else math.nan})
    f.update(work_features("dom", dfam, dcfg, sh, problem))
    f.update(compile_features(kernels, compile_verdict))
    return f


def compile_features(kernels: Sequence[Mapping[str, Any]], verdict: str | None) -> dict[str, float]:
    """Facts of the compile stage over all of a candidate's kernels (NaN when there was no compile record)."""
    if verdict is None:
        return {k: math.nan for k in ("k.compiled", "k.failed", "k.n_kernels", "k.max_regs", "k.sum_shared",
                                      "k.max_shared", "k.spills", "k.max_warps", "k.max_stages", "k.wgmma", "k.mma",
                                      "k.tma", "k.v4", "k.cp_async", "k.min_occupancy")}
    sh = [float(k.get("shared") or k.get("shared_bytes") or 0) for k in kernels]
    return {"k.compiled": float(verdict == PASS), "k.failed": float(verdict == FAIL),
            "k.n_kernels": float(len(kernels)), "k.max_regs": float(max((k.get("reg") or 0 for k in kernels),
                                                                        default=0)),
            "k.sum_shared": float(sum(sh)), "k.max_shared": float(max(sh, default=0)),
            "k.spills": float(any((k.get("stack") or 0) > 0 or (k.get("local") or 0) > 0 for k in kernels)),
            "k.max_warps": float(max((k.get("num_warps") or 0 for k in kernels), default=0)),
            "k.max_stages": float(max((k.get("num_stages") or 0 for k in kernels), default=0)),
            "k.wgmma": float(any(k.get("wgmma") for k in kernels)), "k.mma": float(any(k.get("mma") for k in kernels)),
            "k.tma": float(any(k.get("tma") for k in kernels)),
            "k.v4": float(any(k.get("ld_global_v4") for k in kernels)),
            "k.cp_async": float(any(k.get("cp_async") for k in kernels)),
            "k.min_occupancy": min((occupancy(k) for k in kernels), default=math.nan)}


def _gid_order(g: str) -> tuple[int, str]:
    m = re.match(r"g(\d+)$", g)
    return (int(m.group(1)), g) if m else (1 << 30, g)


def _loads(s: Any) -> dict[str, Any]:
    if isinstance(s, dict):
        return s
    if s is None or (isinstance(s, float) and math.isnan(s)) or s == "":
        return {}
    return json.loads(s)


def _frame(rows: Iterable[dict[str, float]], index=None) -> pd.DataFrame:
    df = pd.DataFrame(list(rows), index=index)
    return df.astype(float)


def features_from_rows(candidates: pd.DataFrame, problems: pd.DataFrame,
                       ceilings: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Features of dataset rows (candidates.parquet joined to problems.parquet on problem_key), same index as
    `candidates`, plus `kernel_families` (not a feature: see `training_table`). A candidate whose problem has no row
    is a ValueError: its problem features would be made up."""
    need = {"problem_key", "choice_json", "coverage_flops", "coverage_bytes", "compile_json", "compile_verdict"}
    missing = need - set(candidates.columns)
    if missing:
        raise ValueError(f"candidate rows lack columns {sorted(missing)} (see workbench/store/dataset.py)")
    ceilings = ceilings if ceilings is not None else default_ceilings()
    probs = {r["problem_key"]: r for r in problems.to_dict("records")}
    unknown = set(candidates["problem_key"]) - set(probs)
    if unknown:
        raise ValueError(f"no problems.parquet row for {sorted(unknown)[:5]}")
    rows = []
    for key, cj, cf, cb, comp, verdict in zip(candidates["problem_key"], candidates["choice_json"],
                                              candidates["coverage_flops"], candidates["coverage_bytes"],
                                              candidates["compile_json"], candidates["compile_verdict"]):
        verdict = verdict if isinstance(verdict, str) else None
        rows.append(candidate_features(probs[key], _loads(cj), {"flops": cf, "bytes": cb}, _loads(comp), verdict,
                                       ceilings))
    out = _frame(rows, index=candidates.index)
    out["kernel_families"] = row_families(candidates)  # not a feature (no "."): what the OOD check compares
    return out


def default_ceilings() -> dict[str, Any] | None:
    """The H200's measured ceilings (the dataset's device); None when the file is absent."""
    return load_ceilings(H200.name)


def live_problem_info(problem, ceilings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The problems.parquet keys for a live `Problem`: counted on meta tensors, floor from the ceilings."""
    c = count(problem)
    info: dict[str, Any] = {"problem": problem.name, "problem_key": problem.key, "flops": c.flops,
                            "min_bytes": c.min_bytes, "eager_bytes": c.eager_bytes, "intensity": c.intensity,
                            "compute_dtype": c.compute_dtype, "floor_ms": None, "floor_bound": None,
                            "inputs": c.inputs, "outputs": c.outputs}
    if ceilings:
        fl = roofline_floor(c, dict(ceilings))
        info.update(floor_ms=fl.ms, floor_bound=fl.bound)
    return info


def features_from_live(problem_info: Mapping[str, Any], candidates: Sequence[Any],
                       compile_records: Mapping[str, Any] | None = None,
                       ceilings: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Features of live candidates: `problem_info` from `live_problem_info`, each candidate's choice and coverage
    from its origin (offline proposer), its compile facts from `compile_records[candidate.hash]` (a StageRecord) when
    there is one. A candidate without a recorded choice (an LLM-written module) gets NaN config columns."""
    ceilings = ceilings if ceilings is not None else default_ceilings()
    compile_records = compile_records or {}
    rows, fams = [], []
    for cand in candidates:
        origin = dict(cand.origin)
        rec = compile_records.get(cand.hash)
        choice = _loads(origin.get("config"))
        rows.append(candidate_features(problem_info, choice,
                                       {"flops": origin.get("coverage_flops"), "bytes": origin.get("coverage_bytes")},
                                       rec.data if rec is not None else None,
                                       rec.verdict if rec is not None else None, ceilings))
        fams.append("+".join(candidate_families(choice, list(((rec.data if rec is not None else None) or {})
                                                              .get("kernels") or []))))
    out = _frame(rows)
    out["kernel_families"] = fams  # not a feature (no "."): what the OOD check compares with training
    return out


META = ("problem", "problem_key", "candidate", "log2_speedup", "failed", "noise_sd", "family", "level",
        "kernel_families", "flops", "min_bytes", "eager_bytes", "compute_dtype")
NOISE_FLOOR = 0.01  # log2 units; a problem whose noise was not measured (or measured as ~0) gets this


def feature_columns(table: pd.DataFrame) -> list[str]:
    """The feature columns of a table (every feature name is namespaced "<part>.<name>"; meta columns are not)."""
    return [c for c in table.columns if "." in c]


def with_shapes(problems: pd.DataFrame) -> pd.DataFrame:
    """problems.parquet rows with the tensors' shapes ("inputs", "outputs", as `count` describes them) where the
    rows lack them: each problem is loaded by name and counted on meta tensors, and kept only when its key is the
    row's (a problem that changed since collection, or is not a built-in, keeps NaN shapes)."""
    if {"inputs", "outputs"} <= set(problems.columns):
        return problems
    out = problems.copy()
    ins, outs = [], []
    for name, key in zip(out["problem"], out["problem_key"]):
        try:
            p = Problem.load(name)
            c = count(p) if p.key == key else None
        except Exception:  # not loadable here: its shape features stay NaN
            c = None
        ins.append(json.dumps(c.inputs) if c else None)
        outs.append(json.dumps(c.outputs) if c else None)
    out["inputs"], out["outputs"] = ins, outs
    return out


def training_table(candidates: pd.DataFrame, problems: pd.DataFrame,
                   ceilings: Mapping[str, Any] | None = None, shapes: bool = True) -> pd.DataFrame:
    """Meta columns (`META`) + features of every measured row ("ok" or "fails"; "unmeasured" rows are dropped).

    `failed` marks outcome "fails" (log2_speedup NaN); `noise_sd` is the problem's measured run-to-run sd of log2
    speedup, floored at NOISE_FLOOR; `family` is the problem's family: the most common dominant-group family of its
    candidates, and `level` its KernelBench level ("builtin" for the built-in suite): what the held-out-family and
    held-out-level splits hold out (the rules: `workbench.surrogates.splits`); `kernel_families` the row's own
    groups' families ("gemm+elementwise": what the OOD check compares with training). `shapes` adds the problems'
    tensor shapes (`with_shapes`) for the size-aware features."""
    if "outcome" not in candidates.columns:
        raise ValueError("candidate rows lack an 'outcome' column (see workbench/store/dataset.py)")
    c = candidates[candidates["outcome"].isin(["ok", "fails"])]
    if c.empty:
        raise ValueError("no measured candidates (outcome 'ok' or 'fails') in the rows")
    if shapes:
        problems = with_shapes(problems)
    X = features_from_rows(c, problems, ceilings)
    p = problems.set_index("problem_key")
    meta = pd.DataFrame({"problem": c["problem"].to_numpy(), "problem_key": c["problem_key"].to_numpy(),
                         "candidate": c["candidate"].to_numpy(),
                         "log2_speedup": c["log2_speedup"].astype(float).to_numpy(),
                         "failed": (c["outcome"] == "fails").to_numpy()}, index=c.index)
    sd = c["problem_key"].map(p["noise_log2_sd"]) if "noise_log2_sd" in p.columns else pd.Series(np.nan, c.index)
    meta["noise_sd"] = sd.astype(float).fillna(NOISE_FLOOR).clip(lower=NOISE_FLOOR).to_numpy()
    for col in ("flops", "min_bytes", "eager_bytes", "compute_dtype"):
        meta[col] = c["problem_key"].map(p[col]).to_numpy() if col in p.columns else np.nan
    fams = X.pop("kernel_families")
    meta["kernel_families"] = fams.to_numpy()
    meta["family"] = meta["problem_key"].map(problem_families(c, fams)).to_numpy()
    meta["level"] = meta["problem_key"].map(problem_levels(c, problems)).to_numpy()
    bad = meta.loc[~meta["failed"] & ~np.isfinite(meta["log2_speedup"]), "candidate"]
    if len(bad):
        raise ValueError(f"{len(bad)} rows are 'ok' without a finite log2_speedup (e.g. {bad.iloc[0]})")
    return pd.concat([meta, X], axis=1)
