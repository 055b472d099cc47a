"""lower-graph: turns emmy.graph ops into sites of library kernels and calls to them.

Each graph op becomes a site of the library family that implements it (softmax, matmul,
the norms, reductions, embedding, attention, rope, strided copies). A chain of elementwise
ops whose intermediate values have no other use becomes one `elementwise` site, its chain
written into the problem key (`fn`), each input read as full, row-broadcast,
column-broadcast or scalar; a chain that alone reads a matmul's product is fused into that
matmul as its epilogue. A softmax or a norm takes the chain that computes its input as its
prologue (written out too where the value has other uses, as the residual stream of a
transformer has) unless a matmul took the chain first, and the chain that alone reads its
result as its epilogue. `graph.reshape` stays: it moves no data, and the host plan reads it
as another name for its input. Every site is instantiated with its forks unresolved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from emmy.dialects import graph, kernel
from emmy.dsl.library import canonical_key, family, instantiate
from emmy.dtypes import dtype_name, is_half
from emmy.errors import EmmyError

ELEMENTWISE = (graph.UnaryOp, graph.BinaryOp, graph.ConstantOp)
BINARY_SYMBOLS = {graph.AddOp: "+", graph.SubOp: "-", graph.MulOp: "*", graph.DivOp: "/"}
UNARY_FUNCTIONS = {
    graph.ExpOp: "exp",
    graph.TanhOp: "tanh",
    graph.SiluOp: "silu",
    graph.ReluOp: "relu",
    graph.SigmoidOp: "sigmoid",
}


def _shape(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def _strip_leading_ones(shape: tuple[int, ...]) -> tuple[int, ...]:
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def broadcast_kind(input_shape: tuple[int, ...], output_shape: tuple[int, ...]) -> str | None:
    """How an input of an elementwise site is read at a flat output index, if it can be."""
    if math.prod(input_shape) == 1:
        return "scalar"
    stripped = _strip_leading_ones(input_shape)
    if stripped == _strip_leading_ones(output_shape):
        return "full"
    if stripped == output_shape[-1:]:
        return "row"
    if input_shape[-1:] == (1,) and _strip_leading_ones(stripped[:-1]) == _strip_leading_ones(
        output_shape[:-1]
    ):
        return "col"
    return None


@dataclass
class ElementwiseGroup:
    root: Operation
    ops: list[Operation]
    inputs: list[SSAValue]
    text: str


def _is_elementwise(op: Operation | None) -> bool:
    return isinstance(op, ELEMENTWISE)


def collect_group(
    root: Operation, accumulator: SSAValue | None = None, numbered: Sequence[SSAValue] = ()
) -> ElementwiseGroup:
    """The root and the producers it alone uses, with the chain as kernel-language text;
    `accumulator` (the result of the kernel the chain is fused into) is called `acc`, and
    inputs are numbered after those of `numbered` (a chain the same kernel reads too)."""
    ops: list[Operation] = []
    inputs: list[SSAValue] = list(numbered)

    def text(value: SSAValue) -> str:
        if value is accumulator:
            return "acc"
        producer = value.owner
        if isinstance(producer, graph.ConstantOp):
            return repr(float(producer.value.value.data))
        inner = _is_elementwise(producer) and producer is not root and value.has_one_use()
        if producer is root or inner:
            ops.append(producer)
            return expression(producer)
        if value not in inputs:
            inputs.append(value)
        return f"in{inputs.index(value)}"

    def expression(op: Operation) -> str:
        if isinstance(op, graph.BinaryOp):
            lhs, rhs = text(op.lhs), text(op.rhs)
            return f"({lhs} {BINARY_SYMBOLS[type(op)]} {rhs})"
        operand = text(op.input)
        if isinstance(op, graph.NegOp):
            return f"(-{operand})"
        if isinstance(op, graph.GeluOp):
            tanh = op.approximate is not None and op.approximate.data == "tanh"
            return f"{'gelu_tanh' if tanh else 'gelu'}({operand})"
        return f"{UNARY_FUNCTIONS[type(op)]}({operand})"

    chain = text(root.results[0])
    return ElementwiseGroup(root, ops, inputs, chain)


#: row kernels that take the chain before them as a prologue and the chain after as an
#: epilogue, by family
ROW_FAMILIES = {
    graph.SoftmaxOp: "softmax",
    graph.LayerNormOp: "layer_norm",
    graph.RmsNormOp: "rms_norm",
}
ROW_OPS = tuple(ROW_FAMILIES)


def fusable_product(
    group: ElementwiseGroup, producers: tuple[type[Operation], ...] = (graph.MatmulOp,)
) -> SSAValue | None:
    """A result of a matmul (or of `producers`) the group alone reads, in full: its chain
    becomes that kernel's epilogue."""
    out_shape = _shape(group.root.results[0])
    for value in group.inputs:
        producer = value.owner
        if isinstance(producer, producers) and value.has_one_use():
            if _shape(value) == out_shape:
                return value
    return None


def broadcast_kinds(inputs: Sequence[SSAValue], out_shape: tuple[int, ...]) -> list[str] | None:
    kinds = [broadcast_kind(_shape(value), out_shape) for value in inputs]
    return None if None in kinds else kinds


@dataclass(frozen=True)
class Lowered:
    """What replaces a graph op: a site of `family` at `key`, called on `inputs`, standing
    for the graph ops `replaced`."""

    family: str
    key: dict[str, int | str]
    inputs: list[SSAValue]
    replaced: list[Operation]
    #: values of the replaced ops that the site also writes, after the main result
    also: tuple[SSAValue, ...] = ()


@dataclass(frozen=True)
class LowerGraph(ModulePass):
    name = "lower-graph"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        # one site per (family, key): the layers of a model share their kernels
        sites: dict[tuple[str, str], str] = {}
        for function in [f for f in op.ops if isinstance(f, func.FuncOp)]:
            for graph_op in reversed(list(function.body.walk())):
                if graph_op.parent is None:
                    continue  # already folded into a group
                lowered = self.lower(graph_op)
                if lowered is None:
                    continue
                decl = family(lowered.family)
                identity = (lowered.family, canonical_key(decl, lowered.key))
                name = sites.get(identity)
                if name is None:
                    name = sites[identity] = f"{lowered.family}_{len(sites)}"
                    site = instantiate(decl, lowered.key, name)
                    op.body.block.insert_op_before(site, function)
                results = [graph_op.results[0], *lowered.also]
                call = kernel.CallOp(name, lowered.inputs, [r.type for r in results])
                block = graph_op.parent_block()
                assert block is not None
                block.insert_op_before(call, graph_op)
                for result, output in zip(results, call.outputs, strict=True):
                    result.replace_all_uses_with(output)
                for dead in lowered.replaced:
                    dead.detach()
                    dead.erase(safe_erase=False)
        for constant in [c for c in op.walk() if isinstance(c, graph.ConstantOp)]:
            if not constant.result.uses:
                constant.detach()
                constant.erase()
        for leftover in op.walk():
            if leftover.dialect_name() == "graph" and not isinstance(leftover, graph.ReshapeOp):
                raise EmmyError(f"lower-graph: no kernel family implements {leftover.name}")

    def lower(self, op: Operation) -> Lowered | None:
        if self.is_group_root(op):
            return self.elementwise(collect_group(op))
        if isinstance(op, ROW_OPS):
            return row_site(op)
        builder = SITES.get(type(op))
        if builder is None:
            return None
        family_name, key = builder(op)
        return Lowered(family_name, key, kernel_inputs(op), [op])

    @staticmethod
    def is_group_root(op: Operation) -> bool:
        """An elementwise op whose value leaves the chain: not a constant (inlined) and not
        the single use of another elementwise op."""
        if not _is_elementwise(op) or isinstance(op, graph.ConstantOp):
            return False
        return not _is_elementwise(op.results[0].get_user_of_unique_use())

    @staticmethod
    def elementwise(group: ElementwiseGroup) -> Lowered:
        rows = fusable_product(group, ROW_OPS)
        if rows is not None and broadcast_kinds(group.inputs, _shape(rows)) is not None:
            return row_site(rows.owner, group)
        product = fusable_product(group)
        if product is not None:
            group = collect_group(group.root, product)
        out_shape = _shape(group.root.results[0])
        kinds = []
        for value in group.inputs:
            kind = broadcast_kind(_shape(value), out_shape)
            if kind is None:
                raise EmmyError(
                    f"elementwise input of shape {list(_shape(value))} broadcast to {list(out_shape)}: "
                    "only full, row, column and scalar broadcasts are supported"
                )
            kinds.append(kind)
        if product is not None:
            matmul = product.owner
            assert isinstance(matmul, graph.MatmulOp)
            family_name, key = matmul_site(matmul, epilogue=group.text, inputs="/".join(kinds))
            inputs = [matmul.lhs, matmul.rhs, *group.inputs]
            return Lowered(family_name, key, inputs, [*group.ops, matmul])
        element = group.root.results[0].type.element_type
        key = {
            "n": max(1, math.prod(out_shape)),
            "cols": out_shape[-1] if out_shape else 1,
            "T": dtype_name(element),
            "inputs": "/".join(kinds),
            "fn": group.text,
        }
        return Lowered("elementwise", key, group.inputs, group.ops)


def kernel_inputs(op: Operation) -> list[SSAValue]:
    """The op's operands in the order of its family's parameters."""
    if isinstance(op, graph.EmbeddingOp):
        return [op.ids, op.table]
    return list(op.operands)


def _dtype(value: SSAValue) -> str:
    return dtype_name(value.type.element_type)


def tensor_core_product(dtype: str, k: int, n: int) -> bool:
    """Whether the tensor-core matmul takes A [m, k] · B [k, n] of this storage type (B
    stored [k, n], rows of 16 bytes)."""
    return is_half(dtype) and k % 8 == 0 and n % 8 == 0


def matmul_site(op: graph.MatmulOp, epilogue: str = "acc", inputs: str = "") -> tuple[str, dict]:
    """The tensor-core family where it applies (f16/bf16, B stored [k, n], rows of 16
    bytes), the SIMT family otherwise."""
    a, b = _shape(op.lhs), _shape(op.rhs)
    k = a[-1]
    n = b[-2] if op.transpose_b else b[-1]
    if len(b) == 2:
        batch, m, b_batch = 1, math.prod(a[:-1]), 1
    else:
        batch, m, b_batch = math.prod(a[:-2]), a[-2], math.prod(b[:-2])
    T = _dtype(op.lhs)
    common = {"batch": batch, "m": m, "n": n, "k": k, "b_batch": b_batch, "T": T}
    epilogue_key = {"epilogue": epilogue, "inputs": inputs}
    if not op.transpose_b and tensor_core_product(T, k, n):
        return "matmul_tc", {**common, **epilogue_key}
    layout = {"b_rows": b[-2], "b_cols": b[-1], "layout": "nk" if op.transpose_b else "kn"}
    return "matmul", {**common, **layout, **epilogue_key}


def row_site(op: Operation, epilogue: ElementwiseGroup | None = None) -> Lowered:
    """A softmax, LayerNorm or RMSNorm site with the chain that computes its input as its
    prologue (unless a matmul takes that chain as its epilogue) and `epilogue`'s chain
    after it."""
    x = op.operands[0]
    shape = _shape(x)
    if isinstance(op, graph.SoftmaxOp) and op.dim.value.data % len(shape) != len(shape) - 1:
        raise EmmyError(
            f"softmax over dim {op.dim.value.data} of {list(shape)}: only the last dim is supported"
        )
    prologue = None
    if LowerGraph.is_group_root(x.owner):
        candidate = collect_group(x.owner)
        fits = broadcast_kinds(candidate.inputs, shape) is not None
        if fits and fusable_product(candidate) is None:
            prologue = candidate
    if prologue and epilogue and x in collect_group(epilogue.root, op.results[0]).inputs:
        prologue = None  # the epilogue reads x from memory: the kernel cannot also write it
    inputs = prologue.inputs if prologue else [x]
    replaced: list[Operation] = [op, *(prologue.ops if prologue else [])]
    key: dict[str, int | str] = {"rows": math.prod(shape[:-1]), "cols": shape[-1], "T": _dtype(x)}
    if isinstance(op, graph.NormOp):
        key["eps"] = repr(float(op.eps.value.data))
    key["fn"] = prologue.text if prologue else "in0"
    if epilogue is not None:
        epilogue = collect_group(epilogue.root, op.results[0], inputs)
        inputs, replaced = epilogue.inputs, [*epilogue.ops, *replaced]
        key["epilogue"] = epilogue.text
    kinds = broadcast_kinds(inputs, shape)
    assert kinds is not None, "a prologue or epilogue that does not fit is never fused"
    key["inputs"] = "/".join(kinds)
    keeps = prologue is not None and not x.has_one_use()
    key["store"] = "yes" if keeps else "no"
    if isinstance(op, graph.SoftmaxOp) and op.causal is not None:
        key["causal"] = shape[-2]
    params = list(op.operands[1:])  # a norm's weight and bias
    return Lowered(ROW_FAMILIES[type(op)], key, [*inputs, *params], replaced, (x,) if keeps else ())


def reduce_site(op: graph.ReduceOp) -> tuple[str, dict]:
    shape = _shape(op.input)
    key = {"rows": math.prod(shape[:-1]), "cols": shape[-1], "T": _dtype(op.input)}
    return "reduce_rows", {**key, "op": op.kind.data}


def embedding_site(op: graph.EmbeddingOp) -> tuple[str, dict]:
    vocab, dim = _shape(op.table)
    tokens = math.prod(_shape(op.ids))
    key = {"tokens": tokens, "vocab": vocab, "dim": dim, "T": _dtype(op.table), "I": _dtype(op.ids)}
    return "embedding", key


def attention_site(op: graph.AttentionOp) -> tuple[str, dict]:
    batch, heads, q_len, d = _shape(op.q)
    _, kv_heads, kv_len, _ = _shape(op.k)
    key = {
        "bh": batch * heads,
        "kv_bh": batch * kv_heads,
        "q_len": q_len,
        "kv_len": kv_len,
        "d": d,
        "T": _dtype(op.q),
        "causal": "yes" if op.causal is not None else "no",
        "scale": repr(float(op.scale.value.data)),
    }
    if op.mask is not None:
        # the mask's groups of heads: per batch, or per (batch, head)
        key |= {"masked": "yes", "batch": _shape(op.mask)[0]}
        if len(_shape(op.mask)) == 3:
            key["mask_rows"] = q_len
    tensor_cores = is_half(key["T"]) and d % 16 == 0 and d <= 256
    return "attention_tc" if tensor_cores else "attention", key


def rope_site(op: graph.RopeOp) -> tuple[str, dict]:
    batch, seq, heads, dim = _shape(op.x)
    key = {"tokens": batch * seq, "seq": seq, "heads": heads, "dim": dim, "half": dim // 2}
    return "rope", {**key, "T": _dtype(op.x)}


def mask_bias_site(op: graph.MaskBiasOp) -> tuple[str, dict]:
    return "mask_bias", {"n": max(1, math.prod(_shape(op.input))), "T": _dtype(op.result)}


def as_strided_site(op: graph.AsStridedOp) -> tuple[str, dict]:
    shape = _shape(op.result)
    strides = [s.value.data for s in op.strides.data]
    dims = collapse_dims(list(shape), strides)
    if len(dims) > 4:
        raise EmmyError(
            f"a strided copy of {len(dims)} dims that do not merge: at most 4 are supported"
        )
    dims = [(1, 0)] * (4 - len(dims)) + dims
    key: dict[str, int | str] = {"size": max(1, math.prod(_shape(op.input)))}
    key |= {f"d{i}": size for i, (size, _) in enumerate(dims)}
    key |= {f"s{i}": stride for i, (_, stride) in enumerate(dims)}
    return "permute", {**key, "offset": op.offset.value.data, "T": _dtype(op.input)}


def collapse_dims(shape: list[int], strides: list[int]) -> list[tuple[int, int]]:
    """(size, stride) per dim with dims of size 1 dropped and each dim merged into the one
    before it where the pair reads as one dim."""
    dims: list[tuple[int, int]] = []
    for size, stride in zip(shape, strides, strict=True):
        if size == 1:
            continue
        if dims and dims[-1][1] == stride * size:
            dims[-1] = (dims[-1][0] * size, stride)
        else:
            dims.append((size, stride))
    return dims or [(1, 0)]


SITES = {
    graph.MatmulOp: matmul_site,
    graph.ReduceOp: reduce_site,
    graph.EmbeddingOp: embedding_site,
    graph.AttentionOp: attention_site,
    graph.RopeOp: rope_site,
    graph.MaskBiasOp: mask_bias_site,
    graph.AsStridedOp: as_strided_site,
}
