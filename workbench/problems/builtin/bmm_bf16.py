# Batched bf16 GEMM (torch.bmm): C[b] = A[b] @ B[b] for b in range(batch_size).
import torch
import torch.nn as nn

batch_size = 64
M = 2048
N = 2048
K = 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


def get_inputs():
    return [torch.randn(batch_size, M, K, dtype=torch.bfloat16), torch.randn(batch_size, K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
