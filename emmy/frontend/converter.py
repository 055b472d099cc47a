"""The converter of an fx graph of ATen ops to an emmy.graph function (`Converter`). The
function takes the user's inputs, then the constants it reads (parameters and buffers, by
their state-dict names): a Linear's weight is read as its transpose, laid out [in, out]
once at compile time.

Each node is computed at compile time where it depends on constants and sizes alone, else
converted by its entry of the registry `ATEN` (emmy.frontend.aten, one module per class of
ops), else run through torch (`fallback.call`). `supported_ops()` lists the ops the
registry converts, `handler_for(name)` gives an op's entry, and `supports(node)` says
whether a node converts without converting it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import fx
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils._pytree import TreeSpec
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, ModuleOp, TensorType
from xdsl.ir import Attribute, Region, SSAValue

from emmy.base import dtypes
from emmy.base.errors import ConversionError, EmmyError
from emmy.dialects import fallback, graph
from emmy.dialects.graph import MUTATED_INPUTS
from emmy.frontend.aten import ATEN
from emmy.frontend.function_builder import (
    UNKNOWN,
    Constant,
    FunctionBuilder,
    RandomMask,
    View,
    contiguous_meta,
    map_leaves,
    map_nodes,
    source_line,
)
from emmy.frontend.op_registry import OpEntry, Support, op_name, op_overload
from emmy.frontend.torch_fallback import (
    Coverage,
    Fallback,
    encode,
    foldable,
    returns_view,
    tensor_outputs,
)


@dataclass
class ModelGraph:
    """A model as a graph function, with the constants its trailing arguments are bound to."""

    module: ModuleOp
    input_names: list[str]
    constants: dict[str, torch.Tensor] = field(default_factory=dict)
    output_dtypes: list[torch.dtype] = field(default_factory=list)
    out_spec: TreeSpec | None = None  # the pytree spec that rebuilds the module's return value
    #: where the graph's ops run: emmy's kernels, torch (the fallbacks), compile time
    coverage: Coverage = field(default_factory=Coverage)
    #: the returned values that view an input or a constant, by their place in the return
    aliases: dict[int, Alias] = field(default_factory=dict)
    #: the pytree spec of the call's (args, kwargs) that the export saw, keyword arguments'
    #: order included (None for a graph handed over by dynamo)
    in_spec: TreeSpec | None = None
    #: the random masks the program takes after the user's inputs (dropout's), drawn anew
    #: for each call
    random_masks: list[RandomMask] = field(default_factory=list)


@dataclass(frozen=True)
class Alias:
    """A returned value that views an input (`input`, its position, with these sizes,
    strides and offset) or is a weight or a view of one (`weight`, that view): returned as
    a torch view, as eager returns it, with no kernel. A returned size (`number`: a graph
    made shape-dynamic returns its batch size, specialised here) is returned as that int, and
    a returned None (`nothing`: a backward graph's gradient of an input that needs none) as
    None."""

    input: int | None
    weight: torch.Tensor | None = None
    shape: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    offset: int = 0
    number: int | None = None
    nothing: bool = False

    def of(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor | int | None:
        if self.nothing:
            return None
        if self.number is not None:
            return self.number
        if self.weight is not None:
            return self.weight
        assert self.input is not None, "an alias of no number and no weight views an input"
        base = inputs[self.input]
        if not base.is_contiguous():
            # the view was followed over a contiguous tensor, as the program reads its inputs
            base = base.contiguous()
        return base.as_strided(self.shape, self.stride, base.storage_offset() + self.offset)


#: the dtype a host scalar is read in (see is_host_scalar)
HOST_SCALAR_DTYPE = torch.float32


def is_host_scalar(value: object) -> bool:
    """A 0-d float64 tensor: a Python float dynamo leaves unspecialised (dynamic=True, the
    graph resuming after an `.item()`), or a value computed from one. emmy has no float64
    kernels: it holds one as a float32 0-d tensor, as torch computes with it beside
    float32 tensors; an input's value is read at each call, so another value compiles
    nothing again."""
    return isinstance(value, torch.Tensor) and value.dim() == 0 and value.dtype == torch.float64


def _held(tensor: torch.Tensor) -> torch.Tensor:
    """A folded value as emmy holds it: a host scalar in float32."""
    return tensor.to(HOST_SCALAR_DTYPE) if is_host_scalar(tensor) else tensor


def with_host_scalars_in_float32(fx_graph: fx.Graph) -> fx.Graph:
    """The graph with every host scalar's example value float32 (its nodes' metadata: the
    graph runs as before where torch runs it)."""
    for node in fx_graph.nodes:
        if is_host_scalar(node.meta.get("val")):
            node.meta["val"] = torch.empty((), dtype=HOST_SCALAR_DTYPE)
    return fx_graph


class Converter(FunctionBuilder):
    """Converts an fx graph of ATen ops: its placeholders are the user's inputs, except
    those `constants` names (placeholder name → state name and value). An op no entry
    converts runs through torch (`fallback.call`), or is an error with `fallback` False."""

    def __init__(
        self,
        fx_graph: fx.Graph,
        constants: dict[str, tuple[str, torch.Tensor]],
        out_spec: TreeSpec | None = None,
        fallback: bool = True,
        mutations: dict[int, int] | None = None,
    ) -> None:
        super().__init__(fx_graph)
        #: returned values that are mutated inputs' new values: place → the input's place
        self.mutations = mutations or {}
        self.fallback = fallback
        self.coverage = Coverage()
        self.placeholder_constants = constants
        self.out_spec = out_spec
        self.input_names: list[str] = []
        self.output_dtypes: list[torch.dtype] = []
        self.aliases: dict[int, Alias] = {}

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
                    arg = self.new_arg(self.type_of(example))
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
            [*self.input_names, *(mask.name for mask in self.random_masks)],
            self.constants,
            self.output_dtypes,
            self.out_spec,
            self.coverage,
            self.aliases,
            random_masks=self.random_masks,
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
        if arg is None:
            return Alias(None, nothing=True)
        value = self.values.get(arg) if isinstance(arg, fx.Node) else None
        if isinstance(value, int):
            return Alias(None, number=value)
        if isinstance(value, Constant):
            return Alias(None, value.tensor.detach())
        if not isinstance(value, View):
            return None
        base = value.base
        while isinstance(base.owner, graph.ReshapeOp):  # the same elements, in order
            base = SSAValue.get(base.owner.input, type=TensorType)
        if base not in self.block.args:
            return None
        meta, where = value.meta, self.block.args.index(base)
        if where < len(self.input_names):
            return Alias(
                where, None, tuple(meta.shape), tuple(meta.stride()), int(meta.storage_offset())
            )
        weight = self.known(View(base, meta))  # a view of the weight's own tensor
        return Alias(None, weight) if isinstance(weight, torch.Tensor) else None

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
        if support and _complex(node):
            # no kernel computes complex numbers: torch does (the rotary pattern is real
            # arithmetic on pairs by then, emmy.frontend.complex)
            support = Support(COMPLEX_REASON)
        reason = support.reason
        if reason is None:
            entry = ATEN.entry_for(node)
            assert entry is not None, "a node is supported by its entry"
            last = self.block.last_op
            try:
                value = entry.handler(self, node)
            except EmmyError as error:
                if not self.fallback or not isinstance(error, ConversionError):
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
        while (op := self.block.last_op) is not None and op is not last:
            self.block.erase_op(op)

    def fold(self, node: fx.Node) -> object:
        """The node's value as constants, where every call would compute the same: an
        empty result, or an op of constants and sizes alone (arange, full, a mask of
        shapes); None otherwise."""
        target = node.target
        if not foldable(node) or not isinstance(target, torch._ops.OpOverload):
            return None
        viewed = [self.values.get(a) for a in node.args if isinstance(a, fx.Node)]
        if returns_view(node) and any(isinstance(value, View) for value in viewed):
            return None  # a view of a weight (or an input) is read in place
        example = node.meta["val"]
        if all(t.numel() == 0 for t in tensor_outputs(example)):
            value = map_leaves(
                example, lambda t: torch.empty(t.shape, dtype=t.dtype) if _is_tensor(t) else t
            )
        else:
            known = map_nodes((node.args, node.kwargs), lambda n: self.known(self.values[n]))
            if any(item is UNKNOWN for item in _leaves(known)):
                return None
            with torch.no_grad():
                value = target(*known[0], **known[1])
        return map_leaves(
            value, lambda t: Constant(f"folded.{node.name}", _held(t)) if _is_tensor(t) else t
        )

    def reinterpret(self, node: fx.Node) -> Constant | None:
        """`view_as_real` or `view_as_complex` of a constant (a rotary embedding's complex
        frequencies, emmy.frontend.complex): its elements read as the other dtype, at
        compile time; None where the tensor is known only when the model runs."""
        tensor = self.known(self.value_of(node.args[0]))
        if not isinstance(tensor, torch.Tensor):
            return None
        return Constant(f"{node.name}.value", op_overload(node)(tensor.contiguous()).clone())

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
                int(meta.storage_offset()),
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
        return map_leaves(
            example, lambda t: self.result(next(results), t) if _is_tensor(t) else None
        )


def _is_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor)


def _leaves(value: object) -> list:
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    if isinstance(value, dict):
        return _leaves(list(value.values()))
    return [value]


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


def _output_dtype(node: object) -> torch.dtype:
    """A returned value's dtype; a returned size's is int64 (an alias: no kernel gives it)."""
    value = node.meta["val"] if isinstance(node, fx.Node) else None
    return value.dtype if isinstance(value, torch.Tensor) else torch.int64
