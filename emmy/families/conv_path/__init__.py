"""The host-level choice of a convolution's kernel: its own or the vendor library
(offer-paths builds its sites and options)."""

from __future__ import annotations

from emmy.families.family import ChoiceFamily

NAME = "conv_path"
KNOB = "conv"
OPTIONS = ("kernel", "vendor")
CONV_FAMILIES = ("conv", "conv_tc")


FAMILY = ChoiceFamily(
    NAME,
    forks={KNOB: OPTIONS},
    # cuDNN until golden files, rows or the prior say emmy's kernel wins at the key
    target_defaults={"gpu": {KNOB: "vendor"}},
)
