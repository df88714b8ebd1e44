# LayerNorm over the last dimension with a learned weight and bias (nn.LayerNorm, eps 1e-5), fp32.
import torch
import torch.nn as nn

batch_size = 65536
dim = 8192


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        # Non-trivial affine parameters, so an implementation that ignores them is caught.
        nn.init.normal_(self.norm.weight, mean=1.0, std=0.5)
        nn.init.normal_(self.norm.bias, std=0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
