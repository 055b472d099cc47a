"""A host op offered as the first option of a choice: what offer-paths makes of each op it
offers alternatives to.

    %c = kernel.call @matmul_0(%a, %b) : ...
  → (the choice's site and its other options given)
    %c = fork.alternatives @matmul_path_1 ["kernel", "vendor"] {
      %c1 = kernel.call @matmul_0(%a, %b) : ...
      fork.yield %c1 : ...
    } { ... } : ...
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.ir import Block, Operation, Region
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import InsertPoint

from emmy.dialects import fork


def offer_choice(
    rewriter: PatternRewriter,
    op: Operation,
    site: str,
    options: Sequence[str],
    other_options: Sequence[Region],
) -> fork.AlternativesOp:
    """Puts in `op`'s place a choice of the site `site` whose first option is `op` itself
    (moved, not copied: its results keep their names) and whose next ones are given."""
    choice = fork.AlternativesOp(
        site, options, [Region(Block()), *other_options], [r.type for r in op.results]
    )
    rewriter.insert(choice, InsertPoint.before(op))
    for result, output in zip(op.results, choice.outputs, strict=True):
        rewriter.replace_all_uses_with(result, output)
    op.detach()
    rewriter.insert(
        [op, fork.YieldOp(list(op.results))], InsertPoint.at_end(choice.branches[0].block)
    )
    return choice


def inside_choice(op: Operation) -> bool:
    """Whether `op` is in an option of a choice (where the paths passes leave it alone)."""
    parent = op.parent_op()
    while parent is not None:
        if isinstance(parent, fork.AlternativesOp):
            return True
        parent = parent.parent_op()
    return False
