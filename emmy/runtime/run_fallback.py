"""Runs a fallback: an op emmy has no kernel for, through torch, on tensors over the
device's buffers (a GPU's memory on emmy's stream, the emulator's numpy arrays), the same
code on both devices. Each tensor argument is a strided view of an input buffer, as the
frontend saw it (emmy.dialects.fallback); each result is copied into its output buffer."""

from __future__ import annotations

from collections.abc import Callable

import torch

from emmy.base.device_records import (
    BufferArg,
    FallbackEnum,
    FallbackTensor,
    FallbackValue,
    TorchFallback,
)
from emmy.base.errors import KernelLaunchError

#: the device's tensor over buffer `arg`, at a shape, of a storage type
View = Callable[[BufferArg, tuple[int, ...], str], torch.Tensor]

_ENUM_TYPES = {"dtype": torch.dtype, "layout": torch.layout, "memory_format": torch.memory_format}


def torch_op(target: str) -> torch._ops.OpOverload:
    """`aten.cumsum.default` as torch.ops.aten.cumsum.default."""
    namespace, name, overload = target.split(".")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)
    except (AttributeError, RuntimeError):
        raise KernelLaunchError(f"torch has no op {target}") from None


def run_fallback(call: TorchFallback, view: View, device: str) -> None:
    """Runs the torch op of `call` on `device` ("cpu", "cuda")."""
    buffers = [
        view(arg, shape, dtype)
        for arg, shape, dtype in zip(call.args, call.shapes, call.dtypes, strict=True)
    ]
    inputs, outputs = buffers[: call.inputs], buffers[call.inputs :]

    def decode(value: FallbackValue) -> object:
        match value:
            case tuple():
                return [decode(item) for item in value]
            case FallbackTensor(operand, shape, strides, offset, dtype):
                tensor = inputs[operand]
                if dtype == "bool":  # a mask is stored as bytes, 0 or 1
                    tensor = tensor.view(torch.bool)
                # the offset counts from the buffer's start, which a view into an arena is not
                return tensor.as_strided(shape, strides, tensor.storage_offset() + offset)
            case FallbackEnum(kind="device"):
                return torch.device(device)
            case FallbackEnum(kind, name):
                found = getattr(torch, name, None)
                if not isinstance(found, _ENUM_TYPES[kind]):
                    raise KernelLaunchError(f"torch has no {kind} {name!r}")
                return found
        return value

    op = torch_op(call.target)
    with torch.no_grad():
        kwargs = {name: decode(value) for name, value in call.kwargs}
        result = op(*[decode(value) for value in call.arguments], **kwargs)
    results = _tensors(result)
    if len(results) != len(outputs):
        raise KernelLaunchError(
            f"torch {call.target} gave {len(results)} tensor(s), the plan expects {len(outputs)}"
        )
    for out, value in zip(outputs, results, strict=True):
        target = out.view(torch.bool) if value.dtype == torch.bool else out
        target.copy_(value.reshape(target.shape))


def _tensors(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []
