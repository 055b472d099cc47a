"""The host-level choice of a decode attention's path: the one-pass kernel or split-KV
(decode-paths builds its sites and options, and its default rule)."""

from __future__ import annotations

from emmy.families.family import Family, FamilyKind
from emmy.passes import decode_paths

FAMILY = Family(
    decode_paths.FAMILY, FamilyKind.CHOICE, forks={decode_paths.KNOB: tuple(decode_paths.OPTIONS)}
)
