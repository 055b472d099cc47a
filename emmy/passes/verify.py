"""The module's verification after a pass, as MLIR's pass manager verifies it: every op's
verifier (xDSL's `verify()`), and SSA dominance, which xDSL's `verify()` does not check.

Dominance: every operand is defined before its use, in the same block or in a block that
dominates the use's (an enclosing region's block above the op that holds the use, or a
block of the same region that dominates it); a region of an op isolated from above sees
none of the values above it. emmy's regions are straight-line (one block): one walk over
the module checks them, each value met once where it is defined and once per use.

    verify_module(module)          # op verifiers and dominance; raises InvalidIR, one line
    verify_dominance(module)       # dominance alone, in one walk
"""

from __future__ import annotations

from io import StringIO

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, OpResult, Region, SSAValue
from xdsl.irdl.dominance import DominanceInfo
from xdsl.printer import Printer
from xdsl.traits import IsolatedFromAbove
from xdsl.utils.exceptions import VerifyException


class InvalidIR(Exception):
    """The module does not verify: one line saying why."""


def verify_module(module: ModuleOp, dominance: bool = True) -> None:
    """Verifies `module` in full: its ops' verifiers, then dominance unless told it is
    known (InvalidIR if either fails)."""
    try:
        module.verify()
    except (VerifyException, ValueError) as error:
        raise InvalidIR(_one_line(str(error))) from error
    if dominance:
        verify_dominance(module)


def verify_dominance(module: ModuleOp) -> None:
    """Verifies that every use in `module` is dominated by its value's definition, in one
    walk (InvalidIR if one is not): what a compile checks after every pass, at a small
    part of the op verifiers' cost."""
    bad = first_undominated_use(module)
    if bad is not None:
        value, user = bad
        raise InvalidIR(_undominated(module, value, user))


def first_undominated_use(root: Operation) -> tuple[SSAValue, Operation] | None:
    """The first (value, user) in walk order where the value does not dominate its use, or
    None when every use is dominated."""
    visible: set[SSAValue] = set()
    for region in root.regions:
        bad = _check_region(region, visible)
        if bad is not None:
            return bad
    return None


def _check_region(region: Region, visible: set[SSAValue]) -> tuple[SSAValue, Operation] | None:
    """Checks `region`, whose parent op sees the values `visible` (left as it was)."""
    blocks = list(region.blocks)
    if len(blocks) <= 1:
        for block in blocks:
            bad = _check_block(block, visible)
            if bad is not None:
                return bad
        return None
    # a CFG region (none of emmy's own): a block sees what the blocks dominating it define
    dominance = DominanceInfo(region)
    for block in blocks:
        seen = set(visible)
        for other in blocks:
            if other is not block and dominance.dominates(other, block):
                seen.update(other.args)
                seen.update(r for op in other.ops for r in op.results)
        bad = _check_block(block, seen)
        if bad is not None:
            return bad
    return None


def _check_block(block: Block, visible: set[SSAValue]) -> tuple[SSAValue, Operation] | None:
    """Checks `block`'s ops in order against `visible` and what the block defines before
    each; adds to `visible` while it walks and takes it all away again (a hot loop: a
    compile runs it after every pass, over every op)."""
    added: list[SSAValue] = [a for a in block.args if a not in visible]
    visible.update(added)
    extend = added.extend
    bad = None
    contains = visible.issuperset
    for op in block.ops:
        # the operands' tuple itself: `op.operands` wraps it in a new view per op
        operands = op._operands  # pyright: ignore[reportPrivateUsage]
        if not contains(operands):
            bad = next(v for v in operands if v not in visible), op
            break
        if op.regions:
            bad = _check_nested(op, visible)
            if bad is not None:
                break
        results = op.results
        visible.update(results)
        extend(results)
    visible.difference_update(added)
    return bad


def _check_nested(op: Operation, visible: set[SSAValue]) -> tuple[SSAValue, Operation] | None:
    isolated = _ISOLATED.get(type(op))
    if isolated is None:
        isolated = _ISOLATED[type(op)] = op.has_trait(IsolatedFromAbove)
    scope = set[SSAValue]() if isolated else visible
    for region in op.regions:
        bad = _check_region(region, scope)
        if bad is not None:
            return bad
    return None


#: per op class, whether it is isolated from above
_ISOLATED: dict[type[Operation], bool] = {}


def _one_line(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return " ".join(lines) if lines else "the module does not verify"


def _undominated(module: ModuleOp, value: SSAValue, user: Operation) -> str:
    """`value` is used by `user` where it is not defined: one line naming both as the
    printed module names them."""
    printer = Printer(stream=StringIO())
    printer.print_op(module)
    name = printer._ssa_values.get(value)  # the names the printed module gives
    shown = f"value %{name}" if name is not None else "a value"
    used = f"{shown} is used by {_describe(user)}"
    owner = value.owner
    if not isinstance(owner, Operation):
        assert isinstance(value, BlockArgument), "a value a block owns is its argument"
        return f"{used} outside the block whose argument {value.index} it is"
    block = owner.parent_block()
    if block is None:
        return f"{used}, but the op that defined it ({owner.name}) is no longer in the IR"
    # an erased value's op is out of the IR: a value of an op in a block is its result
    assert isinstance(value, OpResult)
    defined = f"result {value.index} of {_describe(owner)}"
    ancestor = block.find_ancestor_op_in_block(user)
    if ancestor is owner:
        return f"{used} inside the op that defines it ({defined})"
    if ancestor is not None and ancestor.is_before_in_block(owner):
        return f"{used} before it is defined (as {defined})"
    return f"{used} where it is not visible (it is {defined}, in another region)"


def _describe(op: Operation) -> str:
    """An op's name, its callee or site where it has one."""
    for attribute in ("site", "callee", "sym_name"):
        ref = op.properties.get(attribute) or op.attributes.get(attribute)
        if ref is not None:
            data = getattr(ref, "root_reference", ref)
            text = getattr(data, "data", None)
            if isinstance(text, str):
                return f"{op.name} @{text}"
    return op.name
