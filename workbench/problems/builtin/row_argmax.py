# Row argmax: index of the largest value of each row, fp32 input, int64 output (must match exactly).
import torch
import torch.nn as nn

batch_size = 32768
dim = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
