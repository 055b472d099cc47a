"""What each family must compute, in float64 torch: how a bench or a check judges an
output. The references themselves are the families' (emmy/families/, `reference`)."""

from __future__ import annotations

import torch

from emmy.base.errors import EmmyError
from emmy.families.family import MeasuredFamily, Reference
from emmy.families.registry import FAMILIES
from emmy.runtime.convert import REFERENCE_TOLERANCES


def reference(family: str) -> Reference:
    entry = FAMILIES.get(family)
    if not isinstance(entry, MeasuredFamily):
        raise EmmyError(f"no reference for family {family!r}: a bench cannot check it")
    return entry.reference


def tolerance(family: str, key: dict, dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for a family's output against its float64 reference: the storage type's
    rounding, plus the family's f32 accumulation error that grows with a matmul's depth or
    a row's length (a sum whose terms cancel keeps their absolute error, not its own
    size's)."""
    # an integer output (a sum of ints, an index, a flag) is exact
    rtol, atol = REFERENCE_TOLERANCES.get(dtype, (0.0, 0.0))
    entry = FAMILIES.get(family)
    if isinstance(entry, MeasuredFamily):
        atol += entry.extra_atol(key)
    return rtol, atol


def as_outputs(expected: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """A reference's result as the tuple of a kernel's outputs."""
    return expected if isinstance(expected, tuple) else (expected,)
