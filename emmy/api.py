"""The Python API: `emmy.compile(module, *example_inputs)` gives a callable that runs the
module's kernels on a device (through torch.export), and `torch.compile(model,
backend="emmy")` does the same through dynamo and AOTAutograd (the backend is registered
under torch's `torch_dynamo_backends` entry points; `backend(...)` takes options). Both
compile through the program cache (emmy.build), run the ops emmy has no kernel for through
torch, and log one INFO line per compiled graph on the `emmy` logger."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils import _pytree

from emmy.build import build_program
from emmy.errors import EmmyError
from emmy.frontend.model import (
    Converter,
    ModelGraph,
    convert,
    export,
    export_program,
    specialised_fx_graph,
)
from emmy.program import Program, compile_summary
from emmy.runtime.convert import from_storage, to_storage
from emmy.runtime.cuda import CudaDevice, cuda_available
from emmy.runtime.device import Device
from emmy.runtime.emu import EmuDevice

#: one INFO line per compiled graph: its ops by where they run, its compile's stages
log = logging.getLogger("emmy")


@dataclass
class Specialization:
    """The program of one set of input shapes and dtypes, and the model it came from."""

    program: Program
    model: ModelGraph
    #: the constants the graph computed at compile time (a mask of shapes), as buffers
    constants: dict[str, np.ndarray] = field(default_factory=dict)


def _weights(model: ModelGraph) -> dict[str, np.ndarray]:
    """The model's constants as read-only buffers, so that a GPU keeps them resident."""
    weights = {}
    for name, tensor in model.constants.items():
        array = to_storage(tensor)
        array.flags.writeable = False
        weights[name] = array
    return weights


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
        fallback: bool = True,
    ) -> None:
        self.module = module
        self.device = device
        self.options = options
        self.fallback = fallback
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
        start = time.perf_counter()
        if self.exported is not None:
            model = convert(self.exported, inputs, self.fallback)
        else:
            model = export(self.module, inputs, self.fallback)
        frontend = time.perf_counter() - start
        program = build_program(
            model.module,
            self.device.identity,
            constants=list(model.constants),
            **self.options,
        )
        program.timings = {"frontend": frontend, **program.timings}
        log.info("%s", compile_summary(program))
        specialization = Specialization(program, model, self.shared(_weights(model)))
        self.specializations[self.signature(inputs)] = specialization
        return specialization

    def shared(self, constants: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A shape's constants, each the array an earlier shape keeps where it holds the
        same elements (a weight), else its own (a constant computed from its shapes)."""
        for name, array in constants.items():
            known = self.weights.setdefault(name, array)
            if known.shape == array.shape and known.dtype == array.dtype:
                if np.array_equal(known, array):
                    constants[name] = known
        return constants

    def __call__(self, *inputs: torch.Tensor):
        if len(inputs) != len(self.program.inputs):
            raise EmmyError(
                f"the model takes {len(self.program.inputs)} input(s), got {len(inputs)}"
            )
        chosen = self.specializations.get(self.signature(inputs)) or self.specialize(inputs)
        constants = {spec.name: chosen.constants[spec.name] for spec in chosen.program.constants}
        outputs = _run(chosen, self.device, inputs, constants)
        if chosen.model.out_spec is None:
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        return _pytree.tree_unflatten(outputs, chosen.model.out_spec)


def _run(
    chosen: Specialization,
    device: Device,
    inputs: Sequence[torch.Tensor],
    constants: dict[str, np.ndarray],
) -> list[torch.Tensor]:
    """Runs a specialization's program; its outputs as torch tensors of the model's dtypes,
    the views of inputs and weights among them as torch views (no kernel computes them)."""
    arrays = [to_storage(t) for t in inputs]
    results = chosen.program.run(device, arrays, constants)
    # the device wrote the mutated inputs' new values into their arrays: the caller's
    # tensors get them (a program bound to the tensors themselves would write them there)
    for spec, tensor, array in zip(chosen.program.inputs, inputs, arrays, strict=True):
        if spec.name in chosen.program.mutated_inputs:
            tensor.copy_(from_storage(array, tensor.dtype))
    computed = [
        from_storage(array, dtype).clone()
        for array, dtype in zip(results, computed_dtypes(chosen.model), strict=True)
    ]
    return with_aliases(computed, chosen.model, inputs)


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
    fallback: bool = True,
) -> CompiledModule:
    """Compiles `module` at the shapes of `example_inputs` for `device` (a GPU when one is
    present, else the emulator), each fork decided by the oracle stack. `dynamic_shapes`
    (as torch.export takes it) declares the dims that may vary between calls. A shape
    compiled before with the same stores is read from the program cache unless
    `use_cache` is False. Ops emmy has no kernel for run through torch between its kernels;
    with `fallback` False, the first such op is an error naming it and its source line."""
    device = device or default_device()
    options = {"pins": pins, "golden": golden, "db": db, "use_cache": use_cache}
    return CompiledModule(module, example_inputs, device, options, dynamic_shapes, fallback)


#: the ATen ops the backend has AOTAutograd decompose before emmy sees them: only those
#: whose parts emmy compiles and the op itself not (decomposing more costs compile time);
#: none yet: torch's decomposition of inference batch norm is not functional, so a batch
#: norm under torch.compile runs through torch
DECOMPOSITIONS: list = []


class CompiledGraph:
    """One graph AOTAutograd hands the backend (functionalised ATen; parameters are inputs),
    compiled once per set of input shapes: a graph dynamo made shape-dynamic takes sizes
    beside its tensors, and each call's sizes compile once, emmy's kernels being static."""

    def __init__(
        self,
        graph_module: torch.fx.GraphModule,
        device: Device,
        options: dict[str, str | bool],
        fallback: bool,
        programs: list[Program] | None = None,
    ) -> None:
        self.graph_module = graph_module
        self.device = device
        self.options = options
        self.fallback = fallback
        self.specializations: dict[tuple, Specialization] = {}
        #: where each compiled program is appended, if anywhere (a benchmark's record)
        self.programs = programs

    def specialize(self, inputs: Sequence[object]) -> Specialization:
        start = time.perf_counter()
        graph = specialised_fx_graph(self.graph_module, inputs)
        model = Converter(graph, {}, None, self.fallback).convert()
        frontend = time.perf_counter() - start
        program = build_program(
            model.module, self.device.identity, constants=list(model.constants), **self.options
        )
        program.timings = {"frontend": frontend, **program.timings}
        log.info("%s", compile_summary(program))
        if self.programs is not None:
            self.programs.append(program)
        with unset_fake_temporarily():  # AOTAutograd compiles under its fake mode
            specialization = Specialization(program, model, _weights(model))
        self.specializations[_signature(inputs)] = specialization
        return specialization

    def __call__(self, *inputs: object) -> list[torch.Tensor]:
        chosen = self.specializations.get(_signature(inputs)) or self.specialize(inputs)
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        return _run(chosen, self.device, tensors, chosen.constants)


def _signature(inputs: Sequence[object]) -> tuple:
    return tuple(
        (tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else int(x) for x in inputs
    )


def backend(
    *,
    device: Device | None = None,
    fallback: bool = True,
    programs: list[Program] | None = None,
    **options,
):
    """A torch.compile backend: `torch.compile(model, backend=emmy.api.backend(fallback=
    False))`; `backend="emmy"` is `backend()`. AOTAutograd hands it functionalised ATen
    (under no_grad, the inference graph), each graph compiled as one emmy program on
    `device` (a GPU when one is present, else the emulator), appended to `programs` if
    given; `options` as emmy.compile's."""
    # torch's AOTAutograd is loaded by a backend alone, not by emmy.compile
    from torch._decomp import get_decompositions
    from torch._dynamo.backends.common import aot_autograd

    settings = {"pins": "", "golden": "", "db": "", "use_cache": True, **options}

    def compile_graph(graph_module: torch.fx.GraphModule, example_inputs: Sequence[object]):
        compiled = CompiledGraph(
            graph_module, device or default_device(), settings, fallback, programs
        )
        if all(_static(x) or isinstance(x, int) for x in example_inputs):
            compiled.specialize(example_inputs)
        return compiled

    return aot_autograd(
        fw_compiler=compile_graph, decompositions=get_decompositions(DECOMPOSITIONS)
    )


def _static(value: object) -> bool:
    return isinstance(value, torch.Tensor) and all(isinstance(d, int) for d in value.shape)


def dynamo_backend(graph_module: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]):
    """torch.compile's backend="emmy" (registered under torch's `torch_dynamo_backends`
    entry points): `backend()` with its defaults."""
    return backend()(graph_module, example_inputs)
