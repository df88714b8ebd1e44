# SwiGLU activation: split x [tokens, 2*hidden] into a, b and return silu(a) * b, bf16. Memory-bound.
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32768
hidden_dim = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return F.silu(a) * b


def get_inputs():
    return [torch.randn(batch_size, 2 * hidden_dim, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
