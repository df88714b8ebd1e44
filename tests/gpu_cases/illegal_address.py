# A kernel that writes far outside its output: an illegal address that breaks the CUDA context.
import torch
import triton
import triton.language as tl


@triton.jit
def _bad(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs * 1048576 * 64, x)  # no mask, stride far past the allocation


class ModelNew(torch.nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _bad[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
