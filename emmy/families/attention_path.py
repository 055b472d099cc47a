"""The host-level choice of an attention's path: the fused kernel, the unfused matmul →
softmax → matmul, or the vendor library (attention-paths builds its sites and options)."""

from __future__ import annotations

from emmy.families.family import Family, FamilyKind
from emmy.passes import attention_paths

FAMILY = Family(
    attention_paths.FAMILY,
    FamilyKind.CHOICE,
    forks={"path": tuple(attention_paths.PATHS)},
    # torch's SDPA until golden files, rows or the prior say emmy's kernel wins at the key
    target_defaults={"gpu": {"path": "sdpa"}},
)
