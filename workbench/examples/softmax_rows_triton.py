"""Row softmax with one program per row; the whole row stays in registers (one read, one write)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_rows(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * stride_out + cols, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.empty_like(x2)
        block = triton.next_power_of_2(x2.shape[1])
        warps = 4 if block <= 2048 else (8 if block <= 8192 else 16)
        _softmax_rows[(x2.shape[0],)](x2, out, x2.shape[1], x2.stride(0), out.stride(0), BLOCK=block, num_warps=warps)
        return out.reshape(x.shape)
