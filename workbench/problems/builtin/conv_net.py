# Small conv net: 2 x (Conv2d 3x3 + ReLU + MaxPool2d 2x2) on NCHW images, fp32; tf32 accepted (cuDNN's default).
import torch
import torch.nn as nn

WORKBENCH_PRECISION = "tf32"
batch_size = 128
in_channels = 3
height = 224
width = 224
channels1 = 64
channels2 = 128


class Model(nn.Module):
    def __init__(self, in_channels: int, channels1: int, channels2: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, channels1, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels1, channels2, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, channels1, channels2]
