"""Evidence recorded on sites reads back as the value recorded, in the order the report has
always listed it (sorted keys, as JSON with sort_keys gave): each built-in oracle's typed
record, and an oracle of another package's plain values; the typed records of a site
(decision, config, provenance) read back through the textual IR."""

from __future__ import annotations

import json

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, StringAttr, i64
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

from emmy.dialects import evidence, fork, records

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
    recorded = records.from_attr(records.to_attr(value))
    assert json.dumps(recorded) == json.dumps(expected)  # same values, same key order


@pytest.mark.parametrize("value", EVIDENCE[:2])
def test_evidence_survives_the_textual_ir(value) -> None:
    attr = records.to_attr(value)
    parsed = Parser(Context(), str(attr)).parse_attribute()
    assert records.from_attr(parsed) == records.from_attr(attr)


def test_a_value_with_no_attribute_is_refused() -> None:
    with pytest.raises(TypeError, match="no attribute holds"):
        records.to_attr({"when": object()})


def parse(text: str):
    context = Context()
    context.load_dialect(fork.Fork)
    context.load_dialect(evidence.Evidence)
    return Parser(context, text).parse_attribute()


@pytest.mark.parametrize("value", EVIDENCE)
def test_a_decision_reads_back_its_evidence_and_runner_up_through_the_textual_ir(value) -> None:
    decision = fork.DecisionAttr("db", value, runner_up=value)
    parsed = parse(str(decision))
    assert isinstance(parsed, fork.DecisionAttr) and parsed.oracle.data == "db"
    expected = json.loads(json.dumps(value, sort_keys=True))
    assert json.dumps(parsed.evidence_value()) == json.dumps(expected)
    assert json.dumps(parsed.runner_up_value()) == json.dumps(expected)
    assert parse(str(fork.DecisionAttr("default", {}))).runner_up_value() is None


def test_records_keyed_by_fork_keep_their_order_and_types_through_the_textual_ir() -> None:
    config = fork.ConfigAttr({"vec": 4, "algo": "online", "block": 128})
    assert str(config) == '#fork.config<vec = 4, algo = "online", block = 128>'
    assert parse(str(config)).as_dict() == {"vec": 4, "algo": "online", "block": 128}
    assert parse("#fork.config<>").as_dict() == {}
    provenance = fork.ProvenanceAttr({"vec": "db", "algo": "pin"})
    assert parse(str(provenance)).as_dict() == {"vec": "db", "algo": "pin"}


def test_a_record_of_more_names_than_values_is_refused() -> None:
    names = ArrayAttr([StringAttr("vec"), StringAttr("algo")])
    with pytest.raises(VerifyException, match="#fork.config has 2 fork names but 1 values"):
        fork.ConfigAttr.new([names, ArrayAttr([IntegerAttr(4, i64)])])


#: each built-in oracle's typed record, and the values the report has always listed of it
RECORDS = [
    (evidence.PinsEvidence({"vec": 4, "algo": "online"}), {"pins": {"algo": "online", "vec": 4}}),
    (evidence.GoldenEvidence("/x/emu.json", 2.5e-06), {"file": "/x/emu.json", "median_s": 2.5e-06}),
    (evidence.GoldenEvidence("/x/emu.json", None), {"file": "/x/emu.json", "median_s": None}),
    (
        evidence.DatabaseEvidence([12, 3], 2.5e-06, "bench", 7),
        {"measured": 7, "median_s": 2.5e-06, "origin": "bench", "rows": [12, 3]},
    ),
    (
        evidence.TargetEvidence("gpu", {"matmul": "vendor"}),
        {"device_class": "gpu", "options": {"matmul": "vendor"}},
    ),
    (evidence.DefaultEvidence(), {"declared": True}),
    (
        evidence.DefaultEvidence(moved_by_constraints=["vec"]),
        {"declared": False, "moved_by_constraints": ["vec"]},
    ),
    (
        evidence.PriorEvidence(1.0 / 3.0, "ab12", 40),
        {"configs_scored": 40, "dataset": "ab12", "predicted_s": 1.0 / 3.0},
    ),
    (
        evidence.MeasuredRunnerUp({"vec": 2}, 3e-06, 9),
        {"config": {"vec": 2}, "median_s": 3e-06, "row": 9},
    ),
    (
        evidence.PredictedRunnerUp({"vec": 2}, 2e-05),
        {"config": {"vec": 2}, "predicted_s": 2e-05},
    ),
]


@pytest.mark.parametrize(("record", "listed"), RECORDS)
def test_a_typed_record_reads_back_through_the_textual_ir_as_the_report_lists_it(
    record, listed
) -> None:
    decision = parse(str(fork.DecisionAttr("x", record, runner_up=record)))
    assert isinstance(decision, fork.DecisionAttr) and decision.evidence == record
    assert json.dumps(decision.evidence_value()) == json.dumps(listed)
    assert json.dumps(decision.runner_up_value()) == json.dumps(listed)


def test_a_record_field_of_another_type_is_refused() -> None:
    with pytest.raises(VerifyException, match="parameter 'median_s' does not verify"):
        parse('#evidence.db<rows = [], median_s = "fast", origin = "x", measured = 1>')
