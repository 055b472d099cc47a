"""Evidence recorded on sites as builtin attributes reads back as the value recorded, in the
order the report has always listed it (sorted keys, as JSON with sort_keys gave)."""

from __future__ import annotations

import json

import pytest
from xdsl.context import Context
from xdsl.parser import Parser

from emmy.dialects import fork

EVIDENCE = [
    {"rows": [12, 3], "median_s": 2.5e-06, "origin": "bench", "measured": 7},
    {"declared": False, "moved_by_constraints": ["vec", "threads"]},
    {"predicted_s": 1.0 / 3.0, "dataset": "ab12", "configs_scored": 40},
    {"config": {"vec": 2, "algo": "online"}, "median_s": 3e-06, "row": 9, "none": None},
    {"file": "/x/golden/emu.json", "median_s": float("inf"), "pins": {"b": 1, "a": "x"}},
]


@pytest.mark.parametrize("value", EVIDENCE)
def test_evidence_reads_back_as_recorded_with_sorted_keys(value) -> None:
    expected = json.loads(json.dumps(value, sort_keys=True))
    recorded = fork.from_attr(fork.to_attr(value))
    assert json.dumps(recorded) == json.dumps(expected)  # same values, same key order


@pytest.mark.parametrize("value", EVIDENCE[:2])
def test_evidence_survives_the_textual_ir(value) -> None:
    attr = fork.to_attr(value)
    parsed = Parser(Context(), str(attr)).parse_attribute()
    assert fork.from_attr(parsed) == fork.from_attr(attr)


def test_a_value_with_no_attribute_is_refused() -> None:
    with pytest.raises(TypeError, match="no attribute holds"):
        fork.to_attr({"when": object()})
