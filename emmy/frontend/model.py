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

import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import fx
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from xdsl.builder import Builder
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ModuleOp,
    TensorType,
    i8,
)
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import VerifyException

from emmy import dtypes
from emmy.dialects import fallback, graph
from emmy.errors import EmmyError
from emmy.families.chains import broadcast_kind
from emmy.families.permute import collapse_dims
from emmy.frontend.fallback import (
    Coverage,
    Fallback,
    encode,
    foldable,
    returns_view,
    tensor_outputs,
)
from emmy.frontend.op_registry import OpEntry, OpRegistry, Refusal, Support, op_name

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


def export_program(
    module: torch.nn.Module,
    example_inputs: Sequence[torch.Tensor],
    dynamic_shapes: object = None,
) -> torch.export.ExportedProgram:
    """torch.export of `module` (eval mode, no grad) at its example inputs; `dynamic_shapes`
    (torch.export's, e.g. `({1: Dim("seq", max=1024)},)`) declares the dims that may vary."""
    module = module.eval()
    try:
        with torch.no_grad():
            return torch.export.export(module, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
    except Exception as error:  # noqa: BLE001 - any reason torch.export refuses the model
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise EmmyError(f"torch.export failed: {type(error).__name__}: {first_line}") from None


def export(
    module: torch.nn.Module, example_inputs: Sequence[torch.Tensor], fallback: bool = True
) -> ModelGraph:
    """Exports `module` at its example inputs and converts it."""
    return convert(export_program(module, example_inputs), example_inputs, fallback)


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
    return Converter(fx_graph, constants, exported.call_spec.out_spec, fallback).convert()


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


def specialised_fx_graph(module: fx.GraphModule, inputs: Sequence[object]) -> fx.Graph:
    """The graph of `module` (one AOTAutograd hands a backend) with example values at the
    shapes of `inputs`, its tensors and the sizes of its dynamic dims: the graph itself
    where it is static."""
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
    ) -> None:
        self.fx_graph = fx_graph
        self.fallback = fallback
        self.coverage = Coverage()
        self.placeholder_constants = constants
        self.out_spec = out_spec
        self.block = Block()
        self.builder = Builder(InsertPoint.at_end(self.block))
        self.values: dict[fx.Node, object] = {}
        self.constants: dict[str, torch.Tensor] = {}
        self.constant_args: dict[str, SSAValue] = {}
        self.input_names: list[str] = []
        self.output_dtypes: list[torch.dtype] = []
        self.node: fx.Node | None = None

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
            self.constants[name] = tensor.detach().contiguous()
        return self.constant_args[name]

    def known(self, value: object) -> object:
        """The tensor a value is at compile time (a constant, a view of one), the value
        itself where it is a number, or UNKNOWN where it is known only when the model runs."""
        if isinstance(value, Constant):
            return value.tensor
        if isinstance(value, View):
            name = next((n for n, arg in self.constant_args.items() if arg is value.base), None)
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
        if tensor.dtype in INTEGER_DTYPES:
            element = dtypes.xdsl_type(dtypes.torch_dtype_name(tensor.dtype))
            return TensorType(element, list(tensor.shape))
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
        if meta.dtype in INTEGER_DTYPES or meta.dtype == torch.bool:
            # the strided-copy family moves floats only
            raise self.error(
                f"a strided copy of {meta.dtype} values (a slice or permute of them) is not "
                "supported: pass them as the model reads them"
            )
        dims = len(collapse_dims(list(meta.shape), list(meta.stride())))
        if dims > 4:
            raise self.error(
                f"a strided copy of {dims} dims that do not merge: at most 4 are supported"
            )
        return self.insert(graph.AsStridedOp(base, typ, meta.stride(), meta.storage_offset()))

    def insert(self, op) -> SSAValue:
        """Appends a graph op, verified here so that what its kernel cannot take (an
        integer tensor in arithmetic, attention of rank 3) names the node."""
        try:
            op.verify()
        except VerifyException as error:
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
            elif node.op == "output":
                self.output_dtypes = [arg.meta["val"].dtype for arg in node.args[0]]
                returned = [self.operand(arg) for arg in node.args[0]]
                for value in returned:
                    if value in self.block.args:
                        raise self.error("the model returns an input or a weight unchanged")
                self.builder.insert(func.ReturnOp(*returned))
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
        return ModelGraph(
            ModuleOp([main]),
            self.input_names,
            self.constants,
            self.output_dtypes,
            self.out_spec,
            self.coverage,
        )

    def call(self, node: fx.Node) -> object:
        """The node's value: computed at compile time where it depends on constants and
        shapes alone, else by its registry entry, else through torch."""
        counted = isinstance(node.target, torch._ops.OpOverload) and not returns_view(node)
        folded = self.fold(node)
        if folded is not None:
            if counted:
                self.coverage.count(node, "folded")
            return folded
        support = ATEN.supports(node)
        reason = support.reason
        if support:
            last = self.block.last_op
            try:
                value = ATEN.entry_for(node).handler(self, node)
            except EmmyError as error:
                if not self.fallback or not hasattr(error, "reason"):
                    raise
                self.erase_after(last)
                reason = error.reason
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
            self.block.last_op.erase()

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

    def tensor_or_scalar(self, arg: object, typ: TensorType) -> SSAValue:
        if isinstance(arg, (int, float)):
            return self.insert(graph.ConstantOp(float(arg), typ.element_type))
        view = self.view(self.values[arg])
        out_shape = tuple(typ.get_shape())
        if broadcast_kind(tuple(view.meta.shape), out_shape) is None:
            # a broadcast no elementwise kernel reads in place: expanded by a copy
            view = View(view.base, view.meta.expand(out_shape))
        value = self.contiguous(view)
        if value.type.element_type != typ.element_type:
            raise self.error(f"mixed dtypes {value.type.element_type} and {typ.element_type}")
        return value

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


def _value(node: fx.Node) -> torch.Tensor:
    """The node's example tensor: its first, for ops that give several (their others, the
    statistics saved for a backward pass, have no user in inference)."""
    value = node.meta["val"]
    return value[0] if isinstance(value, (list, tuple)) else value


# -- fx plumbing ------------------------------------------------------------------------
@ATEN.handles_class(lambda node: isinstance(node.meta.get("val"), (int, torch.SymInt)))
def _size(self: Converter, node: fx.Node) -> int:
    """A size (of a dynamic dim, specialised), read by views."""
    return int(node.meta["val"])


@ATEN.handles_class(lambda node: node.target is operator.getitem)
def _item(self: Converter, node: fx.Node) -> object:
    """One result of an op that gives several."""
    return self.values[node.args[0]][node.args[1]]


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
    except RuntimeError:
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


# checks torch.export inserts (before each `.to(...)`) of what shapes already fix
@ATEN.handles("aten._assert_tensor_metadata.default")
def _no_op(self: Converter, node: fx.Node) -> None:
    return None


def _copy_refusal(node: fx.Node) -> str | None:
    source, out = node.args[0].meta["val"].dtype, node.meta["val"].dtype
    if out == source:
        return None
    return f"{node.target}: dtype conversion {source} -> {out} is not supported"


@ATEN.handles(
    "aten.contiguous.default",
    "aten.clone.default",
    "aten._to_copy.default",
    "aten.to.dtype",
    "aten.to.dtype_layout",
    accepts=_copy_refusal,
)
def _copy(self: Converter, node: fx.Node) -> View:
    return self.result(self.contiguous(self.view(self.values[node.args[0]])), node.meta["val"])


# -- elementwise ------------------------------------------------------------------------
UNARY_OPS = {
    "aten.exp.default": graph.ExpOp,
    "aten.tanh.default": graph.TanhOp,
    "aten.sigmoid.default": graph.SigmoidOp,
    "aten.silu.default": graph.SiluOp,
    "aten.relu.default": graph.ReluOp,
    "aten.neg.default": graph.NegOp,
}


@ATEN.handles(*UNARY_OPS)
def _unary(self: Converter, node: fx.Node) -> View:
    x = self.operand(node.args[0])
    return self.result(self.insert(UNARY_OPS[op_name(node)](x)), node.meta["val"])


BINARY_OPS = {
    "add": graph.AddOp,
    "sub": graph.SubOp,
    "mul": graph.MulOp,
    "div": graph.DivOp,
}
ARITHMETIC = (*BINARY_OPS, "rsub")


def _arithmetic(node: fx.Node) -> str:
    """`add` for aten.add.Tensor: every overload of an arithmetic op converts alike."""
    return op_name(node).removeprefix("aten.").partition(".")[0]


@ATEN.handles_class(
    lambda node: _arithmetic(node) in ARITHMETIC,
    members=[f"aten.{op}.{overload}" for op in ARITHMETIC for overload in ("Tensor", "Scalar")],
)
def _binary(self: Converter, node: fx.Node) -> View:
    out = node.meta["val"]
    arithmetic = _arithmetic(node)
    lhs_arg, rhs_arg = node.args[0], node.args[1]
    if arithmetic == "rsub":
        lhs_arg, rhs_arg, arithmetic = rhs_arg, lhs_arg, "sub"
    typ = self.type_of(out)
    lhs = self.tensor_or_scalar(lhs_arg, typ)
    rhs = self.tensor_or_scalar(rhs_arg, typ)
    alpha = node.kwargs.get("alpha", 1)
    if alpha != 1:
        rhs = self.insert(graph.MulOp(rhs, self.scalar(alpha, rhs), rhs.type))
    return self.result(self.insert(BINARY_OPS[arithmetic](lhs, rhs, typ)), out)


@ATEN.handles("aten.gelu.default")
def _gelu(self: Converter, node: fx.Node) -> View:
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    x = self.operand(node.args[0])
    return self.result(self.insert(graph.GeluOp(x, approximate)), node.meta["val"])


@ATEN.handles("emmy.rope.default")
def _rope(self: Converter, node: fx.Node) -> View:
    x, cos, sin = (self.operand(a) for a in node.args[:3])
    return self.result(self.insert(graph.RopeOp(x, cos, sin)), node.meta["val"])


@ATEN.handles("aten.embedding.default")
def _embedding(self: Converter, node: fx.Node) -> View:
    table = self.operand(node.args[0])
    ids = self.operand(node.args[1])
    out = node.meta["val"]
    return self.result(self.insert(graph.EmbeddingOp(table, ids, self.type_of(out))), out)


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
    if _element_type(out.dtype) != graph.reduce_result_dtype("sum", element):
        return f"cumsum to {out.dtype} (a dtype conversion) is not supported"
    return None


@ATEN.handles("aten.cumsum.default", accepts=_cumsum_refusal)
def _cumsum(self: Converter, node: fx.Node) -> View:
    """A prefix sum over any dim, read in place."""
    example = node.meta["val"]
    x = self.operand(node.args[0])
    if not x.type.get_shape():
        x = self.insert(graph.ReshapeOp(x, TensorType(x.type.element_type, [1])))
    rank = len(x.type.get_shape())
    dim = int(node.args[1]) % rank
    element = graph.reduce_result_dtype("sum", x.type.element_type)
    typ = TensorType(element, x.type.get_shape())
    scan = graph.CumsumOp(x, typ, None if dim == rank - 1 else dim)
    return _shaped_as(self, self.insert(scan), example)


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
    if isinstance(weight, Constant):
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
    addend = self.tensor_or_scalar(bias, product.type)
    if beta != 1:
        addend = self.insert(graph.MulOp(addend, self.scalar(beta, addend), addend.type))
    return self.result(self.insert(graph.AddOp(product, addend, product.type)), out)


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
    log-sum-exp, which no inference graph reads."""
    return [_sdpa(self, node, _flash_arguments(node)), None]


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
