"""Runs a fallback: an op emmy has no kernel for, through torch, on tensors over the
device's buffers (a GPU's memory on emmy's stream, the emulator's numpy arrays), the same
code on both devices. Each tensor argument is a strided view of an input buffer, as the
frontend saw it (emmy.dialects.fallback); each result is copied into its output buffer."""

from __future__ import annotations

import json
from collections.abc import Callable

import torch

from emmy.device_records import BufferArg, HostCall
from emmy.errors import KernelLaunchError

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


def run_fallback(call: HostCall, view: View, device: str) -> None:
    """Runs the torch op of `call` (op "torch") on `device` ("cpu", "cuda")."""
    spec = json.loads(call.spec)
    count = spec["inputs"]
    buffers = [
        view(arg, shape, call.dtype_of(i))
        for i, (arg, shape) in enumerate(zip(call.args, call.shapes, strict=True))
    ]
    inputs, outputs = buffers[:count], buffers[count:]

    def decode(value: object) -> object:
        if isinstance(value, list):
            return [decode(item) for item in value]
        if not isinstance(value, dict):
            return value
        if "tensor" in value:
            operand, shape, strides, offset, dtype = value["tensor"]
            tensor = inputs[operand]
            if dtype == "bool":  # a mask is stored as bytes, 0 or 1
                tensor = tensor.view(torch.bool)
            # the offset counts from the buffer's start, which a view into an arena is not
            return tensor.as_strided(shape, strides, tensor.storage_offset() + offset)
        kind, name = value["enum"]
        if kind == "device":
            return torch.device(device)
        found = getattr(torch, name, None)
        if not isinstance(found, _ENUM_TYPES[kind]):
            raise KernelLaunchError(f"torch has no {kind} {name!r}")
        return found

    op = torch_op(spec["target"])
    with torch.no_grad():
        kwargs = {name: decode(value) for name, value in spec["kwargs"].items()}
        result = op(*decode(spec["arguments"]), **kwargs)
    results = _tensors(result)
    if len(results) != len(outputs):
        raise KernelLaunchError(
            f"torch {spec['target']} gave {len(results)} tensor(s), the plan expects {len(outputs)}"
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
