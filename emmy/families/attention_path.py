"""The host-level choice of an attention's path: the fused kernel or the unfused matmul →
softmax → matmul (attention-paths builds its sites and options)."""

from __future__ import annotations

from emmy.families.family import Family, FamilyKind
from emmy.passes import attention_paths

FAMILY = Family(
    attention_paths.FAMILY, FamilyKind.CHOICE, forks={"path": tuple(attention_paths.PATHS)}
)
