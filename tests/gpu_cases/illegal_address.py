# A kernel that writes far outside its output: an illegal address that breaks the CUDA context.
import torch
import triton
import triton.language as tl


@triton.jit
def _bad(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    # no mask, and a stride of 2**40 elements (4 TiB): past the end of the GPU's memory, so no element can land in
    # another live allocation. (A 256 MiB stride did, once earlier tests had grown the allocator's pool: the write hit
    # the input and the harness reported "input mutated" instead of a broken context; seen on the H200.)
    tl.store(out_ptr + offs.to(tl.int64) * (1 << 40), x)


class ModelNew(torch.nn.Module):
    def __init__(self, scale: float, shift: float):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _bad[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
