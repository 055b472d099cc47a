"""The host-level choice of a convolution's weight gradient: its own kernel (conv_weight)
or the vendor library (conv-paths builds its sites and options)."""

from __future__ import annotations

from emmy.families import conv_path
from emmy.families.family import Family, FamilyKind

NAME = "conv_weight_path"

FAMILY = Family(
    NAME,
    FamilyKind.CHOICE,
    # the convolutions' knob: `--pin conv=vendor` pins a convolution and its gradients
    forks={conv_path.KNOB: conv_path.OPTIONS},
    # cuDNN until golden files, rows or the prior say emmy's kernel wins at the key
    target_defaults={"gpu": {conv_path.KNOB: "vendor"}},
)
