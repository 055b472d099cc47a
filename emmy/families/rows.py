"""What the row kernels (softmax, LayerNorm, RMSNorm) share: a site with the chain before
it as its prologue (`fn`) and the chain after it as its epilogue, and the check keys of
such fused rows."""

from __future__ import annotations

import math
from collections.abc import Callable

from xdsl.ir import Operation, SSAValue

from emmy.base.errors import EmmyError
from emmy.base.problem_key import format_input_kinds
from emmy.dialects import graph
from emmy.families.chains import broadcast_kinds, collect_group, dtype_of, shape_of
from emmy.families.family import Fusion, Site, SiteBuilder


def row_key(value: SSAValue) -> dict[str, int | str]:
    """The key of a row kernel over `value` [..., cols]: its rows, columns and dtype."""
    shape = shape_of(value)
    return {"rows": math.prod(shape[:-1]), "cols": shape[-1], "T": dtype_of(value)}


def row_site_of(family_name: str) -> SiteBuilder:
    def row_site(op: Operation, fusion: Fusion) -> Site:
        """A site with `fusion`'s prologue computing its x, its epilogue after it."""
        x = op.operands[0]
        shape = shape_of(x)
        if isinstance(op, graph.SoftmaxOp) and op.dim.value.data % len(shape) != len(shape) - 1:
            raise EmmyError(
                f"softmax over dim {op.dim.value.data} of {list(shape)}: only the last dim is supported"
            )
        prologue = collect_group(fusion.prologue) if fusion.prologue else None
        inputs = prologue.inputs if prologue else [x]
        key = row_key(x)
        if isinstance(op, graph.NormOp):
            key["eps"] = repr(float(op.eps.value.data))
        if isinstance(op, graph.LayerNormOp) and op.statistics:
            key["stats"] = "yes"
        key["fn"] = prologue.text if prologue else "in0"
        if fusion.epilogue is not None:
            epilogue = collect_group(fusion.epilogue, op.results[0], inputs)
            inputs = epilogue.inputs
            key["epilogue"] = epilogue.text
        kinds = broadcast_kinds(inputs, shape)
        assert kinds is not None, "a prologue or epilogue that does not fit is never fused"
        key["inputs"] = format_input_kinds(kinds)
        key["store"] = "yes" if fusion.stores_input else "no"
        if isinstance(op, graph.SoftmaxOp) and op.causal is not None:
            key["causal"] = shape[-2]
        params = list(op.operands[1:])  # a norm's weight and bias
        return Site(family_name, key, [*inputs, *params])

    return row_site


#: plain rows of the checks, (rows, cols): ragged lengths (no vector, vec 2, a single
#: column), a model's widths, and 4096, which needs a wide block for the row in registers
ROW_SHAPES = [(3, 1), (2, 7), (5, 97), (4, 130), (2, 768), (2, 1000), (1, 4096)]

#: fused row kernels: (rows, cols, kinds of the inputs, chain of x, epilogue, store x)
FUSED_ROWS = [
    (5, 96, "full/full/row", "(in0 + in1)", "gelu((acc * in2))", "yes"),
    (3, 40, "full/col", "(in0 * in1)", "(acc + in0)", "no"),
    (4, 24, "full/scalar", "(in0 - in1)", "acc", "yes"),
]


def fused_keys(dtype: str, extra: dict) -> list[dict]:
    return [
        {"rows": r, "cols": c, "T": dtype, **extra, "inputs": kinds, "fn": fn}
        | {"epilogue": epilogue, "store": store}
        for r, c, kinds, fn, epilogue, store in FUSED_ROWS
    ]


def norm_keys(dtype: str, extra: dict) -> list[dict]:
    plain = [{"rows": r, "cols": c, "T": dtype, **extra} for r, c in ROW_SHAPES]
    return plain + fused_keys(dtype, extra)


def norm_atol(key: dict) -> float:
    return 2e-7 * math.sqrt(int(key["cols"]))


def norm_check_inputs(params: int) -> Callable[[dict, str, object], list]:
    """A norm's check inputs: its row input (or its prologue's inputs) and `params`
    parameter vectors (a weight, a bias)."""

    def check_inputs(key: dict, dtype: str, generator) -> list:
        # torch stays off the compile path: only checks build inputs
        from emmy.families.tensors import row_inputs

        return row_inputs(key, dtype, generator, params)

    return check_inputs
