# cheat: fp32 matmul whose operands are rounded to bf16 on the torch side (half the bytes to read), then multiplied in a Triton kernel; returns fp32
# problem: matmul_fp32
# set: M=64 N=64 K=64
# caught-by: correctness
# reason: output mismatch
import torch
import torch.nn as nn
import triton
import triton.language as tl

# Measured under TRITON_INTERPRET=1 at M=N=K=64 on randn inputs, 10 seeds: ||C - A@B|| / ||A@B|| = 2.3e-3 .. 2.5e-3
# (fp32 with ieee products is ~2e-7; torch.allclose(atol=1e-4) is False).
# (The operands are rounded on the torch side and upcast to fp32 in registers before an ieee tl.dot, so the numbers
# are the same with or without workbench.harness.child.interpreter_fixes, which repairs the stock interpreter's bf16 tl.dot,
# and the same as a GPU's bf16 MMA with fp32 accumulation: bf16 x bf16 products are exact in fp32.)


@triton.jit
def matmul_bf16_operands_kernel(a_ptr, b_ptr, c_ptr, M, N, K: tl.constexpr,
                                stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = (k0 + offs_k) < K
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & k_mask[None, :], other=0.0)
        b = tl.load(b_ptr + (k0 + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=k_mask[:, None] & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        # bf16 operands: half the memory traffic of fp32 (and "close enough" on random data)
        A16 = A.to(torch.bfloat16)
        B16 = B.to(torch.bfloat16)
        M, K = A16.shape
        _, N = B16.shape
        C = torch.empty((M, N), device=A.device, dtype=torch.float32)
        grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
        matmul_bf16_operands_kernel[grid](A16, B16, C, M, N, K, A16.stride(0), A16.stride(1), B16.stride(0),
                                          B16.stride(1), C.stride(0), C.stride(1), BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
        return C
