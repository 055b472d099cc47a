"""The graph function a conversion builds, and the values of the fx nodes it has converted
so far (`FunctionBuilder`): what each handler of emmy.frontend.aten reads its operands from
and inserts its ops into.

Views (`view`, `transpose`, `permute`, `slice`, `expand`, ...) move no data: each is
followed as a strided view of the contiguous tensor it came from, computed by applying the
op to a meta tensor. A consumer that needs a contiguous tensor reads the view in place
when its elements are in order (`graph.reshape`) and through a copy otherwise
(`graph.as_strided`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import fx
from torch.fx.node import map_aggregate, map_arg
from xdsl.builder import Builder
from xdsl.dialects.builtin import TensorType, i8
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import VerifyException

from emmy.base import dtypes
from emmy.base.errors import ConversionError, EmmyError
from emmy.dialects import graph
from emmy.families.chains import broadcast_kind
from emmy.families.permute import collapse_dims
from emmy.frontend.complex import real_pairs

_FLOATS = [str(dtypes.torch_dtype(name)).removeprefix("torch.") for name in dtypes.FLOAT_NAMES]
#: the storage types a model may have, as torch spells them: "float32, float16 or bfloat16"
MODEL_DTYPES_TEXT = f"{', '.join(_FLOATS[:-1])} or {_FLOATS[-1]}"


def tensor_type(tensor: torch.Tensor) -> TensorType:
    name = dtypes.torch_dtype_name(tensor.dtype)
    if name is None or not dtypes.is_float(name):
        raise EmmyError(f"dtype {tensor.dtype} is not supported (use {MODEL_DTYPES_TEXT})")
    return TensorType(dtypes.xdsl_type(name), list(tensor.shape))


@dataclass
class View:
    """A tensor as a strided view of a contiguous graph value: `meta` is a meta tensor that
    views an empty tensor of `base`'s shape the way this tensor views `base`."""

    base: SSAValue[TensorType]
    meta: torch.Tensor


def unexpanded(view: View) -> View:
    """The view without the dims an `expand` broadcast (stride 0, more than one element):
    one element there."""
    meta = view.meta
    sizes = [1 if n > 1 and not st else n for n, st in zip(meta.shape, meta.stride(), strict=True)]
    if sizes == list(meta.shape):
        return view
    return View(view.base, meta.as_strided(sizes, meta.stride(), meta.storage_offset()))


@dataclass
class Constant:
    """A parameter or buffer, made an argument of the function on its first use."""

    name: str
    tensor: torch.Tensor


#: the most elements a strided copy split in two reads in its first copy, in view elements
SPLIT_READS = 4
#: the most dims a strided copy tries every order of (7! orders)
REORDERED_DIMS = 7
#: a value `FunctionBuilder.known` cannot give at compile time
UNKNOWN = object()


def contiguous_meta(typ: TensorType, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(list(typ.get_shape()), dtype=dtype, device="meta")


INTEGER_DTYPES = {torch.int64, torch.int32}


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


# fx's map_aggregate and map_arg map leaves of any type to any value, in the structure
# they were in: their stubs type both as fx Arguments, which emmy's values (a View, a
# Constant) are not


def map_leaves(value: object, fn: Callable[[Any], object]) -> Any:
    """`value` (a node's arguments or example: nodes, tensors and numbers in tuples, lists
    and dicts) with each leaf mapped by `fn`, as fx's map_aggregate maps it."""
    return map_aggregate(value, fn)  # pyright: ignore[reportArgumentType]: see above


def map_nodes(value: object, fn: Callable[[fx.Node], object]) -> Any:
    """`value` with each node mapped by `fn`, as fx's map_arg maps it."""
    return map_arg(value, fn)  # pyright: ignore[reportArgumentType]: see above


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


def _numel(shape: Sequence[int]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


@dataclass(frozen=True)
class RandomMask:
    """A dropout's mask, an input of the program drawn by torch's generator at each call
    as eager draws it (`empty_like(x).bernoulli_(keep)`: the same numbers in the same
    order, so a compiled step drops what eager drops)."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    keep: float

    def draw(self, device: torch.device | str = "cpu") -> torch.Tensor:
        return torch.empty(self.shape, dtype=self.dtype, device=device).bernoulli_(self.keep)


class FunctionBuilder:
    """The graph function a conversion builds and the values of the fx nodes it has
    converted (`values`): a handler reads its operands there, as contiguous graph values
    (`operand`) or as views, and appends its ops (`insert`), each verified so that what its
    kernel cannot take names the node being converted (`node`)."""

    def __init__(self, fx_graph: fx.Graph) -> None:
        # a get_attr's tensor is kept on its node, which a rewritten copy keeps
        bind_attributes(fx_graph)
        self.fx_graph = real_pairs(fx_graph)
        self.block = Block()
        self.builder = Builder(InsertPoint.at_end(self.block))
        self.values: dict[fx.Node, object] = {}
        self.constants: dict[str, torch.Tensor] = {}
        self.constant_args: dict[str, SSAValue[TensorType]] = {}
        self.constant_names: dict[SSAValue, str] = {}  # the other way round, for known()
        self.node: fx.Node | None = None
        #: inference batch norms folded into the convolution before them: their value
        self.folded_norms: dict[fx.Node, View] = {}
        #: the random masks the function takes after the user's inputs (dropout's)
        self.random_masks: list[RandomMask] = []

    # -- values ------------------------------------------------------------------------
    def error(self, message: str) -> ConversionError:
        node = self.node
        where = f" (node {node.name}{_where(node)})" if node is not None else ""
        return ConversionError(f"{message}{where}", message)

    def constant_arg(self, name: str, tensor: torch.Tensor) -> SSAValue[TensorType]:
        if name not in self.constant_args:
            self.constant_args[name] = self.new_arg(self.type_of(tensor))
            self.constant_names[self.constant_args[name]] = name
            self.constants[name] = tensor.detach().contiguous()
        return self.constant_args[name]

    def new_arg(self, typ: TensorType) -> SSAValue[TensorType]:
        """A new last argument of the function."""
        arg = self.block.insert_arg(typ, len(self.block.args))
        return SSAValue.get(arg, type=TensorType)

    def random_mask(self, name: str, like: torch.Tensor, keep: float) -> SSAValue[TensorType]:
        """A new input after the user's and the masks before it (the constants are the
        function's last arguments) that each call fills with a random mask of `like`."""
        mask = RandomMask(name, tuple(like.shape), like.dtype, keep)
        typ = self.type_of(torch.empty(mask.shape, dtype=mask.dtype, device="meta"))
        arg = self.block.insert_arg(typ, len(self.block.args) - len(self.constant_args))
        self.random_masks.append(mask)
        return SSAValue.get(arg, type=TensorType)

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

    def value_of(self, arg: object) -> object:
        """The value of a node argument (a tensor's View or Constant, a size the graph
        computed, a tuple of them)."""
        if not isinstance(arg, fx.Node):
            raise self.error(f"expected a tensor, got {arg!r}")
        return self.values[arg]

    def view_of(self, arg: object) -> View:
        """A tensor argument as a view."""
        return self.view(self.value_of(arg))

    def operand(self, arg: object) -> SSAValue[TensorType]:
        """A contiguous graph value for a tensor argument."""
        return self.contiguous(self.view_of(arg))

    def contiguous(self, view: View) -> SSAValue[TensorType]:
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
        return self.insert(graph.AsStridedOp(base, typ, meta.stride(), int(meta.storage_offset())))

    def split_copy(self, view: View) -> SSAValue[TensorType]:
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

    def reordered_copy(self, view: View) -> SSAValue[TensorType] | None:
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

    def runs_copy(self, view: View) -> SSAValue[TensorType] | None:
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

    def expanded_copy(self, view: View, broadcast: list[int]) -> SSAValue[TensorType]:
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

    def insert(self, op: Operation) -> SSAValue[TensorType]:
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
        # every graph and fallback op gives tensors, as verify checked
        return SSAValue.get(op.results[0], type=TensorType)

    def result(self, value: SSAValue[TensorType], like: torch.Tensor) -> View:
        return View(value, contiguous_meta(value.type, like.dtype))

    def scalar(self, value: float, like: SSAValue[TensorType]) -> SSAValue[TensorType]:
        return self.insert(graph.ConstantOp(float(value), like.type.element_type))

    def unexpanded_operands(self, args: Sequence[object], shape: Sequence[int]) -> bool:
        """Whether the tensors among a pointwise op's `args`, each without the dims an
        `expand` broadcast (stride 0), still broadcast to the op's `shape`: then each is
        read as its smaller self (a loss's gradient, expanded from one element, is read as
        a scalar), not copied out to its expanded shape first."""
        shapes = []
        for arg in args:
            value = self.values[arg] if isinstance(arg, fx.Node) else arg
            if isinstance(value, (View, Constant)):
                shapes.append(tuple(unexpanded(self.view(value)).meta.shape))
        merged: tuple[int, ...] | None = ()
        for operand in shapes:
            merged = graph.broadcast_shapes(merged, operand) if merged is not None else None
        return merged == tuple(shape)

    def tensor_or_scalar(
        self, arg: object, element: Attribute, shape: Sequence[int], unexpand: bool = False
    ) -> SSAValue[TensorType]:
        """An operand of a pointwise op whose result has `shape`, in the dtype `element`:
        a number as a constant, a tensor read in place where its broadcast is one a kernel
        reads (else expanded by a copy), converted where its dtype is another; with
        `unexpand` (see unexpanded_operands), a tensor an `expand` made is read unexpanded."""
        value = self.values[arg] if isinstance(arg, fx.Node) else arg
        if isinstance(value, (bool, int, float)):  # a number, or a size the graph computed
            return self.insert(graph.ConstantOp(value, element))
        view = unexpanded(self.view(value)) if unexpand else self.view(value)
        if broadcast_kind(tuple(view.meta.shape), tuple(shape), middle=True) is None:
            # a broadcast no elementwise kernel reads in place: expanded by a copy
            view = View(view.base, view.meta.expand(tuple(shape)))
        read = self.contiguous(view)
        if read.type.element_type == element:
            return read
        return self.insert(
            graph.elementwise("convert", [read], TensorType(element, read.type.get_shape()))
        )

    def over_last_dim(
        self,
        node: fx.Node,
        dim: int,
        build: Callable[..., SSAValue[TensorType]],
        operands: int = 1,
    ) -> View:
        """Applies a last-dim op to dim `dim` of the node's first `operands` arguments (of
        one shape): a transposed copy of each goes in, and the result is viewed back (dims
        of size 1 cost no copy)."""
        sources = [self.view_of(arg) for arg in node.args[:operands]]
        rank = sources[0].meta.dim()
        dim %= rank
        moved = [View(s.base, s.meta.transpose(dim, rank - 1)) for s in sources]
        value = build(*(self.contiguous(view) for view in moved))
        result = self.result(value, node.meta["val"])
        if dim == rank - 1 or len(value.type.get_shape()) != rank:
            return result
        return View(result.base, result.meta.transpose(dim, rank - 1))
