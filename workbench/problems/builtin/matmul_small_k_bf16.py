# Small-K bf16 GEMM (large square output, short reduction): C[M, N] = A[M, K] @ B[K, N].
import torch
import torch.nn as nn

M = 32768
N = 32768
K = 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
