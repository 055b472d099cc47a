"""The Python API: `emmy.compile(module, *example_inputs)` gives a callable that runs the
module's kernels on a device, and `torch.compile(model, backend="emmy")` does the same
through dynamo (the backend is registered under torch's `torch_dynamo_backends` entry
points)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils import _pytree

from emmy.compiler import Program, compile_graph
from emmy.errors import EmmyError
from emmy.frontend.model import ModelGraph, export
from emmy.runtime.convert import from_storage, to_storage
from emmy.runtime.device import Device


class CompiledModule:
    """A compiled model: call it with tensors like the module; it runs on `device`."""

    def __init__(self, program: Program, model: ModelGraph, device: Device) -> None:
        self.program = program
        self.model = model
        self.device = device
        self.constants = {name: to_storage(t) for name, t in model.constants.items()}

    def __call__(self, *inputs: torch.Tensor):
        if len(inputs) != len(self.program.inputs):
            raise EmmyError(
                f"the model takes {len(self.program.inputs)} input(s), got {len(inputs)}"
            )
        arrays = [to_storage(t) for t in inputs]
        results = self.program.run(self.device, arrays, self.constants)
        outputs = [
            from_storage(array, dtype).clone()
            for array, dtype in zip(results, self.model.output_dtypes, strict=True)
        ]
        if self.model.out_spec is None:
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        return _pytree.tree_unflatten(outputs, self.model.out_spec)


def default_device() -> Device:
    from emmy.runtime.cuda import CudaDevice, cuda_available

    if cuda_available():
        return CudaDevice()
    from emmy.runtime.emu import EmuDevice

    return EmuDevice()


def compile(  # noqa: A001 - mirrors torch.compile
    module: torch.nn.Module,
    *example_inputs: torch.Tensor,
    device: Device | None = None,
    pins: str = "",
    golden: str = "",
    db: str = "",
) -> CompiledModule:
    """Compiles `module` at the shapes of `example_inputs` for `device` (a GPU when one is
    present, else the emulator), each fork decided by the oracle stack."""
    device = device or default_device()
    model = export(module, example_inputs)
    program = compile_graph(
        model.module,
        target=device.identity,
        pins=pins,
        golden=golden,
        db=db,
        constants=list(model.constants),
    )
    return CompiledModule(program, model, device)


def dynamo_backend(graph_module: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]):
    """torch.compile's backend="emmy": the captured graph compiled as one emmy program."""
    compiled = compile(graph_module, *example_inputs)

    def run(*inputs: torch.Tensor):
        result = compiled(*inputs)
        return result if isinstance(result, (tuple, list)) else (result,)

    return run
