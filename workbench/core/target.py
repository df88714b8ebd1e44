"""Hardware facts of the GPU the kernels are built for, named once.

The compile stage builds for sm_90 and the shipped data was measured on an NVIDIA H200, so the H200 is the default
target. Shared memory has two limits that are easy to confuse: what one block may opt into (227 KiB) and what one
SM holds (228 KiB, of which 1 KiB per resident block is reserved by the driver).
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Target:
    name: str  # as torch.cuda.get_device_name reports it
    capability: int  # compute capability, e.g. 90 for sm_90
    sms: int
    regs_per_sm: int
    max_regs_per_block: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    smem_per_block: int  # bytes one block may opt into
    smem_per_sm: int  # bytes one SM holds
    reserved_smem_per_block: int  # bytes the driver reserves per resident block
    reg_alloc_unit: int  # registers are allocated per warp in units of this many
    smem_alloc_unit: int
    subpartitions: int  # warp schedulers per SM

    @property
    def device(self) -> str:
        """The device string evaluations measured on this GPU are stored under."""
        return f"cuda:{self.name}"


H200 = Target(name="NVIDIA H200", capability=90, sms=132, regs_per_sm=65536, max_regs_per_block=65536,
              max_warps_per_sm=64, max_blocks_per_sm=32, smem_per_block=227 * 1024, smem_per_sm=228 * 1024,
              reserved_smem_per_block=1024, reg_alloc_unit=256, smem_alloc_unit=128, subpartitions=4)
