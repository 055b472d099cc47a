"""The host-level choice of a decode attention's path: the one-pass kernel or split-KV
(offer-paths builds its sites and options, and its default rule)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from emmy.base.problem_key import KeyValue
from emmy.families.family import ChoiceFamily, key_int

NAME = "attention_decode_path"
KNOB = "path"
DECODE_FAMILY = "attention_decode"
COMBINE_FAMILY = "attention_decode_combine"
ONE_PASS = "one_pass"
SPLITS = (4, 16, 64)
OPTIONS = (ONE_PASS, *(f"split{s}" for s in SPLITS))
#: an H200's multiprocessors: what the default rule fills
SM_COUNT = 132
MIN_CHUNK = 64
LONG_CACHE = 1024


def queries_of(key: Mapping[str, KeyValue]) -> int:
    return key_int(key, "batch") * key_int(key, "heads") * key_int(key, "new")


def splits_for(key: Mapping[str, KeyValue]) -> list[int]:
    """The splits of the cache offered to a decode key (none where the one pass has enough
    queries, or the cache too few positions)."""
    if queries_of(key) >= SM_COUNT:
        return []
    return [s for s in SPLITS if math.ceil(key_int(key, "max_len") / s) >= MIN_CHUNK]


def options_for(key: Mapping[str, KeyValue]) -> list[str]:
    return [ONE_PASS, *(f"split{s}" for s in splits_for(key))]


def default_for(key: Mapping[str, KeyValue]) -> str:
    """The declared default (see the module's docstring)."""
    queries, splits = queries_of(key), splits_for(key)
    if not splits or queries * 4 > SM_COUNT or key_int(key, "max_len") < LONG_CACHE:
        return ONE_PASS
    enough = [s for s in splits if queries * s >= 2 * SM_COUNT]
    return f"split{enough[0] if enough else splits[-1]}"


FAMILY = ChoiceFamily(NAME, forks={KNOB: tuple(OPTIONS)})
