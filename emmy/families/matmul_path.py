"""The host-level choice of a matmul's kernel: its own, split-K with split_sum, or the
vendor library (matmul-paths builds its sites and options)."""

from __future__ import annotations

from emmy.families.family import Family, FamilyKind
from emmy.passes import matmul_paths

FAMILY = Family(
    matmul_paths.FAMILY,
    FamilyKind.CHOICE,
    forks={matmul_paths.KNOB: tuple(matmul_paths.OPTIONS)},
    # cuBLAS until golden files, rows or the prior say emmy's kernel wins at the key
    target_defaults={"gpu": {matmul_paths.KNOB: "vendor"}},
)
