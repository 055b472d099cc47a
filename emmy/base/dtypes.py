"""emmy's storage types, one row each: the short name that keys, the IR and buffers use
(f32, f16, bf16, i8, i32, i64, c64, c128), its bytes, its numpy storage, its C type in the emitted
CUDA and the emulator, its xDSL type and its torch dtype.

Arithmetic is f32 (or i32); storage types are what tensors hold. numpy has no bfloat16, so
a bf16 buffer holds the bit pattern as uint16 (what the device headers' `emmy::bf16`
keeps in its `bits`), and torch views those bits as bfloat16. A torch bool mask has no row
of its own: it is stored as i8, 0 or 1. A complex tensor (c64, c128: a rotary embedding's
`torch.polar`) is stored as pairs of floats, real then imaginary, as torch and numpy keep
it; no kernel computes one (torch does, between emmy's kernels), and the IR spells it
`complex<f32>`.

    lookup("bf16").bytes                   # 2
    xdsl_type("bf16"), dtype_name(f16)     # BFloat16Type(), "f16"
    torch_dtype("bf16")                    # torch.bfloat16
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, TypeGuard

import numpy as np

from emmy.base.errors import EmmyError

if TYPE_CHECKING:
    import torch
    from xdsl.ir import Attribute


@dataclass(frozen=True)
class DType:
    """One storage type."""

    name: str
    bytes: int
    numpy: type[np.generic]
    c_type: str
    floating: bool
    complex: bool = False

    @property
    def half(self) -> bool:
        """Whether it is a 16-bit float, which the tensor cores multiply."""
        return self.floating and self.bytes == 2


DTYPES: dict[str, DType] = {
    row.name: row
    for row in (
        DType("f32", 4, np.float32, "float", floating=True),
        DType("f16", 2, np.float16, "emmy::f16", floating=True),
        DType("bf16", 2, np.uint16, "emmy::bf16", floating=True),
        DType("i8", 1, np.int8, "signed char", floating=False),  # a mask: 0 or 1
        DType("i32", 4, np.int32, "int", floating=False),
        DType("i64", 8, np.int64, "long long", floating=False),
        # pairs of floats, as CUDA's float2 and double2 keep them
        DType("c64", 8, np.complex64, "float2", floating=False, complex=True),
        DType("c128", 16, np.complex128, "double2", floating=False, complex=True),
    )
}
#: the storage types a model (and a float kernel's T) may have
FLOAT_NAMES = tuple(name for name, row in DTYPES.items() if row.floating)
#: the 16-bit floats, which the tensor-core kernels take
HALF_NAMES = tuple(name for name, row in DTYPES.items() if row.half)


def lookup(name: object) -> DType:
    """The row of a storage type's name."""
    if not is_storage(name):
        raise EmmyError(f"{name!r} is not a storage type (one of {', '.join(DTYPES)})")
    return DTYPES[str(name)]


def is_storage(name: object) -> TypeGuard[str]:
    """Whether `name` (a key's value, say) names a storage type."""
    return isinstance(name, str) and name in DTYPES


def is_float(name: object) -> bool:
    return is_storage(name) and DTYPES[str(name)].floating


def is_half(name: object) -> bool:
    return is_storage(name) and DTYPES[str(name)].half


def is_complex(name: object) -> bool:
    return is_storage(name) and DTYPES[str(name)].complex


@cache
def _xdsl_types() -> dict[str, Attribute]:
    # xDSL is imported here, not at the top: emmy.program and the CLI read names, sizes and
    # numpy types from this module, and a program-cache hit must start without xDSL
    from xdsl.dialects.builtin import (
        BFloat16Type,
        ComplexType,
        Float16Type,
        Float32Type,
        Float64Type,
        IntegerType,
    )

    return {
        "f32": Float32Type(),
        "f16": Float16Type(),
        "bf16": BFloat16Type(),
        "i8": IntegerType(8),
        "i32": IntegerType(32),
        "i64": IntegerType(64),
        "c64": ComplexType(Float32Type()),
        "c128": ComplexType(Float64Type()),
    }


@cache
def _xdsl_names() -> dict[Attribute, str]:
    return {typ: name for name, typ in _xdsl_types().items()}


def xdsl_type(name: str) -> Attribute:
    """The xDSL element type of a storage type's name."""
    return _xdsl_types()[lookup(name).name]


def dtype_name(typ: Attribute) -> str:
    """The name of an xDSL storage type: f32, f16, bf16, i8, i32, i64, c64, c128."""
    name = _xdsl_names().get(typ)
    if name is None:
        raise EmmyError(f"{typ} is not a storage type (one of {', '.join(DTYPES)})")
    return name


def is_storage_type(typ: Attribute) -> bool:
    return typ in _xdsl_names()


def is_float_type(typ: Attribute) -> bool:
    return is_float(_xdsl_names().get(typ))


@cache
def _torch_dtypes() -> dict[str, torch.dtype]:
    # torch is imported here, not at the top: the compile path (emmy.dialects, dsl, passes,
    # backend) reads this module and never imports torch
    import torch

    return {
        "f32": torch.float32,
        "f16": torch.float16,
        "bf16": torch.bfloat16,
        "i8": torch.int8,
        "i32": torch.int32,
        "i64": torch.int64,
        "c64": torch.complex64,
        "c128": torch.complex128,
    }


@cache
def _torch_names() -> dict[torch.dtype, str]:
    return {typ: name for name, typ in _torch_dtypes().items()}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a storage type's name."""
    return _torch_dtypes()[lookup(name).name]


def torch_dtype_name(typ: torch.dtype) -> str | None:
    """The storage type of a torch dtype, None for one emmy does not store (torch.bool's
    storage is the caller's choice: a mask is i8)."""
    return _torch_names().get(typ)
