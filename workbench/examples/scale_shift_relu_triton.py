"""relu(x * scale + shift) in one pass: one read and one write per element."""
import torch
import triton
import triton.language as tl


@triton.jit
def _scale_shift_relu(x_ptr, out_ptr, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x * scale + shift, 0.0), mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _scale_shift_relu[(triton.cdiv(n, 4096),)](x, out, n, self.scale, self.shift, BLOCK=4096, num_warps=8)
        return out
