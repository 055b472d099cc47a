"""The Python API: `emmy.compile(module, *example_inputs)` gives a callable that runs the
module's kernels on a device (through torch.export), and `torch.compile(model,
backend="emmy")` does the same through dynamo and AOTAutograd (the backend is registered
under torch's `torch_dynamo_backends` entry points; `backend(...)` takes options). Both
compile through the program cache (emmy.build), run the ops emmy has no kernel for through
torch, and log one INFO line per compiled graph on the `emmy` logger."""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import SupportsInt, cast

import torch
from torch._guards import TracingContext
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils import _pytree

from emmy.base.compile_options import CompileOptions
from emmy.base.errors import EmmyError
from emmy.build import build_program
from emmy.frontend.converter import (
    HOST_SCALAR_DTYPE,
    Converter,
    ModelGraph,
    is_host_scalar,
    with_host_scalars_in_float32,
)
from emmy.frontend.decompositions import decompositions
from emmy.frontend.export import (
    convert,
    export,
    export_program,
    flat_inputs,
    kept_input_mutations,
    specialised_fx_graph,
)
from emmy.frontend.interpolations import recognise_interpolations
from emmy.frontend.rms_norms import recognise_rms_norms
from emmy.program import Program, compile_summary
from emmy.runtime.bound import BoundProgram, as_model_dtype
from emmy.runtime.cuda import CudaDevice, cuda_available
from emmy.runtime.device import Device
from emmy.runtime.emu import EmuDevice

#: one INFO line per compiled graph: its ops by where they run, its compile's stages
log = logging.getLogger("emmy")


@dataclass
class Specialization:
    """The program of one set of input shapes and dtypes, bound to its device, and the
    model it came from."""

    program: Program
    model: ModelGraph
    bound: BoundProgram


class Weights:
    """A module's constants on one device, each uploaded once and shared by every shape's
    program that holds the same elements under the same name (a weight); a constant a
    shape computed at compile time (a mask of its sizes) is that shape's own."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.resident: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def of(self, model: ModelGraph) -> dict[str, torch.Tensor]:
        return {name: self.one(name, tensor) for name, tensor in model.constants.items()}

    def one(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        known = self.resident.get(name)
        if known is not None and _same(known[0], tensor):
            return known[1]
        on_device = self.device.upload(tensor.detach().contiguous())
        self.resident.setdefault(name, (tensor, on_device))
        return on_device


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a is b:
        return True
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))


def bind(
    program: Program, model: ModelGraph, weights: Weights, cuda_graphs: bool = True
) -> Specialization:
    """A compiled program loaded on the weights' device with the model's constants."""
    with unset_fake_temporarily():  # AOTAutograd compiles under its fake mode
        constants = weights.of(model)
        bound = BoundProgram(program, weights.device, constants, cuda_graphs=cuda_graphs)
    return Specialization(program, model, bound)


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
        options: CompileOptions,
        dynamic_shapes: object = None,
        fallback: bool = True,
        cuda_graphs: bool = True,
        example_kwargs: dict[str, object] | None = None,
        use_cache: bool = True,
    ) -> None:
        self.module = module
        self.device = device
        self.options = options
        self.use_cache = use_cache
        self.fallback = fallback
        self.cuda_graphs = cuda_graphs
        self.exported = None
        if dynamic_shapes is not None:
            self.exported = export_program(module, example_inputs, dynamic_shapes, example_kwargs)
        self.specializations: dict[tuple, Specialization] = {}
        self.weights = Weights(device)
        self.first = self.specialize(example_inputs, example_kwargs or {})

    @property
    def program(self) -> Program:
        """The program of the example inputs' shapes."""
        return self.first.program

    @staticmethod
    def signature(inputs: Sequence[torch.Tensor]) -> tuple:
        return tuple((tuple(t.shape), t.dtype) for t in inputs)

    def specialize(
        self, args: Sequence[torch.Tensor], kwargs: dict[str, object] | None = None
    ) -> Specialization:
        """Compiles (or recalls) the program of these arguments' shapes."""
        kwargs = kwargs or {}
        start = time.perf_counter()
        if self.exported is not None:
            inputs = flat_inputs(self.exported.call_spec.in_spec, args, kwargs)
            model = convert(self.exported, inputs, self.fallback)
        else:
            model = export(self.module, args, self.fallback, kwargs)
            inputs = flat_inputs(model.in_spec, args, kwargs)
        frontend = time.perf_counter() - start
        program = build_program(
            model.module, self.options, constants=list(model.constants), use_cache=self.use_cache
        )
        program.timings = {"frontend": frontend, **program.timings}
        log.info("%s", compile_summary(program))
        specialization = bind(program, model, self.weights, self.cuda_graphs)
        self.specializations[self.signature(inputs)] = specialization
        return specialization

    def __call__(self, *args: torch.Tensor, **kwargs: object):
        """The module's return value for this call, positional and keyword arguments as
        the module takes them (a Hugging Face model's `input_ids=`, `attention_mask=`)."""
        inputs = flat_inputs(self.first.model.in_spec, args, kwargs)
        if len(inputs) != len(self.program.inputs):
            raise EmmyError(
                f"the model takes {len(self.program.inputs)} input(s), got {len(inputs)}"
            )
        chosen = self.specializations.get(self.signature(inputs)) or self.specialize(args, kwargs)
        outputs = _run(chosen, inputs)
        if chosen.model.out_spec is None:
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        # the export's spec of the module's return value (ModelGraph holds it untyped)
        return _pytree.tree_unflatten(outputs, cast(_pytree.TreeSpec, chosen.model.out_spec))


def _run(chosen: Specialization, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor | int | None]:
    """Runs a specialization's program; its outputs as the device's tensors of the model's
    dtypes, the views of inputs and weights among them as torch views (no kernel computes
    them)."""
    masks = [mask.draw(_device_of(inputs)) for mask in chosen.model.random_masks]
    results = chosen.bound([*inputs, *masks])
    computed = [
        as_model_dtype(result, dtype)
        for result, dtype in zip(results, computed_dtypes(chosen.model), strict=True)
    ]
    return with_aliases(computed, chosen.model, inputs)


def _device_of(inputs: Sequence[torch.Tensor]) -> torch.device | str:
    """Where torch draws a call's random masks: beside its inputs (the CPU without any)."""
    return inputs[0].device if inputs else "cpu"


def computed_dtypes(model: ModelGraph) -> list[torch.dtype]:
    """The dtypes of the returned values that kernels compute (the others are aliases)."""
    return [d for i, d in enumerate(model.output_dtypes) if i not in model.aliases]


def with_aliases(
    computed: list[torch.Tensor], model: ModelGraph, inputs: Sequence[torch.Tensor]
) -> list[torch.Tensor | int | None]:
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
    cuda_graphs: bool = True,
    **example_kwargs: object,
) -> CompiledModule:
    """Compiles `module` at the shapes of `example_inputs` for `device` (a GPU when one is
    present, else the emulator), each fork decided by the oracle stack. Keyword arguments
    other than these options are the module's own, as its users pass them
    (`emmy.compile(model, input_ids=ids, attention_mask=mask)`); the compiled module is
    called the same way and returns what the module returns (a Hugging Face model's
    output with its cache). `dynamic_shapes`
    (as torch.export takes it) declares the dims that may vary between calls. A shape
    compiled before with the same stores is read from the program cache unless
    `use_cache` is False. Ops emmy has no kernel for run through torch between its kernels;
    with `fallback` False, the first such op is an error naming it and its source line.
    On a GPU each program's launches replay as one CUDA graph unless `cuda_graphs` is
    False. A call takes the device's tensors in place (a host tensor is copied over) and
    returns the device's tensors."""
    device = device or default_device()
    options = CompileOptions.parse(target=device.identity, pins=pins, golden=golden, db=db)
    return CompiledModule(
        module, example_inputs, device, options, dynamic_shapes, fallback, cuda_graphs,
        example_kwargs, use_cache,
    )  # fmt: skip


class CompiledGraph:
    """One graph AOTAutograd hands the backend (functionalised ATen; parameters are inputs),
    compiled once per set of input shapes: a graph dynamo made shape-dynamic takes sizes
    beside its tensors, and each call's sizes compile once, emmy's kernels being static."""

    def __init__(
        self,
        graph_module: torch.fx.GraphModule,
        device: Device,
        options: CompileOptions,
        fallback: bool,
        programs: list[Program] | None = None,
        cuda_graphs: bool = True,
        strict: bool = True,
        eager_graphs: list[str] | None = None,
        frozen: frozenset[int] = frozenset(),
        use_cache: bool = True,
    ) -> None:
        self.graph_module = graph_module
        self.device = device
        #: the options of every compile of the graph, for the device's target
        self.options = replace(options, target=device.identity)
        self.use_cache = use_cache
        self.fallback = fallback
        self.cuda_graphs = cuda_graphs
        self.weights = Weights(device)
        self.specializations: dict[tuple, Specialization] = {}
        #: where each compiled program is appended, if anywhere (a benchmark's record)
        self.programs = programs
        #: raise every compile failure (tests, `emmy compile`) instead of running eagerly
        self.strict = strict
        #: where the warning line of each graph that runs eagerly is appended, if anywhere
        self.eager_graphs = eager_graphs
        #: why this graph runs eagerly, once its compile failed
        self.eager: str | None = None
        #: the inputs that are the module's parameters and buffers, read as constants
        self.frozen = frozen

    def specialize(self, inputs: Sequence[object]) -> Specialization:
        start = time.perf_counter()
        model = convert_aot_graph(self.graph_module, inputs, self.frozen, self.fallback)
        frontend = time.perf_counter() - start
        program = build_program(
            model.module, self.options, constants=list(model.constants), use_cache=self.use_cache
        )
        program.timings = {"frontend": frontend, **program.timings}
        log.info("%s", compile_summary(program))
        if self.programs is not None:
            self.programs.append(program)
        specialization = bind(program, model, self.weights, self.cuda_graphs)
        self.specializations[_signature(inputs)] = specialization
        return specialization

    def user_places(self, placeholders: list[torch.fx.Node], mutations: dict[int, int]):
        """The mutated inputs' places among the tensor inputs as places among those that
        are not frozen (the program's inputs): a frozen input is never written."""
        tensors = [
            i for i, n in enumerate(placeholders) if isinstance(n.meta.get("val"), torch.Tensor)
        ]
        user = [i for i in tensors if i not in self.frozen]
        return {out: user.index(tensors[place]) for out, place in mutations.items()}

    def __call__(self, *inputs: object) -> list[torch.Tensor | int | None]:
        if self.eager is not None:
            return self.graph_module(*inputs)
        chosen = self.specializations.get(_signature(inputs)) or self.guarded(inputs)
        if chosen is None:
            return self.graph_module(*inputs)
        tensors = [
            t.to(HOST_SCALAR_DTYPE) if is_host_scalar(t) else t
            for i, t in enumerate(inputs)
            if isinstance(t, torch.Tensor) and i not in self.frozen
        ]
        return _run(chosen, tensors)

    def guarded(self, inputs: Sequence[object]) -> Specialization | None:
        """`specialize`, behind the safety net: unless strict, a graph emmy fails to compile
        for an internal reason runs eagerly from then on, with one warning line naming the
        graph, the error and where it was raised (None then). With fallbacks refused, emmy's
        errors are the user's answer and are never caught."""
        try:
            return self.specialize(inputs)
        except Exception as error:
            if self.strict or (isinstance(error, EmmyError) and not self.fallback):
                raise
            self.eager = eager_line(self.graph_module, error)
            log.warning("%s", self.eager)
            if self.eager_graphs is not None:
                self.eager_graphs.append(self.eager)
            return None


def convert_aot_graph(
    graph_module: torch.fx.GraphModule,
    inputs: Sequence[object],
    frozen: frozenset[int],
    fallback: bool,
) -> ModelGraph:
    """A graph AOTAutograd hands the backend, converted at the shapes of `inputs` (real
    tensors where `frozen` names the parameters read as constants)."""
    specialised = with_host_scalars_in_float32(specialised_fx_graph(graph_module, inputs))
    graph, mutations = kept_input_mutations(specialised)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    constants: dict[str, tuple[str, torch.Tensor]] = {}
    for i in frozen:
        value = inputs[i]
        assert isinstance(value, torch.Tensor), "a frozen input is a parameter: a real tensor"
        constants[placeholders[i].name] = (placeholders[i].name, value)
    # the mutated inputs' places among the tensors, as places among those not frozen (the
    # program's inputs): a frozen input is never written
    tensors = [i for i, n in enumerate(placeholders) if isinstance(n.meta.get("val"), torch.Tensor)]
    user = [i for i in tensors if i not in frozen]
    places = {out: user.index(tensors[place]) for out, place in mutations.items()}
    return Converter(graph, constants, None, fallback, places).convert()


def converting_compiler(
    record: Callable[[ModelGraph], object], training: bool = False
) -> Callable[[torch.fx.GraphModule, Sequence[object]], Callable[..., object]]:
    """An AOTAutograd compiler that runs each graph it is handed eagerly, converted at its
    first call (real inputs, as the backend converts them) and the converted graph handed
    to `record`: a benchmark's coverage, gpu-day's prebuilt kernels. A training step's
    parameters are inputs (`training`), an inference graph's frozen as the backend's."""

    def convert_graph(graph_module: torch.fx.GraphModule, example_inputs: Sequence[object]):
        frozen = frozenset() if training else frozen_parameters()
        converted: list[bool] = []

        def first_call_converts(*inputs: object) -> object:
            if not converted:
                record(convert_aot_graph(graph_module, inputs, frozen, fallback=True))
                converted.append(True)
            return graph_module(*inputs)

        return first_call_converts

    return convert_graph


def eager_line(graph_module: torch.fx.GraphModule, error: BaseException) -> str:
    """One line: which graph runs eagerly (its size and its first op's source line), the
    error, and the line of emmy that raised it."""
    ops = [n for n in graph_module.graph.nodes if n.op == "call_function"]
    origin = next((_user_line(n) for n in ops if _user_line(n)), "")
    frames = traceback.extract_tb(error.__traceback__)
    raised = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    text = str(error).splitlines()[0] if str(error) else ""
    where = f", from {origin}" if origin else ""
    return (
        f"emmy: a graph of {len(ops)} op(s){where} failed to compile"
        f" ({type(error).__name__}: {text}{raised}); it runs eagerly (EMMY_STRICT=1 raises)"
    )


def _user_line(node: torch.fx.Node) -> str:
    """The model's source line an FX node came from ("file.py:42"), if recorded."""
    trace = node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in trace.splitlines() if ln.strip().startswith("File ")]
    if not lines:
        return ""
    # 'File "/path/model.py", line 42, in forward'
    parts = lines[-1].split('"')
    if len(parts) < 3:
        return ""
    line = parts[2].split(",")[1].strip().removeprefix("line ") if "," in parts[2] else ""
    return f"{Path(parts[1]).name}:{line}"


def strict_from_environment() -> bool:
    """EMMY_STRICT=1 makes every process strict, whatever its callers ask."""
    return os.environ.get("EMMY_STRICT", "") not in ("", "0")


def _signature(inputs: Sequence[object]) -> tuple:
    return tuple(_signature_of(x) for x in inputs)


def _signature_of(x: object) -> tuple | int:
    if isinstance(x, torch.Tensor):
        return tuple(x.shape), x.dtype
    # the graph's other inputs are sizes: ints, or SymInts specialised
    if not isinstance(x, SupportsInt):
        raise TypeError(f"a graph's input is a tensor or a size, not {type(x).__name__}")
    return int(x)


def backend(
    *,
    device: Device | None = None,
    fallback: bool = True,
    programs: list[Program] | None = None,
    cuda_graphs: bool = True,
    strict: bool = False,
    eager_graphs: list[str] | None = None,
    **options,
):
    """A torch.compile backend: `torch.compile(model, backend=emmy.api.backend(fallback=
    False))`; `backend="emmy"` is `backend()`. AOTAutograd hands it functionalised ATen
    (under no_grad, the inference graph), each graph compiled as one emmy program on
    `device` (a GPU when one is present, else the emulator), appended to `programs` if
    given; `options` as emmy.compile's. A graph that fails to compile for an internal
    reason runs eagerly, with one warning line (appended to `eager_graphs` if given),
    unless `strict` or EMMY_STRICT=1 in the environment, which raise."""
    # torch's AOTAutograd is loaded by a backend alone, not by emmy.compile
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch._aot_autograd.utils import make_boxed_func

    use_cache = options.pop("use_cache", True)
    # parsed here, once: a bad pin is an error of this call, not a graph that runs eagerly
    settings = CompileOptions.parse(**options)

    strict = strict or strict_from_environment()

    #: whether the graph being compiled is a training step's (AOTAutograd compiles its
    #: forward with gradients off, so this is decided before it)
    training = [False]

    def compile_graph(graph_module: torch.fx.GraphModule, example_inputs: Sequence[object]):
        frozen = frozenset() if training[0] else frozen_parameters()
        compiled = CompiledGraph(
            graph_module, device or default_device(), settings, fallback, programs,
            cuda_graphs, strict, eager_graphs, frozen, use_cache,
        )  # fmt: skip
        # frozen parameters are read at the first call, where the inputs are real tensors
        if not frozen and all(_static(x) or isinstance(x, int) for x in example_inputs):
            compiled.guarded(example_inputs)
        # AOTAutograd hands a boxed function its arguments as one list, which it can free
        # (a backward's saved activations) as soon as the call has them
        return make_boxed_func(compiled)

    # the graph keeps its input mutations (a KV cache's in-place write): emmy writes the
    # new value into the input's buffer, where AOTAutograd would copy all of it back after
    through_aot = aot_autograd(
        fw_compiler=compile_graph,
        decompositions=decompositions(),
        keep_inference_input_mutations=True,
    )

    def compile_module(graph_module: torch.fx.GraphModule, example_inputs: Sequence[object]):
        # AOTAutograd's own test of whether the graph needs a backward
        training[0] = torch.is_grad_enabled() and any(
            getattr(x, "requires_grad", False) for x in example_inputs
        )
        # before autograd splits them into pieces: a training step's backward then reads
        # one kernel per norm and per upsampling
        recognise_rms_norms(graph_module)
        recognise_interpolations(graph_module)
        return through_aot(graph_module, example_inputs)

    return compile_module


def frozen_parameters() -> frozenset[int]:
    """The inputs of an inference graph that are the module's parameters and buffers
    (dynamo marks them static), read as the constants they are in inference, as Inductor's
    freezing reads them: a batch norm's statistics fold, a convolution's weights are
    constants. None that the graph writes or returns a view of (a KV cache); the caller
    freezes none in a training step's graph (an optimizer moves the parameters)."""
    context = TracingContext.try_get()
    if context is None or context.fw_metadata is None:
        return frozenset()
    meta = context.fw_metadata
    written = {
        i for i, info in enumerate(meta.input_info) if info.mutates_data or info.mutates_metadata
    }
    viewed = {out.base_idx for out in meta.output_info if out.base_idx is not None}
    return frozenset(meta.static_input_indices) - written - viewed


def _static(value: object) -> bool:
    return isinstance(value, torch.Tensor) and all(isinstance(d, int) for d in value.shape)


def dynamo_backend(graph_module: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor]):
    """torch.compile's backend="emmy" (registered under torch's `torch_dynamo_backends`
    entry points): `backend()` with its defaults."""
    return backend()(graph_module, example_inputs)
