# Tall-skinny bf16 GEMM (many rows, small N and K): C[M, N] = A[M, K] @ B[K, N].
import torch
import torch.nn as nn

M = 524288
N = 1024
K = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
