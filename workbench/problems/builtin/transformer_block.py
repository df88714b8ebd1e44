# Pre-LN transformer block, bf16: x + attn(LN(x)) (nn.Linear q/k/v/o, explicit softmax), then + MLP(LN(x)) with GELU.
import math

import torch
import torch.nn as nn

batch_size = 4
seq_len = 2048
d_model = 2048
num_heads = 16
d_ff = 8192


class Model(nn.Module):
    def __init__(self, d_model: int, num_heads: int, d_ff: int):
        super().__init__()
        self.num_heads = num_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.o_proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(d_ff, d_model)
        for ln in (self.ln1, self.ln2):  # non-trivial affine parameters, so skipping them is caught
            nn.init.normal_(ln.weight, mean=1.0, std=0.2)
            nn.init.normal_(ln.bias, std=0.2)
        self.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.num_heads
        y = self.ln1(x)
        q = self.q_proj(y).view(b, s, h, d // h).transpose(1, 2)
        k = self.k_proj(y).view(b, s, h, d // h).transpose(1, 2)
        v = self.v_proj(y).view(b, s, h, d // h).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        attn = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.o_proj(attn)
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model, dtype=torch.bfloat16)]


def get_init_inputs():
    return [d_model, num_heads, d_ff]
