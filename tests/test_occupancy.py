"""The occupancy arithmetic (emmy/backend/occupancy.py) against cases worked by hand, what
ptxas reports through NVRTC (registers, spills, static shared memory), and the resources
`emmy compile --explain` shows per kernel."""

from __future__ import annotations

import pytest

from emmy.backend.nvrtc import compile_cuda
from emmy.backend.occupancy import DEVICES, Limit, devices_of, occupancy
from emmy.base.identity import KNOWN_TARGETS
from emmy.cli import main

A100 = DEVICES["nvidia-a100-sxm4-80gb-sm80"]
H100 = DEVICES["nvidia-h100-80gb-hbm3-sm90"]
H200 = DEVICES["nvidia-h200-sm90"]
KIB = 1024

# `staged` has 2 KiB of static shared memory; `crowded` keeps 64 floats live per thread,
# which needs more than 64 registers, and spills when held to 32
SOURCE = r"""
#include "emmy_device.cuh"
EMMY_KERNEL void staged(const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float tile[512];
  tile[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  y[threadIdx.x] = tile[511 - threadIdx.x];
}
EMMY_KERNEL void crowded(const float* __restrict__ x, float* __restrict__ y) {
  float acc[64];
  #pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = x[threadIdx.x * 64 + i];
  #pragma unroll
  for (int r = 0; r < 8; ++r)
    #pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = acc[i] * acc[(i + r + 1) % 64] + 1.0f;
  #pragma unroll
  for (int i = 0; i < 64; ++i) y[threadIdx.x * 64 + i] = acc[i];
}
"""


def test_the_table_holds_the_known_devices_by_their_identities() -> None:
    assert set(DEVICES) <= set(KNOWN_TARGETS)
    assert [d.identity for d in devices_of("sm_90")] == [H100.identity, H200.identity]
    assert devices_of("sm_80") == [A100] and devices_of("sm_89") == []
    assert (H100.sms, H200.sms, A100.sms) == (132, 132, 108)


def test_256_threads_of_64_registers_with_48_kib_blocks() -> None:
    # 8 warps of 64 x 32 = 2048 registers: 16384 per sub-partition hold 8 warps each, 32
    # warps per SM, 4 blocks. Shared memory: 48 KiB + the 1 KiB reserved = 50176 B a block;
    # A100's 164 KiB hold 3 of them, H100's 228 KiB 4
    a100 = occupancy(A100, threads=256, registers=64, shared_bytes=48 * KIB)
    assert (a100.blocks_per_sm, a100.active_warps, a100.percent) == (3, 24, 37.5)
    assert a100.limits == (Limit.SHARED_MEMORY,)
    h100 = occupancy(H100, threads=256, registers=64, shared_bytes=48 * KIB)
    assert (h100.blocks_per_sm, h100.active_warps, h100.percent) == (4, 32, 50.0)
    assert h100.limits == (Limit.REGISTERS, Limit.SHARED_MEMORY)
    assert h100.describe() == "4 blocks/SM, 32 warps, 50% (registers, shared memory)"


@pytest.mark.parametrize(
    "threads, registers, shared, blocks, limits",
    [
        # 40 x 32 = 1280 registers a warp: 12 warps per sub-partition, 48 per SM, 16 blocks
        # of 3 warps (warps alone would allow 21)
        (96, 40, 0, 16, (Limit.REGISTERS,)),
        # 255 registers round up to 8192 a warp: 2 warps per sub-partition, 2 blocks of 4
        (128, 255, 0, 2, (Limit.REGISTERS,)),
        # 32 registers: registers allow 64 warps, the same as the SM's warps
        (1024, 32, 0, 2, (Limit.WARPS, Limit.REGISTERS)),
        # 1-warp blocks: at most 32 blocks an SM
        (32, 16, 0, 32, (Limit.BLOCKS,)),
        # 100 KiB + 1 KiB reserved: 2 blocks in 228 KiB
        (128, 32, 100 * KIB, 2, (Limit.SHARED_MEMORY,)),
    ],
)
def test_hand_computed_occupancies_on_h100(
    threads: int, registers: int, shared: int, blocks: int, limits: tuple[Limit, ...]
) -> None:
    result = occupancy(H100, threads, registers, shared)
    assert (result.blocks_per_sm, result.limits) == (blocks, limits)
    assert result.active_warps == blocks * -(-threads // 32) and not result.reason


def test_a_block_that_does_not_fit_has_zero_occupancy_and_says_why() -> None:
    # 65 registers round up to 2304 a warp; 32 warps of them need 73728 > 65536
    registers = occupancy(H100, threads=1024, registers=65, shared_bytes=0)
    assert (registers.blocks_per_sm, registers.limits) == (0, (Limit.REGISTERS,))
    assert registers.describe() == (
        "cannot launch: 65 registers x 1024 threads need 73728 registers per block, at most 65536"
    )
    # 200 KiB fit an H100 block (at most 227 KiB) but not an A100 one (at most 163 KiB)
    assert occupancy(H100, 128, 32, 200 * KIB).blocks_per_sm == 1
    shared = occupancy(A100, 128, 32, 200 * KIB)
    assert (shared.blocks_per_sm, shared.limits) == (0, (Limit.SHARED_MEMORY,))
    assert "204800 B of shared memory per block, at most 166912 B" in shared.reason
    threads = occupancy(A100, 2048, 16, 0)
    assert (threads.blocks_per_sm, threads.limits) == (0, (Limit.THREADS,))


def test_nvrtc_reports_registers_spills_and_static_shared_memory() -> None:
    resources = compile_cuda(SOURCE, "sm_90").resources
    staged, crowded = resources["staged"], resources["crowded"]
    assert staged.shared_static == 512 * 4 and staged.registers > 0 and not staged.spill_stores
    assert crowded.registers > 64 and not crowded.spill_stores and not crowded.spill_loads
    # more than 64 registers: a 1024-thread block of it cannot launch, a 256-thread one can
    assert not occupancy(H100, 1024, crowded.registers, 0).blocks_per_sm
    assert occupancy(H100, 256, crowded.registers, 0).blocks_per_sm >= 1
    held = compile_cuda(SOURCE, "sm_80", "--maxrregcount=32").resources["crowded"]
    assert held.registers <= 32 and held.spill_stores > 0 and held.spill_loads > 0


def test_explain_shows_each_kernels_resources_and_occupancy(capsys) -> None:
    expression = "torch.softmax(torch.randn(16, 96), -1)"
    assert (
        main(["compile", "-c", expression, "--target", "nvidia-a100-sxm4-80gb-sm80", "--explain"])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("resources (ptxas, sm_80)"))
    header, row = lines[start + 1].split(), lines[start + 2]
    assert header[:3] == ["kernel", "registers", "spills"] and header[-1] == A100.identity
    name, registers, spills, unit, smem = row.split()[:5]
    assert name == "softmax_0" and int(registers) > 0 and (spills, unit) == ("0/0", "B")
    # the launch's dynamic shared memory is counted with the static
    assert smem.startswith("0+") and int(smem[2:]) > 0
    assert "blocks/SM" in row and "%" in row


def test_explain_on_the_emulator_says_why_it_shows_no_resources(capsys) -> None:
    expression = "torch.softmax(torch.randn(16, 96), -1)"
    assert main(["compile", "-c", expression, "--target", "emu", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "resources: none on emu: g++ compiles its kernels" in out
    assert "blocks/SM" not in out
