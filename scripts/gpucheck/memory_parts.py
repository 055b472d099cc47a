"""The memory-bound parts: the device's copy bandwidth, and softmax, the norms and elementwise
at 64M elements beside torch."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from gpucheck.context import Context, Problem, kernel_sweep

# --- the speed parts ---------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryBound:
    """A memory-bound family at its target shape: key, input shapes, output shape, bytes a
    run moves, and torch eager's way to compute it."""

    key: dict
    inputs: list
    output: tuple
    moved: int
    torch_eager: Callable


def memory_bound(scale: int) -> dict[str, MemoryBound]:
    """The memory-bound families at 64M elements (rows divided by `scale`), bf16."""
    import torch.nn.functional as F

    rows = max(1, 16384 // scale)
    n = max(4096, (1 << 26) // scale)
    x, row = (rows, 4096), (4096,)
    moved = 2 * 2 * rows * 4096
    return {
        "softmax": MemoryBound(
            {"rows": rows, "cols": 4096, "T": "bf16"}, [x], x, moved,
            lambda x: torch.softmax(x, -1),
        ),
        "layer_norm": MemoryBound(
            {"rows": rows, "cols": 4096, "T": "bf16", "eps": "1e-05"}, [x, row, row], x, moved,
            lambda x, w, b: F.layer_norm(x, (4096,), w, b, 1e-5),
        ),
        "rms_norm": MemoryBound(
            {"rows": rows, "cols": 4096, "T": "bf16", "eps": "1e-06"}, [x, row], x, moved,
            lambda x, w: F.rms_norm(x, (4096,), w, 1e-6),
        ),
        "elementwise": MemoryBound(
            {"n": n, "cols": 4096, "T": "bf16", "inputs": "full/full",
             "fn": "gelu((in0 + in1))"}, [(n,), (n,)], (n,), 3 * 2 * n,
            lambda a, b: F.gelu(a + b),
        ),
    }  # fmt: skip


def copy_part(ctx: Context) -> None:
    """Device-to-device copy bandwidth of 256 MiB (read and written: 512 MiB moved): torch's
    copy_ (the driver's copy), and emmy's copy kernel (elementwise `in0`) at its best."""
    elements = max(4096, (128 << 20) // ctx.scale)
    moved = 2 * 2 * elements
    source = ctx.on_device(torch.empty(elements, dtype=torch.bfloat16)).normal_()
    target = torch.empty_like(source)
    seconds = ctx.timed("torch copy_", lambda: target.copy_(source))
    if seconds is not None:
        ctx.emit(("torch_gb_s",), moved / seconds / 1e9)
        print(f"  torch copy_ {moved / seconds / 1e9:8.1f} GB/s", flush=True)
    key = {"n": elements, "cols": 4096, "T": "bf16", "inputs": "full", "fn": "in0"}
    data = np.random.default_rng(0).integers(0, 1 << 14, size=(elements,), dtype=np.uint16)
    problem = Problem("elementwise", key, [data], (elements,), lambda s: moved / s / 1e9, "gb_s")
    kernel_sweep(ctx, (), problem)


def memory_bound_part(ctx: Context, family_name: str) -> None:
    """One memory-bound family: its sweep, the compile's pick and torch eager, in GB/s."""
    from emmy.families.tensors import randn
    from emmy.runtime.convert import to_storage

    spec = memory_bound(ctx.scale)[family_name]
    generator = torch.Generator().manual_seed(0)
    tensors = [randn(shape, "bf16", generator) for shape in spec.inputs]
    elements = math.prod(spec.output)
    ctx.emit(("elements",), elements)
    on_device = [ctx.on_device(t) for t in tensors]
    seconds = ctx.timed("torch eager", lambda: spec.torch_eager(*on_device))
    if seconds is not None:
        ctx.emit(("torch_gb_s",), spec.moved / seconds / 1e9)
    arrays = [to_storage(t) for t in tensors]
    problem = Problem(
        family_name, spec.key, arrays, spec.output, lambda s: spec.moved / s / 1e9, "gb_s"
    )
    kernel_sweep(ctx, (), problem)
