# cheat: each program stores its block pre-activation, then applies relu to the block that program i+1 stores (an inter-block race)
# problem: scale_shift_relu
# set: batch_size=16 dim=1024
# caught-by: correctness
# reason: output
import torch
import torch.nn as nn
import triton
import triton.language as tl

# Program i reads the OUTPUT block written by program i+1 of the same launch. Nothing orders the two programs: on a
# GPU the result depends on scheduling (a race: nondeterministic or wrong); under the interpreter the programs run in
# order, so program i reads the neighbour's block before it is written, and then program i+1 overwrites it with
# pre-activation values, so every block but the last misses the relu (output mismatch).


@triton.jit
def pipelined_scale_shift_relu_kernel(x_ptr, y_ptr, n_elements, scale, shift, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    z = x * scale + shift
    last = (pid + 1) * BLOCK_SIZE >= n_elements
    # the last program has no neighbour and finishes its own block; the others store the pre-activation ...
    tl.store(y_ptr + offsets, tl.where(last, tl.maximum(z, 0.0), z), mask=mask)
    # ... and "overlap the epilogue": apply the relu to the block the next program has (supposedly) stored
    nxt = offsets + BLOCK_SIZE
    nmask = nxt < n_elements
    zn = tl.load(y_ptr + nxt, mask=nmask, other=0.0)
    tl.store(y_ptr + nxt, tl.maximum(zn, 0.0), mask=nmask)


class ModelNew(nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        n = x.numel()
        pipelined_scale_shift_relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, self.scale, self.shift, BLOCK_SIZE=1024)
        return y
