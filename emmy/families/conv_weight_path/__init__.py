"""The host-level choice of a convolution's weight gradient: its own kernel (conv_weight),
split-K with split_sum where few tiles meet a deep sum, or the vendor library (offer-paths
builds its sites and options)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from emmy.base.problem_key import KeyValue
from emmy.families.family import ChoiceFamily, key_int
from emmy.families.matmul_path import MIN_SLICE, SPLIT_TILES, SPLITS

NAME = "conv_weight_path"
KNOB = "conv_weight"
OPTIONS = ("kernel", *(f"split{s}" for s in SPLITS), "vendor")


def splits_for(key: Mapping[str, KeyValue]) -> list[int]:
    """The splits of the depth (every output pixel of every image) offered at a weight
    gradient's key: where its filters and their weights make few tiles."""
    m = key_int(key, "cout") // key_int(key, "groups")
    tiles = key_int(key, "groups") * math.ceil(m / 32) * math.ceil(key_int(key, "kdim") / 64)
    depth = key_int(key, "batch") * key_int(key, "spatial")
    if tiles >= SPLIT_TILES:
        return []
    return [s for s in SPLITS if depth >= s * MIN_SLICE]


def options_for(key: Mapping[str, KeyValue]) -> list[str]:
    return ["kernel", *(f"split{s}" for s in splits_for(key)), "vendor"]


FAMILY = ChoiceFamily(
    NAME,
    forks={KNOB: OPTIONS},
    # cuDNN until golden files, rows or the prior say emmy's kernel wins at the key
    target_defaults={"gpu": {KNOB: "vendor"}},
)
