# cheat: forward spins forever before doing any work (while True: pass)
# problem: scale_shift_relu
# set: batch_size=16 dim=1024
# caught-by: compile
# reason: timed out
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_shift_relu_kernel(x_ptr, y_ptr, n_elements, scale, shift, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.maximum(x * scale + shift, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:
            pass
        y = torch.empty_like(x)
        n = x.numel()
        scale_shift_relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, self.scale, self.shift, BLOCK_SIZE=1024)
        return y
