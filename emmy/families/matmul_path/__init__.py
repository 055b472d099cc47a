"""The host-level choice of a matmul's kernel: its own, split-K with split_sum, or the
vendor library (offer-paths builds its sites and options)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from emmy.base.problem_key import KeyValue
from emmy.families.family import ChoiceFamily, key_int

NAME = "matmul_path"
KNOB = "matmul"
SPLITS = (2, 4, 8)
OPTIONS = ("kernel", *(f"split{s}" for s in SPLITS), "vendor")
MATMUL_FAMILIES = ("matmul", "matmul_tc")
SPLIT_TILES = 128
MIN_K = 512
MIN_SLICE = 256


def splits_for(key: Mapping[str, KeyValue]) -> list[int]:
    """The splits of k offered to a matmul key (none where split-K is not worth it)."""
    tiles = (
        key_int(key, "batch")
        * math.ceil(key_int(key, "m") / 64)
        * math.ceil(key_int(key, "n") / 64)
    )
    k = key_int(key, "k")
    if tiles >= SPLIT_TILES or k < MIN_K:
        return []
    return [s for s in SPLITS if k >= s * MIN_SLICE]


def options_for(key: Mapping[str, KeyValue]) -> list[str]:
    return ["kernel", *(f"split{s}" for s in splits_for(key)), "vendor"]


FAMILY = ChoiceFamily(
    NAME,
    forks={KNOB: tuple(OPTIONS)},
    # cuBLAS until golden files, rows or the prior say emmy's kernel wins at the key
    target_defaults={"gpu": {KNOB: "vendor"}},
)
