"""Fused elementwise chains: one kernel reads each input once and writes one output.

The proposer hands over an expression (Triton source over fp32 values named after the inputs) and how each input
lines up with the output: `flat` (same shape, contiguous), `lastdim` (a vector broadcast along the last dimension, a
bias), `scalar` (one element), or `strided` (anything else broadcastable: up to 4-D index arithmetic with the input's
expanded strides; an output of higher rank is indexed in its dims merged down to 4 where the strides allow). Arithmetic
is fp32; the output is stored in its dtype.

Config: BLOCK (elements per program), num_warps, and PERSISTENT_WAVES (0: one program per block; k > 0: k waves of
one program per SM that stride over the blocks, fewer launches of work for very large tensors).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..core.target import H200
from .base import Rendered, grid_space, tl_dtype

KINDS = ("flat", "lastdim", "scalar", "strided")
NUM_SMS = H200.sms


@dataclasses.dataclass(frozen=True)
class ElementwiseInput:
    name: str
    kind: str  # one of KINDS
    is_bool: bool = False


@dataclasses.dataclass(frozen=True)
class ElementwiseSpec:
    expr: str
    inputs: tuple[ElementwiseInput, ...]
    out_dtype: str  # "float32", "bfloat16", ...
    numel: int
    rank: int = 1  # rank of the output (for strided inputs)
    # for an output of rank > 4: the output's dims merged (where every strided input's strides allow) to <= 4, the
    # shape strided inputs are indexed in; None: the output's own shape
    index_shape: tuple[int, ...] | None = None


class ElementwiseFamily:
    name = "elementwise"
    template_version = 1  # see base.Family

    def space(self, spec: ElementwiseSpec) -> list[dict[str, Any]]:
        return grid_space(BLOCK=(256, 512, 1024, 2048, 4096, 8192), num_warps=(2, 4, 8, 16),
                          PERSISTENT_WAVES=(0, 4))

    def check(self, spec: ElementwiseSpec, config: dict[str, Any]) -> str | None:
        threads = config["num_warps"] * 32
        if config["BLOCK"] < threads:
            return f"BLOCK {config['BLOCK']} < {threads} threads: idle threads"
        if config["BLOCK"] // threads > 64:
            return f"{config['BLOCK'] // threads} elements per thread per input: register pressure"
        if config["PERSISTENT_WAVES"] and spec.numel < config["BLOCK"] * NUM_SMS * config["PERSISTENT_WAVES"] * 2:
            return "persistent loop over too few blocks to pay"
        return None

    def default(self, spec: ElementwiseSpec) -> dict[str, Any]:
        return {"BLOCK": 4096 if spec.numel >= 1 << 20 else 1024, "num_warps": 8 if spec.numel >= 1 << 20 else 4,
                "PERSISTENT_WAVES": 0}

    def render(self, spec: ElementwiseSpec, config: dict[str, Any], name: str) -> Rendered:
        big = spec.numel >= 2 ** 31  # 64-bit offsets only where 32-bit ones would overflow
        args, loads = [], []
        for inp in spec.inputs:
            n = inp.name
            cast = "" if inp.is_bool else ".to(tl.float32)"
            if inp.kind == "scalar":
                args.append(f"{n}_ptr")
                loads.append(f"{n} = tl.load({n}_ptr){cast}")
                continue
            if inp.kind == "flat":
                args.append(f"{n}_ptr")
                idx = "offs"
            elif inp.kind == "lastdim":
                args += [f"{n}_ptr", f"{n}_len"]
                idx = f"offs % {n}_len"
            else:  # strided: offs -> 4-D index of the output -> input offset
                args += [f"{n}_ptr", f"{n}_s0", f"{n}_s1", f"{n}_s2", f"{n}_s3"]
                idx = f"i0 * {n}_s0 + i1 * {n}_s1 + i2 * {n}_s2 + i3 * {n}_s3"
            loads.append(f"{n} = tl.load({n}_ptr + {idx}, mask=mask, other=0){cast}")
        strided = any(i.kind == "strided" for i in spec.inputs)
        waves = config["PERSISTENT_WAVES"]
        ind = "        " if waves else "    "
        pid = "tl.program_id(0).to(tl.int64)" if big else "tl.program_id(0)"
        lines = ["@triton.jit",
                 f"def {name}_kernel({', '.join(args + ['out_ptr', 'n'] + (['d1', 'd2', 'd3'] if strided else []))}, "
                 f"BLOCK: tl.constexpr):"]
        if waves:
            lines.append(f"    for start in range({pid} * BLOCK, n, tl.num_programs(0) * BLOCK):")
        else:
            lines.append(f"    start = {pid} * BLOCK")
        lines += [f"{ind}offs = start + tl.arange(0, BLOCK)", f"{ind}mask = offs < n"]
        if strided:
            lines += [f"{ind}i3 = offs % d3", f"{ind}rest = offs // d3", f"{ind}i2 = rest % d2",
                      f"{ind}rest = rest // d2", f"{ind}i1 = rest % d1", f"{ind}i0 = rest // d1"]
        lines += [ind + line for line in loads]
        lines += [f"{ind}out = {spec.expr}",
                  f"{ind}tl.store(out_ptr + offs, out.to({tl_dtype(spec.out_dtype)}), mask=mask)"]
        kernel = "\n".join(lines) + "\n"

        # launcher: every input a tensor (scalars as 1-element tensors); the output has the broadcast shape
        params = ", ".join(i.name for i in spec.inputs)
        first = next((i.name for i in spec.inputs if i.kind != "scalar"), spec.inputs[0].name)
        body = [f"def {name}({params}, out_shape):",
                f"    out = torch.empty(out_shape, device={first}.device, dtype=torch.{spec.out_dtype})",
                "    n = out.numel()"]
        call = []
        for inp in spec.inputs:
            n = inp.name
            if inp.kind == "flat":
                body.append(f"    {n} = {n}.contiguous()")
                call.append(n)
            elif inp.kind == "scalar":
                body.append(f"    {n} = {n}.reshape(1)")
                call.append(n)
            elif inp.kind == "lastdim":
                body.append(f"    {n} = {n}.contiguous()")
                call += [n, f"{n}.numel()"]
            else:
                view = f".reshape({spec.index_shape!r})" if spec.index_shape is not None else ""  # a view: dims merge
                body += [f"    {n}_e = {n}.expand(out_shape){view}",
                         f"    {n}_st = [0] * (4 - {n}_e.dim()) + list({n}_e.stride())"]
                call += [f"{n}_e", f"{n}_st[0]", f"{n}_st[1]", f"{n}_st[2]", f"{n}_st[3]"]
        call += ["out", "n"]
        if strided:
            shape = "out_shape" if spec.index_shape is None else repr(spec.index_shape)
            body.append(f"    dims = [1] * (4 - len({shape})) + list({shape})")
            call += ["dims[1]", "dims[2]", "dims[3]"]
        block = config["BLOCK"]
        grid = f"max(1, min(triton.cdiv(n, {block}), {NUM_SMS * waves}))" if waves else f"triton.cdiv(n, {block})"
        body += [f"    {name}_kernel[({grid},)]({', '.join(call)}, BLOCK={block}, num_warps={config['num_warps']})",
                 "    return out"]
        return Rendered(kernel, "\n".join(body) + "\n")


ELEMENTWISE = ElementwiseFamily()
