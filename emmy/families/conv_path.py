"""The host-level choice of a convolution's kernel: its own or the vendor library
(conv-paths builds its sites and options)."""

from __future__ import annotations

from emmy.families.family import Family, FamilyKind
from emmy.passes import conv_paths

FAMILY = Family(
    conv_paths.FAMILY,
    FamilyKind.CHOICE,
    forks={conv_paths.KNOB: conv_paths.OPTIONS},
    # cuDNN until golden files, rows or the prior say emmy's kernel wins at the key
    target_defaults={"gpu": {conv_paths.KNOB: "vendor"}},
)
