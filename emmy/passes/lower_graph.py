"""lower-sites: turns each `graph.fused` and each graph op that fuses with nothing into a
site of the library family that implements it and a call to that site.

The family is the registry's (emmy.families): the one whose `ops` hold the op (inside a
`graph.fused`, its matmul or row op, else the elementwise chain), and its `site` builds the
problem key. Sites with the same (family, canonical key) are one site: the layers of a model
share their kernels. Every site is instantiated with its forks unresolved.

    %y = graph.fused(%a, %b) {
    ^bb0(%a1: tensor<64x512xf32>, %b1: tensor<512xf32>):
      %s = graph.add %a1, %b1 : tensor<64x512xf32>, tensor<512xf32> -> tensor<64x512xf32>
      %g = graph.gelu %s : tensor<64x512xf32> -> tensor<64x512xf32>
      graph.yield %g : tensor<64x512xf32>
    } : (tensor<64x512xf32>, tensor<512xf32>) -> tensor<64x512xf32>
  →
    fork.site @elementwise_0 "elementwise" "n=32768,cols=512,T=f32,inputs=full/row,fn=gelu((in0 + in1))" {...}
    %y = kernel.call @elementwise_0(%a, %b) : (...) -> tensor<64x512xf32>

A site whose tensors (inputs or outputs) include one of 2^31 elements or more indexes in
64 bits: its key gains `index=i64` (no other key changes), and a family whose kernel cannot
is a one-line error naming the site, the family and the tensor.

`graph.reshape` stays: it moves no data, and the host plan reads it as another name for
its input. `lower-graph` is fuse-graph then lower-sites, as one pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
)

from emmy.base.errors import EmmyError, NarrowIndexError
from emmy.base.problem_key import INDEX_NAME, NARROW_INDEX_LIMIT, WIDE_INDEX
from emmy.dialects import fork, graph, kernel
from emmy.dsl.keys import problem_key
from emmy.dsl.library import declaration
from emmy.families.chains import is_elementwise
from emmy.families.family import Fusion, HostCallFamily, Site
from emmy.families.registry import FAMILIES, implementing
from emmy.passes.fuse_graph import FuseGraph, erase_unused_constants, rewrite_bottom_up
from emmy.passes.site_table import SiteTable
from emmy.sites.lower import instantiate

# emmy.passes.pipeline reads these here
__all__ = ["LowerGraph", "LowerSites"]

#: graph ops no site stands for: views, and what a `graph.fused` is made of
UNLOWERED = (graph.ReshapeOp, graph.ConstantOp, graph.YieldOp)


def site_call(
    sites: SiteTable, rewriter: PatternRewriter, op: Operation, site: Site
) -> kernel.CallOp:
    """A call of the site (made before the function the first time it is met) on its
    inputs, with `op`'s result types."""
    big = _first_wide_tensor(site, op)
    key = site.key if big is None else {**site.key, INDEX_NAME: WIDE_INDEX}
    entry = FAMILIES.get(site.family)
    if isinstance(entry, HostCallFamily):  # no kernel
        name = sites.host_call_site(rewriter, site.family, entry.host_key(key), op)
        return kernel.CallOp(name, site.inputs, [r.type for r in op.results])
    decl = declaration(site.family)

    def build(name: str) -> fork.SiteOp:
        try:
            return instantiate(decl, key, name)
        except NarrowIndexError as error:
            assert big is not None, "only a 64-bit site refuses its index type"
            where, number, typ = big
            raise EmmyError(
                f"site {name} ({op.name}): family {site.family} cannot index 64-bit "
                f"({error}), and its {where} {number} ({typ}) has {_elements(typ)} "
                "elements, 2^31 or more"
            ) from None

    name = sites.site(rewriter, site.family, problem_key(decl, key), build, op)
    return kernel.CallOp(name, site.inputs, [r.type for r in op.results])


def _first_wide_tensor(site: Site, op: Operation) -> tuple[str, int, Attribute] | None:
    """The first of the site's inputs and outputs with 2^31 elements or more, as (input or
    output, its position, its type), or None: the site indexes in 32 bits."""
    tensors = [("input", i, v.type) for i, v in enumerate(site.inputs)]
    tensors += [("output", i, r.type) for i, r in enumerate(op.results)]
    return next((t for t in tensors if _elements(t[2]) >= NARROW_INDEX_LIMIT), None)


def _elements(typ: Attribute) -> int:
    return math.prod(typ.get_shape()) if isinstance(typ, TensorType) else 1


@dataclass
class LowerOp(RewritePattern):
    """A graph op that fuses with nothing: its family's site with no chains."""

    sites: SiteTable

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if op.dialect_name() != "graph" or isinstance(op, (*UNLOWERED, graph.FusedOp)):
            return
        if isinstance(op.parent_op(), graph.FusedOp):
            return
        if is_elementwise(op):
            raise EmmyError(f"lower-sites: {op.name} is not in a graph.fused: run fuse-graph first")
        sites = implementing(op)
        if sites is None:
            return  # reported after the walk, with every other op no family implements
        rewriter.replace(op, site_call(self.sites, rewriter, op, sites.site(op, Fusion())))


@dataclass
class LowerFused(RewritePattern):
    """A `graph.fused`: the site of its matmul or row op with the chains around it, or of
    its elementwise chain, called on the fused op's inputs."""

    sites: SiteTable

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, graph.FusedOp):
            return
        yielded = op.block.last_op
        assert isinstance(yielded, graph.YieldOp)
        root = yielded.values[0].owner
        assert isinstance(root, Operation)
        anchor = next(
            (o for o in op.block.ops if not is_elementwise(o) and not isinstance(o, graph.YieldOp)),
            None,
        )
        if anchor is None:  # an elementwise chain alone
            anchor, fusion = root, Fusion()
        else:
            x = anchor.operands[0].owner
            fusion = Fusion(
                prologue=x if isinstance(x, graph.ElementwiseOp) else None,
                epilogue=root if root is not anchor else None,
                # the outputs past the anchor's own: the prologue's x, which it stores
                stores_input=len(op.outputs) > len(anchor.results),
            )
        sites = implementing(anchor)
        assert sites is not None, "fuse-graph fuses family ops"
        site = sites.site(anchor, fusion)
        outer = Site(site.family, site.key, [self.outer(op, value) for value in site.inputs])
        rewriter.replace(op, site_call(self.sites, rewriter, op, outer))

    @staticmethod
    def outer(fused: graph.FusedOp, value: SSAValue) -> SSAValue:
        """The fused op's input a value of its body stands for."""
        assert isinstance(value, BlockArgument) and value.block is fused.block
        return fused.inputs[value.index]


@dataclass(frozen=True)
class LowerSites(ModulePass):
    name = "lower-sites"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        sites = SiteTable()  # lower-sites makes the module's first sites
        rewrite_bottom_up(op, [LowerFused(sites), LowerOp(sites)])
        erase_unused_constants(op)
        # graph ops live in the host functions: the sites' kernels need no walk
        functions = [f for f in op.ops if isinstance(f, func.FuncOp)]
        for leftover in [o for f in functions for o in f.walk()]:
            if leftover.dialect_name() == "graph" and not isinstance(leftover, graph.ReshapeOp):
                raise EmmyError(f"lower-graph: no kernel family implements {leftover.name}")


@dataclass(frozen=True)
class LowerGraph(ModulePass):
    """fuse-graph then lower-sites, as `emmy-opt -p lower-graph` has always run them."""

    name = "lower-graph"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        FuseGraph().apply(ctx, op)
        LowerSites().apply(ctx, op)
