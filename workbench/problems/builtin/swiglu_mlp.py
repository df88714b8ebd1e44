# SwiGLU MLP: w2(silu(w1(x)) * w3(x)) with bias-free nn.Linear layers, bf16.
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4096
dim = 4096
hidden_dim = 11008


class Model(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False).to(torch.bfloat16)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False).to(torch.bfloat16)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False).to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def get_inputs():
    return [torch.randn(batch_size, dim, dtype=torch.bfloat16)]


def get_init_inputs():
    return [dim, hidden_dim]
