"""The frontend for models: `torch.export` of an nn.Module → an emmy.graph function.

The exported program is read at the level torch.export gives before decompositions
(`aten.linear`, `aten.layer_norm`, `aten.scaled_dot_product_attention`, ...), so each op
keeps the shape a library family matches. The function takes the user's inputs, then the
constants it reads (parameters and buffers, by their state-dict names): a Linear's weight
is read as its transpose, laid out [in, out] once at compile time.

Views (`view`, `transpose`, `permute`, `slice`, `expand`, ...) move no data: each is
followed as a strided view of the contiguous tensor it came from, computed by applying the
op to a meta tensor. A consumer that needs a contiguous tensor reads the view in place
when its elements are in order (`graph.reshape`) and through a copy otherwise
(`graph.as_strided`).

Each op converts by one entry of the registry `ATEN` (emmy.frontend.op_registry):
`supported_ops()` lists the ops, `handler_for(name)` gives an op's entry, and
`supports(node)` says whether a node converts without converting it.
"""

from __future__ import annotations

import itertools
import operator
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import fx
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.export._tree_utils import reorder_kwargs
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.utils import _pytree
from xdsl.builder import Builder
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    IntegerAttr,
    ModuleOp,
    TensorType,
    i8,
    i64,
)
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import VerifyException

from emmy import dtypes
from emmy.dialects import fallback, graph
from emmy.dialects.graph import MUTATED_INPUTS
from emmy.errors import EmmyError
from emmy.families.cat import PARTS as CAT_PARTS
from emmy.families.chains import broadcast_kind
from emmy.families.gather import INDICES
from emmy.families.permute import collapse_dims
from emmy.frontend.complex import real_pairs
from emmy.frontend.op_registry import OpEntry, OpRegistry, Refusal, Support, op_name
from emmy.frontend.torch_fallback import (
    Coverage,
    Fallback,
    encode,
    foldable,
    returns_view,
    tensor_outputs,
)
from emmy.pointwise_ops import (
    BOOL,
    BY_ATEN,
    CONDITION,
    POINTWISE,
    VALUE,
    Gives,
    PointwiseOp,
    Promotion,
)

_FLOATS = [str(dtypes.torch_dtype(name)).removeprefix("torch.") for name in dtypes.FLOAT_NAMES]
#: the storage types a model may have, as torch spells them: "float32, float16 or bfloat16"
MODEL_DTYPES_TEXT = f"{', '.join(_FLOATS[:-1])} or {_FLOATS[-1]}"


def tensor_type(tensor: torch.Tensor) -> TensorType:
    name = dtypes.torch_dtype_name(tensor.dtype)
    if not dtypes.is_float(name):
        raise EmmyError(f"dtype {tensor.dtype} is not supported (use {MODEL_DTYPES_TEXT})")
    return TensorType(dtypes.xdsl_type(name), list(tensor.shape))


@dataclass
class ModelGraph:
    """A model as a graph function, with the constants its trailing arguments are bound to."""

    module: ModuleOp
    input_names: list[str]
    constants: dict[str, torch.Tensor] = field(default_factory=dict)
    output_dtypes: list[torch.dtype] = field(default_factory=list)
    out_spec: object = None  # the pytree spec that rebuilds the module's return value
    #: where the graph's ops run: emmy's kernels, torch (the fallbacks), compile time
    coverage: Coverage = field(default_factory=Coverage)
    #: the returned values that view an input or a constant, by their place in the return
    aliases: dict[int, Alias] = field(default_factory=dict)
    #: the pytree spec of the call's (args, kwargs) that the export saw, keyword arguments'
    #: order included (None for a graph handed over by dynamo)
    in_spec: object = None


@dataclass(frozen=True)
class Alias:
    """A returned value that views an input (`input`, its position, with these sizes,
    strides and offset) or is a weight or a view of one (`weight`, that view): returned as
    a torch view, as eager returns it, with no kernel. A returned size (`number`: a graph
    made shape-dynamic returns its batch size, specialised here) is returned as that int."""

    input: int | None
    weight: torch.Tensor | None = None
    shape: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    offset: int = 0
    number: int | None = None

    def of(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor | int:
        if self.number is not None:
            return self.number
        if self.weight is not None:
            return self.weight
        base = inputs[self.input]
        if not base.is_contiguous():
            # the view was followed over a contiguous tensor, as the program reads its inputs
            base = base.contiguous()
        return base.as_strided(self.shape, self.stride, base.storage_offset() + self.offset)


@dataclass
class View:
    """A tensor as a strided view of a contiguous graph value: `meta` is a meta tensor that
    views an empty tensor of `base`'s shape the way this tensor views `base`."""

    base: SSAValue
    meta: torch.Tensor


@dataclass
class Constant:
    """A parameter or buffer, made an argument of the function on its first use."""

    name: str
    tensor: torch.Tensor


#: the most elements a strided copy split in two reads in its first copy, in view elements
SPLIT_READS = 4
#: the most dims a strided copy tries every order of (7! orders)
REORDERED_DIMS = 7
#: a value `Converter.known` cannot give at compile time
UNKNOWN = object()


def _is_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor)


def _leaves(value: object) -> list:
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    if isinstance(value, dict):
        return _leaves(list(value.values()))
    return [value]


def contiguous_meta(typ: TensorType, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(list(typ.get_shape()), dtype=dtype, device="meta")


INTEGER_DTYPES = {torch.int64, torch.int32}
#: the index tensors one gather reads (emmy/families/gather.py)
INDEX_TENSORS = INDICES


def export_program(
    module: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    dynamic_shapes: object = None,
    example_kwargs: dict[str, object] | None = None,
) -> torch.export.ExportedProgram:
    """torch.export of `module` (eval mode, no grad) at its example inputs, positional and
    keyword, as its users call it; `dynamic_shapes` (torch.export's, e.g.
    `({1: Dim("seq", max=1024)},)`) declares the dims that may vary."""
    module = module.eval()
    register_output_types()
    try:
        with torch.no_grad():
            exported = torch.export.export(
                module, tuple(example_inputs), example_kwargs or None, dynamic_shapes=dynamic_shapes
            )
            _write_fresh_functionally(exported.graph)
            if _mutates(exported.graph):
                # functionalised (no decompositions): each in-place op becomes its functional
                # form, and the graph returns the new value of every input it mutates
                with warnings.catch_warnings():
                    # torch's own copy of the export's tree spec warns about torch's API
                    warnings.filterwarnings("ignore", "`isinstance.treespec", FutureWarning)
                    exported = exported.run_decompositions({})
    except Exception as error:  # noqa: BLE001 - any reason torch.export refuses the model
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise EmmyError(f"torch.export failed: {type(error).__name__}: {first_line}") from None
    return exported


#: in-place ops that change no data, only autograd's view of a tensor (a Hugging Face
#: cache's lazily made tensors are detached in place)
_METADATA_ONLY = frozenset({torch.ops.aten.detach_.default})


def _mutates(fx_graph: fx.Graph) -> bool:
    """Whether a graph has an in-place op that writes data (a KV cache's `index_copy_`)."""
    return any(
        isinstance(node.target, torch._ops.OpOverload)
        and node.target._schema.is_mutable
        and node.target not in _METADATA_ONLY
        for node in fx_graph.nodes
        if node.op == "call_function"
    )


def _write_fresh_functionally(fx_graph: fx.Graph) -> None:
    """Makes each in-place op that writes only a tensor the graph made, which no op reads
    after it, its functional form (a mixture of experts' `weights /= sum`, `inv[perm] =
    arange`): its result is the tensor's one value from then on. torch's functionalisation
    is left for the writes it must order (an input's, a view's): it loses the constants
    lifted in submodules (a cache's lazy tensors)."""
    order = {node: place for place, node in enumerate(fx_graph.nodes)}
    for node in fx_graph.nodes:
        functional = _functional_form(node)
        if functional is not None and _writes_fresh(node, order):
            node.target = functional


def _functional_form(node: fx.Node) -> torch._ops.OpOverload | None:
    """The out-of-place overload of an in-place ATen op (`div_.Tensor` → `div.Tensor`)."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return None
    schema = node.target._schema
    if not schema.is_mutable or node.target in _METADATA_ONLY or not schema.name.endswith("_"):
        return None
    namespace, name = schema.name.split("::")
    packet = getattr(getattr(torch.ops, namespace), name.removesuffix("_"), None)
    overload = node.target._overloadname
    return getattr(packet, overload, None) if packet is not None else None


def _writes_fresh(node: fx.Node, order: dict[fx.Node, int]) -> bool:
    """Whether the op writes only its first argument, a tensor the graph made (no input,
    no view) that no op reads after it, nor views (a view would see the write)."""
    written = [
        value
        for argument, value in zip(node.target._schema.arguments, node.args, strict=False)
        if argument.alias_info is not None and argument.alias_info.is_write
    ]
    if len(written) != 1 or written[0] is not node.args[0]:
        return False
    target = written[0]
    if not isinstance(target, fx.Node) or target.op != "call_function" or returns_view(target):
        return False
    readers = [user for user in target.users if user is not node]
    return all(order[user] < order[node] and not returns_view(user) for user in readers)


def mutated_inputs(exported: torch.export.ExportedProgram) -> dict[int, int]:
    """The returned values that are the new values of mutated user inputs: their place in
    the graph's return → the input's place among the user inputs."""
    signature = exported.graph_signature
    kinds = torch.export.graph_signature.OutputKind
    for spec in signature.output_specs:
        if spec.kind in (kinds.BUFFER_MUTATION, kinds.PARAMETER_MUTATION):
            raise EmmyError(
                f"the model writes its own {spec.target} in place; a program writes only its "
                "inputs (pass the tensor, a KV cache, as an input)"
            )
    user = list(signature.user_inputs)
    return {
        index: user.index(spec.target)
        for index, spec in enumerate(signature.output_specs)
        if spec.kind == kinds.USER_INPUT_MUTATION
    }


def register_output_types() -> None:
    """Lets torch.export and pytree see through the types a model returns that they do not
    know: a Hugging Face model called with its defaults (use_cache) returns a DynamicCache,
    which transformers registers on request. Only where transformers is loaded already."""
    if "transformers" not in sys.modules:
        return
    try:
        # transformers is the user's model's, loaded by it already: emmy never loads it first
        from transformers.integrations.executorch import register_dynamic_cache_export_support
    except ImportError:  # a transformers without it: its caches stay refused, one line
        return
    register_dynamic_cache_export_support()


def export(
    module: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    fallback: bool = True,
    example_kwargs: dict[str, object] | None = None,
) -> ModelGraph:
    """Exports `module` at its example inputs (positional and keyword) and converts it."""
    exported = export_program(module, example_inputs, example_kwargs=example_kwargs)
    flat = flat_inputs(exported.call_spec.in_spec, example_inputs, example_kwargs or {})
    return convert(exported, flat, fallback)


def flat_inputs(
    in_spec: object, args: Sequence[object], kwargs: dict[str, object]
) -> list[torch.Tensor]:
    """A call's tensors in the order of the exported graph's inputs: its positional and
    keyword arguments flattened as torch.export flattened the example's."""
    if not kwargs:
        return [x for x in args if isinstance(x, torch.Tensor)]
    ordered = reorder_kwargs(kwargs, in_spec) if in_spec is not None else kwargs
    leaves, _ = _pytree.tree_flatten((tuple(args), ordered))
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def convert(
    exported: torch.export.ExportedProgram,
    inputs: Sequence[torch.Tensor],
    fallback: bool = True,
) -> ModelGraph:
    """The graph of an exported program at the shapes of `inputs`: a program exported with
    dynamic dims is specialised to them without exporting again. Ops emmy has no kernel
    for run through torch, or with `fallback` False are an error naming the op."""
    state = {**exported.state_dict, **exported.constants}
    constants = {
        spec.arg.name: (spec.target, state[spec.target])
        for spec in exported.graph_signature.input_specs
        if spec.kind != torch.export.graph_signature.InputKind.USER_INPUT
    }
    fx_graph = exported.graph
    _refuse_data_dependent_shapes(fx_graph)
    if exported.range_constraints:
        fx_graph = specialised_graph(exported, inputs)
    out_spec = exported.call_spec.out_spec
    model = Converter(fx_graph, constants, out_spec, fallback, mutated_inputs(exported)).convert()
    model.in_spec = exported.call_spec.in_spec
    return model


def _refuse_data_dependent_shapes(fx_graph: fx.Graph) -> None:
    """An op whose output shape depends on the data (nonzero, a boolean mask's selection) is
    one line naming it, before any kernel: neither emmy nor torch can plan its buffers."""
    for node in fx_graph.nodes:
        if node.op == "call_function" and free_unbacked_symbols(node.meta.get("val")):
            raise EmmyError(
                f"{op_name(node)} has a data-dependent output shape, which a compiled program "
                f"cannot hold (node {node.name}{_where(node)})"
            )


def dynamic_dims(exported: torch.export.ExportedProgram) -> dict[str, tuple[int, int]]:
    """The dims an exported program leaves free: their names and (min, max) ranges."""
    return {
        str(symbol): (int(bounds.lower), int(bounds.upper))
        for symbol, bounds in exported.range_constraints.items()
    }


def _bind_dims(exported: torch.export.ExportedProgram, inputs: Sequence[torch.Tensor]) -> None:
    """Checks the inputs against the shapes the program was exported for: each static dim
    as it was, each dynamic dim within its range and the same wherever it appears."""
    placeholders = [n for n in exported.graph.nodes if n.op == "placeholder"]
    user = [n for n in placeholders if n.name in exported.graph_signature.user_inputs]
    if len(inputs) != len(user):
        raise EmmyError(f"the model takes {len(user)} input(s), got {len(inputs)}")
    bound: dict[str, int] = {}
    for node, tensor in zip(user, inputs, strict=True):
        declared = node.meta["val"].shape
        where = f"input {node.name}"
        if len(declared) != tensor.dim():
            raise EmmyError(
                f"{where} has {tensor.dim()} dims; the model was exported with {len(declared)}"
            )
        for dim, (want, got) in enumerate(zip(declared, tensor.shape, strict=True)):
            if isinstance(want, int):
                if want != got:
                    raise EmmyError(
                        f"{where} dim {dim} is {got}; it is static at {want} (declare it "
                        "dynamic to vary it)"
                    )
                continue
            symbol = want.node.expr
            bounds = exported.range_constraints.get(symbol)
            if bounds is not None and not int(bounds.lower) <= got <= int(bounds.upper):
                raise EmmyError(
                    f"{where} dim {dim} is {got}, outside its dynamic range "
                    f"[{int(bounds.lower)}, {int(bounds.upper)}]"
                )
            if bound.setdefault(str(symbol), got) != got:
                raise EmmyError(
                    f"{where} dim {dim} is {got}, but the same dynamic dim is {bound[str(symbol)]} elsewhere"
                )


class _Propagate(fx.Interpreter):
    """Runs a graph on meta tensors, recording each node's value as its example."""

    def run_node(self, n: fx.Node):
        result = super().run_node(n)
        n.meta["val"] = result
        return result

    def get_attr(self, target, args, kwargs):
        # a tensor constant is met by meta tensors: its example is a meta tensor too (its
        # value is the node's ATTRIBUTE)
        value = super().get_attr(target, args, kwargs)
        if isinstance(value, torch.Tensor):
            return torch.empty_strided(
                value.shape, value.stride(), dtype=value.dtype, device="meta"
            )
        return value

    def call_function(self, target, args, kwargs):
        # a factory (aten.arange of the cache positions) names the model's device: its
        # tensor must be on meta beside the inputs it meets
        if "device" in kwargs:
            kwargs = {**kwargs, "device": torch.device("meta")}
        return super().call_function(target, args, kwargs)


def specialised_graph(
    exported: torch.export.ExportedProgram, inputs: Sequence[torch.Tensor]
) -> fx.Graph:
    """A copy of the exported graph whose example values have the shapes of `inputs`."""
    _bind_dims(exported, inputs)
    copy = fx.Graph()
    output = copy.graph_copy(exported.graph, {})
    copy.output(output)
    module = fx.GraphModule(exported.graph_module, copy)
    args = []
    state = {**exported.state_dict, **exported.constants}
    given = iter(inputs)
    for spec in exported.graph_signature.input_specs:
        if spec.kind == torch.export.graph_signature.InputKind.USER_INPUT:
            tensor = next(given)
        else:
            tensor = state[spec.target]
        args.append(torch.empty(tensor.shape, dtype=tensor.dtype, device="meta"))
    with torch.no_grad():
        _Propagate(module).run(*args)
    return copy


def _symbolic(value: object) -> bool:
    if isinstance(value, torch.Tensor):
        return any(not isinstance(d, int) for d in value.shape)
    return isinstance(value, torch.SymInt)


#: the meta key of a get_attr node's value (a tensor constant), kept on copies of the graph
ATTRIBUTE = "emmy_attribute"


def attribute_of(module: object, target: str) -> object:
    """The value at `target` (dotted) of a graph's module, or UNKNOWN where there is none."""
    value = module
    for part in target.split("."):
        value = getattr(value, part, UNKNOWN)
        if value is UNKNOWN:
            break
    return value


def bind_attributes(fx_graph: fx.Graph) -> None:
    """Records each get_attr node's value (a tensor the model built in its forward: a
    `torch.tensor([...])` literal, a cache's lazy init) in its meta, which a copy of the
    graph keeps where it no longer has the module."""
    module = fx_graph.owning_module
    if module is None:
        return
    for node in fx_graph.nodes:
        if node.op == "get_attr" and ATTRIBUTE not in node.meta:
            node.meta[ATTRIBUTE] = attribute_of(module, str(node.target))


def specialised_fx_graph(module: fx.GraphModule, inputs: Sequence[object]) -> fx.Graph:
    """The graph of `module` (one AOTAutograd hands a backend) with example values at the
    shapes of `inputs`, its tensors and the sizes of its dynamic dims: the graph itself
    where it is static."""
    bind_attributes(module.graph)
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    if not any(_symbolic(n.meta.get("val")) for n in placeholders):
        return module.graph
    copy = fx.Graph()
    copy.output(copy.graph_copy(module.graph, {}))
    args = [
        torch.empty(x.shape, dtype=x.dtype, device="meta") if isinstance(x, torch.Tensor) else x
        for x in inputs
    ]
    with torch.no_grad():
        _Propagate(fx.GraphModule(module, copy)).run(*args)
    return copy


def kept_input_mutations(fx_graph: fx.Graph) -> tuple[fx.Graph, dict[int, int]]:
    """An AOTAutograd graph that keeps its input mutations (a KV cache's new value copied
    into the input at the end, `aten.copy_(input, value)`) as a graph that returns each such
    value after its own outputs, and where they go: their place in the return → the
    input's place among the tensor inputs (Converter's `mutations`). A copy_ the graph
    also returns is returned as the input itself."""
    bind_attributes(fx_graph)
    copies = [
        node
        for node in fx_graph.nodes
        if node.op == "call_function"
        and node.target is torch.ops.aten.copy_.default
        and node.args[0].op == "placeholder"
        and all(user.op == "output" for user in node.users)
    ]
    if not copies:
        return fx_graph, {}
    graph = fx.Graph()
    mapping: dict[fx.Node, fx.Node] = {}
    returned = graph.graph_copy(fx_graph, mapping)
    tensors = [
        n
        for n in fx_graph.nodes
        if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
    ]
    outputs = list(returned) if isinstance(returned, (list, tuple)) else [returned]
    mutations = {}
    for node in copies:
        copied = mapping[node]
        # a returned copy_ is the input itself, written: returned as a view of it
        outputs = [mapping[node.args[0]] if out is copied else out for out in outputs]
        mutations[len(outputs)] = tensors.index(node.args[0])
        outputs.append(mapping[node.args[1]])
        graph.erase_node(copied)
    graph.output(tuple(outputs))
    return graph, mutations


def _where(node: fx.Node) -> str:
    """The model source line a node came from, as torch.export recorded it."""
    source = source_line(node)
    return f" at {source}" if source else ""


_TORCH_DIR = str(Path(torch.__file__).parent)


def source_line(node: fx.Node) -> str:
    """`file:line (function)` of the model's call that made `node`, or ""."""
    trace = node.meta.get("stack_trace") or ""
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip().startswith("File")]
    if not lines:
        return ""
    # the model's own line, not the torch.nn module's that it called
    outside = [line for line in lines if _TORCH_DIR not in line]
    line = (outside or lines)[-1]
    match = re.match(r'File "(.*)", line (\d+), in (.*)', line)
    return f"{match[1]}:{match[2]} ({match[3]})" if match else line


class Converter:
    """Converts an fx graph of ATen ops: its placeholders are the user's inputs, except
    those `constants` names (placeholder name → state name and value). An op no entry
    converts runs through torch (`fallback.call`), or is an error with `fallback` False."""

    def __init__(
        self,
        fx_graph: fx.Graph,
        constants: dict[str, tuple[str, torch.Tensor]],
        out_spec: object = None,
        fallback: bool = True,
        mutations: dict[int, int] | None = None,
    ) -> None:
        # a get_attr's tensor is kept on its node, which a rewritten copy keeps
        bind_attributes(fx_graph)
        self.fx_graph = real_pairs(fx_graph)
        #: returned values that are mutated inputs' new values: place → the input's place
        self.mutations = mutations or {}
        self.fallback = fallback
        self.coverage = Coverage()
        self.placeholder_constants = constants
        self.out_spec = out_spec
        self.block = Block()
        self.builder = Builder(InsertPoint.at_end(self.block))
        self.values: dict[fx.Node, object] = {}
        self.constants: dict[str, torch.Tensor] = {}
        self.constant_args: dict[str, SSAValue] = {}
        self.constant_names: dict[SSAValue, str] = {}  # the other way round, for known()
        self.input_names: list[str] = []
        self.output_dtypes: list[torch.dtype] = []
        self.node: fx.Node | None = None
        self.aliases: dict[int, Alias] = {}
        #: inference batch norms folded into the convolution before them: their value
        self.folded_norms: dict[fx.Node, View] = {}

    # -- values ------------------------------------------------------------------------
    def error(self, message: str) -> EmmyError:
        node = self.node
        where = f" (node {node.name}{_where(node)})" if node is not None else ""
        error = EmmyError(f"{message}{where}")
        error.reason = message  # what a fallback records: its op and place are its own
        return error

    def constant_arg(self, name: str, tensor: torch.Tensor) -> SSAValue:
        if name not in self.constant_args:
            typ = self.type_of(tensor)
            self.constant_args[name] = self.block.insert_arg(typ, len(self.block.args))
            self.constant_names[self.constant_args[name]] = name
            self.constants[name] = tensor.detach().contiguous()
        return self.constant_args[name]

    def attribute(self, node: fx.Node) -> torch.Tensor:
        """The tensor a get_attr node reads (a tensor the model built in its forward, which
        the trace kept as a constant): a constant of the program, as a weight is."""
        value = node.meta.get(ATTRIBUTE, UNKNOWN)
        if value is UNKNOWN:
            value = attribute_of(self.fx_graph.owning_module, str(node.target))
        if not isinstance(value, torch.Tensor):
            raise self.error(f"get_attr {node.target} is {type(value).__name__}, not a tensor")
        return value

    def known(self, value: object) -> object:
        """The tensor a value is at compile time (a constant, a view of one), the value
        itself where it is a number, or UNKNOWN where it is known only when the model runs."""
        if isinstance(value, Constant):
            return value.tensor
        if isinstance(value, View):
            name = self.constant_names.get(value.base)
            if name is None:
                return UNKNOWN
            meta = value.meta
            return self.constants[name].as_strided(meta.shape, meta.stride(), meta.storage_offset())
        if isinstance(value, (list, tuple)):
            return [self.known(item) for item in value]
        return value

    def type_of(self, tensor: torch.Tensor) -> TensorType:
        if tensor.dtype == torch.bool:
            return TensorType(i8, list(tensor.shape))  # a mask: a byte per element, 0 or 1
        if tensor.dtype in INTEGER_DTYPES or tensor.dtype.is_complex:
            name = dtypes.torch_dtype_name(tensor.dtype)
            if name is None:
                raise self.error(f"dtype {tensor.dtype} is not supported")
            return TensorType(dtypes.xdsl_type(name), list(tensor.shape))
        if not dtypes.is_float(dtypes.torch_dtype_name(tensor.dtype)):
            raise self.error(f"dtype {tensor.dtype} is not supported")
        return tensor_type(tensor)

    def view(self, value: object) -> View:
        if isinstance(value, View):
            return value
        if isinstance(value, Constant):
            base = self.constant_arg(value.name, value.tensor)
            return View(base, contiguous_meta(base.type, value.tensor.dtype))
        raise self.error(f"expected a tensor, got {value!r}")

    def operand(self, arg: object) -> SSAValue:
        """A contiguous graph value for a tensor argument."""
        if not isinstance(arg, fx.Node):
            raise self.error(f"expected a tensor, got {arg!r}")
        return self.contiguous(self.view(self.values[arg]))

    def contiguous(self, view: View) -> SSAValue:
        meta, base = view.meta, view.base
        typ = TensorType(base.type.element_type, list(meta.shape))
        base_numel = 1
        for size in base.type.get_shape():
            base_numel *= size
        if meta.is_contiguous() and meta.storage_offset() == 0 and meta.numel() == base_numel:
            if list(meta.shape) == list(base.type.get_shape()):
                return base
            return self.insert(graph.ReshapeOp(base, typ))
        dims = len(collapse_dims(list(meta.shape), list(meta.stride())))
        broadcast = [
            d
            for d, (n, st) in enumerate(zip(meta.shape, meta.stride(), strict=True))
            if n > 1 and not st
        ]
        if dims > 4 and broadcast:
            return self.expanded_copy(view, broadcast)
        if dims > 4:
            return self.split_copy(view)
        return self.insert(graph.AsStridedOp(base, typ, meta.stride(), meta.storage_offset()))

    def split_copy(self, view: View) -> SSAValue:
        """A strided copy of more dims that do not merge than one copy takes (4; a state-
        space model's chunk scan has 5) as two copies of fewer: through the view in
        another order of its dims (`reordered_copy`), else through runs of storage
        (`runs_copy`)."""
        meta = view.meta
        dims = collapse_dims(list(meta.shape), list(meta.stride()))
        # the same elements in the same order, each dim one that does not merge
        flat = View(
            view.base,
            meta.as_strided([n for n, _ in dims], [st for _, st in dims], meta.storage_offset()),
        )
        value = self.reordered_copy(flat)
        if value is None:
            value = self.runs_copy(flat)
        if value is None:
            raise self.error(
                f"a strided copy of {len(dims)} dims that do not merge: at most 4 are supported"
            )
        return self.insert(
            graph.ReshapeOp(value, TensorType(value.type.element_type, list(meta.shape)))
        )

    def reordered_copy(self, view: View) -> SSAValue | None:
        """The view copied with its dims in an order where some merge (a permute of a
        contiguous tensor: dims that neighbour in its storage), then that copy permuted
        back, neighbours in the view kept neighbours so that they merge: each copy of at
        most 4 dims; None where no order gives two such copies."""
        meta, count = view.meta, view.meta.dim()
        if count > REORDERED_DIMS:
            return None
        for order in itertools.permutations(range(count)):
            first = collapse_dims([meta.shape[d] for d in order], [meta.stride(d) for d in order])
            kept = sum(1 for a, b in itertools.pairwise(order) if b == a + 1)
            if len(first) <= 4 and count - kept <= 4:
                break
        else:
            return None
        source = self.contiguous(View(view.base, meta.permute(order)))
        back = [order.index(d) for d in range(count)]
        return self.contiguous(View(source, contiguous_meta(source.type, meta.dtype).permute(back)))

    def runs_copy(self, view: View) -> SSAValue | None:
        """The view as two copies through runs of storage: first three `outer` dims, each
        element of them with the run its other (`inner`) dims reach, then the inner dims
        read from those runs. The outer dims merge in the second copy where they are one
        or two groups of neighbours in the view; of the splits that do, the one with the
        shortest runs (the inner dims of the smallest strides) is taken, where it reads at
        most SPLIT_READS times the view's elements (a second copy of more than 4 dims splits
        again); None where none does."""
        meta, count = view.meta, view.meta.dim()
        best: tuple[int, tuple[int, ...]] | None = None
        for outer in itertools.combinations(range(count), 3):
            groups = 1 + sum(1 for a, b in itertools.pairwise(outer) if b != a + 1)
            if groups + count - 3 >= count:  # the second copy would not be smaller
                continue
            span = 1 + sum(
                (meta.shape[d] - 1) * meta.stride(d) for d in range(count) if d not in outer
            )
            reads = _numel([meta.shape[d] for d in outer]) * span
            if best is None or reads < best[0]:
                best = (reads, outer)
        if best is None or best[0] > SPLIT_READS * meta.numel():
            return None
        reads, outer = best
        span = reads // _numel([meta.shape[d] for d in outer])
        runs = meta.as_strided(
            [meta.shape[d] for d in outer] + [span],
            [meta.stride(d) for d in outer] + [1],
            meta.storage_offset(),
        )
        source = self.contiguous(View(view.base, runs))
        run_strides = contiguous_meta(source.type, meta.dtype).stride()
        strides = [
            run_strides[outer.index(d)] if d in outer else meta.stride(d) for d in range(count)
        ]
        read = contiguous_meta(source.type, meta.dtype).as_strided(meta.shape, strides)
        return self.contiguous(View(source, read))

    def expanded_copy(self, view: View, broadcast: list[int]) -> SSAValue:
        """A broadcast of a strided view (grouped-query attention's repeated keys) in two
        copies: the view without its broadcast dims, then that broadcast, each of fewer dims
        that do not merge than the two together."""
        meta = view.meta
        kept = [d for d in range(meta.dim()) if d not in broadcast]
        inner = meta.as_strided(
            [meta.shape[d] for d in kept], [meta.stride(d) for d in kept], meta.storage_offset()
        )
        source = self.contiguous(View(view.base, inner))
        expanded = contiguous_meta(source.type, meta.dtype)
        for d in broadcast:
            expanded = expanded.unsqueeze(d)
        return self.contiguous(View(source, expanded.expand(meta.shape)))

    def insert(self, op) -> SSAValue:
        """Appends a graph op, verified here so that what its kernel cannot take (an
        integer tensor in arithmetic, attention of rank 3) names the node."""
        try:
            op.verify()
        except VerifyException as error:
            # the op is never inserted: its uses of the handler's earlier results go, so
            # that erase_after can erase those
            op.drop_all_references()
            raise self.error(str(error).strip().splitlines()[0]) from None
        self.builder.insert(op)
        return op.results[0]

    def result(self, value: SSAValue, like: torch.Tensor) -> View:
        return View(value, contiguous_meta(value.type, like.dtype))

    def scalar(self, value: float, like: SSAValue) -> SSAValue:
        return self.insert(graph.ConstantOp(float(value), like.type.element_type))

    # -- the walk ------------------------------------------------------------------------
    def convert(self) -> ModelGraph:
        # AOTAutograd hands a backend its graph under its fake mode: constants, folded
        # values and the meta tensors views are followed on are real tensors
        with unset_fake_temporarily():
            return self._convert()

    def _convert(self) -> ModelGraph:
        for node in self.fx_graph.nodes:
            self.node = node
            if node.op == "placeholder":
                constant = self.placeholder_constants.get(node.name)
                example = node.meta["val"]
                if not isinstance(example, torch.Tensor):
                    # a size AOTAutograd passes beside the tensors, specialised to a number
                    self.values[node] = int(example)
                elif constant is None:
                    # user inputs come first: constants become arguments on first use
                    arg = self.block.insert_arg(self.type_of(example), len(self.block.args))
                    self.values[node] = View(arg, contiguous_meta(arg.type, example.dtype))
                    self.input_names.append(node.name)
                else:
                    self.values[node] = Constant(*constant)
            elif node.op == "call_function":
                self.values[node] = self.call(node)
            elif node.op == "get_attr":
                self.values[node] = Constant(str(node.target), self.attribute(node))
            elif node.op == "output":
                self.builder.insert(func.ReturnOp(*self.returned(node.args[0])))
            else:
                raise self.error(f"unsupported graph node kind {node.op}")
        self.node = None
        ret = self.block.last_op
        assert isinstance(ret, func.ReturnOp)
        main = func.FuncOp(
            "main",
            ([a.type for a in self.block.args], [v.type for v in ret.arguments]),
            Region(self.block),
        )
        main.attributes["coverage"] = self.coverage.to_attr()
        if self.mutations:
            written = [IntegerAttr(i, 64) for _, i in sorted(self.mutations.items())]
            main.attributes[MUTATED_INPUTS] = ArrayAttr(written)
        return ModelGraph(
            ModuleOp([main]),
            self.input_names,
            self.constants,
            self.output_dtypes,
            self.out_spec,
            self.coverage,
            self.aliases,
        )

    def returned(self, values: Sequence[object]) -> list[SSAValue]:
        """The function's results: first the new values of the mutated inputs (a kernel
        writes each into its input's buffer), then the user's outputs but those that view
        an input or a weight (returned as torch views)."""
        written = [self.operand(values[i]) for i in sorted(self.mutations)]
        user = [value for i, value in enumerate(values) if i not in self.mutations]
        self.output_dtypes = [_output_dtype(value) for value in user]
        returned = []
        for index, value in enumerate(user):
            alias = self.alias(value)
            if alias is None:
                returned.append(self.operand(value))
            else:
                self.aliases[index] = alias
        return [*written, *returned]

    def alias(self, arg: object) -> Alias | None:
        """How a returned value views an input or a weight (no kernel computes it), or
        None for a value a kernel computes."""
        value = self.values.get(arg) if isinstance(arg, fx.Node) else None
        if isinstance(value, int):
            return Alias(None, number=value)
        if isinstance(value, Constant):
            return Alias(None, value.tensor.detach())
        if not isinstance(value, View):
            return None
        base = value.base
        while isinstance(base.owner, graph.ReshapeOp):  # the same elements, in order
            base = base.owner.input
        if base not in self.block.args:
            return None
        meta, where = value.meta, list(self.block.args).index(base)
        if where < len(self.input_names):
            return Alias(
                where, None, tuple(meta.shape), tuple(meta.stride()), meta.storage_offset()
            )
        return Alias(None, self.known(View(base, meta)))  # a view of the weight's own tensor

    def call(self, node: fx.Node) -> object:
        """The node's value: computed at compile time where it depends on constants and
        shapes alone, else by its registry entry, else through torch."""
        counted = isinstance(node.target, torch._ops.OpOverload) and not returns_view(node)
        folded = self.fold(node) if node.target not in _DTYPE_VIEWS else self.reinterpret(node)
        if folded is not None:
            if counted:
                self.coverage.count(node, "folded")
            return folded
        support = ATEN.supports(node)
        reason = support.reason
        if support and _complex(node):
            # no kernel computes complex numbers: torch does (the rotary pattern is real
            # arithmetic on pairs by then, emmy.frontend.complex)
            support, reason = Support(COMPLEX_REASON), COMPLEX_REASON
        if support:
            last = self.block.last_op
            try:
                value = ATEN.entry_for(node).handler(self, node)
            except EmmyError as error:
                if not self.fallback or not hasattr(error, "reason"):
                    raise
                self.erase_after(last)
                reason = error.reason
            except Exception as error:  # noqa: BLE001 - a handler's bug: torch still runs it
                self.erase_after(last)
                text = str(error).strip().splitlines()
                reason = (
                    f"emmy failed to convert it: {type(error).__name__}: {text[0] if text else ''}"
                )
            else:
                if counted:
                    self.coverage.count(node, "native")
                return value
        if not self.fallback:
            raise self.error(reason)
        self.coverage.count(node, "fallback")
        return self.fall_back(node, reason)

    def erase_after(self, last: object) -> None:
        """Erases the ops a handler inserted before it refused its node."""
        while self.block.last_op is not last:
            self.block.erase_op(self.block.last_op)

    def fold(self, node: fx.Node) -> object:
        """The node's value as constants, where every call would compute the same: an
        empty result, or an op of constants and sizes alone (arange, full, a mask of
        shapes); None otherwise."""
        if not foldable(node):
            return None
        example = node.meta["val"]
        if all(t.numel() == 0 for t in tensor_outputs(example)):
            value = fx.node.map_aggregate(
                example, lambda t: torch.empty(t.shape, dtype=t.dtype) if _is_tensor(t) else t
            )
        else:
            known = fx.node.map_arg((node.args, node.kwargs), lambda n: self.known(self.values[n]))
            if any(item is UNKNOWN for item in _leaves(known)):
                return None
            with torch.no_grad():
                value = node.target(*known[0], **known[1])
        return fx.node.map_aggregate(
            value, lambda t: Constant(f"folded.{node.name}", t) if _is_tensor(t) else t
        )

    def reinterpret(self, node: fx.Node) -> Constant | None:
        """`view_as_real` or `view_as_complex` of a constant (a rotary embedding's complex
        frequencies, emmy.frontend.complex): its elements read as the other dtype, at
        compile time; None where the tensor is known only when the model runs."""
        tensor = self.known(self.values[node.args[0]])
        if not isinstance(tensor, torch.Tensor):
            return None
        return Constant(f"{node.name}.value", node.target(tensor.contiguous()).clone())

    def fall_back(self, node: fx.Node, reason: str) -> object:
        """The node as a `fallback.call`: torch runs it on the device's buffers, its
        tensor arguments read in place as views."""
        example = node.meta.get("val")
        outputs = tensor_outputs(example)
        for tensor in outputs:
            if any(not isinstance(d, int) for d in tensor.shape):
                raise self.error(f"{op_name(node)} has a data-dependent output shape")
        operands: list[SSAValue] = []

        def argument(value: object) -> Attribute:
            if not isinstance(value, (View, Constant)):
                return encode(value, lambda n: argument(self.values[n]))
            view = self.view(value)
            if view.base not in operands:
                operands.append(view.base)
            meta = view.meta
            return fallback.TensorArgAttr(
                operands.index(view.base),
                meta.shape,
                meta.stride(),
                meta.storage_offset(),
                str(meta.dtype).removeprefix("torch."),
            )

        try:
            arguments = [argument(a) for a in node.args]
            kwargs = {name: argument(a) for name, a in node.kwargs.items()}
        except EmmyError as error:
            raise self.error(f"{op_name(node)} cannot fall back to torch: {error}") from None
        types = []
        for tensor in outputs:
            if tensor.dtype != torch.bool and dtypes.torch_dtype_name(tensor.dtype) is None:
                raise self.error(
                    f"{op_name(node)} gives {tensor.dtype}, which emmy has no storage type for"
                )
            types.append(self.type_of(tensor))
        source = source_line(node)
        op = fallback.CallOp(op_name(node), operands, arguments, kwargs, types, reason, source)
        self.insert(op)
        self.coverage.fallbacks.append(Fallback(op_name(node), reason, source))
        results = iter(op.outputs)
        return fx.node.map_aggregate(
            example, lambda t: self.result(next(results), t) if _is_tensor(t) else None
        )

    def tensor_or_scalar(self, arg: object, element: Attribute, shape: Sequence[int]) -> SSAValue:
        """An operand of a pointwise op whose result has `shape`, in the dtype `element`:
        a number as a constant, a tensor read in place where its broadcast is one a kernel
        reads (else expanded by a copy), converted where its dtype is another."""
        value = self.values[arg] if isinstance(arg, fx.Node) else arg
        if isinstance(value, (bool, int, float)):  # a number, or a size the graph computed
            return self.insert(graph.ConstantOp(value, element))
        view = self.view(value)
        if broadcast_kind(tuple(view.meta.shape), tuple(shape)) is None:
            # a broadcast no elementwise kernel reads in place: expanded by a copy
            view = View(view.base, view.meta.expand(tuple(shape)))
        read = self.contiguous(view)
        if read.type.element_type == element:
            return read
        return self.insert(graph.ConvertOp(read, TensorType(element, read.type.get_shape())))

    def over_last_dim(self, node: fx.Node, dim: int, build: Callable[[SSAValue], SSAValue]) -> View:
        """Applies a last-dim op to dim `dim`: a transposed copy goes in, and the result is
        viewed back (dims of size 1 cost no copy)."""
        source = self.view(self.values[node.args[0]])
        rank = source.meta.dim()
        dim %= rank
        moved = View(source.base, source.meta.transpose(dim, rank - 1))
        value = build(self.contiguous(moved))
        result = self.result(value, node.meta["val"])
        if dim == rank - 1 or len(value.type.get_shape()) != rank:
            return result
        return View(result.base, result.meta.transpose(dim, rank - 1))


#: the ops the converter takes, each by one entry
ATEN = OpRegistry()


def supported_ops() -> frozenset[str]:
    """The names of the ATen ops the converter takes."""
    return ATEN.supported_ops()


def handler_for(name: str) -> OpEntry | None:
    """The entry that converts op `name`, or None when no entry does."""
    return ATEN.handler_for(name)


def supports(node: fx.Node) -> Support:
    """Whether the converter takes a call_function node, and if not why, without converting."""
    return ATEN.supports(node)


#: views that read a tensor's elements as another dtype
_DTYPE_VIEWS = (torch.ops.aten.view_as_real.default, torch.ops.aten.view_as_complex.default)
COMPLEX_REASON = "no emmy kernel computes complex tensors"


def _complex(node: fx.Node) -> bool:
    """Whether a node reads or gives a complex tensor."""
    values = [node.meta.get("val"), *(n.meta.get("val") for n in node.all_input_nodes)]
    return any(t.dtype.is_complex for t in tensor_outputs(values))


def _output_dtype(node: fx.Node) -> torch.dtype:
    """A returned value's dtype; a returned size's is int64 (an alias: no kernel gives it)."""
    value = node.meta["val"]
    return value.dtype if isinstance(value, torch.Tensor) else torch.int64


def _value(node: fx.Node) -> torch.Tensor:
    """The node's example tensor: its first, for ops that give several (their others, the
    statistics saved for a backward pass, have no user in inference)."""
    value = node.meta["val"]
    return value[0] if isinstance(value, (list, tuple)) else value


# -- fx plumbing ------------------------------------------------------------------------
_NUMBERS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)


@ATEN.handles_class(lambda node: isinstance(node.meta.get("val"), _NUMBERS))
def _size(self: Converter, node: fx.Node) -> int | float:
    """A size (of a dynamic dim, specialised), or a number computed from sizes (`x.shape[1]
    / 8`), read by views and as scalars: known when the graph is converted."""
    value = node.meta["val"]
    if isinstance(value, (float, torch.SymFloat)):
        return float(value)
    return int(value)


@ATEN.handles_class(lambda node: node.target is operator.getitem)
def _item(self: Converter, node: fx.Node) -> object:
    """One result of an op that gives several."""
    return self.values[node.args[0]][node.args[1]]


# -- shape-only ops ---------------------------------------------------------------------
#: ops that read only the shape and dtype of their first argument
SHAPE_ONLY_OPS = (
    "aten.zeros_like.default",
    "aten.ones_like.default",
    "aten.full_like.default",
    "aten.empty_like.default",
    "aten.new_zeros.default",
    "aten.new_ones.default",
    "aten.new_full.default",
    "aten.new_empty.default",
)


def _shape_only_refusal(node: fx.Node) -> str | None:
    if any(not _is_size(arg) for arg in node.all_input_nodes[1:]):
        return f"{op_name(node)} of a tensor fill is not supported"
    return None


def _is_size(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), (int, torch.SymInt))


@ATEN.handles(*SHAPE_ONLY_OPS, accepts=_shape_only_refusal)
def _shape_only(self: Converter, node: fx.Node) -> Constant:
    """zeros_like(x), x.new_full(size, v), ...: of x's shape and dtype alone, so computed
    at compile time, on the CPU (any contents are right for an empty one: zeros)."""
    example = node.args[0].meta["val"]
    rest = fx.node.map_arg((node.args[1:], dict(node.kwargs)), lambda n: self.values[n])
    args, kwargs = rest
    if "device" in kwargs:
        kwargs["device"] = "cpu"
    with torch.no_grad():
        value = node.target(torch.zeros(example.shape, dtype=example.dtype), *args, **kwargs)
    if "empty" in op_name(node):
        value = value.zero_()
    return Constant(f"{node.name}.value", value)


# -- views and copies -------------------------------------------------------------------
@ATEN.handles(
    "aten.view.default",
    "aten.reshape.default",
    "aten._unsafe_view.default",
    "aten.transpose.int",
    "aten.permute.default",
    "aten.t.default",
    "aten.unsqueeze.default",
    "aten.squeeze.dim",
    "aten.squeeze.dims",
    "aten.squeeze.default",
    "aten.flatten.using_ints",
    "aten.unflatten.int",
    "aten.expand.default",
    "aten.slice.Tensor",
    "aten.select.int",
    "aten.narrow.default",
    "aten.alias.default",
    "aten.detach.default",
    "aten.split.Tensor",
    "aten.split_with_sizes.default",
    "aten.chunk.default",
    "aten.unbind.int",
)
def _view(self: Converter, node: fx.Node) -> object:
    source = self.view(self.values[node.args[0]])
    rest = fx.node.map_arg(node.args[1:], lambda size: self.values[size])
    try:
        meta = node.target(source.meta, *rest, **node.kwargs)
    except (RuntimeError, ValueError):
        # not expressible as a view of these strides (a reshape of a permuted tensor):
        # copy to contiguous, then view that
        base = self.contiguous(source)
        meta = node.target(contiguous_meta(base.type, source.meta.dtype), *rest, **node.kwargs)
        source = View(base, meta)
    if isinstance(meta, (list, tuple)):
        return [View(source.base, m) for m in meta]
    if not meta._is_view() and meta is not source.meta:
        # torch copied (reshape of a non-viewable tensor): so does emmy
        base = self.contiguous(source)
        meta = node.target(contiguous_meta(base.type, source.meta.dtype), *rest, **node.kwargs)
        return View(base, meta)
    return View(source.base, meta)


@ATEN.handles("aten.dropout.default", "aten.lift_fresh_copy.default", "aten.lift_fresh.default")
def _identity(self: Converter, node: fx.Node) -> object:
    return self.values[node.args[0]]


def _whole_storage(example: torch.Tensor) -> bool:
    """Whether a tensor is its whole storage, in order (as_strided counts from there)."""
    return (
        example.is_contiguous()
        and example.storage_offset() == 0
        and example.untyped_storage().nbytes() == example.numel() * example.element_size()
    )


def _as_strided_refusal(node: fx.Node) -> str | None:
    if any(not isinstance(arg, (int, fx.Node)) for arg in [*node.args[1], *node.args[2]]):
        return "as_strided of sizes that are not ints is not supported"
    return None


@ATEN.handles("aten.as_strided.default", accepts=_as_strided_refusal)
def _as_strided(self: Converter, node: fx.Node) -> View:
    """x.as_strided(size, stride, offset): a view of x's storage, which torch counts from
    its start. Where emmy views the same storage the same way as eager (an input, a view of
    one), the view is taken over it; where eager's x is its whole storage, over x copied;
    else eager's storage is one emmy does not hold."""
    source = self.view(self.values[node.args[0]])
    example = node.args[0].meta["val"]
    size, stride = (fx.node.map_arg(node.args[k], lambda n: self.values[n]) for k in (1, 2))
    offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
    meta = source.meta
    same = (
        tuple(meta.shape) == tuple(example.shape)
        and tuple(meta.stride()) == tuple(example.stride())
        and meta.storage_offset() == example.storage_offset()
        and _numel(source.base.type.get_shape()) * example.element_size()
        == example.untyped_storage().nbytes()
    )
    if not same:
        if not _whole_storage(example):
            raise self.error("as_strided of a view of a storage emmy does not hold")
        source = View(self.contiguous(source), contiguous_meta(self.type_of(example), meta.dtype))
    if isinstance(offset, fx.Node):
        offset = self.values[offset]  # a size the graph computed, specialised
    start = source.meta.storage_offset() if offset is None else int(offset)
    return View(source.base, source.meta.as_strided(list(size), list(stride), start))


# checks torch.export inserts (before each `.to(...)`) of what shapes already fix
@ATEN.handles("aten._assert_tensor_metadata.default")
def _no_op(self: Converter, node: fx.Node) -> None:
    return None


def _copy_refusal(node: fx.Node) -> str | None:
    source, out = node.args[0].meta["val"].dtype, node.meta["val"].dtype
    for dtype in (source, out):
        if _storage_name(dtype) is None:
            return f"{node.target}: dtype {dtype} is not supported"
    return None


@ATEN.handles(
    "aten.contiguous.default",
    "aten.clone.default",
    "aten._to_copy.default",
    "aten.to.dtype",
    "aten.to.dtype_layout",
    "aten.type_as.default",
    "aten.to.device",  # to the device the program runs on: its tensors are there
    accepts=_copy_refusal,
)
def _copy(self: Converter, node: fx.Node) -> View:
    """A copy, contiguous, converted to another dtype where it asks for one."""
    return _copied(self, node.args[0], node.meta["val"])


def _copied(self: Converter, source: fx.Node, out: torch.Tensor) -> View:
    """`source`, contiguous, in the dtype of `out`."""
    value = self.contiguous(self.view(self.values[source]))
    typ = self.type_of(out)
    if value.type.element_type != typ.element_type:
        value = self.insert(graph.ConvertOp(value, TensorType(typ.element_type, typ.get_shape())))
    return self.result(value, out)


def _copy_into_refusal(node: fx.Node) -> str | None:
    into, source = node.args[0].meta["val"], node.args[1].meta["val"]
    if tuple(into.shape) != tuple(source.shape):
        return f"{node.target}: a copy that broadcasts {list(source.shape)} to {list(into.shape)}"
    for dtype in (source.dtype, into.dtype):
        if _storage_name(dtype) is None:
            return f"{node.target}: dtype {dtype} is not supported"
    return None


@ATEN.handles("aten.copy.default", accepts=_copy_into_refusal)
def _copy_into(self: Converter, node: fx.Node) -> View:
    """The functional form of `x.copy_(y)` (a write of y over x, as functionalisation
    spells it): y, contiguous, in x's dtype."""
    return _copied(self, node.args[1], node.meta["val"])


# -- elementwise ------------------------------------------------------------------------
def _storage_name(dtype: torch.dtype) -> str | None:
    """The storage type of a torch dtype (a bool is i8), None where emmy stores none."""
    return BOOL if dtype == torch.bool else dtypes.torch_dtype_name(dtype)


def _element(dtype: torch.dtype) -> Attribute:
    name = _storage_name(dtype)
    assert name is not None, f"{dtype} has no storage type"
    return dtypes.xdsl_type(name)


def _operands(node: fx.Node) -> tuple[PointwiseOp, list[object]]:
    """The pointwise op of a node and its operands (fx nodes or numbers), bound by torch's
    schema; an optional operand left None picks the op without it (clamp → clamp_min)."""
    entry, form = BY_ATEN[op_name(node)]
    schema = node.target._schema
    given = {arg.name: value for arg, value in zip(schema.arguments, node.args, strict=False)}
    given |= node.kwargs
    defaults = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    operands = [given.get(name, defaults.get(name)) for name in form.args]
    for index, name in entry.partial:
        if operands[index] is None:
            entry = POINTWISE[name]
            operands = operands[:index] + operands[index + 1 :]
            break
    return entry, operands


def _example(arg: object) -> object:
    """An operand's example: a tensor, or a number (a size the graph computed, specialised)."""
    if not isinstance(arg, fx.Node):
        return arg
    value = arg.meta["val"]
    return value if isinstance(value, torch.Tensor) else int(value)


def _values_dtype(entry: PointwiseOp, operands: list[object], out: torch.Tensor) -> torch.dtype:
    """The dtype the op's values compute in: torch's promotion of them by the op's kind
    (a comparison's by the default kind: its values meet in their common dtype)."""
    values = [_example(o) for role, o in zip(entry.roles, operands, strict=True) if role == VALUE]
    if not values:
        return torch.bool
    kind = Promotion.DEFAULT if entry.gives == Gives.BOOL else entry.promotion
    _, promoted = elementwise_dtypes(
        *values, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND[kind.value]
    )
    return promoted


def _pointwise_refusal(node: fx.Node) -> str | None:
    entry, operands = _operands(node)
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor):
        return f"{op_name(node)} does not give a tensor"
    if any(o is None for o in operands):
        return f"{op_name(node)} without all of its operands is not supported"
    examples = [out, *(_example(o) for o in operands)]
    tensors = [t for t in examples if isinstance(t, torch.Tensor)]
    unstored = [t.dtype for t in tensors if _storage_name(t.dtype) is None]
    if unstored:
        return f"{op_name(node)} of {unstored[0]} is not supported"
    common = _values_dtype(entry, operands, out)
    if entry.gives == Gives.SAME and common != out.dtype:
        return f"{op_name(node)}: torch gives {out.dtype}, its promotion {common}"
    if not entry.takes(_storage_name(common) or ""):
        return f"{op_name(node)} of {common} is not supported"
    return None


@ATEN.handles_class(
    lambda node: op_name(node) in BY_ATEN, members=list(BY_ATEN), accepts=_pointwise_refusal
)
def _pointwise(self: Converter, node: fx.Node) -> View:
    """An op of the pointwise table: its values promoted to one dtype, its conditions
    bools, its parameters constants; `alpha` (add, sub) scales its operand first."""
    entry, operands = _operands(node)
    out = node.meta["val"]
    shape = list(out.shape)
    common = _element(_values_dtype(entry, operands, out))
    args = [
        self.tensor_or_scalar(arg, i8 if role == CONDITION else common, shape)
        for role, arg in zip(entry.roles, operands, strict=True)
    ]
    _, form = BY_ATEN[op_name(node)]
    alpha = node.kwargs.get("alpha", 1)
    if form.alpha is not None and alpha != 1:
        scaled = form.args.index(form.alpha)
        factor = self.insert(graph.ConstantOp(alpha, common))
        args[scaled] = self.insert(graph.MulOp(args[scaled], factor, args[scaled].type))
    return self.result(self.insert(graph.elementwise(entry.name, args, self.type_of(out))), out)


def _glu_refusal(node: fx.Node) -> str | None:
    if dtypes.is_float(_storage_name(node.meta["val"].dtype)):
        return None
    return f"glu of {node.meta['val'].dtype} is not supported"


@ATEN.handles("aten.glu.default", accepts=_glu_refusal)
def _glu(self: Converter, node: fx.Node) -> View:
    """glu(x, dim): the first half of x along dim times the sigmoid of the second."""
    x = self.view(self.values[node.args[0]])
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", -1)
    half = x.meta.shape[dim] // 2
    a = self.contiguous(View(x.base, x.meta.narrow(dim, 0, half)))
    b = self.contiguous(View(x.base, x.meta.narrow(dim, half, half)))
    gate = self.insert(graph.SigmoidOp(b))
    return self.result(self.insert(graph.MulOp(a, gate, a.type)), node.meta["val"])


def _gelu_refusal(node: fx.Node) -> str | None:
    if dtypes.is_float(_storage_name(node.meta["val"].dtype)):
        return None
    return f"gelu of {node.meta['val'].dtype} is not supported"


@ATEN.handles("aten.gelu.default", accepts=_gelu_refusal)
def _gelu(self: Converter, node: fx.Node) -> View:
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    x = self.operand(node.args[0])
    return self.result(self.insert(graph.GeluOp(x, approximate)), node.meta["val"])


@ATEN.handles("emmy.rope.default")
def _rope(self: Converter, node: fx.Node) -> View:
    x, cos, sin = (self.operand(a) for a in node.args[:3])
    return self.result(self.insert(graph.RopeOp(x, cos, sin)), node.meta["val"])


def _cached_attention_refusal(node: fx.Node) -> str | None:
    """What attention_decode does not cover: a q and caches of different or non-float
    dtypes, a length not one int64, shapes that do not fit, a head dim that no `lanes`
    option divides."""
    q, k, v, length = (a.meta["val"] for a in node.args[:4])
    if not q.dtype == k.dtype == v.dtype or not dtypes.is_float(_storage_name(q.dtype)):
        return f"cached_attention of q {q.dtype} and caches {k.dtype}, {v.dtype}"
    if length.dtype != torch.int64 or length.numel() != 1:
        return (
            f"cached_attention's length must be one int64, not {length.dtype} {list(length.shape)}"
        )
    ranks = q.dim() == k.dim() == 4 and k.shape == v.shape
    if not ranks or not _cache_fits(tuple(q.shape), tuple(k.shape)):
        return f"cached_attention of q {list(q.shape)} over caches {list(k.shape)}, {list(v.shape)}"
    dim = q.shape[-1]
    if dim % 4 or dim > 1024:
        return f"cached_attention of head dim {dim} (a multiple of 4 up to 1024 is supported)"
    return None


def _cache_fits(q: tuple[int, ...], cache: tuple[int, ...]) -> bool:
    """q [batch, heads, new, dim] over caches [batch, kv_heads, max_len, dim]: heads a
    multiple of kv_heads, no more new tokens than the cache holds."""
    (batch, heads, new, dim), (cache_batch, kv_heads, max_len, cache_dim) = q, cache
    same = batch == cache_batch and dim == cache_dim
    return same and kv_heads > 0 and heads % kv_heads == 0 and new <= max_len


@ATEN.handles("emmy.cached_attention.default", accepts=_cached_attention_refusal)
def _cached_attention(self: Converter, node: fx.Node) -> View:
    q, k_cache, v_cache, length = (self.operand(a) for a in node.args[:4])
    op = graph.CachedAttentionOp(q, k_cache, v_cache, length)
    return self.result(self.insert(op), node.meta["val"])


@ATEN.handles("aten.embedding.default")
def _embedding(self: Converter, node: fx.Node) -> View:
    """Rows of the table by id. padding_idx, scale_grad_by_freq and sparse shape only the
    gradient: the forward pass reads the padding row like any other."""
    out = node.meta["val"]
    if not out.is_floating_point():
        return _rows(self, node)
    table = self.operand(node.args[0])
    ids = self.operand(node.args[1])
    return self.result(self.insert(graph.EmbeddingOp(table, ids, self.type_of(out))), out)


# -- indexing and data movement ---------------------------------------------------------
def _nonempty(refusal: Refusal | None = None) -> Refusal:
    """`refusal`, after refusing an op whose result has no element (no kernel launches
    for one)."""

    def refuses(node: fx.Node) -> str | None:
        reason = refusal(node) if refusal is not None else None
        if reason is not None:
            return reason
        shape = _value(node).shape
        # sizes of dims left dynamic are known once the graph is specialised
        if all(isinstance(n, int) for n in shape) and 0 in shape:
            return f"{op_name(node)} giving an empty tensor is not supported"
        return None

    return refuses


@dataclass
class Pick:
    """An index tensor of a gather: each output element reads it at Σ o_d · strides[d] (of
    `base`'s elements) and picks that element of a dim of `size` elements, `step` apart."""

    base: SSAValue
    strides: list[int]
    size: int
    step: int


def _gather(
    self: Converter, source: View, out: torch.Tensor, strides: list[int], offset: int, picks=()
) -> View:
    """A gather of `out`'s shape from `source`'s base: strides and offset over its elements."""
    indices = [(p.base, p.strides, p.size, p.step) for p in picks]
    op = graph.GatherOp(source.base, self.type_of(out), strides, offset, indices)
    return self.result(self.insert(op), out)


def _index_base(self: Converter, view: View, shape: Sequence[int]) -> tuple[SSAValue, list[int]]:
    """An index tensor broadcast to `shape`, as a graph value and its strides over it."""
    meta = view.meta.reshape((1,) * (len(shape) - view.meta.dim()) + tuple(view.meta.shape))
    if meta.storage_offset() != 0:
        base = self.contiguous(view)
        meta = contiguous_meta(base.type, view.meta.dtype).reshape(meta.shape)
        return base, list(meta.expand(*shape).stride())
    return view.base, list(meta.expand(*shape).stride())


def _index_dtype_refusal(node: fx.Node, index: fx.Node) -> str | None:
    dtype = index.meta["val"].dtype
    if dtype in (torch.bool, torch.uint8):
        return f"{op_name(node)} by a boolean mask: its output shape depends on the data"
    if dtype not in INTEGER_DTYPES:
        return f"{op_name(node)} by {dtype} indices is not supported"
    return None


def _index_select_refusal(node: fx.Node) -> str | None:
    if node.args[0].meta["val"].dim() == 0:
        return "index_select of a 0-dim tensor is not supported"
    return _index_dtype_refusal(node, node.args[2])


@ATEN.handles("aten.index_select.default", accepts=_nonempty(_index_select_refusal))
def _index_select(self: Converter, node: fx.Node) -> View:
    source = self.view(self.values[node.args[0]])
    meta, dim = source.meta, int(node.args[1]) % source.meta.dim()
    out = node.meta["val"]
    index, index_strides = _index_base(self, self.view(self.values[node.args[2]]), [-1])
    strides = list(meta.stride())
    strides[dim] = 0
    along = [0] * meta.dim()
    along[dim] = index_strides[0]
    pick = Pick(index, along, meta.shape[dim], meta.stride(dim))
    return _gather(self, source, out, strides, meta.storage_offset(), [pick])


def _index_copy_refusal(node: fx.Node) -> str | None:
    x, index, source = (_value(node.args[k]) for k in (0, 2, 3))
    if index.dim() > 1 or index.dtype not in (torch.int32, torch.int64):
        return "index_copy by an index that is not a 0-d or 1-d tensor of int32/int64"
    if source.dim() != x.dim():
        return "index_copy of a source with fewer dims than its input is not supported"
    return None


@ATEN.handles("aten.index_copy.default", accepts=_nonempty(_index_copy_refusal))
def _index_copy(self: Converter, node: fx.Node) -> View:
    """A static KV cache's update: the input with the rows at the positions replaced."""
    out = node.meta["val"]
    x, index, source = (self.operand(node.args[k]) for k in (0, 2, 3))
    op = graph.IndexCopyOp(x, node.args[1] % out.dim(), index, source)
    return self.result(self.insert(op), out)


def _gather_refusal(node: fx.Node) -> str | None:
    if node.args[0].meta["val"].dim() == 0:
        return "gather of a 0-dim tensor is not supported"
    return _index_dtype_refusal(node, node.args[2])


@ATEN.handles("aten.gather.default", accepts=_nonempty(_gather_refusal))
def _gather_along(self: Converter, node: fx.Node) -> View:
    """torch.gather: out[..., j, ...] = x[..., index[..., j, ...], ...] along dim."""
    source = self.view(self.values[node.args[0]])
    meta, dim = source.meta, int(node.args[1]) % source.meta.dim()
    out = node.meta["val"]
    index, index_strides = _index_base(self, self.view(self.values[node.args[2]]), out.shape)
    strides = list(meta.stride())
    strides[dim] = 0
    pick = Pick(index, index_strides, meta.shape[dim], meta.stride(dim))
    return _gather(self, source, out, strides, meta.storage_offset(), [pick])


def _advanced_index_refusal(node: fx.Node) -> str | None:
    indices = [i for i in node.args[1] if i is not None]
    for index in indices:
        refusal = _index_dtype_refusal(node, index)
        if refusal is not None:
            return refusal
    if len(indices) > INDEX_TENSORS:
        return f"indexing by {len(indices)} index tensors: at most {INDEX_TENSORS} are supported"
    return None


@ATEN.handles("aten.index.Tensor", accepts=_nonempty(_advanced_index_refusal))
def _advanced_index(self: Converter, node: fx.Node) -> View:
    """x[..., a, b, ...] by integer index tensors (None entries take a whole dim): the
    indexed dims become the broadcast shape of the indices, in their place when they are
    adjacent and first otherwise, as torch does it."""
    source = self.view(self.values[node.args[0]])
    meta, out = source.meta, node.meta["val"]
    entries = list(node.args[1]) + [None] * (meta.dim() - len(node.args[1]))
    indexed = [d for d, entry in enumerate(entries) if entry is not None]
    views = [self.view(self.values[entries[d]]) for d in indexed]
    broadcast = list(torch.broadcast_shapes(*(v.meta.shape for v in views)))
    kept = [d for d in range(meta.dim()) if d not in indexed]
    adjacent = indexed == list(range(indexed[0], indexed[-1] + 1))
    # each output dim: ("x", a dim of x) or ("index", a dim of the broadcast indices)
    at = indexed[0] if adjacent else 0
    layout = [("x", d) for d in kept[:at] if adjacent]
    layout += [("index", b) for b in range(len(broadcast))]
    layout += [("x", d) for d in (kept[at:] if adjacent else kept)]
    strides = [meta.stride(d) if kind == "x" else 0 for kind, d in layout]
    picks = []
    for d, view in zip(indexed, views, strict=True):
        base, index_strides = _index_base(self, view, broadcast)
        along = [index_strides[b] if kind == "index" else 0 for kind, b in layout]
        picks.append(Pick(base, along, meta.shape[d], meta.stride(d)))
    return _gather(self, source, out, strides, meta.storage_offset(), picks)


def _rows(self: Converter, node: fx.Node) -> View:
    """Rows of a table (args[0]) by ids of any shape (args[1]): an embedding of a table
    the embedding family does not take."""
    source = self.view(self.values[node.args[0]])
    ids = self.view(self.values[node.args[1]])
    meta, out = source.meta, node.meta["val"]
    index, index_strides = _index_base(self, ids, ids.meta.shape)
    strides = [0] * ids.meta.dim() + [meta.stride(1)]
    pick = Pick(index, [*index_strides, 0], meta.shape[0], meta.stride(0))
    return _gather(self, source, out, strides, meta.storage_offset(), [pick])


def _slice_scatter_refusal(node: fx.Node) -> str | None:
    step = node.args[5] if len(node.args) > 5 else node.kwargs.get("step", 1)
    if step != 1:
        return f"slice_scatter with step {step} is not supported"
    return None


@ATEN.handles("aten.slice_scatter.default", accepts=_nonempty(_slice_scatter_refusal))
def _slice_scatter(self: Converter, node: fx.Node) -> View:
    """The input with a slice along dim replaced by src: a cat of the input before the
    slice, src, and the input after it."""
    names = ["dim", "start", "end"]
    bound = {"dim": 0} | dict(zip(names, node.args[2:], strict=False)) | dict(node.kwargs)
    view, out = self.view(self.values[node.args[0]]), node.meta["val"]
    dim = bound["dim"] % out.dim()
    size = out.shape[dim]
    start, end = slice(bound.get("start"), bound.get("end")).indices(size)[:2]
    return self.result(_spliced(self, view, dim, start, max(start, end), node.args[1]), out)


@ATEN.handles("aten.select_scatter.default", accepts=_nonempty())
def _select_scatter(self: Converter, node: fx.Node) -> View:
    """The input with one index along dim replaced by src (without that dim)."""
    view, out = self.view(self.values[node.args[0]]), node.meta["val"]
    dim = node.args[2] % out.dim()
    index = node.args[3] % out.shape[dim]
    src = self.view(self.values[node.args[1]])
    src = View(src.base, src.meta.unsqueeze(dim))
    return self.result(_spliced(self, view, dim, index, index + 1, src), out)


def _spliced(
    self: Converter, view: View, dim: int, start: int, end: int, src: fx.Node | View
) -> SSAValue:
    """`view` with its elements [start, end) along dim replaced by `src`'s."""
    size = view.meta.shape[dim]
    inserted = src if isinstance(src, View) else self.view(self.values[src])
    parts = [] if start == 0 else [View(view.base, view.meta.narrow(dim, 0, start))]
    parts.append(inserted)
    if end < size:
        parts.append(View(view.base, view.meta.narrow(dim, end, size - end)))
    return _cat_of(self, [self.contiguous(p) for p in parts if p.meta.numel()], dim)


@ATEN.handles("aten.flip.default", accepts=_nonempty())
def _flip(self: Converter, node: fx.Node) -> View:
    """Reads each flipped dim backwards: a negative stride from its last element."""
    source = self.view(self.values[node.args[0]])
    meta = source.meta
    strides, offset = list(meta.stride()), meta.storage_offset()
    for dim in {int(d) % max(1, meta.dim()) for d in node.args[1]}:
        offset += (meta.shape[dim] - 1) * strides[dim]
        strides[dim] = -strides[dim]
    return _gather(self, source, node.meta["val"], strides, offset)


def _roll_refusal(node: fx.Node) -> str | None:
    shifts = node.args[1]
    if len(shifts) > INDEX_TENSORS:
        return f"roll over {len(shifts)} dims: at most {INDEX_TENSORS} are supported"
    return None


@ATEN.handles("aten.roll.default", accepts=_nonempty(_roll_refusal))
def _roll(self: Converter, node: fx.Node) -> View:
    """Each rolled dim read through a constant index, (j - shift) mod its size: a roll of
    no dims rolls the flattened tensor."""
    source = self.view(self.values[node.args[0]])
    shifts = list(node.args[1])
    dims = list(node.args[2]) if len(node.args) > 2 else list(node.kwargs.get("dims", []))
    out = node.meta["val"]
    if not dims:
        flat = self.contiguous(source)
        flat = self.insert(graph.ReshapeOp(flat, TensorType(flat.type.element_type, [out.numel()])))
        source, dims = View(flat, torch.empty(out.numel(), dtype=out.dtype, device="meta")), [0]
    meta = source.meta
    strides, picks = list(meta.stride()), []
    for t, (shift, dim) in enumerate(zip(shifts, dims, strict=True)):
        dim %= meta.dim()
        size = meta.shape[dim]
        index = (torch.arange(size) - int(shift)) % max(1, size)
        along = [0] * meta.dim()
        along[dim] = 1
        base = self.constant_arg(f"{node.name}.index{t}", index)
        picks.append(Pick(base, along, size, strides[dim]))
        strides[dim] = 0
    rolled = _gather(self, source, meta, strides, meta.storage_offset(), picks)
    if list(meta.shape) == list(out.shape):
        return self.result(rolled.base, out)
    return self.result(self.insert(graph.ReshapeOp(rolled.base, self.type_of(out))), out)


def _triangle_refusal(node: fx.Node) -> str | None:
    value = node.args[0].meta["val"]
    if not dtypes.is_float(dtypes.torch_dtype_name(value.dtype)):
        return f"{op_name(node)} of {value.dtype} values is not supported"
    return None


TRIANGLES = {"aten.triu.default": graph.Triangle.UPPER, "aten.tril.default": graph.Triangle.LOWER}


@ATEN.handles(*TRIANGLES, accepts=_nonempty(_triangle_refusal))
def _triangle(self: Converter, node: fx.Node) -> View:
    x = self.operand(node.args[0])
    diagonal = node.args[1] if len(node.args) > 1 else node.kwargs.get("diagonal", 0)
    op = graph.TriangleOp(x, TRIANGLES[op_name(node)], int(diagonal))
    return self.result(self.insert(op), node.meta["val"])


@ATEN.handles("aten.repeat.default", accepts=_nonempty())
def _repeat(self: Converter, node: fx.Node) -> View:
    """A copy of the input broadcast along a new dim before each of its own, one per
    repeat: [r0, n0, r1, n1, ...] read with strides [0, s0, 0, s1, ...]."""
    source = self.view(self.values[node.args[0]])
    repeats = list(node.args[1])
    meta, out = source.meta, node.meta["val"]
    lead = len(repeats) - meta.dim()
    sizes = [1] * lead + list(meta.shape)
    steps = [0] * lead + list(meta.stride())
    shape = [n for r, size in zip(repeats, sizes, strict=True) for n in (r, size)]
    strides = [s for step in steps for s in (0, step)]
    tiled = meta.as_strided(shape, strides, meta.storage_offset())
    value = self.contiguous(View(source.base, tiled))
    return self.result(self.insert(graph.ReshapeOp(value, self.type_of(out))), out)


def _repeat_interleave_refusal(node: fx.Node) -> str | None:
    repeats = node.args[1]
    if isinstance(repeats, fx.Node) and not isinstance(repeats.meta.get("val"), torch.Tensor):
        return None  # a size the graph computed: known once the graph is specialised
    if isinstance(repeats, fx.Node) and repeats.meta["val"].dim() > 1:
        return "repeat_interleave by repeats of more than one dim is not supported"
    return None


@ATEN.handles(
    "aten.repeat_interleave.self_int",
    "aten.repeat_interleave.self_Tensor",
    accepts=_nonempty(_repeat_interleave_refusal),
)
def _repeat_interleave(self: Converter, node: fx.Node) -> View:
    """Each element (along `dim`, or of the flattened input without one) `repeats` times:
    for one count, the input read with a broadcast dim after `dim` and reshaped; for counts
    of each element known at compile time, a gather of the elements they pick."""
    source = self.view(self.values[node.args[0]])
    out = node.meta["val"]
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim")
    repeats = node.args[1]
    count = self.values[repeats] if isinstance(repeats, fx.Node) else repeats
    meta = source.meta if dim is not None else source.meta.reshape(-1)
    if not meta._is_view() and meta is not source.meta:
        # a flattened view torch copies (a permuted input): emmy copies it too
        base = self.contiguous(source)
        meta = contiguous_meta(base.type, source.meta.dtype).reshape(-1)
        source = View(base, meta)
    dim = 0 if dim is None else dim % meta.dim()
    if not isinstance(count, int):
        counts = self.known(count)
        if counts is UNKNOWN:
            raise self.error("repeat_interleave by counts known only when the model runs")
        if counts.numel() != 1:
            return _picked_repeats(self, View(source.base, meta), dim, counts, out)
        count = int(counts.reshape(()))
    shape = list(meta.shape)
    strides = list(meta.stride())
    shape.insert(dim + 1, count)
    strides.insert(dim + 1, 0)
    value = self.contiguous(
        View(source.base, meta.as_strided(shape, strides, meta.storage_offset()))
    )
    return _shaped_as(self, value, out)


def _picked_repeats(
    self: Converter, source: View, dim: int, counts: torch.Tensor, out: torch.Tensor
) -> View:
    """repeat_interleave by a count per element: a gather along `dim` of the elements
    torch.repeat_interleave(arange(n), counts) picks, a constant index."""
    meta = source.meta
    picked = torch.repeat_interleave(torch.arange(meta.shape[dim]), counts.long())
    index = self.constant_arg(f"{self.node.name}.index", picked)
    strides = list(meta.stride())
    strides[dim] = 0
    along = [0] * meta.dim()
    along[dim] = 1
    pick = Pick(index, along, meta.shape[dim], meta.stride(dim))
    return _gather(self, source, out, strides, meta.storage_offset(), [pick])


def _cat_refusal(node: fx.Node) -> str | None:
    out = node.meta["val"]
    mixed = {arg.meta["val"].dtype for arg in node.args[0]} - {out.dtype}
    if not mixed:
        return None
    names = ", ".join(sorted(map(str, mixed)))
    return f"cat of {names} into {out.dtype} needs a conversion, which is not supported"


def _cat_of(self: Converter, values: list[SSAValue], dim: int) -> SSAValue:
    """graph.cat of `values` along dim, in steps of at most PARTS inputs."""
    if len(values) == 1:
        return values[0]
    first, rest = values[:CAT_PARTS], values[CAT_PARTS:]
    while True:
        shape = list(first[0].type.get_shape())
        shape[dim] = sum(v.type.get_shape()[dim] for v in first)
        typ = TensorType(first[0].type.element_type, shape)
        value = self.insert(graph.CatOp(first, dim, typ))
        if not rest:
            return value
        first, rest = [value, *rest[: CAT_PARTS - 1]], rest[CAT_PARTS - 1 :]


@ATEN.handles(
    "aten.cat.default",
    "aten.concat.default",
    "aten.concatenate.default",
    accepts=_nonempty(_cat_refusal),
)
def _cat(self: Converter, node: fx.Node) -> View:
    out = node.meta["val"]
    dim = (node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)) % out.dim()
    # torch lets an empty 1-d tensor stand in any cat: it adds nothing
    parts = [arg for arg in node.args[0] if arg.meta["val"].numel()]
    return self.result(_cat_of(self, [self.operand(arg) for arg in parts], dim), out)


@ATEN.handles("aten.stack.default", accepts=_nonempty(_cat_refusal))
def _stack(self: Converter, node: fx.Node) -> View:
    """A cat of the inputs, each with a new dim of size 1 at `dim`."""
    out = node.meta["val"]
    dim = (node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)) % out.dim()
    parts = []
    for arg in node.args[0]:
        view = self.view(self.values[arg])
        parts.append(self.contiguous(View(view.base, view.meta.unsqueeze(dim))))
    return self.result(_cat_of(self, parts, dim), out)


def _pad_arguments(node: fx.Node) -> tuple[list[int], str, float]:
    """(pad, mode, fill) of aten.constant_pad_nd (input, pad, value) or aten.pad (input,
    pad, mode, value)."""
    names = (
        ["pad", "value"]
        if op_name(node) == "aten.constant_pad_nd.default"
        else ["pad", "mode", "value"]
    )
    bound = dict(zip(names, node.args[1:], strict=False)) | dict(node.kwargs)
    fill = bound.get("value")
    return list(bound["pad"]), bound.get("mode", "constant"), 0 if fill is None else fill


def _pad_refusal(node: fx.Node) -> str | None:
    mode = _pad_arguments(node)[1]
    if mode != "constant":
        return f"a pad of mode {mode!r} is not supported"
    return None


@ATEN.handles("aten.constant_pad_nd.default", "aten.pad.default", accepts=_nonempty(_pad_refusal))
def _constant_pad(self: Converter, node: fx.Node) -> View:
    """Pads (pairs from the last dim back) as cats of constant fills; a negative pad is a
    slice."""
    view = self.view(self.values[node.args[0]])
    pad, _, fill = _pad_arguments(node)
    out = node.meta["val"]
    meta = view.meta
    for pair in range(len(pad) // 2):
        dim, before, after = meta.dim() - 1 - pair, pad[2 * pair], pad[2 * pair + 1]
        start, stop = max(0, -before), meta.shape[dim] - max(0, -after)
        meta = meta.narrow(dim, start, stop - start)
    value = self.contiguous(View(view.base, meta))
    for pair in range(len(pad) // 2):
        dim, before, after = meta.dim() - 1 - pair, pad[2 * pair], pad[2 * pair + 1]
        parts = [value]
        for side, width in (("before", before), ("after", after)):
            if width <= 0:
                continue
            shape = list(value.type.get_shape())
            shape[dim] = width
            filled = torch.full(shape, fill, dtype=out.dtype)
            constant = self.constant_arg(f"{node.name}.{side}{dim}", filled)
            parts.insert(0 if side == "before" else len(parts), constant)
        value = _cat_of(self, parts, dim)
    return self.result(value, out)


# -- reductions -------------------------------------------------------------------------
#: each reduction's graph.reduce kind; over the dims `dim` names (all of them where it is
#: None or [], as torch reads it), or all dims for the overloads that take none
REDUCTIONS = {
    **dict.fromkeys(("aten.sum.dim_IntList", "aten.sum.default"), "sum"),
    **dict.fromkeys(("aten.mean.dim", "aten.mean.default"), "mean"),
    **dict.fromkeys(("aten.amax.default", "aten.max.default"), "max"),
    **dict.fromkeys(("aten.amin.default", "aten.min.default"), "min"),
    **dict.fromkeys(("aten.prod.dim_int", "aten.prod.default"), "prod"),
    "aten.logsumexp.default": "logsumexp",
    "aten.argmax.default": "argmax",
    "aten.argmin.default": "argmin",
    **dict.fromkeys(("aten.any.default", "aten.any.dim", "aten.any.dims"), "any"),
    **dict.fromkeys(("aten.all.default", "aten.all.dim", "aten.all.dims"), "all"),
    **dict.fromkeys(("aten.var.correction", "aten.var.dim", "aten.var.default"), "var"),
    **dict.fromkeys(("aten.std.correction", "aten.std.dim", "aten.std.default"), "std"),
}
#: reductions that give two results (a value and its index, a variance and a mean): two
#: reductions of the same rows
PAIRED_REDUCTIONS = {
    "aten.max.dim": ("max", "argmax"),
    "aten.min.dim": ("min", "argmin"),
    "aten.aminmax.default": ("min", "max"),
    **dict.fromkeys(("aten.var_mean.dim", "aten.var_mean.correction"), ("var", "mean")),
    **dict.fromkeys(("aten.std_mean.dim", "aten.std_mean.correction"), ("std", "mean")),
}
#: the longest float row argmax and argmin index exactly (their indices reduce as f32)
ARG_COLS_MAX = 2**24


def _arguments(node: fx.Node) -> dict:
    """The node's arguments by the names of its op's schema, defaults filled in."""
    schema = node.target._schema
    bound = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    bound |= dict(zip((a.name for a in schema.arguments), node.args, strict=False))
    return bound | dict(node.kwargs)


def _reduction_kinds(node: fx.Node) -> tuple[str, ...]:
    return PAIRED_REDUCTIONS.get(op_name(node)) or (REDUCTIONS[op_name(node)],)


def _reduced(bound: dict, rank: int) -> list[int]:
    """The dims a reduction reduces, ascending: all of them where it names none."""
    dims = bound.get("dim")
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if not dims or rank == 0:
        return list(range(rank))
    return sorted({int(d) % rank for d in dims})


def _correction(bound: dict) -> object:
    """var's and std's divisor is the count less this (unbiased: 1)."""
    if "correction" in bound:
        return 1 if bound["correction"] is None else bound["correction"]
    return 1 if bound.get("unbiased", True) else 0


def _reduction_refusal(node: fx.Node) -> str | None:
    bound = _arguments(node)
    x = node.args[0].meta["val"]
    floating = x.dtype.is_floating_point
    if x.numel() == 0:
        return "a reduction of an empty tensor is not supported"
    cols = _numel([int(x.shape[d]) for d in _reduced(bound, x.dim())])
    for kind in _reduction_kinds(node):
        if graph.REDUCE_KINDS[kind][0] == "float" and not floating:
            return f"{kind} of {x.dtype} is not supported"
        if kind in ("any", "all") and floating:
            return f"{kind} of {x.dtype} is not supported: compare it with 0 first"
        if kind in ("argmax", "argmin") and floating and cols >= ARG_COLS_MAX:
            return f"{kind} over {cols} elements: at most {ARG_COLS_MAX - 1} are supported"
    element = _element_type(x.dtype)
    if element is None:
        return f"{op_name(node)} of {x.dtype} is not supported"
    examples = node.meta["val"]
    examples = examples if isinstance(examples, (list, tuple)) else [examples]
    for kind, example in zip(_reduction_kinds(node), examples, strict=True):
        if _element_type(example.dtype) != graph.reduce_result_dtype(kind, element):
            # a `dtype=` that is not the one torch gives anyway
            return f"{op_name(node)} to {example.dtype} (a dtype conversion) is not supported"
    corrected = set(_reduction_kinds(node)) & set(graph.CORRECTED_KINDS)
    if corrected and int(_correction(bound)) != _correction(bound):
        return f"{op_name(node)} with a correction of {_correction(bound)} is not supported"
    return None


@ATEN.handles(*REDUCTIONS, *PAIRED_REDUCTIONS, accepts=_reduction_refusal)
def _reduce(self: Converter, node: fx.Node) -> object:
    """A reduction over any dims: the kept dims in order, then the reduced ones merged into
    one last dim (a copy where they are not last already), reduced as rows; the result is
    reshaped to torch's (keepdim's dims of size 1 move no element)."""
    bound = _arguments(node)
    source = self.view(self.values[node.args[0]])
    rank = source.meta.dim()
    reduced = _reduced(bound, rank)
    examples = node.meta["val"]
    examples = list(examples) if isinstance(examples, (list, tuple)) else [examples]
    if not source.meta.dtype.is_floating_point:
        kinds = zip(_reduction_kinds(node), examples, strict=True)
        results = [_reduce_integers(self, source, reduced, k, e) for k, e in kinds]
        return results if isinstance(node.meta["val"], (list, tuple)) else results[0]
    kept = [d for d in range(rank) if d not in reduced]
    meta = source.meta.permute(kept + reduced) if rank else source.meta
    x = self.contiguous(View(source.base, meta))
    kept_shape = [int(source.meta.shape[d]) for d in kept]
    cols = x.type.element_count() // max(1, _numel(kept_shape))
    rows_type = TensorType(x.type.element_type, [*kept_shape, cols])
    if x.type != rows_type:
        x = self.insert(graph.ReshapeOp(x, rows_type))
    results = []
    for kind, example in zip(_reduction_kinds(node), examples, strict=True):
        out = self.type_of(example)
        shape = list(out.get_shape())
        reduced_shape = shape if shape in (kept_shape, [*kept_shape, 1]) else kept_shape
        element = graph.reduce_result_dtype(kind, x.type.element_type)
        correction = int(_correction(bound)) if kind in graph.CORRECTED_KINDS else None
        op = graph.ReduceOp(x, kind, TensorType(element, reduced_shape), correction)
        value = self.insert(op)
        if value.type != out:
            value = self.insert(graph.ReshapeOp(value, out))
        results.append(self.result(value, example))
    return results if isinstance(node.meta["val"], (list, tuple)) else results[0]


def _reduce_integers(
    self: Converter, source: View, reduced: list[int], kind: str, example: torch.Tensor
) -> View:
    """An integer reduction, read in place (integer tensors have no strided copy): each run
    of adjacent reduced dims, the last first, is the middle dim of [before, run, after]
    (a kind over several runs reduces in steps: a sum of sums, an any of anys; argmax and
    argmin reduce one dim, or all of them, one run)."""
    x = self.contiguous(source)
    shape = [int(size) for size in source.meta.shape]
    if not shape:  # a 0-d tensor reduces as one element: its argmax is 0, its any a flag
        x = self.insert(graph.ReshapeOp(x, TensorType(x.type.element_type, [1])))
        shape, reduced = [1], [0]
    runs: list[list[int]] = []
    for d in reduced:
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    for run in reversed(runs):
        first, end = run[0], run[-1] + 1
        before, after = _numel(shape[:first]), _numel(shape[end:])
        lines = TensorType(x.type.element_type, [before, _numel(shape[first:end]), after])
        if x.type != lines:
            x = self.insert(graph.ReshapeOp(x, lines))
        element = graph.reduce_result_dtype(kind, x.type.element_type)
        x = self.insert(graph.ReduceOp(x, kind, TensorType(element, [before, after]), dim=1))
        shape = shape[:first] + shape[end:]
    return _shaped_as(self, x, example)


def _cumsum_refusal(node: fx.Node) -> str | None:
    x, out = node.args[0].meta["val"], node.meta["val"]
    element = _element_type(x.dtype)
    if element is None:
        return f"cumsum of {x.dtype} is not supported"
    if x.numel() == 0:
        return "a cumsum of an empty tensor is not supported"
    if out.dtype == torch.bool or _element_type(out.dtype) is None:
        return f"cumsum to {out.dtype} is not supported"
    return None


@ATEN.handles("aten.cumsum.default", accepts=_cumsum_refusal)
def _cumsum(self: Converter, node: fx.Node) -> View:
    """A prefix sum over any dim, read in place. With a `dtype` (`x.cumsum(-1,
    dtype=torch.int32)`) torch converts x to it first and sums in it: so does emmy, the
    scan's own result (an integer's in i64) converted back to it (an i32 sum wraps as
    the low half of the i64 one)."""
    example = node.meta["val"]
    x = self.operand(node.args[0])
    if not x.type.get_shape():
        x = self.insert(graph.ReshapeOp(x, TensorType(x.type.element_type, [1])))
    wanted = _element_type(example.dtype)
    if node.kwargs.get("dtype") is not None and x.type.element_type != wanted:
        x = self.insert(graph.ConvertOp(x, TensorType(wanted, x.type.get_shape())))
    rank = len(x.type.get_shape())
    dim = int(node.args[1]) % rank
    element = graph.reduce_result_dtype("sum", x.type.element_type)
    typ = TensorType(element, x.type.get_shape())
    scan = self.insert(graph.CumsumOp(x, typ, None if dim == rank - 1 else dim))
    if element != wanted:
        scan = self.insert(graph.ConvertOp(scan, TensorType(wanted, typ.get_shape())))
    return _shaped_as(self, scan, example)


def _element_type(dtype: torch.dtype) -> Attribute | None:
    """The graph's element type of a torch dtype (a bool is i8), None for one it lacks."""
    if dtype == torch.bool:
        return i8
    name = dtypes.torch_dtype_name(dtype)
    return dtypes.xdsl_type(name) if name is not None and name != "i8" else None


def _shaped_as(self: Converter, value: SSAValue, example: torch.Tensor) -> View:
    """`value` reshaped to the example's shape (the elements in the same order)."""
    out = self.type_of(example)
    if value.type != out:
        value = self.insert(graph.ReshapeOp(value, out))
    return self.result(value, example)


def _numel(shape: Sequence[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _softmax_refusal(node: fx.Node) -> str | None:
    x = node.args[0].meta["val"]
    if x.dim() == 0 or x.numel() == 0:
        return f"{op_name(node)} of a tensor of shape {list(x.shape)} is not supported"
    if node.meta["val"].dtype == x.dtype:
        return None
    return f"{op_name(node)} with a dtype conversion is not supported"


@ATEN.handles("aten.softmax.int", "aten._softmax.default", accepts=_softmax_refusal)
def _softmax(self: Converter, node: fx.Node) -> View:
    def build(x: SSAValue) -> SSAValue:
        return self.insert(graph.SoftmaxOp(x, -1))

    return self.over_last_dim(node, int(node.args[1]), build)


@ATEN.handles("aten._log_softmax.default", "aten.log_softmax.int", accepts=_softmax_refusal)
def _log_softmax(self: Converter, node: fx.Node) -> View:
    """x - logsumexp(x) over a dim: a row reduction, then a subtraction of its column."""

    def build(x: SSAValue) -> SSAValue:
        shape = list(x.type.get_shape())
        lse_type = TensorType(x.type.element_type, [*shape[:-1], 1])
        lse = self.insert(graph.ReduceOp(x, "logsumexp", lse_type))
        return self.insert(graph.SubOp(x, lse, x.type))

    return self.over_last_dim(node, int(node.args[1]), build)


# -- matmuls ----------------------------------------------------------------------------
def _linear_refusal(node: fx.Node) -> str | None:
    x, w = node.args[0].meta["val"], node.args[1].meta["val"]
    if w.dim() != 2:
        return f"linear with a weight of shape {list(w.shape)} is not supported"
    return _operands_refusal(x, w)


@ATEN.handles("aten.linear.default", accepts=_linear_refusal)
def _linear(self: Converter, node: fx.Node) -> View:
    """x · wᵀ (+ bias); a vector x is a matrix of one row."""
    x_arg, w_arg = node.args[0], node.args[1]
    bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    out = node.meta["val"]
    x = self.operand(x_arg)
    if len(x.type.get_shape()) == 1:
        x = self.insert(
            graph.ReshapeOp(x, TensorType(x.type.element_type, [1, *x.type.get_shape()]))
        )
    n = int(node.args[1].meta["val"].shape[0])
    typ = TensorType(x.type.element_type, [*x.type.get_shape()[:-1], n])
    weight = self.values[w_arg]
    # a weight of its own is stored transposed, B [k, n]; a tied one (GPT-2's embedding as
    # its lm_head) is read in place as A · Bᵀ: a transposed copy would double it
    if isinstance(weight, Constant) and len(w_arg.users) == 1:
        w = self.constant_arg(f"{weight.name}.T", weight.tensor.t())
        product = graph.MatmulOp(x, w, typ, transpose_b=False)
    else:
        product = graph.MatmulOp(x, self.operand(w_arg), typ, transpose_b=True)
    value = self.insert(product)
    if bias is not None:
        value = self.insert(graph.AddOp(value, self.operand(bias), value.type))
    if value.type != self.type_of(out):
        value = self.insert(graph.ReshapeOp(value, self.type_of(out)))
    return self.result(value, out)


def _operands_refusal(*operands: torch.Tensor) -> str | None:
    for tensor in operands:
        if not tensor.dtype.is_floating_point:
            return f"a product of {tensor.dtype} tensors is not supported"
        if tensor.dim() == 0 or tensor.numel() == 0:
            return f"a product of a tensor of shape {list(tensor.shape)} is not supported"
    return None


def _matmul_refusal(node: fx.Node) -> str | None:
    return _operands_refusal(node.args[0].meta["val"], node.args[1].meta["val"])


@ATEN.handles(
    "aten.matmul.default",
    "aten.mm.default",
    "aten.bmm.default",
    "aten.mv.default",
    "aten.dot.default",
    accepts=_matmul_refusal,
)
def _matmul(self: Converter, node: fx.Node) -> View:
    out = node.meta["val"]
    return self.result(_matmul_of(self, node.args[0], node.args[1], out), out)


def _matmul_of(self: Converter, lhs_arg: fx.Node, rhs_arg: fx.Node, out: torch.Tensor) -> SSAValue:
    """lhs · rhs as torch.matmul takes them: a vector lhs is a matrix of one row and a
    vector rhs one of one column, dropped from the result; the batch dims broadcast (a
    broadcast lhs is expanded by a copy, an rhs whose batch dims are all 1 is one matrix
    shared by the batch)."""
    lhs_view, rhs_view = self.view(self.values[lhs_arg]), self.view(self.values[rhs_arg])
    a, b = lhs_view.meta, rhs_view.meta
    a = a.unsqueeze(0) if a.dim() == 1 else a
    b = b.unsqueeze(-1) if b.dim() == 1 else b
    batch = list(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    a = a.expand(*batch, *a.shape[-2:])
    if all(size == 1 for size in b.shape[:-2]):
        b = b.reshape(b.shape[-2:]) if b.dim() > 2 else b
    else:
        b = b.expand(*batch, *b.shape[-2:])
    # a transposed rhs (k.transpose(-2, -1)) is read in place as A · Bᵀ
    transposed = View(rhs_view.base, b.transpose(-2, -1))
    if transposed.meta.is_contiguous() and not b.is_contiguous():
        rhs, transpose_b = self.contiguous(transposed), True
    else:
        rhs, transpose_b = self.contiguous(View(rhs_view.base, b)), False
    lhs = self.contiguous(View(lhs_view.base, a))
    typ = TensorType(lhs.type.element_type, [*batch, a.shape[-2], b.shape[-1]])
    value = self.insert(graph.MatmulOp(lhs, rhs, typ, transpose_b))
    if value.type != self.type_of(out):
        value = self.insert(graph.ReshapeOp(value, self.type_of(out)))
    return value


def _einsum_labels(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """The labels of each operand of an einsum and of its output, one character a dim:
    '...' spelled out as labels of its own (right-aligned across operands, as torch
    broadcasts them), an implicit output as torch makes it (the ellipsis's dims, then the
    labels used once, in alphabetical order)."""
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if len(terms) != len(ranks):
        raise EmmyError(f"einsum '{equation}' names {len(terms)} operands for {len(ranks)}")
    widest = max(
        rank - len(term.replace("...", "")) for term, rank in zip(terms, ranks, strict=True)
    )
    # labels torch takes are ASCII letters: these are not
    ellipsis = "".join(chr(0x100 + i) for i in range(max(widest, 0)))
    spelled = []
    for term, rank in zip(terms, ranks, strict=True):
        width = rank - len(term.replace("...", ""))
        spelled.append(term.replace("...", ellipsis[len(ellipsis) - width :]))
    if arrow:
        return spelled, output.replace("...", ellipsis)
    used = "".join(spelled)
    once = sorted(label for label in set(used) if used.count(label) == 1 and label.isalpha())
    return spelled, ellipsis + "".join(once)


def _einsum_refusal(node: fx.Node) -> str | None:
    operands = [arg.meta["val"] for arg in node.args[1]]
    if len(operands) not in (1, 2):
        return f"einsum of {len(operands)} operands is not supported"
    terms, output = _einsum_labels(node.args[0], [t.dim() for t in operands])
    if len(operands) == 1:
        if sorted(terms[0]) != sorted(output) or len(set(output)) != len(output):
            return f"einsum '{node.args[0]}' of one operand (a sum or a diagonal) is not supported"
        return None
    if (reason := _operands_refusal(*operands)) is not None:
        return reason
    if operands[0].dtype != operands[1].dtype:
        return f"einsum of {operands[0].dtype} and {operands[1].dtype} is not supported"
    sizes: dict[str, int] = {}
    for term, tensor in zip(terms, operands, strict=True):
        if len(set(term)) != len(term):
            return f"einsum '{node.args[0]}' with a diagonal (a label repeated) is not supported"
        for label, size in zip(term, tensor.shape, strict=True):
            if sizes.setdefault(label, size) != size:
                return f"einsum '{node.args[0]}' that broadcasts a dim is not supported"
    return None


@ATEN.handles("aten.einsum.default", accepts=_nonempty(_einsum_refusal))
def _einsum(self: Converter, node: fx.Node) -> View:
    """An einsum of two operands as one batched matmul: each operand read (a copy where
    its dims are not in place) as [batch, free, contracted], the product [batch, m, n]
    viewed as the output's dims. A label only one operand has and the output lacks is
    summed as a contracted dim that the other operand reads broadcast. One operand whose
    output permutes its dims is a view."""
    args = list(node.args[1])
    views = [self.view(self.values[arg]) for arg in args]
    terms, output = _einsum_labels(node.args[0], [v.meta.dim() for v in views])
    if len(views) == 1:
        meta = views[0].meta.permute([terms[0].index(label) for label in output])
        return View(views[0].base, meta)
    sizes = {
        label: n
        for term, v in zip(terms, views, strict=True)
        for label, n in zip(term, v.meta.shape, strict=True)
    }
    batch = [label for label in output if label in terms[0] and label in terms[1]]
    free = [[label for label in output if label in term and label not in batch] for term in terms]
    contracted = [label for label in sizes if label not in output]

    def read(index: int, labels: list[str]) -> View:
        """Operand `index` with dims `labels`, broadcast along those it lacks."""
        view, term = views[index], terms[index]
        strides = [view.meta.stride(term.index(x)) if x in term else 0 for x in labels]
        shape = [sizes[x] for x in labels]
        return View(view.base, view.meta.as_strided(shape, strides, view.meta.storage_offset()))

    def matrices(index: int, rows: list[str], cols: list[str]) -> SSAValue:
        """Operand `index` as [batch, rows, cols], each group of labels one dim."""
        value = self.contiguous(read(index, batch + rows + cols))
        groups = [batch, rows, cols] if batch else [rows, cols]
        shape = [_numel([sizes[x] for x in group]) for group in groups]
        return self.insert(graph.ReshapeOp(value, TensorType(value.type.element_type, shape)))

    lhs = matrices(0, free[0], contracted)
    # an rhs whose dims are in place as [batch, n, k] is read so, as A · Bᵀ, uncopied
    transpose_b = read(1, batch + free[1] + contracted).meta.is_contiguous()
    if transpose_b:
        rhs = matrices(1, free[1], contracted)
    else:
        rhs = matrices(1, contracted, free[1])
    m, n = _numel([sizes[x] for x in free[0]]), _numel([sizes[x] for x in free[1]])
    shape = [*lhs.type.get_shape()[:-2], m, n]
    product = self.insert(
        graph.MatmulOp(lhs, rhs, TensorType(lhs.type.element_type, shape), transpose_b)
    )
    order = batch + free[0] + free[1]
    meta = contiguous_meta(product.type, node.meta["val"].dtype).reshape([sizes[x] for x in order])
    return View(product, meta.permute([order.index(label) for label in output]))


def _scaled_sum_refusal(node: fx.Node) -> str | None:
    """addmm, addmv, baddbmm: beta · self + alpha · (a · b), of float operands."""
    return _operands_refusal(*(arg.meta["val"] for arg in node.args[:3]))


@ATEN.handles(
    "aten.addmm.default",
    "aten.addmv.default",
    "aten.baddbmm.default",
    accepts=_scaled_sum_refusal,
)
def _addmm(self: Converter, node: fx.Node) -> View:
    """beta · self + alpha · (a · b) (what F.linear of a 2-d input is below autograd); the
    scales are elementwise ops the product's epilogue takes, and beta = 0 ignores self (NaN
    included) as torch does."""
    bias, x_arg, w_arg = node.args[:3]
    beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)
    out = node.meta["val"]
    product = _matmul_of(self, x_arg, w_arg, out)
    if alpha != 1:
        product = self.insert(graph.MulOp(product, self.scalar(alpha, product), product.type))
    if beta == 0:
        return self.result(product, out)
    addend = self.tensor_or_scalar(bias, product.type.element_type, product.type.get_shape())
    if beta != 1:
        addend = self.insert(graph.MulOp(addend, self.scalar(beta, addend), addend.type))
    return self.result(self.insert(graph.AddOp(product, addend, product.type)), out)


# -- convolutions -----------------------------------------------------------------------
#: the convolution ops, by name: their arguments in order
_CONV_ARGUMENTS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
CONVOLUTIONS = {
    **{
        f"aten.conv{d}d.{overload}": _CONV_ARGUMENTS
        for d in (1, 2)
        for overload in ("default", "padding")
    },
    "aten.convolution.default": (*_CONV_ARGUMENTS[:6], "transposed", "output_padding", "groups"),
}
_CONV_DEFAULTS = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1}


def _conv_argument(node: fx.Node, name: str) -> object:
    """An argument of a convolution by name, at its default where torch.export dropped it."""
    index = CONVOLUTIONS[op_name(node)].index(name)
    if index < len(node.args):
        return node.args[index]
    return node.kwargs.get(name, _CONV_DEFAULTS[name])


def _per_spatial_dim(value: object, spatial: int) -> list[int]:
    """A convolution's stride, padding or dilation (an int, or one per spatial dim) as one
    value per spatial dim."""
    values = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
    values = values * spatial if len(values) == 1 else values
    return values


def _conv_padding(node: fx.Node, weight: torch.Tensor) -> list[int] | None:
    """The zero padding per spatial dim; "same" as the symmetric padding it is for odd
    dilated filter sizes (None where torch pads one side more)."""
    spatial = weight.dim() - 2
    padding = _conv_argument(node, "padding")
    if padding == "valid":
        return [0] * spatial
    if padding != "same":
        return _per_spatial_dim(padding, spatial)
    dilation = _per_spatial_dim(_conv_argument(node, "dilation"), spatial)
    total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:], strict=True)]
    if any(t % 2 for t in total):
        return None
    return [t // 2 for t in total]


def _conv_refusal(node: fx.Node) -> str | None:
    x, weight = node.args[0].meta["val"], node.args[1].meta["val"]
    transposed = op_name(node) == "aten.convolution.default" and _conv_argument(node, "transposed")
    if transposed:
        return "a transposed convolution is not supported"
    if weight.dim() not in (3, 4):
        return f"a convolution of {weight.dim() - 2} spatial dims is not supported"
    if x.dim() not in (weight.dim() - 1, weight.dim()):
        return f"a convolution of an input of shape {list(x.shape)} is not supported"
    if _conv_padding(node, weight) is None:
        return "a 'same' convolution padded more on one side is not supported"
    return _operands_refusal(x, weight)


def _as_2d(self: Converter, value: SSAValue, shape: Sequence[int]) -> SSAValue:
    """A 1-D convolution's operand [..., length] as a 2-D one [..., 1, length]."""
    typ = TensorType(value.type.element_type, list(shape))
    return value if value.type == typ else self.insert(graph.ReshapeOp(value, typ))


@ATEN.handles(*CONVOLUTIONS, accepts=_conv_refusal)
def _convolution(self: Converter, node: fx.Node) -> View:
    """A convolution (1-D as 2-D of height 1; an unbatched input as a batch of one); an
    inference batch norm that alone reads it, of constant statistics, is folded into its
    constant weights and bias."""
    x_arg, w_arg = node.args[0], node.args[1]
    bias_arg = _conv_argument(node, "bias")
    weight = w_arg.meta["val"]
    spatial = weight.dim() - 2
    example = _value(node)
    unit = [1] if spatial == 1 else []
    stride = unit + _per_spatial_dim(_conv_argument(node, "stride"), spatial)
    padding = [0] * len(unit) + _conv_padding(node, weight)
    dilation = unit + _per_spatial_dim(_conv_argument(node, "dilation"), spatial)
    groups = int(_conv_argument(node, "groups"))
    x_shape = list(x_arg.meta["val"].shape)
    batched = x_shape if len(x_shape) == weight.dim() else [1, *x_shape]
    x = _as_2d(self, self.operand(x_arg), [*batched[:2], *unit, *batched[2:]])
    w_shape = [*weight.shape[:2], *unit, *weight.shape[2:]]
    folded = _folded_batch_norm(self, node)
    if folded is not None:
        w = self.constant_arg(f"{node.name}.folded_weight", folded[0].reshape(w_shape))
        bias = self.constant_arg(f"{node.name}.folded_bias", folded[1])
    else:
        w = _as_2d(self, self.operand(w_arg), w_shape)
        bias = self.operand(bias_arg) if bias_arg is not None else None
    out_shape = [*example.shape] if example.dim() == weight.dim() else [1, *example.shape]
    out_2d = [*out_shape[:2], *unit, *out_shape[2:]]
    typ = TensorType(x.type.element_type, out_2d)
    value = self.insert(graph.ConvOp(x, w, bias, typ, stride, padding, dilation, groups))
    result = _shaped_as(self, value, example)
    if folded is not None:
        (norm,) = node.users
        self.folded_norms[norm] = result
    return result


def _folded_batch_norm(self: Converter, conv: fx.Node) -> tuple[torch.Tensor, ...] | None:
    """The weight and bias of `conv` with the inference batch norm that alone reads it
    folded in (w · scale per filter, (b - mean) · scale + shift), where the weight, the
    bias and the norm's statistics and parameters are constants; None otherwise."""
    if len(conv.users) != 1:
        return None
    (norm,) = conv.users
    if op_name(norm) not in BATCH_NORMS or _batch_norm_refusal(norm) or norm.args[0] is not conv:
        return None
    bias = _conv_argument(conv, "bias")
    known = [
        self.known(self.values.get(arg, UNKNOWN)) if arg is not None else None
        for arg in (conv.args[1], bias, *norm.args[1:5])
    ]
    if any(value is UNKNOWN or isinstance(value, list) for value in known):
        return None
    weight, bias, gamma, beta, mean, var = (
        value.double() if isinstance(value, torch.Tensor) else None for value in known
    )
    if weight is None or mean is None or var is None:
        return None
    _, eps_index = BATCH_NORMS[op_name(norm)]
    scale = torch.rsqrt(var + float(norm.args[eps_index]))
    scale = scale * gamma if gamma is not None else scale
    shift = beta if beta is not None else torch.zeros_like(scale)
    bias = bias if bias is not None else torch.zeros_like(scale)
    dtype = conv.args[1].meta["val"].dtype
    folded_weight = weight * scale.reshape(-1, *[1] * (weight.dim() - 1))
    return folded_weight.to(dtype), ((bias - mean) * scale + shift).to(dtype)


# -- norms ------------------------------------------------------------------------------
def _norm_refusal(norm: str) -> Refusal:
    """Refuses a norm over no dims (its normalized_shape, args[1]) or of an empty tensor."""

    def refusal(node: fx.Node) -> str | None:
        x = node.args[0].meta["val"]
        if not node.args[1] or x.numel() == 0:
            return f"{norm} of {list(x.shape)} over {list(node.args[1])} is not supported"
        return None

    return refusal


def _norm_rows(self: Converter, x_arg: fx.Node, dims: int) -> SSAValue:
    """x with its `dims` normalised trailing dims merged into one (no element moves)."""
    x = self.operand(x_arg)
    shape = list(x.type.get_shape())
    rows = TensorType(x.type.element_type, [*shape[: len(shape) - dims], _numel(shape[-dims:])])
    return x if x.type == rows else self.insert(graph.ReshapeOp(x, rows))


def _norm_param(
    self: Converter, node: fx.Node, arg: object, size: int, like: torch.Tensor, fill: float
) -> SSAValue:
    """A norm's weight or bias flattened to [size]; an absent one is ones or zeros."""
    if arg is None:
        return _filled(self, node, size, like, fill)
    param = self.operand(arg)
    flat = TensorType(param.type.element_type, [size])
    return param if param.type == flat else self.insert(graph.ReshapeOp(param, flat))


@ATEN.handles("aten.layer_norm.default", accepts=_norm_refusal("layer_norm"))
def _layer_norm(self: Converter, node: fx.Node) -> View:
    x_arg, shape = node.args[0], node.args[1]
    weight = node.args[2] if len(node.args) > 2 else None
    bias = node.args[3] if len(node.args) > 3 else None
    eps = node.args[4] if len(node.args) > 4 else 1e-5
    x = _norm_rows(self, x_arg, len(shape))
    example = _value(node)
    size = x.type.get_shape()[-1]
    w = _norm_param(self, node, weight, size, example, 1.0)
    b = _norm_param(self, node, bias, size, example, 0.0)
    return _shaped_as(self, self.insert(graph.LayerNormOp(x, w, b, float(eps))), example)


@ATEN.handles("aten.native_layer_norm.default", accepts=_norm_refusal("layer_norm"))
def _native_layer_norm(self: Converter, node: fx.Node) -> list:
    """LayerNorm's output; its saved mean and rstd have no user in inference."""
    return [_layer_norm(self, node), None, None]


@ATEN.handles("aten.rms_norm.default", accepts=_norm_refusal("rms_norm"))
def _rms_norm(self: Converter, node: fx.Node) -> View:
    x_arg, shape = node.args[0], node.args[1]
    weight = node.args[2] if len(node.args) > 2 else None
    eps = node.args[3] if len(node.args) > 3 else None
    example = _value(node)
    if eps is None:
        eps = torch.finfo(example.dtype).eps
    x = _norm_rows(self, x_arg, len(shape))
    w = _norm_param(self, node, weight, x.type.get_shape()[-1], example, 1.0)
    return _shaped_as(self, self.insert(graph.RmsNormOp(x, w, float(eps))), example)


@ATEN.handles("aten._fused_rms_norm.default", accepts=_norm_refusal("rms_norm"))
def _fused_rms_norm(self: Converter, node: fx.Node) -> list:
    """RMSNorm's output (what rms_norm is below autograd); its saved rstd has no user."""
    return [_rms_norm(self, node), None]


def _filled(self: Converter, node: fx.Node, size: int, like: torch.Tensor, fill: float) -> SSAValue:
    """A norm's absent weight (ones) or bias (zeros), as a constant."""
    tensor = torch.full((size,), fill, dtype=like.dtype)
    return self.constant_arg(f"{node.name}.{'weight' if fill else 'bias'}", tensor)


#: inference batch norms: (the index of `training` in the arguments or None, of eps)
BATCH_NORMS = {
    "aten.batch_norm.default": (5, 7),
    "aten.native_batch_norm.default": (5, 7),
    "aten._native_batch_norm_legit_no_training.default": (None, 6),
}


def _batch_norm_refusal(node: fx.Node) -> str | None:
    training, _ = BATCH_NORMS[op_name(node)]
    x = node.args[0].meta["val"]
    if training is not None and node.args[training]:
        return "batch_norm in training mode (batch statistics) is not supported"
    if x.dim() < 2 or x.numel() == 0 or not x.dtype.is_floating_point:
        return f"batch_norm of {x.dtype}{list(x.shape)} is not supported"
    for arg in node.args[1:5]:
        if arg is not None and not isinstance(arg.meta.get("val"), torch.Tensor):
            return "batch_norm with a parameter that is not a tensor is not supported"
    return None


@ATEN.handles(*BATCH_NORMS, accepts=_batch_norm_refusal)
def _batch_norm(self: Converter, node: fx.Node) -> object:
    """(x - mean) · rsqrt(var + eps) · w + b with the running statistics, as x · scale +
    shift per channel (dim 1), folded at compile time from the weights: x is read as rows
    [batch · channels, the rest], the scale and shift as a column of one value per row."""
    folded = self.folded_norms.get(node)
    if folded is not None:  # into the convolution before it
        return [folded, None, None] if isinstance(node.meta["val"], (list, tuple)) else folded
    _, eps_index = BATCH_NORMS[op_name(node)]
    x_arg, weight, bias, mean, var = node.args[:5]
    eps = float(node.args[eps_index])
    stats = [self.values[a] if a is not None else None for a in (weight, bias, mean, var)]
    if any(s is not None and not isinstance(s, Constant) for s in stats):
        raise self.error("batch_norm with statistics or parameters that are not weights")
    w, b, m, v = (s.tensor.double() if s is not None else None for s in stats)
    channels = int(node.args[0].meta["val"].shape[1])
    scale = torch.rsqrt(v + eps) if v is not None else torch.ones(channels, dtype=torch.float64)
    scale = scale * w if w is not None else scale
    shift = -m * scale if m is not None else torch.zeros(channels, dtype=torch.float64)
    shift = shift + b if b is not None else shift
    example = _value(node)
    x = self.operand(x_arg)
    shape = list(x.type.get_shape())
    rows = TensorType(x.type.element_type, [shape[0] * channels, _numel(shape[2:])])
    x = self.insert(graph.ReshapeOp(x, rows))
    columns = [
        self.constant_arg(
            f"{node.name}.{name}", t.repeat(shape[0]).reshape(-1, 1).to(example.dtype)
        )
        for name, t in (("scale", scale), ("shift", shift))
    ]
    y = self.insert(graph.MulOp(x, columns[0], rows))
    y = _shaped_as(self, self.insert(graph.AddOp(y, columns[1], rows)), example)
    return [y, None, None] if isinstance(node.meta["val"], (list, tuple)) else y


# -- pooling, upsampling and group norm (the ops around convolutions) --------------------
#: windowed poolings: (the graph kind, the pooled trailing dims)
POOLS = {
    "aten.max_pool2d.default": (graph.Pooling.MAX, 2),
    "aten.max_pool2d_with_indices.default": (graph.Pooling.MAX, 2),
    "aten.max_pool1d.default": (graph.Pooling.MAX, 1),
    "aten.max_pool1d_with_indices.default": (graph.Pooling.MAX, 1),
    "aten.avg_pool2d.default": (graph.Pooling.AVG, 2),
    "aten.avg_pool1d.default": (graph.Pooling.AVG, 1),
}
#: adaptive poolings: (the graph kind, the pooled trailing dims)
ADAPTIVE_POOLS = {
    "aten.adaptive_avg_pool2d.default": (graph.Pooling.AVG, 2),
    "aten._adaptive_avg_pool2d.default": (graph.Pooling.AVG, 2),
    "aten.adaptive_avg_pool1d.default": (graph.Pooling.AVG, 1),
    "aten.adaptive_max_pool2d.default": (graph.Pooling.MAX, 2),
    "aten.adaptive_max_pool1d.default": (graph.Pooling.MAX, 1),
}
#: upsamplings: their graph mode
RESIZES = {
    "aten.upsample_nearest2d.vec": graph.Resize.NEAREST,
    "aten.upsample_nearest2d.default": graph.Resize.NEAREST,
    "aten.upsample_bilinear2d.vec": graph.Resize.BILINEAR,
    "aten.upsample_bilinear2d.default": graph.Resize.BILINEAR,
}


def _spatial_refusal(node: fx.Node) -> str | None:
    """Refuses a pooling or an upsampling of an empty or non-float tensor, or of fewer dims
    than its spatial ones and one more."""
    name = op_name(node)
    dims = (POOLS | ADAPTIVE_POOLS)[name][1] if name not in RESIZES else 2
    x = node.args[0].meta["val"]
    if x.dim() < dims + 1 or x.numel() == 0 or _value(node).numel() == 0:
        return f"{name} of {list(x.shape)} is not supported"
    if not x.dtype.is_floating_point:
        return f"{name} of {x.dtype} is not supported"
    return None


def _pair(value: object, dims: int, height: int = 1) -> tuple[int, int]:
    """A pooling argument (an int, or a list of one per pooled dim) along (h, w); a 1-D
    pooling's h is `height` (its planes' height is 1: a window, stride or dilation of 1, a
    padding of 0)."""
    values = [int(value)] * dims if isinstance(value, int) else [int(v) for v in value]
    values = values * dims if len(values) == 1 else values
    return (values[0], values[1]) if dims == 2 else (height, values[0])


def _read_indices(node: fx.Node) -> bool:
    """Whether a user reads the indices (output 1) of a pooling that gives them."""
    return any(user.target is not operator.getitem or user.args[1] == 1 for user in node.users)


def _pooled(
    self: Converter, node: fx.Node, kind: graph.Pooling, dims: int, example: torch.Tensor, **fields
) -> View:
    """graph.pool of the node's input (a 1-D pooling's as planes of height 1) to `example`."""
    x = self.operand(node.args[0])
    shape = list(x.type.get_shape())
    out = list(example.shape)
    if dims == 1:
        shape, out = [*shape[:-1], 1, shape[-1]], [*out[:-1], 1, out[-1]]
        x = self.insert(graph.ReshapeOp(x, TensorType(x.type.element_type, shape)))
    element = self.type_of(example).element_type  # the indices' i64, or the input's
    pooled = self.insert(graph.PoolOp(x, kind, TensorType(element, out), **fields))
    return _shaped_as(self, pooled, example)


@ATEN.handles(*POOLS, accepts=_spatial_refusal)
def _pool(self: Converter, node: fx.Node) -> object:
    """Max pooling (and its indices where a user reads them) and average pooling: kernel,
    stride (the kernel's where empty), padding, dilation; ceil_mode in the output's size."""
    kind, dims = POOLS[op_name(node)]
    bound = _arguments(node)
    window = _pair(bound["kernel_size"], dims)
    stride = _pair(bound["stride"], dims) if bound["stride"] else window
    fields = {"window": window, "stride": stride, "padding": _pair(bound["padding"], dims, 0)}
    if kind == graph.Pooling.AVG:
        divisor = bound.get("divisor_override")
        fields |= {"count_pad": bool(bound["count_include_pad"]), "divisor": divisor}
        return _pooled(self, node, kind, dims, _value(node), **fields)
    fields["dilation"] = _pair(bound["dilation"], dims)
    values = _pooled(self, node, kind, dims, _value(node), **fields)
    if not isinstance(node.meta["val"], (list, tuple)):
        return values
    index = node.meta["val"][1]
    argmax = graph.Pooling.ARGMAX
    indices = _pooled(self, node, argmax, dims, index, **fields) if _read_indices(node) else None
    return [values, indices]


@ATEN.handles(*ADAPTIVE_POOLS, accepts=_spatial_refusal)
def _adaptive_pool(self: Converter, node: fx.Node) -> object:
    """Adaptive pooling: output i's window spans floor(i · n / out) to ceil((i + 1) · n /
    out); adaptive max pooling gives its indices too."""
    kind, dims = ADAPTIVE_POOLS[op_name(node)]
    example = _value(node)
    if kind == graph.Pooling.AVG and _numel(example.shape[-dims:]) == 1:
        # a global pool (every classifier head's) is a mean of rows, a block per plane, as
        # torch.compile's decomposition gives it
        x = self.operand(node.args[0])
        shape = list(x.type.get_shape())
        count = _numel(shape[:-dims])
        rows = TensorType(x.type.element_type, [count, _numel(shape[-dims:])])
        x = x if x.type == rows else self.insert(graph.ReshapeOp(x, rows))
        mean = graph.ReduceOp(x, "mean", TensorType(rows.element_type, [count, 1]))
        return _shaped_as(self, self.insert(mean), example)
    values = _pooled(self, node, kind, dims, example)
    if not isinstance(node.meta["val"], (list, tuple)):
        return values
    index = node.meta["val"][1]
    read = _read_indices(node)
    return [values, _pooled(self, node, graph.Pooling.ARGMAX, dims, index) if read else None]


def _resize_scales(node: fx.Node, example: torch.Tensor) -> tuple[float, float]:
    """The source step per dim torch's upsampling takes: the inverse of the caller's scale
    factor where given, else the input's size over the output's."""
    bound = _arguments(node)
    if "scale_factors" in bound:
        factors = bound["scale_factors"] or [None, None]
    else:
        factors = [bound.get("scales_h"), bound.get("scales_w")]
    sizes = zip(node.args[0].meta["val"].shape[-2:], example.shape[-2:], strict=True)
    return tuple(
        1.0 / factor if factor else n / o for factor, (n, o) in zip(factors, sizes, strict=True)
    )


@ATEN.handles(*RESIZES, accepts=_spatial_refusal)
def _resize(self: Converter, node: fx.Node) -> View:
    """Nearest and bilinear upsampling of the last two dims, by output size or scale factor."""
    example = _value(node)
    align_corners = bool(_arguments(node).get("align_corners", False))
    x = self.operand(node.args[0])
    op = graph.ResizeOp(
        x,
        RESIZES[op_name(node)],
        self.type_of(example),
        _resize_scales(node, example),
        align_corners,
    )
    return self.result(self.insert(op), example)


@ATEN.handles("aten._unsafe_index.Tensor", accepts=_nonempty(_advanced_index_refusal))
def _unsafe_index(self: Converter, node: fx.Node) -> View:
    """Indexing without bounds checks (upsampling's decomposition under torch.compile, by
    indices it computes from aranges): a gather, as x[a, b]."""
    return _advanced_index(self, node)


#: group norms: the index of (weight, bias, the group count, eps) in their arguments
GROUP_NORMS = {
    "aten.group_norm.default": (2, 3, 1, 4),
    "aten.native_group_norm.default": (1, 2, 6, 7),
}


def _group_norm_refusal(node: fx.Node) -> str | None:
    x = node.args[0].meta["val"]
    groups = node.args[GROUP_NORMS[op_name(node)][2]]
    if x.dim() < 2 or x.numel() == 0 or not x.dtype.is_floating_point:
        return f"group_norm of {x.dtype}{list(x.shape)} is not supported"
    if x.shape[1] % groups:
        return f"group_norm of {x.shape[1]} channels in {groups} groups"
    return None


def _channel_column(self: Converter, node: fx.Node, arg: fx.Node, batch: int, name: str):
    """A per-channel parameter [C] as a column of one value per row [batch · C, 1] (a
    weight's folded at compile time, another's broadcast by a copy)."""
    value = self.values[arg]
    channels = int(arg.meta["val"].shape[0])
    dtype = _value(node).dtype
    if isinstance(value, Constant):
        column = value.tensor.detach().repeat(batch).reshape(-1, 1).to(dtype)
        return self.constant_arg(f"{node.name}.{name}", column)
    view = self.view(value)
    expanded = view.meta.reshape(1, channels, 1).expand(batch, channels, 1)
    copy = self.contiguous(View(view.base, expanded))
    typ = TensorType(copy.type.element_type, [batch * channels, 1])
    return self.insert(graph.ReshapeOp(copy, typ))


@ATEN.handles(*GROUP_NORMS, accepts=_group_norm_refusal)
def _group_norm(self: Converter, node: fx.Node) -> object:
    """GroupNorm in inference: the rows [N · G, C / G · the rest] normalised (a layer norm
    without affine), then the per-channel weight and bias over the rows [N · C, the rest]
    as columns, as batch_norm's."""
    weight_at, bias_at, groups_at, eps_at = GROUP_NORMS[op_name(node)]
    args = [*node.args, *[None] * 8]
    weight, bias, groups = args[weight_at], args[bias_at], int(args[groups_at])
    eps = float(args[eps_at] if args[eps_at] is not None else 1e-5)
    example = _value(node)
    x = self.operand(node.args[0])
    shape = list(x.type.get_shape())
    batch, channels, rest = shape[0], shape[1], _numel(shape[2:])
    element = x.type.element_type
    rows = TensorType(element, [batch * groups, channels // groups * rest])
    cols = rows.get_shape()[1]
    x = self.insert(graph.ReshapeOp(x, rows))
    ones, zeros = (_filled(self, node, cols, example, fill) for fill in (1.0, 0.0))
    y = self.insert(graph.LayerNormOp(x, ones, zeros, eps))
    if weight is not None or bias is not None:
        planes = TensorType(element, [batch * channels, rest])
        y = self.insert(graph.ReshapeOp(y, planes))
        if weight is not None:
            column = _channel_column(self, node, weight, batch, "scale")
            y = self.insert(graph.MulOp(y, column, planes))
        if bias is not None:
            y = self.insert(
                graph.AddOp(y, _channel_column(self, node, bias, batch, "shift"), planes)
            )
    y = _shaped_as(self, y, example)
    return [y, None, None] if isinstance(node.meta["val"], (list, tuple)) else y


# -- mixture of experts -----------------------------------------------------------------
def _index_put_refusal(node: fx.Node) -> str | None:
    x, values = _value(node.args[0]), _value(node.args[2])
    indices = list(node.args[1])
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    if accumulate:
        return f"{op_name(node)} with accumulate=True is not supported"
    if len(indices) != 1 or indices[0] is None or x.dim() == 0:
        return f"{op_name(node)} by other than one index tensor on the first dim"
    index = _value(indices[0])
    if index.dim() != 1 or index.dtype not in INTEGER_DTYPES:
        return f"{op_name(node)} by an index that is not a 1-d tensor of int32/int64"
    if tuple(values.shape) != (index.shape[0], *x.shape[1:]) or values.dtype != x.dtype:
        return f"{op_name(node)} of values {list(values.shape)} {values.dtype} (not broadcast)"
    return None


@ATEN.handles("aten.index_put.default", accepts=_nonempty(_index_put_refusal))
def _index_put(self: Converter, node: fx.Node) -> View:
    """x[index] = values by one index tensor on the first dim: an index_copy along it (a
    mixture of experts' inverse permutation)."""
    out = _value(node)
    x, index, values = (self.operand(a) for a in (node.args[0], node.args[1][0], node.args[2]))
    return self.result(self.insert(graph.IndexCopyOp(x, 0, index, values)), out)


def _grouped_operands(node: fx.Node) -> tuple[fx.Node, fx.Node, object, object, object]:
    """input, weight, offsets, bias, out_dtype of a grouped matmul: transformers'
    `grouped_mm_fallback(input, weight, offs)` or torch's `_grouped_mm(self, mat2, offs,
    bias, out_dtype)`."""
    schema = node.target._schema
    given = {arg.name: value for arg, value in zip(schema.arguments, node.args, strict=False)}
    given |= node.kwargs
    names = [arg.name for arg in schema.arguments]
    return (
        given[names[0]],
        given[names[1]],
        given.get("offs"),
        given.get("bias"),
        given.get("out_dtype"),
    )


def _grouped_mm_refusal(node: fx.Node) -> str | None:
    x, weight, offsets, bias, out_dtype = _grouped_operands(node)
    if offsets is None or bias is not None:
        return f"{op_name(node)} without offsets or with a bias is not supported"
    a, w, offs = _value(x), _value(weight), _value(offsets)
    if a.dim() != 2 or w.dim() != 3:
        return f"{op_name(node)} of {list(a.shape)} by {list(w.shape)} (2-d by 3-d is supported)"
    if a.dtype != w.dtype or not dtypes.is_float(_storage_name(a.dtype)):
        return f"{op_name(node)} of {a.dtype} by {w.dtype} is not supported"
    if out_dtype not in (None, a.dtype):
        return f"{op_name(node)} to {out_dtype} is not supported"
    if offs.dim() != 1 or offs.dtype not in INTEGER_DTYPES or offs.shape[0] != w.shape[0]:
        return f"{op_name(node)} offsets must be one int32/int64 per group"
    if a.shape[0] == 0 or a.shape[1] != w.shape[1]:
        return f"{op_name(node)} of {list(a.shape)} by {list(w.shape)} does not contract"
    return None


@ATEN.handles(
    "aten._grouped_mm.default",
    "transformers.grouped_mm_fallback.default",
    accepts=_grouped_mm_refusal,
)
def _grouped_mm(self: Converter, node: fx.Node) -> View:
    """Each group's rows of the input times its weight [groups, k, n], the groups' ends the
    offsets (a mixture of experts' tokens sorted by expert): one graph.grouped_matmul. A
    weight that is the transpose of one stored [groups, n, k] (a Hugging Face expert's
    `gate_up_proj`) is read in place."""
    x, weight, offsets, _, _ = _grouped_operands(node)
    out = _value(node)
    w = self.view(self.values[weight])
    stored = w.meta.transpose(-2, -1)
    transpose_b = stored.is_contiguous() and not w.meta.is_contiguous()
    rhs = self.contiguous(View(w.base, stored) if transpose_b else w)
    op = graph.GroupedMatmulOp(
        self.operand(x), rhs, self.operand(offsets), self.type_of(out), transpose_b
    )
    return self.result(self.insert(op), out)


def _broadcast(self: Converter, value: SSAValue, dtype: torch.dtype, dims, shape) -> SSAValue:
    """`value` with its elements laid out as `dims` (its shape with dims of 1 put in),
    as an operand of an elementwise op of `shape`: read in place where a kernel reads
    that broadcast, else expanded by a copy."""
    meta = contiguous_meta(value.type, dtype).reshape(tuple(dims))
    if broadcast_kind(tuple(dims), tuple(shape)) is None:
        return self.contiguous(View(value, meta.expand(tuple(shape))))
    return self.contiguous(View(value, meta))


def _pointwise_of(self: Converter, name: str, operands: list[SSAValue], element, shape):
    return self.insert(graph.elementwise(name, operands, TensorType(element, list(shape))))


def _iota(self: Converter, count: int) -> SSAValue:
    """0, 1, ..., count - 1 (int64): a constant of the program."""
    return self.constant_arg(f"emmy.iota{count}", torch.arange(count))


def _ranked(
    self: Converter, x: SSAValue, dtype: torch.dtype, k: int, descending: bool
) -> tuple[SSAValue, SSAValue]:
    """The first k of each row of x [rows, n] in order (largest first where `descending`)
    and their places, ties in the order of their places: the values [rows, k] and int64
    places [rows, k]. By ranks, in the elementwise and row-reduction kernels: element i's
    rank counts the elements j before it in the order (x_j beyond x_i, or equal with j < i);
    output p sums the elements (and the places) of rank p, exactly one per row. Its work
    is n² per row: routing's rows are short (a token's experts, a batch's picks)."""
    rows, n = x.type.get_shape()
    pairs = (rows, n, n)  # [row, i, j]
    xi = _broadcast(self, x, dtype, (rows, n, 1), pairs)
    xj = _broadcast(self, x, dtype, (rows, 1, n), pairs)
    beyond = _pointwise_of(self, "gt" if descending else "lt", [xj, xi], i8, pairs)
    equal = _pointwise_of(self, "eq", [xj, xi], i8, pairs)
    places = _iota(self, n)
    before = _pointwise_of(
        self,
        "lt",
        [
            _broadcast(self, places, torch.int64, (1, 1, n), pairs),
            _broadcast(self, places, torch.int64, (1, n, 1), pairs),
        ],
        i8,
        pairs,
    )
    tie = _pointwise_of(self, "logical_and", [equal, before], i8, pairs)
    first = _pointwise_of(self, "logical_or", [beyond, tie], i8, pairs)
    count = self.insert(graph.ConvertOp(first, TensorType(i64, list(pairs))))
    rank = self.insert(graph.ReduceOp(count, "sum", TensorType(i64, [rows, n])))
    picks = (rows, k, n)  # [row, p, i]
    chosen = _pointwise_of(
        self,
        "eq",
        [
            _broadcast(self, rank, torch.int64, (rows, 1, n), picks),
            _broadcast(self, _iota(self, k) if k != n else places, torch.int64, (1, k, 1), picks),
        ],
        i8,
        picks,
    )

    def pick(value: SSAValue, value_dtype: torch.dtype, dims: tuple[int, ...]) -> SSAValue:
        value_element = value.type.element_type
        zero = self.insert(graph.ConstantOp(0, value_element))
        spread = _broadcast(self, value, value_dtype, dims, picks)
        kept = _pointwise_of(self, "where", [chosen, spread, zero], value_element, picks)
        summed = graph.reduce_result_dtype("sum", value_element)
        total = self.insert(graph.ReduceOp(kept, "sum", TensorType(summed, [rows, k])))
        if summed != value_element:
            total = self.insert(graph.ConvertOp(total, TensorType(value_element, [rows, k])))
        return total

    values = pick(x, dtype, (rows, 1, n))
    indices = pick(places, torch.int64, (1, 1, n))
    return values, indices


#: the most pairs (rows · n²) a ranking compares: routing's rows are short
RANKED_PAIRS_MAX = 1 << 24


def _ranking_refusal(node: fx.Node) -> str | None:
    bound = _arguments(node)
    x = _value(node.args[0])
    if x.dim() == 0 or x.numel() == 0:
        return f"{op_name(node)} of a tensor of shape {list(x.shape)} is not supported"
    if int(bound.get("dim", -1)) % x.dim() != x.dim() - 1:
        return f"{op_name(node)} along other than the last dim is not supported"
    if x.dtype not in (*INTEGER_DTYPES, torch.float32, torch.float16, torch.bfloat16):
        return f"{op_name(node)} of {x.dtype} is not supported"
    if op_name(node) == "aten.topk.default" and not x.dtype.is_floating_point:
        # integers tie often, and torch's topk places equal values in an order of its own
        return f"topk of {x.dtype} is not supported: torch orders equal values its own way"
    n = x.shape[-1]
    if x.numel() * n > RANKED_PAIRS_MAX:
        return f"{op_name(node)} of rows of {n}: at most {RANKED_PAIRS_MAX} pairs are compared"
    return None


def _ranked_node(self: Converter, node: fx.Node, k: int, descending: bool) -> list[View]:
    x = _value(node.args[0])
    n = x.shape[-1]
    rows = self.operand(node.args[0])
    flat = TensorType(rows.type.element_type, [x.numel() // n, n])
    rows = self.insert(graph.ReshapeOp(rows, flat))
    values, indices = _ranked(self, rows, x.dtype, k, descending)
    examples = node.meta["val"]
    return [_shaped_as(self, values, examples[0]), _shaped_as(self, indices, examples[1])]


@ATEN.handles("aten.topk.default", accepts=_nonempty(_ranking_refusal))
def _topk(self: Converter, node: fx.Node) -> list[View]:
    """The k largest (or smallest) of the last dim and their places, in order: a mixture
    of experts' router picking each token's experts."""
    bound = _arguments(node)
    return _ranked_node(self, node, int(bound["k"]), bool(bound.get("largest", True)))


@ATEN.handles("aten.sort.default", "aten.sort.stable", accepts=_nonempty(_ranking_refusal))
def _sort(self: Converter, node: fx.Node) -> list[View]:
    """The last dim sorted, and the places its elements came from: a mixture of experts'
    picks ordered by expert. Ties keep their order (a stable sort; torch's default sort
    leaves their order unspecified)."""
    bound = _arguments(node)
    n = _value(node.args[0]).shape[-1]
    return _ranked_node(self, node, n, bool(bound.get("descending", False)))


def _histc_refusal(node: fx.Node) -> str | None:
    bound = _arguments(node)
    x = _value(node.args[0])
    if not dtypes.is_float(_storage_name(x.dtype)) or x.numel() == 0:
        return f"histc of {x.dtype} {list(x.shape)} is not supported"
    low, high = float(bound.get("min", 0)), float(bound.get("max", 0))
    if not low < high:
        return "histc over the data's own range (min >= max) is not supported"
    if x.numel() * int(bound.get("bins", 100)) > RANKED_PAIRS_MAX:
        return f"histc of {x.numel()} elements: at most {RANKED_PAIRS_MAX} pairs are compared"
    return None


@ATEN.handles("aten.histc.default", accepts=_histc_refusal)
def _histc(self: Converter, node: fx.Node) -> View:
    """Counts of the elements in `bins` equal bins over [min, max] (the last bin closed, an
    element outside counted nowhere), as torch bins them: a mixture of experts' picks per
    expert. Bin b counts the elements whose bin is b: a comparison of every element with
    every bin and a row sum, in the elementwise and row-reduction kernels."""
    bound = _arguments(node)
    bins, low, high = int(bound.get("bins", 100)), float(bound["min"]), float(bound["max"])
    out = _value(node)
    x = self.operand(node.args[0])
    n = _numel(x.type.get_shape())
    x = self.insert(graph.ReshapeOp(x, TensorType(x.type.element_type, [n])))
    if x.type.element_type != dtypes.xdsl_type("f32"):
        x = self.insert(graph.ConvertOp(x, TensorType(dtypes.xdsl_type("f32"), [n])))
    f32 = x.type.element_type

    def number(value: float, element) -> SSAValue:
        return self.insert(graph.ConstantOp(value, element))

    # torch's bin: (x - min) * bins / (max - min), truncated; max itself in the last bin
    scaled = _pointwise_of(self, "sub", [x, number(low, f32)], f32, [n])
    scaled = _pointwise_of(self, "mul", [scaled, number(bins, f32)], f32, [n])
    scaled = _pointwise_of(self, "div", [scaled, number(high - low, f32)], f32, [n])
    place = self.insert(
        graph.ConvertOp(_pointwise_of(self, "trunc", [scaled], f32, [n]), TensorType(i64, [n]))
    )
    place = _pointwise_of(self, "minimum", [place, number(bins - 1, i64)], i64, [n])
    above = _pointwise_of(self, "ge", [x, number(low, f32)], i8, [n])
    below = _pointwise_of(self, "le", [x, number(high, f32)], i8, [n])
    inside = _pointwise_of(self, "logical_and", [above, below], i8, [n])
    pairs = (bins, n)
    hit = _pointwise_of(
        self,
        "eq",
        [
            _broadcast(self, place, torch.int64, (1, n), pairs),
            _broadcast(self, _iota(self, bins), torch.int64, (bins, 1), pairs),
        ],
        i8,
        pairs,
    )
    hit = _pointwise_of(
        self, "logical_and", [hit, _broadcast(self, inside, torch.bool, (1, n), pairs)], i8, pairs
    )
    ones = self.insert(graph.ConvertOp(hit, TensorType(f32, list(pairs))))
    counts = self.insert(graph.ReduceOp(ones, "sum", TensorType(f32, [bins])))
    element = _element(out.dtype)
    if element != f32:
        counts = self.insert(graph.ConvertOp(counts, TensorType(element, [bins])))
    return self.result(counts, out)


# -- attention --------------------------------------------------------------------------
def _sdpa_arguments(node: fx.Node) -> dict:
    names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
    return dict(zip(names, node.args, strict=False)) | dict(node.kwargs)


def _flash_arguments(node: fx.Node) -> dict:
    names = ["query", "key", "value", "dropout_p", "is_causal", "attn_mask", "scale"]
    return dict(zip(names, node.args, strict=False)) | dict(node.kwargs)


def _without_dropout(arguments: Callable[[fx.Node], dict]) -> Refusal:
    """Refuses attention with dropout, its arguments bound by `arguments`."""

    def refusal(node: fx.Node) -> str | None:
        if not arguments(node).get("dropout_p", 0.0):
            return None
        return "scaled_dot_product_attention with dropout is not supported"

    return refusal


@ATEN.handles(
    "aten.scaled_dot_product_attention.default", accepts=_without_dropout(_sdpa_arguments)
)
def _attention(self: Converter, node: fx.Node) -> View:
    return _sdpa(self, node, _sdpa_arguments(node))


@ATEN.handles(
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    accepts=_without_dropout(_flash_arguments),
)
def _attention_for_cpu(self: Converter, node: fx.Node) -> list:
    """torch's CPU flash attention (what SDPA is below autograd): the output and its
    log-sum-exp, which no inference graph reads. It takes k/v of fewer heads than q as
    grouped-query attention (what SDPA with enable_gqa=True becomes)."""
    return [_sdpa(self, node, {"enable_gqa": True, **_flash_arguments(node)}), None]


def _additive_mask(self: Converter, view: View, dtype: Attribute) -> View:
    """A boolean mask's additive form in `dtype` (0 where true, -inf where false), viewed as
    the mask was."""
    shape = list(view.base.type.get_shape())
    bias = self.insert(graph.MaskBiasOp(view.base, TensorType(dtype, shape)))
    torch_dtype = dtypes.torch_dtype(dtypes.dtype_name(dtype))
    meta = torch.empty(shape, dtype=torch_dtype, device="meta").as_strided(
        view.meta.shape, view.meta.stride(), view.meta.storage_offset()
    )
    return View(bias, meta)


def _attention_mask(
    self: Converter,
    arg: fx.Node,
    dtype: Attribute,
    batch: int,
    heads: int,
    q_len: int,
    kv_len: int,
) -> SSAValue:
    """An attn_mask [batch or 1, heads or 1, q_len or 1, kv_len], additive in q's `dtype` or
    boolean (true: the key is read), which becomes additive first: read as [groups,
    kv_len] or [groups, q_len, kv_len], where the groups are the batch (a mask the same for
    every head) or the batch's heads (a mask per head); a padding mask is [batch, 1, 1,
    kv_len], and Hugging Face models build padding and causal masks as [batch, 1, q_len,
    kv_len]."""
    view = self.view(self.values[arg])
    if view.meta.dtype == torch.bool:
        view = _additive_mask(self, view, dtype)
    meta = view.meta
    shape = (1,) * (4 - meta.dim()) + tuple(meta.shape)
    fits = meta.dim() <= 4 and shape[0] in (1, batch) and shape[1] in (1, heads)
    if not fits or shape[2] not in (1, q_len) or shape[3] != kv_len:
        raise self.error(
            f"attn_mask of shape {list(meta.shape)}: it must broadcast to [{batch}, {heads}, "
            f"{q_len}, {kv_len}] from [batch or 1, heads or 1, q_len or 1, kv_len]"
        )
    per_head, rows = shape[1] > 1, shape[2]
    expanded = meta.reshape(shape).expand(batch, shape[1], rows, kv_len)
    value = self.contiguous(View(view.base, expanded if per_head else expanded[:, 0]))
    groups = batch * heads if per_head else batch
    out = [groups, *([rows] if rows > 1 else []), kv_len]
    if list(value.type.get_shape()) == out:
        return value
    return self.insert(graph.ReshapeOp(value, TensorType(value.type.element_type, out)))


def _sdpa(self: Converter, node: fx.Node, bound: dict) -> View:
    q, k, v = (self.operand(bound[n]) for n in ("query", "key", "value"))
    heads, kv_heads = q.type.get_shape()[1], k.type.get_shape()[1]
    if kv_heads != heads and not bound.get("enable_gqa", False):
        raise self.error("k/v with fewer heads than q need enable_gqa=True")
    scale = bound.get("scale")
    if scale is None:
        scale = q.type.get_shape()[-1] ** -0.5
    mask = None
    if bound.get("attn_mask") is not None:
        batch, kv_len = k.type.get_shape()[0], k.type.get_shape()[2]
        q_len = q.type.get_shape()[2]
        dtype = q.type.element_type
        mask = _attention_mask(self, bound["attn_mask"], dtype, batch, heads, q_len, kv_len)
    out = _value(node)
    causal = bool(bound.get("is_causal", False))
    op = graph.AttentionOp(q, k, v, float(scale), causal, mask)
    return self.result(self.insert(op), out)
