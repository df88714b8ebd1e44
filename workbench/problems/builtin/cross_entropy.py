# Cross-entropy loss (F.cross_entropy, mean over the batch) of fp32 logits [batch, classes] and int64 targets.
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16384
num_classes = 32000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
