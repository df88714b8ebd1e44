# Row max: the largest value of each row (torch.amax over the last dimension), fp32.
import torch
import torch.nn as nn

batch_size = 32768
dim = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
