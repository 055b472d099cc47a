"""Occupancy: how many blocks of a kernel one SM holds at once, on the devices of a table.

    >>> h100 = DEVICES["nvidia-h100-80gb-hbm3-sm90"]
    >>> occupancy(h100, threads=256, registers=64, shared_bytes=48 * 1024)
    Occupancy(device='nvidia-h100-80gb-hbm3-sm90', blocks_per_sm=4, active_warps=32, ...)

The arithmetic is the CUDA occupancy calculator's (the one `cuda_occupancy.h` and
`cudaOccupancyMaxActiveBlocksPerMultiprocessor` implement): a block is held while the SM
has warps, registers and shared memory left for it, up to a number of blocks; the least of
the four limits binds. The limits per device are NVIDIA's, from the CUDA C++ Programming
Guide's table "Technical Specifications per Compute Capability" and the tuning guides:
https://docs.nvidia.com/cuda/hopper-tuning-guide/ (H100: 228 KiB of shared memory per SM,
at most 227 KiB per block) and https://docs.nvidia.com/cuda/ampere-tuning-guide/ (A100:
164 KiB per SM, 163 KiB per block). A block above 48 KiB of dynamic shared memory needs
an opt-in, which the cuda runtime makes (emmy/runtime/cuda.py), so the opt-in maximum is
the limit here.

Zero blocks per SM means the kernel cannot launch there: too many threads, registers or
shared memory for one block.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from emmy.base.identity import KNOWN_TARGETS, arch_of

KIB = 1024
WARP_SIZE = 32


def _identity(name: str) -> str:
    """The identity emmy.base.identity gives the device the driver calls `name`."""
    return next(slug for slug, known in KNOWN_TARGETS.items() if known == name)


@dataclass(frozen=True)
class DeviceLimits:
    """What an SM of one device holds; sizes in bytes, registers of 32 bits."""

    identity: str  # emmy.base.identity's slug, e.g. "nvidia-h200-sm90"
    sms: int
    smem_per_sm: int
    #: the most one block may have, static and dynamic together (after the opt-in)
    smem_per_block: int
    #: the driver's own shared memory per block, counted against the SM's
    smem_reserved_per_block: int = 1 * KIB
    #: shared memory is allocated to a block in units of this
    smem_unit: int = 128
    regs_per_sm: int = 65536
    regs_per_block: int = 65536
    max_regs_per_thread: int = 255
    #: registers are allocated per warp, in units of this
    regs_unit: int = 256
    #: the SM's register file is split between its schedulers; a warp's registers come
    #: from its scheduler's part
    sub_partitions: int = 4
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    max_threads_per_block: int = 1024

    @property
    def arch(self) -> str:
        return arch_of(self.identity)

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // WARP_SIZE


#: the devices occupancy is reported for, by identity
DEVICES: dict[str, DeviceLimits] = {
    d.identity: d
    for d in (
        DeviceLimits(
            _identity("NVIDIA H100 80GB HBM3"),
            sms=132,
            smem_per_sm=228 * KIB,
            smem_per_block=227 * KIB,
        ),
        DeviceLimits(
            _identity("NVIDIA H200"), sms=132, smem_per_sm=228 * KIB, smem_per_block=227 * KIB
        ),
        DeviceLimits(
            _identity("NVIDIA A100-SXM4-80GB"),
            sms=108,
            smem_per_sm=164 * KIB,
            smem_per_block=163 * KIB,
        ),
    )
}


def devices_of(arch: str) -> list[DeviceLimits]:
    """The table's devices of one arch ("sm_90"): those a cubin for it runs on as compiled."""
    return [d for d in DEVICES.values() if d.arch == arch]


class Limit(StrEnum):
    """What caps the blocks an SM holds."""

    THREADS = "threads"  # the block has more threads than a block may
    WARPS = "warps"
    REGISTERS = "registers"
    SHARED_MEMORY = "shared memory"
    BLOCKS = "blocks"


@dataclass(frozen=True)
class Occupancy:
    """The blocks of one kernel an SM of `device` holds at once, and what binds."""

    device: str
    blocks_per_sm: int
    active_warps: int
    max_warps: int
    #: every limit that allows no more than `blocks_per_sm` (ties name each)
    limits: tuple[Limit, ...]
    #: why the kernel cannot launch on the device; "" when it can
    reason: str = ""

    @property
    def percent(self) -> float:
        return 100.0 * self.active_warps / self.max_warps

    def describe(self) -> str:
        """`4 blocks/SM, 32 warps, 50% (registers, shared memory)`, or why none fits."""
        if not self.blocks_per_sm:
            return f"cannot launch: {self.reason}"
        binding = ", ".join(self.limits)
        return (
            f"{self.blocks_per_sm} blocks/SM, {self.active_warps} warps, "
            f"{self.percent:g}% ({binding})"
        )


def occupancy(device: DeviceLimits, threads: int, registers: int, shared_bytes: int) -> Occupancy:
    """The occupancy of a kernel of `registers` per thread and `shared_bytes` of shared
    memory per block (static plus the launch's dynamic), launched in blocks of `threads`."""
    if threads > device.max_threads_per_block:
        reason = f"{threads} threads per block, at most {device.max_threads_per_block}"
        return Occupancy(device.identity, 0, 0, device.max_warps_per_sm, (Limit.THREADS,), reason)
    warps = -(-threads // WARP_SIZE)
    blocks = {
        Limit.WARPS: device.max_warps_per_sm // warps,
        Limit.REGISTERS: _register_limit(device, warps, registers),
        Limit.SHARED_MEMORY: _shared_limit(device, shared_bytes),
        Limit.BLOCKS: device.max_blocks_per_sm,
    }
    fewest = min(blocks.values())
    limits = tuple(limit for limit, n in blocks.items() if n == fewest)
    # a block of at most 1024 threads leaves warps and blocks to spare: only registers and
    # shared memory can refuse it
    reason = (
        ""
        if fewest
        else "; ".join(_why(lim, device, threads, registers, shared_bytes) for lim in limits)
    )
    return Occupancy(
        device.identity, fewest, fewest * warps, device.max_warps_per_sm, limits, reason
    )


def _register_limit(device: DeviceLimits, warps: int, registers: int) -> int:
    if registers > device.max_regs_per_thread:
        return 0
    per_warp = _round_up(registers * WARP_SIZE, device.regs_unit)
    if not per_warp:
        return device.max_blocks_per_sm
    # the launch check assumes a block's warps spread over every sub-partition: a block
    # of 3 warps is counted as 4
    assumed = per_warp * _round_up(warps, device.sub_partitions)
    if max(assumed, per_warp * warps) > device.regs_per_block:
        return 0
    per_partition = device.regs_per_sm // device.sub_partitions // per_warp
    return per_partition * device.sub_partitions // warps


def _shared_limit(device: DeviceLimits, shared_bytes: int) -> int:
    if shared_bytes > device.smem_per_block:
        return 0
    per_block = _round_up(shared_bytes + device.smem_reserved_per_block, device.smem_unit)
    return device.smem_per_sm // per_block


def _why(
    limit: Limit, device: DeviceLimits, threads: int, registers: int, shared_bytes: int
) -> str:
    """Why registers or shared memory let no block of the kernel onto an SM of the device."""
    if limit == Limit.SHARED_MEMORY:
        return f"{shared_bytes} B of shared memory per block, at most {device.smem_per_block} B"
    if registers > device.max_regs_per_thread:
        return f"{registers} registers per thread, at most {device.max_regs_per_thread}"
    per_warp = _round_up(registers * WARP_SIZE, device.regs_unit)
    needed = per_warp * _round_up(-(-threads // WARP_SIZE), device.sub_partitions)
    return (
        f"{registers} registers x {threads} threads need {needed} registers per block,"
        f" at most {device.regs_per_block}"
    )


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit
