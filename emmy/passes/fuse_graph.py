"""fuse-graph: groups the graph ops that become one kernel into a `graph.fused`.

A chain of elementwise ops whose intermediate values have no other use is one group. A
chain that alone reads a matmul's product joins that matmul as its epilogue. A softmax or a
norm takes the chain that computes its input as its prologue (yielded too where the value
has other uses, as the residual stream of a transformer has) unless a matmul takes that
chain first, and the chain that alone reads its result as its epilogue, where the chains'
inputs are ones the kernel reads (full, row, column or scalar); a training LayerNorm's
statistics are yielded too. Which ops take which chains is their family's `fuses`
(emmy.families). Ops that fuse with nothing stay as they are; lower-sites reads each
`graph.fused` as one site.

    %x = graph.add %a, %b : ...
    %n = graph.layer_norm %x, %w, %bias {eps = 1.0e-05 : f64} : ...
    %y = graph.gelu %n : ...
    func.return %y, %x : ...                  // %x is used again: the kernel writes it too
  →
    %y, %x = graph.fused(%a, %b, %w, %bias) {
    ^bb0(%0: ..., %1: ..., %2: ..., %3: ...):
      %x1 = graph.add %0, %1 : ...
      %n = graph.layer_norm %x1, %2, %3 {eps = 1.0e-05 : f64} : ...
      %y1 = graph.gelu %n : ...
      graph.yield %y1, %x1 : ...
    } : (...) -> (...)
    func.return %y, %x : ...

Groups are found from the function's end backwards, as lower-sites numbers its sites;
constants a chain reads are copied into its body (their values are written into keys).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.rewriter import InsertPoint

from emmy.dialects import graph
from emmy.families.chains import (
    ElementwiseGroup,
    broadcast_kinds,
    collect_group,
    dtype_of,
    is_elementwise,
    of_one_float_dtype,
    shape_of,
)
from emmy.families.family import Fuses
from emmy.families.registry import fusing


def is_group_root(op: Operation | Block | None) -> bool:
    """An elementwise op whose value leaves the chain: not a constant (inlined) and not
    the single use of another elementwise op."""
    if not isinstance(op, Operation) or not is_elementwise(op) or isinstance(op, graph.ConstantOp):
        return False
    return not is_elementwise(op.results[0].get_user_of_unique_use())


def fusable_product(
    group: ElementwiseGroup, producers: tuple[type[Operation], ...]
) -> SSAValue | None:
    """A result of one of `producers` the group alone reads (once or more: gelu_new reads
    x three times), in full: the chain becomes that kernel's epilogue."""
    out_shape = shape_of(group.root.results[0])
    members = set(group.ops)
    for value in group.inputs:
        if not isinstance(value.owner, producers) or shape_of(value) != out_shape:
            continue
        if all(use.operation in members for use in value.uses):
            return value
    return None


def _in_fused(op: Operation) -> bool:
    return isinstance(op.parent_op(), graph.FusedOp)


def _program_order(ops: Sequence[Operation]) -> list[Operation]:
    """The ops with every producer before its users (in block order where they share one)."""
    blocks = {op.parent_block() for op in ops}
    if len(blocks) == 1:
        block = next(iter(blocks))
        assert block is not None
        return sorted(ops, key=block.get_operation_index)
    ordered: list[Operation] = []
    remaining = list(ops)
    while remaining:
        ready = next(
            op
            for op in remaining
            if all(v.owner not in remaining for v in op.operands if isinstance(v.owner, Operation))
        )
        ordered.append(ready)
        remaining.remove(ready)
    return ordered


def _outside_inputs(ordered: Sequence[Operation]) -> tuple[list[SSAValue], list[graph.ConstantOp]]:
    """The values `ordered` read from outside them, and the constants they copy in."""
    inside = set(ordered)
    inputs: list[SSAValue] = []
    constants: list[graph.ConstantOp] = []
    for op in ordered:
        for value in op.operands:
            producer = value.owner
            if producer in inside:
                continue
            if isinstance(producer, graph.ConstantOp) and is_elementwise(op):
                if producer not in constants:
                    constants.append(producer)
            elif value not in inputs:
                inputs.append(value)
    return inputs, constants


def _early_use(
    root: Operation, also: Sequence[SSAValue], ops: Sequence[Operation]
) -> Operation | None:
    """The first op of `root`'s block before `root` that reads one of `also` (or holds an
    op that does), other than `ops`: a `graph.fused` that yields them must come before it,
    not where `root` was. None when there is none."""
    block = root.parent_block()
    if block is None:
        return None
    found = [op for v in also if (op := _first_use(root, v, ops, block)) is not None]
    return min(found, key=block.get_operation_index, default=None)


def _first_use(
    root: Operation, value: SSAValue, ops: Sequence[Operation], block: Block
) -> Operation | None:
    if not isinstance(value.owner, Operation):
        return None
    users = {block.find_ancestor_op_in_block(use.operation) for use in value.uses}
    users.difference_update(ops)
    op = value.owner.next_op if value.owner.parent_block() is block else block.first_op
    while op is not None and op is not root:
        if op in users:
            return op
        op = op.next_op
    return None


def _defined_before(values: Sequence[SSAValue], place: Operation) -> bool:
    """Whether every one of `values` is defined before `place` (in its block or above)."""
    block = place.parent_block()
    assert block is not None
    later = set()
    op = place
    while op is not None:
        later.add(op)
        op = op.next_op
    for value in values:
        owner = value.owner
        if isinstance(owner, Operation) and block.find_ancestor_op_in_block(owner) in later:
            return False
    return True


def can_fuse(ops: Sequence[Operation], result: SSAValue, also: Sequence[SSAValue]) -> bool:
    """Whether one `graph.fused` of `ops` fits in the block: where one of `also` (values it
    yields beside `result`) is read before `result`'s op, the values the kernel reads are
    all defined before that first read."""
    root = result.owner
    assert isinstance(root, Operation)
    early = _early_use(root, also, ops)
    return early is None or _defined_before(_outside_inputs(_program_order(ops))[0], early)


def fuse(
    rewriter: PatternRewriter,
    ops: Sequence[Operation],
    result: SSAValue,
    also: Sequence[SSAValue] = (),
) -> None:
    """Replaces `ops` by a `graph.fused` yielding `result` and `also` (values of the group
    used outside it: the stored x of a row kernel, a LayerNorm's statistics), where
    `result` was computed, or before the first op that reads one of `also` where one does
    before that (can_fuse says whether the kernel's inputs are there by then)."""
    ordered = _program_order(ops)
    inputs, constants = _outside_inputs(ordered)
    block = Block(arg_types=[v.type for v in inputs])
    mapping: dict[SSAValue, SSAValue] = dict(zip(inputs, block.args, strict=True))
    for op in [*constants, *ordered]:
        copy = op.clone(mapping)
        block.add_op(copy)
        mapping.update(zip(op.results, copy.results, strict=True))
    yielded = [result, *also]
    block.add_op(graph.YieldOp([mapping[v] for v in yielded]))
    fused = graph.FusedOp(inputs, Region(block), [v.type for v in yielded])
    for value, output in zip(yielded, fused.outputs, strict=True):
        output.name_hint = value.name_hint
    root = result.owner
    assert isinstance(root, Operation)
    early = _early_use(root, also, ordered)
    if early is None:
        rewriter.insert(fused, InsertPoint.before(root))
    else:
        # one of `also` is read before `root`: the kernel that writes it comes before
        assert _defined_before(inputs, early), "fuse() where can_fuse() says no"
        rewriter.insert(fused, InsertPoint.before(early))
    for value, output in zip(yielded, fused.outputs, strict=True):
        rewriter.replace_all_uses_with(value, output)
    for op in reversed(ordered):
        rewriter.erase(op)


def fuse_row(rewriter: PatternRewriter, op: Operation, epilogue: ElementwiseGroup | None) -> bool:
    """Fuses a row kernel's op with the chain computing its x where that fits, and with
    `epilogue`; whether anything was fused. The op's other results (a LayerNorm's
    statistics) are the kernel's too."""
    x = op.operands[0]
    statistics = list(op.results[1:])
    shape = shape_of(x)
    prologue = None
    if is_group_root(x.owner):
        assert isinstance(x.owner, Operation)
        candidate = collect_group(x.owner)
        fits = broadcast_kinds(candidate.inputs, shape) is not None
        fits = fits and of_one_float_dtype(candidate, dtype_of(x))
        if fits and fusable_product(candidate, fusing(Fuses.EPILOGUE)) is None:
            prologue = candidate
    if prologue and epilogue and x in collect_group(epilogue.root, op.results[0]).inputs:
        prologue = None  # the epilogue reads x from memory: the kernel cannot also write it
    result = epilogue.root.results[0] if epilogue else op.results[0]
    if prologue is not None and not x.has_one_use():
        ops = [*prologue.ops, op, *(epilogue.ops if epilogue else [])]
        if not can_fuse(ops, result, [x, *statistics]):
            # x is read before the kernel could write it: x comes from its own kernel
            prologue = None
    if prologue is None and epilogue is None:
        return False
    ops = [*(prologue.ops if prologue else []), op, *(epilogue.ops if epilogue else [])]
    stored = [x] if prologue is not None and not x.has_one_use() else []
    if not can_fuse(ops, result, [*stored, *statistics]):
        return False  # the statistics are read before the epilogue's inputs are there
    fuse(rewriter, ops, result, [*stored, *statistics])
    return True


class FuseRowPrologue(RewritePattern):
    """A softmax or a norm with the chain that computes its x (no chain reads its result:
    a group root there would have taken it as its epilogue first)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if _in_fused(op) or not isinstance(op, fusing(Fuses.PROLOGUE_AND_EPILOGUE)):
            return
        fuse_row(rewriter, op, None)


class FuseElementwise(RewritePattern):
    """An elementwise chain, into the row kernel or the matmul that it alone reads, or as
    a kernel of its own."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if _in_fused(op) or not is_group_root(op):
            return
        group = collect_group(op)
        rows = fusable_product(group, fusing(Fuses.PROLOGUE_AND_EPILOGUE))
        if rows is not None and not of_one_float_dtype(group, dtype_of(rows)):
            rows = None  # a row kernel has one storage type
        if rows is not None and broadcast_kinds(group.inputs, shape_of(rows)) is not None:
            assert isinstance(rows.owner, Operation)
            fuse_row(rewriter, rows.owner, group)
            return
        product = fusable_product(group, fusing(Fuses.EPILOGUE))
        if product is not None and broadcast_kinds(group.inputs, shape_of(product)) is None:
            product = None  # an input read per channel: the elementwise kernel's alone
        if product is not None and of_one_float_dtype(group, dtype_of(product)):
            assert isinstance(product.owner, Operation)
            group = collect_group(op, product)
            fuse(rewriter, [product.owner, *group.ops], op.results[0])
            return
        fuse(rewriter, group.ops, op.results[0])


@dataclass(frozen=True)
class FuseGraph(ModulePass):
    name = "fuse-graph"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        rewrite_bottom_up(op, [FuseElementwise(), FuseRowPrologue()])
        erase_unused_constants(op)


def rewrite_bottom_up(module: ModuleOp, patterns: Sequence[RewritePattern]) -> None:
    """Applies `patterns` once to each op of every function, last op first: a chain is met
    at its root, before the ops it reads."""
    walker = PatternRewriteWalker(
        GreedyRewritePatternApplier(list(patterns)),
        walk_reverse=True,
        walk_regions_first=True,
        apply_recursively=False,
    )
    for function in [f for f in module.ops if isinstance(f, func.FuncOp)]:
        walker.rewrite_region(function.body)


def erase_unused_constants(module: ModuleOp) -> None:
    """Constants are inlined into the chains that read them: those no op reads any more go
    (graph constants live in the host functions, not in the sites' kernels)."""
    functions = [f for f in module.ops if isinstance(f, func.FuncOp)]
    for constant in [c for f in functions for c in f.walk() if isinstance(c, graph.ConstantOp)]:
        if not constant.result.uses:
            constant.detach()
            constant.erase()
