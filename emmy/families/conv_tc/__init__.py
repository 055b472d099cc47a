"""Convolutions on tensor cores (mma.sync, ldmatrix, cp.async): f16/bf16. Its sites are
built by conv's (`conv.conv_key` picks it)."""

from __future__ import annotations

from emmy.base import dtypes
from emmy.families.conv import check_inputs, check_key, check_keys, depth_atol, reference
from emmy.families.family import KernelFamily


def tc_check_keys(dtype: str) -> list[dict]:
    """The SIMT family's keys, and deeper ones: filter rows of whole 16-byte chunks (cp.async
    fills) and not, a filter tile the group's edge cuts."""
    return [
        *(key for key in check_keys(dtype) if "transposed" not in key),
        check_key(dtype, 2, 16, (6, 7), 24, (3, 3), padding=1, epilogue=("relu(acc)", "")),
        check_key(dtype, 1, 32, (5, 5), 40, (1, 1), stride=2, groups=2, bias=False),
    ]


FAMILY = KernelFamily(
    "conv_tc",
    reference=reference,
    check_keys=tc_check_keys,
    check_inputs=check_inputs,
    check_dtypes=dtypes.HALF_NAMES,
    extra_atol=depth_atol,
)
