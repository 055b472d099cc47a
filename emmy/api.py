"""The Python API: `emmy.compile(module, *example_inputs)` gives a callable that runs the
module's kernels on a device, and `torch.compile(model, backend="emmy")` does the same
through dynamo (the backend is registered under torch's `torch_dynamo_backends` entry
points). Both compile through the program cache (emmy.build)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils import _pytree

from emmy.build import build_program
from emmy.errors import EmmyError
from emmy.frontend.model import ModelGraph, convert, export, export_program
from emmy.program import Program
from emmy.runtime.convert import from_storage, to_storage
from emmy.runtime.cuda import CudaDevice, cuda_available
from emmy.runtime.device import Device
from emmy.runtime.emu import EmuDevice


@dataclass
class Specialization:
    """The program of one set of input shapes and dtypes, and the model it came from."""

    program: Program
    model: ModelGraph


class CompiledModule:
    """A compiled model: call it with tensors like the module; it runs on `device`.

    Every problem key is static, so inputs of other shapes than the examples (another
    batch or sequence length) compile again for those shapes, once each; the weights are
    read when a shape is first compiled, converted once and shared by every shape. A module
    exported with `dynamic_shapes` is exported once: each new shape specialises that export
    (within the declared ranges) instead of tracing the module again.
    """

    def __init__(
        self,
        module: torch.nn.Module,
        example_inputs: Sequence[torch.Tensor],
        device: Device,
        options: dict[str, str | bool],
        dynamic_shapes: object = None,
    ) -> None:
        self.module = module
        self.device = device
        self.options = options
        self.exported = None
        if dynamic_shapes is not None:
            self.exported = export_program(module, example_inputs, dynamic_shapes)
        self.specializations: dict[tuple, Specialization] = {}
        self.weights: dict[str, np.ndarray] = {}
        self.first = self.specialize(example_inputs)

    @property
    def program(self) -> Program:
        """The program of the example inputs' shapes."""
        return self.first.program

    @staticmethod
    def signature(inputs: Sequence[torch.Tensor]) -> tuple:
        return tuple((tuple(t.shape), t.dtype) for t in inputs)

    def specialize(self, inputs: Sequence[torch.Tensor]) -> Specialization:
        if self.exported is not None:
            model = convert(self.exported, inputs)
        else:
            model = export(self.module, inputs)
        program = build_program(
            model.module,
            self.device.identity,
            constants=list(model.constants),
            **self.options,
        )
        for name, tensor in model.constants.items():
            if name not in self.weights:
                array = to_storage(tensor)
                array.flags.writeable = False  # so a GPU keeps them resident across calls
                self.weights[name] = array
        specialization = Specialization(program, model)
        self.specializations[self.signature(inputs)] = specialization
        return specialization

    def __call__(self, *inputs: torch.Tensor):
        if len(inputs) != len(self.program.inputs):
            raise EmmyError(
                f"the model takes {len(self.program.inputs)} input(s), got {len(inputs)}"
            )
        chosen = self.specializations.get(self.signature(inputs)) or self.specialize(inputs)
        constants = {spec.name: self.weights[spec.name] for spec in chosen.program.constants}
        results = chosen.program.run(self.device, [to_storage(t) for t in inputs], constants)
        outputs = with_aliases(
            [
                from_storage(array, dtype).clone()
                for array, dtype in zip(results, computed_dtypes(chosen.model), strict=True)
            ],
            chosen.model,
            inputs,
        )
        if chosen.model.out_spec is None:
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        return _pytree.tree_unflatten(outputs, chosen.model.out_spec)


def computed_dtypes(model: ModelGraph) -> list[torch.dtype]:
    """The dtypes of the returned values that kernels compute (the others are aliases)."""
    return [d for i, d in enumerate(model.output_dtypes) if i not in model.aliases]


def with_aliases(
    computed: list[torch.Tensor], model: ModelGraph, inputs: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """Every returned value in order: those kernels computed, and between them the views
    of inputs and weights, as torch views of them (no kernel, no copy)."""
    given = iter(computed)
    count = len(model.output_dtypes)
    return [
        model.aliases[i].of(inputs) if i in model.aliases else next(given) for i in range(count)
    ]


def default_device() -> Device:
    return CudaDevice() if cuda_available() else EmuDevice()


def compile(  # noqa: A001 - mirrors torch.compile
    module: torch.nn.Module,
    *example_inputs: torch.Tensor,
    device: Device | None = None,
    pins: str = "",
    golden: str = "",
    db: str = "",
    dynamic_shapes: object = None,
    use_cache: bool = True,
) -> CompiledModule:
    """Compiles `module` at the shapes of `example_inputs` for `device` (a GPU when one is
    present, else the emulator), each fork decided by the oracle stack. `dynamic_shapes`
    (as torch.export takes it) declares the dims that may vary between calls. A shape
    compiled before with the same stores is read from the program cache unless
    `use_cache` is False."""
    device = device or default_device()
    options = {"pins": pins, "golden": golden, "db": db, "use_cache": use_cache}
    return CompiledModule(module, example_inputs, device, options, dynamic_shapes)


class _SizesBound(torch.nn.Module):
    """A dynamo graph that also takes sizes (the SymInts of its dynamic dims) as a module of
    its tensors alone, the sizes bound to those of one call."""

    def __init__(self, graph_module: torch.fx.GraphModule, inputs: Sequence[object]):
        super().__init__()
        self.graph_module = graph_module
        self.sizes = {i: x for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)}
        self.count = len(inputs)

    def forward(self, *tensors: torch.Tensor):
        given = iter(tensors)
        inputs = [self.sizes[i] if i in self.sizes else next(given) for i in range(self.count)]
        return self.graph_module(*inputs)


def _static(value: object) -> bool:
    return isinstance(value, torch.Tensor) and all(isinstance(d, int) for d in value.shape)


def dynamo_backend(graph_module: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]):
    """torch.compile's backend="emmy": the captured graph compiled as one emmy program. A
    graph dynamo made shape-dynamic (it does so at a model's second input shape) is compiled
    at each call's concrete sizes, once per set of sizes: emmy's kernels are static."""

    def as_tuple(result):
        return result if isinstance(result, (tuple, list)) else (result,)

    if all(_static(x) for x in example_inputs):
        compiled = compile(graph_module, *example_inputs)
        return lambda *inputs: as_tuple(compiled(*inputs))
    by_sizes: dict[tuple, CompiledModule] = {}

    def run(*inputs):
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        key = tuple(x if not isinstance(x, torch.Tensor) else tuple(x.shape) for x in inputs)
        if key not in by_sizes:
            by_sizes[key] = compile(_SizesBound(graph_module, inputs), *tensors)
        return as_tuple(by_sizes[key](*tensors))

    return run
