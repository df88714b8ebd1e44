# Bias + GELU + residual: y = gelu(x + bias) + r with a broadcast [dim] bias, two fp32 inputs. Memory-bound.
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16384
dim = 16384


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return F.gelu(x + self.bias) + r


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
