# Causal attention written out: softmax(mask(Q @ K^T / sqrt(head_dim))) @ V, future keys masked to -inf, bf16.
import math

import torch
import torch.nn as nn

batch_size = 8
num_heads = 16
seq_len = 4096
head_dim = 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seq = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=q.device), diagonal=1)
        scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(*shape, dtype=torch.bfloat16) for _ in range(3)]


def get_init_inputs():
    return []
