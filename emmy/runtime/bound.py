"""A compiled program bound to a device, the way a served model runs: its weights uploaded
once, its arena and other temporaries allocated once, its launch list loaded once (kernels
loaded, arguments packed). A call binds the caller's tensors in place (inputs, and the
inputs the program writes, such as a KV cache), draws its outputs from the device's
allocator, and runs on the device's current stream: nothing is copied to the host and
nothing is synchronised unless the caller asks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Unpack

import torch

from emmy.base import dtypes
from emmy.base.errors import EmmyError, KernelLaunchError
from emmy.program import ARENA, Program, TensorSpec
from emmy.runtime.device import Device
from emmy.runtime.executable import RunOptions

#: every byte of a fresh arena: all-ones bits, NaN in every float type, so that a kernel
#: reading a temporary nobody wrote shows it
POISON = 0xFF


class BoundProgram:
    """`program` on `device` with `constants` (host or device tensors, by name) resident."""

    def __init__(
        self,
        program: Program,
        device: Device,
        constants: Mapping[str, torch.Tensor],
        *,
        poison_outputs: bool = False,
        cuda_graphs: bool = True,
    ) -> None:
        missing = [spec.name for spec in program.constants if spec.name not in constants]
        if missing:
            raise EmmyError(f"the program needs the constant(s) {', '.join(missing[:3])}")
        self.program = program
        self.device = device
        #: fill each call's outputs with NaN first, so an element no kernel wrote shows
        self.poison_outputs = poison_outputs
        self.fixed: dict[str, torch.Tensor] = {
            spec.name: self._resident(spec, constants[spec.name]) for spec in program.constants
        }
        for spec in program.temporaries:
            if spec.name not in program.arena:
                self.fixed[spec.name] = self._poisoned(spec.shape, spec.dtype)
        if program.arena:
            self.fixed[ARENA] = self._poisoned((max(1, program.arena_bytes),), "i8")
        self.mutated = frozenset(program.mutated_inputs)
        slots = list(dict.fromkeys([s.name for s in [*program.inputs, *program.outputs]]))
        slots += list(self.fixed)
        self.executable = device.load(
            program.source,
            program.launches(),
            slots,
            cuda_graphs=cuda_graphs,
            fixed=tuple(self.fixed),
            mutated=tuple(self.mutated),
            outputs=tuple(spec.name for spec in program.outputs),
        )

    def _resident(self, spec: TensorSpec, tensor: torch.Tensor) -> torch.Tensor:
        """A constant as the device's tensor of its storage type, uploaded once."""
        storage = _storage_view(tensor, spec)
        aligned = storage.data_ptr() % self.device.driver.alignment == 0
        if self.device.owns(storage) and storage.is_contiguous() and aligned:
            return storage
        return self.device.upload(storage.contiguous())

    def _poisoned(self, shape: Sequence[int], dtype: str) -> torch.Tensor:
        tensor = self.device.empty(tuple(shape), dtypes.torch_dtype(dtype))
        if tensor.numel():
            tensor.view(torch.uint8).fill_(POISON)
        return tensor

    def __call__(
        self, inputs: Sequence[torch.Tensor], **options: Unpack[RunOptions]
    ) -> list[torch.Tensor]:
        """The program's outputs (tensors of their storage types on the device) for
        `inputs`; an input the program writes is updated in the caller's tensor."""
        program = self.program
        if len(inputs) != len(program.inputs):
            raise EmmyError(f"the program takes {len(program.inputs)} input(s), got {len(inputs)}")
        tensors = dict(self.fixed)
        for spec, given in zip(program.inputs, inputs, strict=True):
            tensors[spec.name] = self._checked(spec, given)
        outputs = []
        for spec in program.outputs:
            if spec.name in tensors:  # a reshape of another output: the same buffer
                outputs.append(tensors[spec.name].reshape(spec.shape))
                continue
            out = self.device.output(spec.shape, dtypes.torch_dtype(spec.dtype))
            if self.poison_outputs and out.numel():
                out.view(torch.uint8).fill_(POISON)
            tensors[spec.name] = out
            outputs.append(out)
        try:
            self.executable(tensors, **options)
        except KernelLaunchError as error:
            raise KernelLaunchError(program.naming_sites(str(error))) from None
        return outputs

    def _checked(self, spec: TensorSpec, tensor: torch.Tensor) -> torch.Tensor:
        """The caller's tensor as its storage type, of the spec's shape. The executable uses
        it in place where the kernels can (device memory, contiguous, aligned), else a
        copy it writes back where the program writes the input (a KV cache)."""
        if tuple(tensor.shape) != spec.shape:
            raise EmmyError(
                f"{spec.name} must have shape {list(spec.shape)}, got {list(tensor.shape)}"
            )
        return _storage_view(tensor, spec)


def _storage_view(tensor: torch.Tensor, spec: TensorSpec) -> torch.Tensor:
    """`tensor` as its storage type: a mask's bytes as i8 with no copy; another dtype than
    the spec's is an error (the program was compiled for that one)."""
    wanted = dtypes.torch_dtype(spec.dtype)
    if tensor.dtype == wanted:
        return tensor
    if tensor.dtype == torch.bool and wanted == torch.int8:
        return tensor.view(torch.int8)
    raise EmmyError(f"{spec.name} must be {spec.dtype}, got {tensor.dtype}")


def as_model_dtype(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An output of its storage type as the model's dtype: a mask's bytes as bool."""
    return tensor.view(torch.bool) if dtype == torch.bool else tensor
