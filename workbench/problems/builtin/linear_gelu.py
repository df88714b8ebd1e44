# A linear layer followed by GELU (tanh approximation), fp32; tf32 matrix units accepted.
import torch
import torch.nn as nn

WORKBENCH_PRECISION = "tf32"
batch_size = 16384
in_features = 4096
out_features = 4096
shape = (batch_size, in_features)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x), approximate="tanh")


def get_inputs():
    return [torch.randn(*shape)]


def get_init_inputs():
    return [in_features, out_features]
