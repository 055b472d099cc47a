"""Tensors ↔ device buffers, and comparison with a reference at the dtype's tolerance.

Buffers are numpy arrays of the storage type's numpy type (emmy.base.dtypes: bf16 is kept as
its bit pattern, numpy having no bfloat16).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.utils import _pytree

from emmy.base import dtypes

#: (rtol, atol) per dtype: emmy computes in f32 and rounds once, torch eager may round
#: every intermediate of a chain, so low-precision results can differ by a few ulps
TOLERANCES = {
    torch.float32: (1e-5, 1e-6),
    torch.float16: (4e-3, 1e-4),
    torch.bfloat16: (3e-2, 1e-3),
}


#: (rtol, atol) against a float64 reference computed from the same rounded inputs: emmy
#: computes in f32 and rounds once to the storage type
REFERENCE_TOLERANCES = {
    torch.float32: (1e-5, 1e-6),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1e-2, 1e-2),
}
#: (rtol, atol relative to the output's largest magnitude) of a whole model against torch
#: eager in f32: every layer's reductions sum in another order than torch's, a 16-bit model
#: rounds every kernel's output, and the differences grow through the layers
MODEL_TOLERANCES = {
    torch.float32: (1e-4, 1e-5),
    torch.float16: (2e-2, 2e-3),
    torch.bfloat16: (5e-2, 1e-2),
}


def model_tolerance(dtype: torch.dtype, reference: torch.Tensor) -> tuple[float, float]:
    rtol, atol = MODEL_TOLERANCES[dtype]
    scale = float(reference.abs().max()) if reference.numel() else 1.0
    return rtol, atol * max(1.0, scale)


def to_storage(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach().contiguous().cpu()
    if tensor.dtype == torch.bool:
        return tensor.to(torch.int8).numpy().copy()  # a boolean mask: i8, 0 or 1
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: its bits, as emmy.base.dtypes says
        bits = tensor.reshape(-1).view(torch.uint8).numpy()
        return bits.view(dtypes.lookup("bf16").numpy).reshape(tensor.shape).copy()
    return tensor.numpy().copy()


def from_storage(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    # ascontiguousarray makes a 0-d array 1-d: the shape is put back
    tensor = torch.from_numpy(np.ascontiguousarray(array).reshape(array.shape))
    if dtype in (torch.bfloat16, torch.bool):  # bf16's bits; a mask's bytes, 0 or 1
        return tensor.view(dtype)
    return tensor


@dataclass(frozen=True)
class Comparison:
    ok: bool
    summary: str


def compare(
    actual: torch.Tensor, expected: torch.Tensor, tolerance: tuple[float, float] | None = None
) -> Comparison:
    """Every element within the tolerance (by default the dtype's against torch eager);
    NaN where the reference is NaN."""
    rtol, atol = tolerance or TOLERANCES[expected.dtype]
    a, e = actual.float(), expected.float()
    close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    bad = int((~close).sum())
    finite = torch.isfinite(a) & torch.isfinite(e)
    worst = float((a - e).abs()[finite].max()) if bool(finite.any()) else 0.0
    if bad:
        index = tuple(int(i) for i in torch.nonzero(~close)[0])
        return Comparison(
            False,
            f"MISMATCH: {bad} of {e.numel()} elements differ (first at {list(index)}: "
            f"{float(a[index])} vs {float(e[index])}); max abs error {worst:.3g}",
        )
    return Comparison(
        True, f"OK: matches torch eager (max abs error {worst:.3g}, rtol {rtol}, atol {atol})"
    )


def other_values(value: object, seed: int) -> object:
    """`value` (tensors in any nesting: a call's arguments and keyword arguments) with other
    values of the same shapes, dtypes and devices, as a user's next call brings them:
    floats drawn afresh about their mean and spread, integers (token ids, timesteps) from
    their range. A 0/1 integer tensor (an attention mask) and a bool one are kept: other
    values could mask every key of a row. Seeded, so a check is repeatable."""
    generator = torch.Generator().manual_seed(seed)

    def other(tensor: object) -> object:
        if not isinstance(tensor, torch.Tensor) or tensor.dtype == torch.bool or not tensor.numel():
            return tensor
        if tensor.is_floating_point() or tensor.is_complex():
            wide = tensor.to(torch.complex128 if tensor.is_complex() else torch.float64)
            spread = float(wide.abs().std()) if tensor.numel() > 1 else 0.0
            drawn = torch.randn(tensor.shape, generator=generator, dtype=wide.dtype)
            drawn = drawn * (spread or 1.0) + wide.mean()
            return drawn.to(tensor.dtype).to(tensor.device)
        low, high = int(tensor.min()), int(tensor.max())
        if 0 <= low and high <= 1:
            return tensor
        drawn = torch.randint(low, high + 1, tensor.shape, generator=generator)
        return drawn.to(tensor.dtype).to(tensor.device)

    return _pytree.tree_map(other, value)
