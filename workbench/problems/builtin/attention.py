# Non-causal attention written out: softmax(Q @ K^T / sqrt(head_dim)) @ V on [batch, heads, seq, head_dim], fp16.
import math

import torch
import torch.nn as nn

batch_size = 4
num_heads = 16
seq_len = 4096
head_dim = 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        return torch.softmax(scores, dim=-1) @ v


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(*shape, dtype=torch.float16) for _ in range(3)]


def get_init_inputs():
    return []
