"""The vendor library's operations, through torch, on either device's buffers: cuBLAS for
torch CUDA tensors (the `cuda` device's memory), the CPU's BLAS for tensors over the
emulator's numpy buffers. One function per host-call record, the same code on both devices."""

from __future__ import annotations

from typing import assert_never

import numpy as np
import torch

from emmy.base import dtypes
from emmy.base.device_records import (
    BufferArg,
    HostCall,
    TorchFallback,
    VendorAttention,
    VendorAttentionBackward,
    VendorConv,
    VendorConvWeight,
    VendorMatmul,
)
from emmy.base.errors import KernelLaunchError
from emmy.runtime.run_fallback import View, run_fallback


def run_host_call(call: HostCall, view: View, device: str) -> None:
    """Runs one host call on `device` ("cpu", "cuda"); `view(arg, shape, dtype)` is the
    device's tensor over a buffer. The one reader of the host-call records: what torch runs
    for each."""
    match call:
        case VendorMatmul():
            _matmul(call, _views(call, view))
        case VendorAttention():
            _attention(call, _views(call, view))
        case VendorAttentionBackward():
            _attention_backward(call, _views(call, view))
        case VendorConv():
            _conv(call, _views(call, view))
        case VendorConvWeight():
            _conv_weight(call, _views(call, view))
        case TorchFallback():
            run_fallback(call, view, device)
        case _:
            assert_never(call)


VendorCall = (
    VendorMatmul | VendorAttention | VendorAttentionBackward | VendorConv | VendorConvWeight
)


def _views(call: VendorCall, view: View) -> list[torch.Tensor]:
    """The vendor call's buffers in the shapes it reads them."""
    return [view(arg, shape, call.dtype) for arg, shape in zip(call.args, call.shapes, strict=True)]


def _matmul(call: VendorMatmul, tensors: list[torch.Tensor]) -> None:
    a, b, c = tensors
    a = a.transpose(-2, -1) if call.transpose_a else a
    torch.matmul(a, b.transpose(-2, -1) if call.transpose_b else b, out=c)


def _attention(call: VendorAttention, tensors: list[torch.Tensor]) -> None:
    q, k, v, *mask, o = tensors
    o.copy_(_sdpa(call, q, k, v, mask))


def _attention_backward(call: VendorAttentionBackward, tensors: list[torch.Tensor]) -> None:
    """SDPA's backward: its forward again under autograd (no output or log-sum-exp is kept
    from the forward), then the gradients of q, k and v from dO."""
    q, k, v, grad, *mask, grad_q, grad_k, grad_v = tensors
    # a clone outside inference mode is a tensor autograd may record (the device's buffers
    # may be inference tensors)
    with torch.inference_mode(False), torch.enable_grad():
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = _sdpa(call, leaves[0], leaves[1], leaves[2], [m.clone() for m in mask])
        gradients = torch.autograd.grad(out, leaves, grad.clone())
    for target, gradient in zip((grad_q, grad_k, grad_v), gradients, strict=True):
        target.copy_(gradient)


def _sdpa(
    call: VendorAttention | VendorAttentionBackward,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: list[torch.Tensor],
) -> torch.Tensor:
    """torch's SDPA; a causal attention with a mask adds the causal mask to it (SDPA takes
    one or the other)."""
    attn_mask = mask[0] if mask else None
    if attn_mask is not None and call.causal:
        hidden = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
        attn_mask = attn_mask.masked_fill(hidden, float("-inf"))
    return torch.nn.functional.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=attn_mask,
        is_causal=call.causal and attn_mask is None,
        scale=call.scale,
        enable_gqa=q.shape[1] != k.shape[1],
    )


def _conv(call: VendorConv, tensors: list[torch.Tensor]) -> None:
    """torch's 2-D convolution or transposed convolution (cuDNN on a GPU) with its bias, if
    given."""
    x, filters, *bias, y = tensors
    geometry = {
        "stride": call.stride,
        "padding": call.padding,
        "dilation": call.dilation,
        "groups": call.groups,
    }
    bias_or_none = bias[0] if bias else None
    if call.output_padding is None:
        y.copy_(torch.nn.functional.conv2d(x, filters, bias_or_none, **geometry))
        return
    y.copy_(
        torch.nn.functional.conv_transpose2d(
            x, filters, bias_or_none, output_padding=call.output_padding, **geometry
        )
    )


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


def _conv_weight(call: VendorConvWeight, tensors: list[torch.Tensor]) -> None:
    """torch's convolution weight gradient (cuDNN's on a GPU), the weight read for its
    shape alone."""
    dy, x, dw = tensors
    _, grad_weight, _ = torch.ops.aten.convolution_backward(
        dy, x, dw, None, list(call.stride), list(call.padding), list(call.dilation), False,
        [0, 0], call.groups, [False, True, False],
    )  # fmt: skip
    dw.copy_(grad_weight)
