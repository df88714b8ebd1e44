# GEMM + bias + ReLU + scale: y = relu(x @ W^T + b) * scale (nn.Linear), bf16.
import torch
import torch.nn as nn

batch_size = 8192
in_features = 8192
out_features = 8192
scale = 0.5


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features).to(torch.bfloat16)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=torch.bfloat16)]


def get_init_inputs():
    return [in_features, out_features, scale]
