# MLP: three nn.Linear layers with ReLU between them (sizes in layer_sizes), fp32; tf32 matrix units accepted.
import torch
import torch.nn as nn

WORKBENCH_PRECISION = "tf32"
batch_size = 4096
layer_sizes = [4096, 4096, 4096, 4096]


class Model(nn.Module):
    def __init__(self, layer_sizes: list):
        super().__init__()
        layers = []
        for i, (n_in, n_out) in enumerate(zip(layer_sizes[:-1], layer_sizes[1:])):
            if i > 0:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(n_in, n_out))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def get_inputs():
    return [torch.randn(batch_size, layer_sizes[0])]


def get_init_inputs():
    return [layer_sizes]
