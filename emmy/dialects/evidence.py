"""emmy.evidence: what each built-in oracle decided a site by, as typed records that a
`#fork.decision` holds (its evidence and the runner-up it weighed); the report lists their
values (`to_json`).

    #fork.decision<oracle = "db",
        evidence = #evidence.db<rows = [3 : i64, 7 : i64], median_s = 2.5e-06 : f64,
                                origin = "bench", measured = 2 : i64>,
        runner_up = #evidence.measured_runner_up<config = #fork.config<vec = 2>,
                                                 median_s = 3.0e-06 : f64, row = 7 : i64>>
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xdsl.dialects.builtin import (
    ArrayAttr,
    FloatAttr,
    IntegerAttr,
    NoneType,
    StringAttr,
    f64,
    i1,
    i64,
)
from xdsl.ir import Dialect
from xdsl.irdl import irdl_attr_definition

from emmy.dialects.fork import ConfigAttr, Option
from emmy.dialects.records import EvidenceAttr, PlainValue


def _seconds(value: float | None) -> FloatAttr | NoneType:
    """A time, or `none` (the type: what `none` parses back as) where none was recorded."""
    return NoneType() if value is None else FloatAttr(value, f64)


def _seconds_value(attr: FloatAttr | NoneType) -> float | None:
    return None if isinstance(attr, NoneType) else float(attr.value.data)


def _int(value: int) -> IntegerAttr:
    return IntegerAttr(value, i64)


@irdl_attr_definition
class PinsEvidence(EvidenceAttr):
    """The pins set every fork.

    #evidence.pins<pins = #fork.config<vec = 4, algo = "online">>
    """

    name = "evidence.pins"
    pins: ConfigAttr

    def __init__(self, pins: Mapping[str, Option]):
        super().__init__(ConfigAttr(pins))

    def to_json(self) -> dict[str, PlainValue]:
        return {"pins": dict(self.pins.as_dict())}


@irdl_attr_definition
class GoldenEvidence(EvidenceAttr):
    """The entry of a golden file, and the median it was measured at (none if unrecorded).

    #evidence.golden<file = "recipes/gpt2/golden/emu.json", median_s = 2.5e-06 : f64>
    """

    name = "evidence.golden"
    file: StringAttr
    median_s: FloatAttr | NoneType

    def __init__(self, file: str, median_s: float | None):
        super().__init__(StringAttr(file), _seconds(median_s))

    def to_json(self) -> dict[str, PlainValue]:
        return {"file": self.file.data, "median_s": _seconds_value(self.median_s)}


@irdl_attr_definition
class DatabaseEvidence(EvidenceAttr):
    """The tuning database's rows: the fastest allowed ones (the pick first), its median
    and origin, and how many rows were measured at the key.

    #evidence.db<rows = [3 : i64, 7 : i64], median_s = 2.5e-06 : f64,
                      origin = "bench", measured = 2 : i64>
    """

    name = "evidence.db"
    rows: ArrayAttr[IntegerAttr]
    median_s: FloatAttr
    origin: StringAttr
    measured: IntegerAttr

    def __init__(self, rows: Sequence[int], median_s: float, origin: str, measured: int):
        super().__init__(
            ArrayAttr([_int(r) for r in rows]),
            FloatAttr(median_s, f64),
            StringAttr(origin),
            _int(measured),
        )

    def to_json(self) -> dict[str, PlainValue]:
        return {
            "rows": [r.value.data for r in self.rows],
            "median_s": float(self.median_s.value.data),
            "origin": self.origin.data,
            "measured": self.measured.value.data,
        }


@irdl_attr_definition
class TargetEvidence(EvidenceAttr):
    """The target default of a class of device: no evidence at the key.

    #evidence.target<device_class = "gpu", options = #fork.config<matmul = "vendor">>
    """

    name = "evidence.target"
    device_class: StringAttr
    options: ConfigAttr

    def __init__(self, device_class: str, options: Mapping[str, Option]):
        super().__init__(StringAttr(device_class), ConfigAttr(options))

    def to_json(self) -> dict[str, PlainValue]:
        return {"device_class": self.device_class.data, "options": dict(self.options.as_dict())}


@irdl_attr_definition
class DefaultEvidence(EvidenceAttr):
    """The declared defaults, or the valid config nearest them and the forks the
    constraints moved.

    #evidence.default<declared = true, moved_by_constraints = []>
    """

    name = "evidence.default"
    declared: IntegerAttr
    moved_by_constraints: ArrayAttr[StringAttr]

    def __init__(self, moved_by_constraints: Sequence[str] | None = None):
        moved = () if moved_by_constraints is None else moved_by_constraints
        super().__init__(
            IntegerAttr(int(moved_by_constraints is None), i1),
            ArrayAttr([StringAttr(name) for name in moved]),
        )

    def to_json(self) -> dict[str, PlainValue]:
        if self.declared.value.data:
            return {"declared": True}
        return {
            "declared": False,
            "moved_by_constraints": [m.data for m in self.moved_by_constraints],
        }


@irdl_attr_definition
class PriorEvidence(EvidenceAttr):
    """The prior's prediction for the pick, its dataset, and how many configs it scored.

    #evidence.prior<predicted_s = 1.0e-05 : f64, dataset = "ab12", configs_scored = 40 : i64>
    """

    name = "evidence.prior"
    predicted_s: FloatAttr
    dataset: StringAttr
    configs_scored: IntegerAttr

    def __init__(self, predicted_s: float, dataset: str, configs_scored: int):
        super().__init__(FloatAttr(predicted_s, f64), StringAttr(dataset), _int(configs_scored))

    def to_json(self) -> dict[str, PlainValue]:
        return {
            "predicted_s": float(self.predicted_s.value.data),
            "dataset": self.dataset.data,
            "configs_scored": self.configs_scored.value.data,
        }


@irdl_attr_definition
class MeasuredRunnerUp(EvidenceAttr):
    """The second-fastest allowed row: its config, median and id.

    #evidence.measured_runner_up<config = #fork.config<vec = 2>, median_s = 3.0e-06 : f64, row = 7 : i64>
    """

    name = "evidence.measured_runner_up"
    config: ConfigAttr
    median_s: FloatAttr
    row: IntegerAttr

    def __init__(self, config: Mapping[str, Option], median_s: float, row: int):
        super().__init__(ConfigAttr(config), FloatAttr(median_s, f64), _int(row))

    def to_json(self) -> dict[str, PlainValue]:
        return {
            "config": dict(self.config.as_dict()),
            "median_s": float(self.median_s.value.data),
            "row": self.row.value.data,
        }


@irdl_attr_definition
class PredictedRunnerUp(EvidenceAttr):
    """The config the prior predicted second-fastest, and its prediction.

    #evidence.predicted_runner_up<config = #fork.config<vec = 2>, predicted_s = 2.0e-05 : f64>
    """

    name = "evidence.predicted_runner_up"
    config: ConfigAttr
    predicted_s: FloatAttr

    def __init__(self, config: Mapping[str, Option], predicted_s: float):
        super().__init__(ConfigAttr(config), FloatAttr(predicted_s, f64))

    def to_json(self) -> dict[str, PlainValue]:
        return {
            "config": dict(self.config.as_dict()),
            "predicted_s": float(self.predicted_s.value.data),
        }


Evidence = Dialect(
    "evidence",
    [],
    [
        PinsEvidence,
        GoldenEvidence,
        DatabaseEvidence,
        TargetEvidence,
        DefaultEvidence,
        PriorEvidence,
        MeasuredRunnerUp,
        PredictedRunnerUp,
    ],
)
