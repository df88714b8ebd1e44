"""A correction to Triton 3.6's CPU interpreter, applied only in CPU workers (TRITON_INTERPRET=1).

The interpreter stores bf16 values as raw uint16 bits and its `tl.dot` multiplies those bits as integers, so every
bf16 matmul it runs is wrong by orders of magnitude (seen here: relative error 1e10 on a 16x16 product). We widen bf16
operands to fp32 before the product, which is what the hardware's bf16 MMA computes (exact products, fp32
accumulation). Nothing else in the interpreter is changed.
"""
from __future__ import annotations

import numpy as np


def apply() -> None:
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_dot, "_wb_fixed", False):
        return
    original = builder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar == tl.bfloat16 or b.dtype.scalar == tl.bfloat16:
            a_data = interpreter._convert_float(a.data, tl.bfloat16, tl.float32, None).view(np.float32) \
                if a.dtype.scalar == tl.bfloat16 else a.data.astype(np.float32)
            b_data = interpreter._convert_float(b.data, tl.bfloat16, tl.float32, None).view(np.float32) \
                if b.dtype.scalar == tl.bfloat16 else b.data.astype(np.float32)
            out = np.matmul(a_data, b_data, dtype=np.float32).astype(d.data.dtype) + d.data
            return interpreter.TensorHandle(out, d.dtype.scalar)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    create_dot._wb_fixed = True
    builder.create_dot = create_dot
