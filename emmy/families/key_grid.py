"""What the families' shares of the prior's dataset key grid (Family.grid, gathered by
emmy.campaign.grid) share: the storage types, a random tensor's expression, and the row
shapes of the row-wise families."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from emmy.base.dtypes import torch_dtype

#: the storage types the dataset's keys are in
DTYPES = ("f32", "bf16")
#: torch.nn.functional, as the expressions name it
F = "torch.nn.functional"
#: the row-wise families' (rows, cols): from tiny to what the emulator runs in well under a
#: second, ragged and round
ROWS_COLS = (
    (8, 64), (64, 100), (256, 256), (32, 1000), (128, 768), (16, 4096),
    (1, 4096), (512, 64), (4, 2048), (200, 333), (1024, 128), (48, 1536),
    (96, 512), (2, 8192), (300, 200), (64, 3072), (24, 640), (768, 96), (128, 2048),
    (40, 50), (12, 1200), (160, 480), (640, 40), (36, 2560), (400, 160), (6, 6000),
)  # fmt: skip


def randn(shape: tuple[int, ...], dtype: str) -> str:
    """The expression of a random tensor."""
    return f"torch.randn({', '.join(map(str, shape))}, dtype={torch_dtype(dtype)})"


def row_keys(expression: Callable[[str, int, str], str]) -> list[tuple[str, str]]:
    """One unpinned key per row shape and storage type: `expression(x, cols, dtype)`, x a
    random [rows, cols] tensor."""
    return [
        (expression(randn((rows, cols), dtype), cols, dtype), "")
        for (rows, cols), dtype in itertools.product(ROWS_COLS, DTYPES)
    ]
