# Row variance and mean (torch.var_mean over the last dimension, unbiased variance), fp32; two outputs.
import torch
import torch.nn as nn

batch_size = 32768
dim = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        return torch.var_mean(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
