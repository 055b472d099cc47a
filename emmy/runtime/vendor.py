"""The vendor library's operations, through torch, on either device's buffers: cuBLAS for
torch CUDA tensors (the `cuda` device's memory), the CPU's BLAS for tensors over the
emulator's numpy buffers. One function per HostCall op, the same code on both devices."""

from __future__ import annotations

import json

import numpy as np
import torch

from emmy import dtypes
from emmy.device_records import BufferArg, HostCall
from emmy.errors import KernelLaunchError
from emmy.runtime.run_fallback import View, run_fallback


def run_host_call(call: HostCall, view: View, device: str) -> None:
    """Runs one host call on `device` ("cpu", "cuda"); `view(arg, shape, dtype)` is the
    device's tensor over a buffer."""
    if call.op == "torch":
        run_fallback(call, view, device)
        return
    run = HOST_OPS.get(call.op)
    if run is None:
        raise KernelLaunchError(f"unknown host call {call.op!r}")
    run(
        call,
        [view(arg, shape, call.dtype) for arg, shape in zip(call.args, call.shapes, strict=True)],
    )


def _matmul(call: HostCall, tensors: list[torch.Tensor]) -> None:
    a, b, c = tensors
    torch.matmul(a, b.transpose(-2, -1) if call.transpose_b else b, out=c)


def _attention(call: HostCall, tensors: list[torch.Tensor]) -> None:
    """torch's SDPA; a causal attention with a mask adds the causal mask to it (SDPA takes
    one or the other)."""
    q, k, v, *mask, o = tensors
    spec = json.loads(call.spec)
    causal = bool(spec["causal"])
    attn_mask = mask[0] if mask else None
    if attn_mask is not None and causal:
        hidden = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
        attn_mask = attn_mask.masked_fill(hidden, float("-inf"))
    o.copy_(
        torch.nn.functional.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attn_mask,
            is_causal=causal and attn_mask is None,
            scale=float(spec["scale"]),
            enable_gqa=q.shape[1] != k.shape[1],
        )
    )


def _conv(call: HostCall, tensors: list[torch.Tensor]) -> None:
    """torch's 2-D convolution (cuDNN on a GPU) with its bias, if given."""
    x, filters, *bias, y = tensors
    spec = json.loads(call.spec)
    y.copy_(
        torch.nn.functional.conv2d(
            x,
            filters,
            bias[0] if bias else None,
            stride=spec["stride"],
            padding=spec["padding"],
            dilation=spec["dilation"],
            groups=spec["groups"],
        )
    )


#: the vendor library's operations, by HostCall op
HOST_OPS = {"matmul": _matmul, "attention": _attention, "conv": _conv}


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
