"""The host-level choice of an attention's path: the fused kernel, the unfused matmul →
softmax → matmul, or the vendor library (offer-paths builds its sites and options)."""

from __future__ import annotations

from emmy.dialects import graph
from emmy.families.family import ChoiceFamily

NAME = "attention_path"
KNOB = "path"
PATHS = ("fused", "unfused", "sdpa")


def paths_for(op: graph.AttentionOp) -> list[str]:
    """The paths offered to an attention: the unfused one only without a padding mask (the
    unfused softmax has no per-batch broadcast to add it with)."""
    return [p for p in PATHS if p != "unfused" or op.mask is None]


FAMILY = ChoiceFamily(
    NAME,
    forks={KNOB: tuple(PATHS)},
    # torch's SDPA until golden files, rows or the prior say emmy's kernel wins at the key
    target_defaults={"gpu": {KNOB: "sdpa"}},
)
