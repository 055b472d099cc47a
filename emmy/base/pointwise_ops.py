"""The pointwise ops, one entry each: the graph op (`graph.<name>`), the ATen ops it
converts, how torch promotes its operands, its spelling in an elementwise chain (a key's
`fn` or `epilogue`) and its device function (`emmy::pw_<name>` in emmy_device.cuh, which
the emulator compiles from the same header).

    softplus = POINTWISE["softplus"]
    softplus.arity                       # 3: x, beta, threshold
    softplus.spell(["in0", "1.0", "20.0"])   # "softplus(in0, 1.0, 20.0)"

The graph dialect builds its ops from this table, the frontend its handlers, the chains
their text and the kernel language their lowering. The first ops (`add` ... `gelu`) are
the ones emmy had before the table: their chains keep their spelling and their kernels
keep their inline arithmetic (`inline`), so the recipes' keys and kernels stay the same.

Operands have a role: a value (promoted with the others to one dtype, as torch's
`elementwise_dtypes` does with the op's promotion kind), a condition (a bool tensor) or a
parameter (a Python number of the op, written into the chain as a literal). A `convert`
is spelled by its result's dtype: `to_f16(in0)`, `to_bool(in1)`.

Torch is not imported here: the compile path reads this table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict, Unpack

from emmy.base import dtypes


class Promotion(StrEnum):
    """torch's ELEMENTWISE_TYPE_PROMOTION_KIND of an op, by the member's name."""

    DEFAULT = "DEFAULT"
    NO_OPMATH = "NO_OPMATH"
    INT_TO_FLOAT = "INT_TO_FLOAT"
    ALWAYS_BOOL = "ALWAYS_BOOL"
    COMPLEX_TO_FLOAT = "COMPLEX_TO_FLOAT"
    BOOL_TO_LONG = "BOOL_TO_LONG"


class Domain(StrEnum):
    """The dtypes an op computes in (its values' common dtype)."""

    FLOAT = "float"  # f32, f16, bf16
    NUMBER = "number"  # floats and integers, not bool
    INTEGRAL = "integral"  # integers and bool
    BOOL = "bool"
    ANY = "any"


class Gives(StrEnum):
    """The dtype of an op's result."""

    SAME = "same"  # the values' common dtype
    BOOL = "bool"
    CONVERTED = "converted"  # its own result type (a convert)


#: operand roles, one letter each: a value, a condition, a parameter
VALUE, CONDITION, PARAM = "v", "c", "p"


@dataclass(frozen=True)
class Aten:
    """One way torch spells an op: its ATen names, the schema arguments that become the
    op's operands (in the op's order), and the operand that `alpha` scales (add, sub)."""

    names: tuple[str, ...]
    args: tuple[str, ...]
    alpha: str | None = None


@dataclass(frozen=True)
class PointwiseOp:
    """One pointwise op. `roles` has a letter per operand (VALUE, CONDITION, PARAM);
    `symbol` is an infix (`+`) or prefix (`-`) spelling; `inline` ops lower to the kernel
    language's own arithmetic instead of a device function; `partial` names the op to use
    instead where an optional operand is None (clamp without a max is clamp_min)."""

    name: str
    roles: str
    promotion: Promotion
    domain: Domain
    gives: Gives = Gives.SAME
    aten: tuple[Aten, ...] = ()
    symbol: str | None = None
    inline: bool = False
    partial: tuple[tuple[int, str], ...] = ()

    @property
    def arity(self) -> int:
        return len(self.roles)

    @property
    def graph_name(self) -> str:
        return f"graph.{self.name}"

    def device(self, call_name: str = "") -> str:
        """The device function (in namespace emmy) that computes it, called `call_name`
        in a chain (a convert's `to_f16`)."""
        return f"pw_{call_name or self.name}"

    def spell(self, operands: Sequence[str], result_dtype: str = "") -> str:
        """The op in a chain, its operands already spelled."""
        if self.symbol is not None and self.arity == 1:
            return f"({self.symbol}{operands[0]})"
        if self.symbol is not None:
            return f"({operands[0]} {self.symbol} {operands[1]})"
        return f"{self.call_name(result_dtype)}({', '.join(operands)})"

    def call_name(self, result_dtype: str = "") -> str:
        """Its name in a chain's call: `to_<dtype>` for a convert."""
        if self.gives == Gives.CONVERTED:
            return f"to_{CHAIN_DTYPE.get(result_dtype, result_dtype)}"
        return self.name

    def takes(self, dtype: str) -> bool:
        """Whether the op computes in `dtype` (a storage name; i8 is bool)."""
        floating, boolean = dtypes.is_float(dtype), dtype == BOOL
        return {
            Domain.FLOAT: floating,
            Domain.NUMBER: dtypes.is_storage(dtype) and not boolean,
            Domain.INTEGRAL: dtypes.is_storage(dtype) and not floating,
            Domain.BOOL: boolean,
            Domain.ANY: dtypes.is_storage(dtype),
        }[self.domain]


#: bool's storage type (a mask: a byte, 0 or 1)
BOOL = "i8"
#: a storage type's name in a chain's conversion (`to_bool`)
CHAIN_DTYPE = {BOOL: "bool"}
_P, _D = Promotion, Domain


def _one(name: str, *args: str) -> Aten:
    return Aten((name,), args or ("self",))


class _Options(TypedDict, total=False):
    """The fields of a PointwiseOp its constructors leave at their defaults."""

    gives: Gives
    symbol: str | None
    inline: bool
    partial: tuple[tuple[int, str], ...]


def _unary(
    name: str, promotion: Promotion, domain: Domain, **extra: Unpack[_Options]
) -> PointwiseOp:
    return PointwiseOp(name, "v", promotion, domain, aten=(_one(f"aten.{name}.default"),), **extra)


def _binary(
    name: str, promotion: Promotion, domain: Domain, dunder: str = "", **extra: Unpack[_Options]
) -> PointwiseOp:
    """A binary op of a Tensor and a Scalar overload (also as Python's `__and__` where
    `dunder` names it: `x & y` is captured so)."""
    names = [f"aten.{n}.{o}" for n in (name, dunder) if n for o in ("Tensor", "Scalar")]
    forms = Aten(tuple(names), ("self", "other"))
    return PointwiseOp(name, "vv", promotion, domain, aten=(forms,), **extra)


def _arithmetic(name: str, symbol: str, promotion: Promotion) -> PointwiseOp:
    overloads = ("Tensor", "Scalar")
    forms = [Aten(tuple(f"aten.{name}.{o}" for o in overloads), ("self", "other"), "other")]
    if name == "sub":  # rsub(self, other) is other - alpha * self
        forms.append(Aten(tuple(f"aten.rsub.{o}" for o in overloads), ("other", "self"), "self"))
    if name == "div":  # true_divide is div's other name (dynamo's for a SymFloat's `/`)
        forms.append(Aten(tuple(f"aten.true_divide.{o}" for o in overloads), ("self", "other")))
    if name == "mul":  # square(self) is self * self
        forms.append(Aten(("aten.square.default",), ("self", "self")))
    return PointwiseOp(
        name, "vv", promotion, _D.NUMBER, aten=tuple(forms), symbol=symbol, inline=True
    )


def _compare(name: str) -> PointwiseOp:
    return _binary(name, _P.ALWAYS_BOOL, _D.ANY, gives=Gives.BOOL)


TABLE: tuple[PointwiseOp, ...] = (
    # the ops emmy had before the table: inline arithmetic, spellings unchanged
    _arithmetic("add", "+", _P.DEFAULT),
    _arithmetic("sub", "-", _P.DEFAULT),
    _arithmetic("mul", "*", _P.DEFAULT),
    _arithmetic("div", "/", _P.INT_TO_FLOAT),
    _unary("exp", _P.INT_TO_FLOAT, _D.FLOAT, inline=True),
    _unary("tanh", _P.INT_TO_FLOAT, _D.FLOAT, inline=True),
    _unary("sigmoid", _P.INT_TO_FLOAT, _D.FLOAT, inline=True),
    _unary("silu", _P.DEFAULT, _D.FLOAT, inline=True),
    _unary("relu", _P.DEFAULT, _D.NUMBER, inline=True),
    _unary("neg", _P.DEFAULT, _D.NUMBER, inline=True, symbol="-"),
    # gelu's graph op carries `approximate` (graph.GeluOp); the frontend's _gelu converts it
    PointwiseOp("gelu", "v", _P.DEFAULT, _D.FLOAT, inline=True),
    # math
    _unary("abs", _P.COMPLEX_TO_FLOAT, _D.NUMBER),
    _unary("sqrt", _P.INT_TO_FLOAT, _D.FLOAT),
    _unary("rsqrt", _P.INT_TO_FLOAT, _D.FLOAT),
    _unary("log", _P.INT_TO_FLOAT, _D.FLOAT),
    _unary("log1p", _P.INT_TO_FLOAT, _D.FLOAT),
    _unary("expm1", _P.INT_TO_FLOAT, _D.FLOAT),
    _unary("sin", _P.INT_TO_FLOAT, _D.FLOAT),
    _unary("cos", _P.INT_TO_FLOAT, _D.FLOAT),
    _unary("erf", _P.INT_TO_FLOAT, _D.FLOAT),
    _unary("reciprocal", _P.INT_TO_FLOAT, _D.FLOAT),
    _unary("sign", _P.DEFAULT, _D.NUMBER),
    _unary("floor", _P.DEFAULT, _D.NUMBER),
    _unary("ceil", _P.DEFAULT, _D.NUMBER),
    _unary("round", _P.DEFAULT, _D.NUMBER),
    _unary("trunc", _P.DEFAULT, _D.NUMBER),
    PointwiseOp(
        "pow",
        "vv",
        _P.BOOL_TO_LONG,
        _D.NUMBER,
        aten=(
            Aten(
                ("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar"),
                ("self", "exponent"),
            ),
        ),
    ),
    PointwiseOp(
        "clamp",
        "vvv",
        _P.DEFAULT,
        _D.NUMBER,
        aten=(
            Aten(("aten.clamp.default", "aten.clamp.Tensor"), ("self", "min", "max")),
            _one("aten.hardtanh.default", "self", "min_val", "max_val"),
        ),
        partial=((1, "clamp_max"), (2, "clamp_min")),
    ),
    PointwiseOp(
        "clamp_min",
        "vv",
        _P.DEFAULT,
        _D.NUMBER,
        aten=(Aten(("aten.clamp_min.default", "aten.clamp_min.Tensor"), ("self", "min")),),
    ),
    PointwiseOp(
        "clamp_max",
        "vv",
        _P.DEFAULT,
        _D.NUMBER,
        aten=(Aten(("aten.clamp_max.default", "aten.clamp_max.Tensor"), ("self", "max")),),
    ),
    # torch's `//`: the quotient rounded toward -inf (a mixture of experts' token of a pick)
    PointwiseOp(
        "floor_divide",
        "vv",
        _P.DEFAULT,
        _D.NUMBER,
        aten=(Aten(("aten.floor_divide.default", "aten.floor_divide.Scalar"), ("self", "other")),),
    ),
    PointwiseOp(
        "maximum",
        "vv",
        _P.DEFAULT,
        _D.NUMBER,
        aten=(_one("aten.maximum.default", "self", "other"),),
    ),
    PointwiseOp(
        "minimum",
        "vv",
        _P.DEFAULT,
        _D.NUMBER,
        aten=(_one("aten.minimum.default", "self", "other"),),
    ),
    # activations (their parameters are numbers of the op)
    PointwiseOp(
        "softplus",
        "vpp",
        _P.DEFAULT,
        _D.FLOAT,
        aten=(_one("aten.softplus.default", "self", "beta", "threshold"),),
    ),
    _unary("hardswish", _P.DEFAULT, _D.FLOAT),
    _unary("hardsigmoid", _P.DEFAULT, _D.FLOAT),
    PointwiseOp(
        "elu",
        "vppp",
        _P.DEFAULT,
        _D.FLOAT,
        aten=(_one("aten.elu.default", "self", "alpha", "scale", "input_scale"),),
    ),
    PointwiseOp(
        "leaky_relu",
        "vp",
        _P.DEFAULT,
        _D.FLOAT,
        aten=(_one("aten.leaky_relu.default", "self", "negative_slope"),),
    ),
    _unary("mish", _P.DEFAULT, _D.FLOAT),
    # comparisons, logic and bits
    _compare("eq"),
    _compare("ne"),
    _compare("lt"),
    _compare("le"),
    _compare("gt"),
    _compare("ge"),
    _unary("isnan", _P.ALWAYS_BOOL, _D.ANY, gives=Gives.BOOL),
    _unary("isinf", _P.ALWAYS_BOOL, _D.ANY, gives=Gives.BOOL),
    # logical ops read their operands as bools (non-zero): converted to bool first
    PointwiseOp(
        "logical_and",
        "cc",
        _P.ALWAYS_BOOL,
        _D.BOOL,
        Gives.BOOL,
        aten=(_one("aten.logical_and.default", "self", "other"),),
    ),
    PointwiseOp(
        "logical_or",
        "cc",
        _P.ALWAYS_BOOL,
        _D.BOOL,
        Gives.BOOL,
        aten=(_one("aten.logical_or.default", "self", "other"),),
    ),
    PointwiseOp(
        "logical_xor",
        "cc",
        _P.ALWAYS_BOOL,
        _D.BOOL,
        Gives.BOOL,
        aten=(_one("aten.logical_xor.default", "self", "other"),),
    ),
    PointwiseOp(
        "logical_not",
        "c",
        _P.ALWAYS_BOOL,
        _D.BOOL,
        Gives.BOOL,
        aten=(_one("aten.logical_not.default"),),
    ),
    _binary("bitwise_and", _P.DEFAULT, _D.INTEGRAL, "__and__"),
    _binary("bitwise_or", _P.DEFAULT, _D.INTEGRAL, "__or__"),
    _binary("bitwise_xor", _P.DEFAULT, _D.INTEGRAL, "__xor__"),
    _unary("bitwise_not", _P.DEFAULT, _D.INTEGRAL),
    # selection and fused arithmetic
    PointwiseOp(
        "where",
        "cvv",
        _P.NO_OPMATH,
        _D.ANY,
        aten=(
            Aten(
                (
                    "aten.where.self",
                    "aten.where.ScalarSelf",
                    "aten.where.ScalarOther",
                    "aten.where.Scalar",
                ),
                ("condition", "self", "other"),
            ),
            # masked_fill(x, mask, value) is where(mask, value, x), in x's dtype
            Aten(("aten.masked_fill.Scalar", "aten.masked_fill.Tensor"), ("mask", "value", "self")),
        ),
    ),
    PointwiseOp(
        "lerp",
        "vvv",
        _P.DEFAULT,
        _D.FLOAT,
        aten=(Aten(("aten.lerp.Scalar", "aten.lerp.Tensor"), ("self", "end", "weight")),),
    ),
    PointwiseOp(
        "addcmul",
        "vvvp",
        _P.DEFAULT,
        _D.NUMBER,
        aten=(_one("aten.addcmul.default", "self", "tensor1", "tensor2", "value"),),
    ),
    PointwiseOp(
        "addcdiv",
        "vvvp",
        _P.DEFAULT,
        _D.FLOAT,
        aten=(_one("aten.addcdiv.default", "self", "tensor1", "tensor2", "value"),),
    ),
    # a dtype conversion: the frontend's `_copy` and every promotion insert it
    PointwiseOp("convert", "v", _P.NO_OPMATH, _D.ANY, Gives.CONVERTED),
)

POINTWISE: dict[str, PointwiseOp] = {op.name: op for op in TABLE}
#: each ATen name: its op and how torch spells it
BY_ATEN: dict[str, tuple[PointwiseOp, Aten]] = {
    name: (op, form) for op in TABLE for form in op.aten for name in form.names
}
#: the storage types a kernel converts to: no kernel computes complex numbers (a complex
#: value is real arithmetic on pairs before it reaches a kernel, or runs through torch)
CONVERTIBLE = tuple(name for name, row in dtypes.DTYPES.items() if not row.complex)
#: each chain spelling of a call: the op (conversions spelled by their target)
BY_CALL: dict[str, PointwiseOp] = {
    **{op.name: op for op in TABLE if op.symbol is None and op.gives != Gives.CONVERTED},
    "gelu_tanh": POINTWISE["gelu"],
    **{POINTWISE["convert"].call_name(name): POINTWISE["convert"] for name in CONVERTIBLE},
}
#: a conversion call's result dtype (`to_bool` → i8)
CONVERT_TARGETS: dict[str, str] = {
    POINTWISE["convert"].call_name(name): name for name in CONVERTIBLE
}
#: the device functions of the table's ops (in namespace emmy of emmy_device.cuh)
DEVICE_FUNCTIONS: frozenset[str] = frozenset(
    op.device(call) for call, op in BY_CALL.items() if not op.inline
)
