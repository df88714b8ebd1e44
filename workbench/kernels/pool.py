"""Pooling family: max and average pooling over the spatial dims of NC(D)HW inputs, windowed, adaptive or global.

The launcher views its input as 5-D [N, C, D, H, W] (1-D and 2-D pooling get unit D/H dims, an unbatched input a unit
N) with any strides; every (n, c) pair is a *plane*. One program computes a tile [BLOCK_NC planes, BLOCK_O output
pixels] (output pixels flattened over (od, oh, ow), so neighbouring lanes store neighbouring addresses and, at stride
1, load neighbouring addresses too). Three modes, fixed by the spec:

- windowed (nn.MaxPool*/AvgPool*): kernel, stride, padding, dilation (max), ceil_mode (the output size rule of torch,
  a last window may be partial), count_include_pad and divisor_override (avg). Taps are unrolled (`tl.static_range`)
  up to MAX_UNROLL taps; larger windows loop over D and H (W still unrolled up to MAX_UNROLL_W). Max tracks the flat
  index of its maximum within the input plane (int64, as torch's return_indices): the first maximum wins, a NaN
  wins and propagates, as in torch's kernels.
- adaptive (nn.AdaptiveAvgPool*/AdaptiveMaxPool*): window o covers [floor(o*in/out), ceil((o+1)*in/out)) per dim;
  the taps loop to the largest window (ceil(in/out) + 1, or in/out when it divides) with the window's end masking.
- global (adaptive to 1, or a mean over every spatial dim): each program reduces BLOCK_NC whole planes in chunks of
  BLOCK_O contiguous elements (a plane that is not contiguous is made so first).

Arithmetic is fp32; the output keeps the input dtype unless the epilogue says otherwise. An optional epilogue
(`base.Epilogue` over the pooled fp32 `acc`) fuses an elementwise chain after the pooling; its inputs are "col" (one
value per channel, [C]), "full" (anything broadcastable to the output; loaded through its expanded strides) or
"scalar" (a Python float). Launcher: `{name}(x, *epilogue_inputs, view_shape=None)`; it returns the pooled output
(with return_indices the tuple (values, indices)), viewed as `view_shape` when given (a fused chain that followed a
view removing unit dims: "full" inputs are then broadcast to that shape).
"""
from __future__ import annotations

import ast
import dataclasses
import math
from typing import Any

from ._common import RESERVED_NAMES, next_pow2, register_budget, threads_check, usable_name
from .base import Epilogue, Rendered, grid_space

name = "pool"
template_version = 2  # see base.Family; 2: spatial sizes are constexpr

OPS = ("max", "avg")
MODES = ("window", "adaptive", "global")
DTYPES = ("float32", "bfloat16", "float16")
KINDS = ("col", "full", "scalar")
BLOCK_NC = (1, 2, 4, 8, 16, 32, 64)
BLOCK_O = (16, 32, 64, 128, 256, 512, 1024, 2048)
WARPS = (1, 2, 4, 8)
# Windows of up to MAX_UNROLL taps are unrolled in the kernel text; larger ones loop over D and H and unroll only W
# taps (up to MAX_UNROLL_W): an 11x11 window unrolled whole took over 120 s to compile for sm_90 at wide tiles.
MAX_UNROLL = 32
MAX_UNROLL_W = 16
# fp32 tile elements a thread may hold: the value (and index) tiles plus one tap's load and offsets in flight
ELEMS_PER_THREAD = 32
INDEX_ELEMS_PER_THREAD = 16  # max with indices: an int64 index tile beside the values
MAX_TILE = 8192


@dataclasses.dataclass(frozen=True)
class PoolSpec:
    """What to pool. Sizes are (D, H, W) with unit dims for lower ranks; `rank` is the number of spatial dims of the
    launcher's input (1-3). in_size/out_size are those of the traced shapes (the launcher recomputes the windowed
    output size from the input it gets; adaptive output sizes are out_size)."""
    op: str  # "max" | "avg"
    dtype: str  # input dtype
    rank: int
    in_size: tuple[int, int, int]
    out_size: tuple[int, int, int]
    mode: str = "window"
    kernel: tuple[int, int, int] = (1, 1, 1)
    stride: tuple[int, int, int] = (1, 1, 1)
    padding: tuple[int, int, int] = (0, 0, 0)
    dilation: tuple[int, int, int] = (1, 1, 1)
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor_override: int | None = None
    return_indices: bool = False
    out_dtype: str = ""  # "" : the input dtype
    epilogue: Epilogue | None = None

    @property
    def result_dtype(self) -> str:
        return self.out_dtype or self.dtype


def window_out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """torch's pooling output size along one dim (the last window starts inside the input or its left padding)."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def adaptive_taps(size: int, out: int) -> int:
    """The largest adaptive window along one dim: in/out when it divides, else at most ceil(in/out) + 1."""
    return size // out if size % out == 0 else -(-size // out) + 1


def _taps(spec: PoolSpec) -> int:
    if spec.mode == "adaptive":
        return math.prod(adaptive_taps(i, o) for i, o in zip(spec.in_size, spec.out_size))
    return math.prod(spec.kernel)


def _spec_problem(spec: PoolSpec) -> str | None:
    if spec.op not in OPS:
        return f"op {spec.op!r} unknown (one of {OPS})"
    if spec.mode not in MODES:
        return f"mode {spec.mode!r} unknown (one of {MODES})"
    if spec.dtype not in DTYPES or spec.result_dtype not in DTYPES:
        return f"dtype {spec.dtype}/{spec.result_dtype} unsupported (one of {DTYPES})"
    if spec.rank not in (1, 2, 3):
        return f"{spec.rank} spatial dims: 1 to 3 supported"
    if min(spec.in_size) < 1 or min(spec.out_size) < 1:
        return "empty input or output"
    if spec.return_indices and (spec.op != "max" or spec.mode == "global"):
        return "indices only for windowed or adaptive max pooling"
    if spec.return_indices and spec.epilogue is not None:
        return "an epilogue with return_indices: the values and indices are one tuple"
    if spec.mode == "window":
        if min(spec.kernel) < 1 or min(spec.stride) < 1 or min(spec.dilation) < 1 or min(spec.padding) < 0:
            return "kernel, stride and dilation must be >= 1, padding >= 0"
        if any(p * 2 > k for p, k in zip(spec.padding, spec.kernel)):
            return "padding over half the kernel (torch refuses it too)"
        if spec.op == "avg" and max(spec.dilation) > 1:
            return "average pooling has no dilation"
        if spec.divisor_override is not None and spec.divisor_override < 1:
            return "divisor_override must be >= 1"
    elif spec.mode == "global" and spec.out_size != (1, 1, 1):
        return "global pooling has a one-pixel output"
    ep = spec.epilogue
    if ep is not None:
        names = [i.name for i in ep.inputs]
        if len(set(names)) != len(names):
            return "epilogue input names repeat"
        for i in ep.inputs:
            if not usable_name(i.name):
                return f"epilogue input name {i.name!r} is not usable (reserved: {sorted(RESERVED_NAMES)})"
            if i.kind not in KINDS:
                return f"epilogue input {i.name!r} has kind {i.kind!r}, not one of {KINDS}"
        try:
            ast.parse(ep.expr, mode="eval")
        except SyntaxError as e:
            return f"epilogue expression does not parse: {e.msg}"
    return None


def space(spec: PoolSpec) -> list[dict[str, Any]]:
    return grid_space(BLOCK_NC=BLOCK_NC, BLOCK_O=BLOCK_O, num_warps=WARPS)


def check(spec: PoolSpec, config: dict[str, Any]) -> str | None:
    why = _spec_problem(spec)
    if why:
        return why
    bnc, bo, warps = config["BLOCK_NC"], config["BLOCK_O"], config["num_warps"]
    if bnc not in BLOCK_NC or bo not in BLOCK_O or warps not in WARPS:
        return f"BLOCK_NC {bnc}, BLOCK_O {bo}, num_warps {warps}: outside {BLOCK_NC} / {BLOCK_O} / {WARPS}"
    # BLOCK_O runs over output pixels (global: over a plane's input elements)
    extent = math.prod(spec.in_size) if spec.mode == "global" else math.prod(spec.out_size)
    cover = max(BLOCK_O[0], next_pow2(extent))
    if bo > cover:
        what = "inputs" if spec.mode == "global" else "outputs"
        return f"BLOCK_O {bo} > {cover}: lanes past the plane's {extent} {what}"
    if bnc > 1 and bo < cover:
        return f"BLOCK_NC {bnc} > 1 while BLOCK_O {bo} does not cover a plane ({extent}): grow BLOCK_O first"
    tile = bnc * bo
    if tile > MAX_TILE:
        return f"tile {bnc}x{bo} = {tile} elements > {MAX_TILE}"
    per = INDEX_ELEMS_PER_THREAD if spec.return_indices else ELEMS_PER_THREAD
    budget = register_budget(per, warps)
    if tile / (32 * warps) > budget:
        return f"tile {bnc}x{bo} over {warps} warps: {tile // (32 * warps)} elements per thread > {budget:.0f} " \
               "(registers would spill)"
    return threads_check(warps, tile)


def default(spec: PoolSpec) -> dict[str, Any]:
    extent = math.prod(spec.in_size) if spec.mode == "global" else math.prod(spec.out_size)
    bo = min(next_pow2(extent), 1024 if spec.mode == "global" else 512)
    bo = max(bo, BLOCK_O[0])
    bnc = 1 if bo < next_pow2(extent) else max(1, min(BLOCK_NC[-1], 512 // bo))
    for w in (4, 2, 1, 8):
        for b in (bnc, 1):
            c = {"BLOCK_NC": b, "BLOCK_O": bo, "num_warps": w}
            if check(spec, c) is None:
                return c
    for c in space(spec):
        if check(spec, c) is None:
            return c
    raise ValueError(f"no valid config for {spec}")


# ---------------------------------------------------------------------------------------------------------------
# Rendering

def _inputs(spec: PoolSpec):
    return spec.epilogue.inputs if spec.epilogue is not None else ()


def _ep_params(spec: PoolSpec) -> list[str]:
    out = []
    for i in _inputs(spec):
        n = f"ep_{i.name}"
        out += {"col": [n], "scalar": [n], "full": [n] + [f"{n}_s{a}" for a in "ncdhw"]}[i.kind]
    return out


def _epilogue_lines(spec: PoolSpec, name: str) -> list[str]:
    """Load the epilogue inputs for tile (planes n, c; pixels od, oh, ow) and compute `res` from `acc`."""
    lines, args = [], []
    for i in _inputs(spec):
        n = f"ep_{i.name}"
        if i.kind == "scalar":
            lines.append(f"{n}_v = {n}")
        elif i.kind == "col":
            lines.append(f"{n}_v = tl.load({n} + c, mask=pm, other=0.0).to(tl.float32)[:, None]")
        else:
            lines.append(f"{n}_v = tl.load({n} + (n64 * {n}_sn + c64 * {n}_sc)[:, None] + "
                         f"(od * {n}_sd + oh * {n}_sh + ow * {n}_sw)[None, :], mask=mask, other=0.0).to(tl.float32)")
        args.append(f"{n}_v")
    if spec.epilogue is None or spec.epilogue.is_identity:
        lines.append("res = acc")
    else:
        lines.append(f"res = {name}_epilogue(acc{''.join(', ' + a for a in args)})")
    return lines


def _loop(var: str, bound: str, unroll: bool) -> str:
    return f"for {var} in {'tl.static_range' if unroll else 'range'}({bound}):"


def _window_body(spec: PoolSpec) -> list[str]:
    """Tap loops accumulating `acc` (and `best_i`) for the windowed and adaptive modes."""
    is_max = spec.op == "max"
    unroll = _taps(spec) <= MAX_UNROLL
    w_taps = spec.kernel[2] if spec.mode == "window" else adaptive_taps(spec.in_size[2], spec.out_size[2])
    unroll_w = unroll or w_taps <= MAX_UNROLL_W
    fill = 'float("-inf")' if is_max else "0.0"
    L = []
    if spec.mode == "window":
        for ax, o, up in (("d", "od", "D"), ("h", "oh", "H"), ("w", "ow", "W")):
            L.append(f"{ax}0 = {o} * S{up} - P{up}")
        kd, kh, kw = "KD", "KH", "KW"
        pos = {a: f"{a}0 + k{a} * DIL{a.upper()}" for a in "dhw"}
        inside = {a: f"(x{a} >= 0) & (x{a} < I{a.upper()})" for a in "dhw"}
    else:
        for ax, o, up in (("d", "od", "D"), ("h", "oh", "H"), ("w", "ow", "W")):
            L.append(f"{ax}0 = ({o} * I{up}) // O{up}")
            L.append(f"{ax}1 = (({o} + 1) * I{up} + O{up} - 1) // O{up}")
        kd, kh, kw = "KD", "KH", "KW"
        pos = {a: f"{a}0 + k{a}" for a in "dhw"}
        inside = {a: f"(x{a} < {a}1)" for a in "dhw"}
    L.append(f"acc = tl.full((BLOCK_NC, BLOCK_O), {fill}, tl.float32)")
    if spec.return_indices:
        L.append("best_i = tl.full((BLOCK_NC, BLOCK_O), -1, tl.int64)")
    L.append(_loop("kd", kd, unroll))
    ind = "    "
    L += [ind + f"xd = {pos['d']}", ind + f"vd = om & {inside['d']}"]
    L.append(ind + _loop("kh", kh, unroll))
    ind2 = ind * 2
    L += [ind2 + f"xh = {pos['h']}", ind2 + f"vh = vd & {inside['h']}", ind2 + "row = xd * sx_d + xh * sx_h"]
    L.append(ind2 + _loop("kw", kw, unroll_w))
    ind3 = ind * 3
    L += [ind3 + f"xw = {pos['w']}", ind3 + f"valid = vh & {inside['w']}",
          ind3 + "m = pm[:, None] & valid[None, :]",
          ind3 + f"v = tl.load(x_ptr + base[:, None] + (row + xw * sx_w)[None, :], mask=m, other={fill})"
                 ".to(tl.float32)"]
    if is_max and spec.return_indices:
        # torch: the first maximum wins, a NaN replaces whatever came before; the first valid tap seeds the index
        L += [ind3 + "take = m & ((v > acc) | (v != v) | (best_i < 0))",
              ind3 + "acc = tl.where(take, v, acc)",
              ind3 + "best_i = tl.where(take, ((xd * IH + xh) * IW + xw).to(tl.int64)[None, :], best_i)"]
    elif is_max:
        L.append(ind3 + "acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)")
    else:
        L.append(ind3 + "acc += v")
    if not is_max:
        if spec.mode == "adaptive":
            L.append("count = tl.maximum((d1 - d0) * (h1 - h0) * (w1 - w0), 1)  # lanes past the output: 0")
        elif spec.divisor_override is not None:
            L.append(f"count = {int(spec.divisor_override)}")
        else:
            # torch: the window is clipped to the padded input, then (count_include_pad=False) to the input
            ends = []
            for a, up in (("d", "D"), ("h", "H"), ("w", "W")):
                L.append(f"{a}1 = tl.minimum({a}0 + K{up}, I{up} + P{up})")
                if not spec.count_include_pad:
                    L.append(f"{a}1 = tl.minimum({a}1, I{up})")
                    L.append(f"{a}0 = tl.maximum({a}0, 0)")
                ends.append(f"({a}1 - {a}0)")
            L.append(f"count = tl.maximum({' * '.join(ends)}, 1)  # lanes past the output: 0 or less")
        L.append("acc = acc / count.to(tl.float32)[None, :]" if spec.divisor_override is None or
                 spec.mode == "adaptive" else "acc = acc / count")
    return L


def _global_body(spec: PoolSpec) -> list[str]:
    is_max = spec.op == "max"
    fill = 'float("-inf")' if is_max else "0.0"
    L = [f"part = tl.full((BLOCK_NC, BLOCK_O), {fill}, tl.float32)",
         "r = tl.arange(0, BLOCK_O)",
         "if INT64:",
         "    r = r.to(tl.int64)",
         "for start in range(0, PLANE, BLOCK_O):",
         "    m = pm[:, None] & ((start + r) < PLANE)[None, :]",
         f"    v = tl.load(x_ptr + base[:, None] + (start + r)[None, :], mask=m, other={fill}).to(tl.float32)"]
    if is_max:
        L += ["    part = tl.maximum(part, v, propagate_nan=tl.PropagateNan.ALL)",
              "nan = tl.max((part != part).to(tl.int32), axis=1, keep_dims=True)",  # tl.max drops NaNs: keep them
              "acc = tl.where(nan > 0, float('nan'), tl.max(part, axis=1, keep_dims=True))"]
    else:
        L += ["    part += v", "acc = tl.sum(part, axis=1, keep_dims=True) / PLANE"]
    return L


def render(spec: PoolSpec, config: dict[str, Any], name: str) -> Rendered:
    why = check(spec, config)
    if why:
        raise ValueError(f"invalid config {config} for {spec}: {why}")
    kernels = []
    if spec.epilogue is not None and not spec.epilogue.is_identity:
        ins = "".join(", " + i.name for i in _inputs(spec))
        kernels.append(f"@triton.jit\ndef {name}_epilogue(acc{ins}):\n    return {spec.epilogue.expr}\n")
    ep = "".join(p + ", " for p in _ep_params(spec))
    idx = "idx_ptr, " if spec.return_indices else ""
    consts = ", ".join(f"{p}{a}: tl.constexpr" for p in ("K", "S", "P", "DIL") for a in "DHW")
    # the spatial sizes are compile-time constants: the flat output index is split into (od, oh, ow) per element,
    # and an integer division by a runtime value is a long instruction sequence where one by a constant is a
    # multiply and a shift; a new input size compiles anew
    sizes = ", ".join(f"{d}: tl.constexpr" for d in ("ID", "IH", "IW", "OD", "OH", "OW"))
    params = (f"x_ptr, out_ptr, {idx}{ep}NC, C, {sizes}, sx_n, sx_c, sx_d, sx_h, sx_w,\n"
              f"        {consts},\n"
              "        BLOCK_NC: tl.constexpr, BLOCK_O: tl.constexpr, INT64: tl.constexpr")
    glob = spec.mode == "global"
    head = [
        "pid = tl.program_id(0)",
        "n_out = OD * OH * OW",
        f"tiles_o = {'1' if glob else 'tl.cdiv(n_out, BLOCK_O)'}",
        "planes = (pid // tiles_o) * BLOCK_NC + tl.arange(0, BLOCK_NC)",  # output tiles of a plane run adjacent
        "pm = planes < NC",
        "n = planes // C",
        "c = planes % C",
        "n64 = n.to(tl.int64)",
        "c64 = c.to(tl.int64)",
        "base = n64 * sx_n + c64 * sx_c",
    ]
    if glob:
        head += ["PLANE = ID * IH * IW", "o = tl.arange(0, 1)"]
    else:
        head += ["o = (pid % tiles_o) * BLOCK_O + tl.arange(0, BLOCK_O)"]
    head += ["if INT64:", "    o = o.to(tl.int64)",
             "om = o < n_out",
             "ow = o % OW",
             "oh = (o // OW) % OH",
             "od = o // (OW * OH)"]
    body = _global_body(spec) if glob else _window_body(spec)
    tail = ["mask = pm[:, None] & om[None, :]"] + _epilogue_lines(spec, name) + [
        "dst = planes.to(tl.int64)[:, None] * n_out + o[None, :]",
        "tl.store(out_ptr + dst, res.to(out_ptr.dtype.element_ty), mask=mask)"]
    if spec.return_indices:
        tail.append("tl.store(idx_ptr + dst, best_i, mask=mask)")
    lines = head + body + tail
    kernels.append(f"@triton.jit\ndef {name}_kernel(\n        {params}):\n"
                   + "\n".join("    " + ln for ln in lines) + "\n")
    return Rendered("\n\n".join(kernels), _launcher(spec, config, name))


def _launcher(spec: PoolSpec, config: dict[str, Any], name: str) -> str:
    bnc, bo = config["BLOCK_NC"], config["BLOCK_O"]
    r = spec.rank
    L = [f"def {name}(x, *epilogue_inputs, view_shape=None):",
         f"    assert x.dim() in ({r + 1}, {r + 2}), x.shape",
         f"    lead = tuple(x.shape[:x.dim() - {r}])",
         "    x5 = x.unsqueeze(0) if len(lead) == 1 else x  # an unbatched input: one image",
         "    while x5.dim() < 5:",
         "        x5 = x5.unsqueeze(2)",
         "    N, C, ID, IH, IW = x5.shape"]
    k, s, p, d = spec.kernel, spec.stride, spec.padding, spec.dilation
    if spec.mode == "window":
        L.append(f"    OD, OH, OW = [(i + 2 * p_ - d_ * (k_ - 1) - 1 + ({'s_ - 1' if spec.ceil_mode else '0'})) "
                 f"// s_ + 1 for i, k_, s_, p_, d_ in zip((ID, IH, IW), {k}, {s}, {p}, {d})]")
        if spec.ceil_mode:  # the last window must start inside the input or its left padding
            L.append(f"    OD, OH, OW = [o - 1 if (o - 1) * s_ >= i + p_ else o for o, i, s_, p_ in "
                     f"zip((OD, OH, OW), (ID, IH, IW), {s}, {p})]")
        taps = k
    elif spec.mode == "adaptive":
        L.append(f"    OD, OH, OW = {spec.out_size}")
        L.append("    taps = [i // o if i % o == 0 else -(-i // o) + 1 for i, o in zip((ID, IH, IW), (OD, OH, OW))]")
        taps = None
    else:
        L.append("    OD, OH, OW = 1, 1, 1")
        L.append("    if x5.stride(4) != 1 or x5.stride(3) != IW or x5.stride(2) != IH * IW:")
        L.append("        x5 = x5.contiguous()  # the global reduction walks a plane as one contiguous row")
        taps = (1, 1, 1)
    out_dt = "torch." + spec.result_dtype
    L += [f"    out = torch.empty((N, C, OD, OH, OW), device=x.device, dtype={out_dt})",
          f"    shape = lead + (OD, OH, OW)[{3 - r}:]"]
    if spec.return_indices:
        L.append("    idx = torch.empty((N, C, OD, OH, OW), device=x.device, dtype=torch.int64)")
    L += ["    NC = N * C",
          "    if out.numel() == 0:",
          f"        return {'(out.view(shape), idx.view(shape))' if spec.return_indices else 'out.view(shape)'}",
          f"    assert len(epilogue_inputs) == {len(_inputs(spec))}, 'expected {len(_inputs(spec))} epilogue input(s)'",
          "    spans = [sum((e - 1) * abs(t) for e, t in zip(x5.shape[2:], x5.stride()[2:])), ID * IH * IW,",
          "             OD * OH * OW]"]
    args = []
    for j, i in enumerate(_inputs(spec)):
        v = f"e{j}"
        if i.kind == "scalar":
            L.append(f"    {v} = float(epilogue_inputs[{j}])")
            args.append(v)
        elif i.kind == "col":
            L.append(f"    {v} = epilogue_inputs[{j}].reshape(-1)")
            L.append(f"    assert {v}.numel() == C, ({v}.shape, C)")
            args.append(f"{v}.contiguous()")
        else:
            L.append(f"    {v} = epilogue_inputs[{j}].expand(view_shape or shape).reshape(N, C, OD, OH, OW)")
            L.append(f"    spans.append(sum((e - 1) * abs(t) for e, t in zip(out.shape[2:], {v}.stride()[2:])))")
            args += [v] + [f"{v}.stride({a})" for a in range(5)]
    ep = "".join(a + ", " for a in args)
    idx = "idx, " if spec.return_indices else ""
    kdhw = ", ".join(f"K{a}={t}" for a, t in zip("DHW", taps)) if taps is not None else \
        "KD=taps[0], KH=taps[1], KW=taps[2]"
    rest = ", ".join(f"{q}{a}={t}" for q, vals in (("S", s), ("P", p), ("DIL", d)) for a, t in zip("DHW", vals))
    tiles_o = "1" if spec.mode == "global" else f"triton.cdiv(OD * OH * OW, {bo})"
    L += ["    INT64 = max(spans) >= 2**31",
          f"    grid = (triton.cdiv(NC, {bnc}) * {tiles_o},)",
          f"    {name}_kernel[grid](x5, out, {idx}{ep}NC, C, ID, IH, IW, OD, OH, OW, *x5.stride(),",
          f"        {kdhw}, {rest},",
          f"        BLOCK_NC={bnc}, BLOCK_O={bo}, INT64=INT64, num_warps={config['num_warps']})",
          "    shape = view_shape or shape"]
    L.append(f"    return {'(out.view(shape), idx.view(shape))' if spec.return_indices else 'out.view(shape)'}")
    return "\n".join(L) + "\n"
