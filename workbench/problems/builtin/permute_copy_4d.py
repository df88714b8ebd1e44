# Permute copy of a 4-D tensor: [batch, seq, heads, head_dim] -> [batch, heads, seq, head_dim], contiguous, bf16.
import torch
import torch.nn as nn

batch_size = 64
seq_len = 4096
num_heads = 32
head_dim = 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 2, 1, 3).contiguous()


def get_inputs():
    return [torch.randn(batch_size, seq_len, num_heads, head_dim, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
