"""The vendor library's operations, through torch, on either device's buffers: cuBLAS for
torch CUDA tensors (the `cuda` device's memory), the CPU's BLAS for tensors over the
emulator's numpy buffers. One function per HostCall op, the same code on both devices."""

from __future__ import annotations

import warnings

import numpy as np
import torch

from emmy import dtypes
from emmy.errors import KernelLaunchError
from emmy.runtime.device import BufferArg, HostCall
from emmy.runtime.fallback import View, run_fallback


def run_host_call(call: HostCall, view: View, device: str) -> None:
    """Runs one host call on `device` ("cpu", "cuda"); `view(arg, shape, dtype)` is the
    device's tensor over a buffer."""
    if call.op == "torch":
        run_fallback(call, view, device)
        return
    if call.op != "matmul":
        raise KernelLaunchError(f"unknown host call {call.op!r}")
    a, b, c = (
        view(arg, shape, call.dtype) for arg, shape in zip(call.args, call.shapes, strict=True)
    )
    torch.matmul(a, b.transpose(-2, -1) if call.transpose_b else b, out=c)


def numpy_view(
    array: np.ndarray, arg: BufferArg, shape: tuple[int, ...], dtype: str
) -> torch.Tensor:
    """A torch tensor over the bytes of a host buffer from `arg.offset` (no copy)."""
    count = int(np.prod(shape))
    storage = dtypes.lookup(dtype)
    item = storage.bytes
    raw = array.reshape(-1).view(np.uint8)[arg.offset : arg.offset + count * item]
    if raw.size != count * item:
        raise KernelLaunchError(f"host call reads past the end of buffer {arg.name!r}")
    with warnings.catch_warnings():  # a read-only input is only read
        warnings.simplefilter("ignore", UserWarning)
        tensor = torch.from_numpy(raw.view(storage.numpy).reshape(shape))
    return tensor.view(dtypes.torch_dtype(dtype))


def tensor_view(
    tensor: torch.Tensor, arg: BufferArg, shape: tuple[int, ...], dtype: str
) -> torch.Tensor:
    """A tensor over the bytes of a device tensor (a buffer) from `arg.offset` (no copy)."""
    count = int(np.prod(shape))
    item = dtypes.lookup(dtype).bytes
    raw = tensor.reshape(-1).view(torch.uint8)[arg.offset : arg.offset + count * item]
    if raw.numel() != count * item:
        raise KernelLaunchError(f"host call reads past the end of buffer {arg.name!r}")
    return raw.view(dtypes.torch_dtype(dtype)).view(shape)
