# GEMM + softmax: softmax(x @ W^T + b) over the out features (nn.Linear), fp32; tf32 matrix units accepted.
import torch
import torch.nn as nn

WORKBENCH_PRECISION = "tf32"
batch_size = 16384
in_features = 4096
out_features = 4096


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.linear(x), dim=-1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
