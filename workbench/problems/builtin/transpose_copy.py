# Transpose copy: x.transpose(0, 1).contiguous() of a [rows, cols] fp32 matrix.
import torch
import torch.nn as nn

rows = 16384
cols = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(0, 1).contiguous()


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
