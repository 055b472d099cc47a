"""The oracle stack of an ordinary compile: order, regime gating, provenance, determinism."""

from __future__ import annotations

import pytest
from stores import (
    SOFTMAX_DEFAULT,
    SOFTMAX_KEY,
    golden_entry,
    row,
    single_site_module,
    softmax_config,
    softmax_program,
    write_golden,
)
from xdsl.context import Context

from emmy.base.compile_options import CompileOptions
from emmy.base.errors import EmmyError
from emmy.base.regime import regime_for
from emmy.dialects import fork
from emmy.passes.resolve_forks import ResolveForks
from emmy.program import SiteProvenance
from emmy.recall.query import Decision, SiteQuery
from emmy.recall.tuning_db import TuningDB


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "autotune.db"


def decision(program) -> SiteProvenance:
    (provenance,) = program.provenance.values()
    return provenance


def config_of(program) -> dict:
    (info,) = program.kernels.values()
    return info.config


def test_empty_stores_give_the_declared_default(db_path) -> None:
    program = softmax_program(db_path)
    assert config_of(program) == SOFTMAX_DEFAULT
    assert decision(program).oracle == "default"


def test_the_fastest_clean_row_of_the_database_is_picked_with_evidence(db_path) -> None:
    with TuningDB(db_path) as db:
        slow, fast, broken = db.add(
            [
                row(softmax_config(vec=2), 3e-3),
                row(softmax_config(vec=1), 1e-3),
                row(softmax_config(vec=8), None, status="wrong_result"),
            ]
        )
        db.add([row(softmax_config(threads=64), 5e-4, status="unstable")])
    program = softmax_program(db_path)
    assert config_of(program) == softmax_config(vec=1)
    provenance = decision(program)
    assert provenance.oracle == "db"
    assert provenance.evidence["rows"] == [fast, slow]
    assert provenance.runner_up == {
        "config": softmax_config(vec=2),
        "median_s": 3e-3,
        "row": slow,
    }
    assert set(provenance.forks.values()) == {"db"}


@pytest.mark.parametrize(
    "planted",
    [
        {"device": "nvidia-h200-sm90"},  # another device
        {"regime": "r-000000000000"},  # another regime of this device
    ],
)
def test_a_faster_row_of_another_device_or_regime_is_never_read(db_path, planted) -> None:
    with TuningDB(db_path) as db:
        db.add([row(softmax_config(vec=2), 2e-3), row(softmax_config(vec=1), 1e-9, **planted)])
    assert config_of(softmax_program(db_path)) == softmax_config(vec=2)


def test_golden_comes_before_the_database(db_path, tmp_path, monkeypatch) -> None:
    golden_dir = tmp_path / "golden"
    write_golden(
        golden_dir / "emu.json",
        [golden_entry(softmax_config(vec=2), 2e-3)],
    )
    monkeypatch.setattr("emmy.recall.golden.MODEL_AGNOSTIC_DIR", golden_dir)
    with TuningDB(db_path) as db:
        db.add([row(softmax_config(vec=1), 1e-3)])
    program = softmax_program(db_path)
    assert config_of(program) == softmax_config(vec=2)
    assert decision(program).oracle == "golden"
    assert decision(program).evidence["file"] == str(golden_dir / "emu.json")
    # the user reorders the stack: the database first
    reordered = softmax_program(db_path, oracles="db,golden,default")
    assert config_of(reordered) == softmax_config(vec=1)
    # golden rows were imported into the measurements table before the compile picked
    with TuningDB(db_path) as db:
        origins = {r.origin for r in db.rows("emu", row({}, 1).regime, "softmax", SOFTMAX_KEY)}
    assert origins == {"golden", "forced"}


def test_a_recipe_golden_file_comes_before_the_model_agnostic_one(
    db_path, tmp_path, monkeypatch
) -> None:
    agnostic = tmp_path / "agnostic"
    recipe = tmp_path / "recipe"
    write_golden(
        agnostic / "emu.json",
        [golden_entry(softmax_config(vec=2), 2e-3)],
    )
    write_golden(
        recipe / "golden" / "emu.json",
        [golden_entry(softmax_config(algo="online"), 2e-3)],
    )
    monkeypatch.setattr("emmy.recall.golden.MODEL_AGNOSTIC_DIR", agnostic)
    program = softmax_program(db_path, golden=str(recipe))
    assert config_of(program) == softmax_config(algo="online")


def test_pins_come_first_and_narrow_the_other_oracles(db_path) -> None:
    with TuningDB(db_path) as db:
        db.add([row(softmax_config(vec=1), 1e-3), row(softmax_config(vec=2, algo="online"), 2e-3)])
    program = softmax_program(db_path, pins="algo=online")
    assert config_of(program) == softmax_config(vec=2, algo="online")
    assert decision(program).forks["algo"] == "pin"
    assert decision(program).forks["vec"] == "db"


def test_golden_under_another_regime_is_not_read(db_path, tmp_path, monkeypatch, capsys) -> None:
    golden_dir = tmp_path / "golden"
    write_golden(
        golden_dir / "emu.json",
        [golden_entry(softmax_config(vec=2), 1e-9)],
        regime="r-111111111111",
    )
    monkeypatch.setattr("emmy.recall.golden.MODEL_AGNOSTIC_DIR", golden_dir)
    assert config_of(softmax_program(db_path)) == SOFTMAX_DEFAULT
    assert "not read" in capsys.readouterr().err


@pytest.mark.parametrize(
    "entry, message",
    [
        (
            {"family": "conv2d", "config": {"tile": 64}},
            "entry 0 (conv2d, rows=8,cols=64,T=f32): unknown family 'conv2d'",
        ),
        ({"config": softmax_config(vec=3)}, "vec=3 is not an option of fork vec [1, 2, 4, 8]"),
        ({"config": {"vec": 4}}, "config names forks ['vec'], the family has"),
    ],
)
def test_a_golden_entry_outside_the_library_is_refused_naming_the_file(
    db_path, tmp_path, monkeypatch, entry, message
) -> None:
    golden_dir = tmp_path / "golden"
    full = {**golden_entry({}, 1e-3), **entry}
    path = write_golden(golden_dir / "emu.json", [full])
    before = path.read_bytes()
    monkeypatch.setattr("emmy.recall.golden.MODEL_AGNOSTIC_DIR", golden_dir)
    with pytest.raises(EmmyError, match=str(path)) as error:
        softmax_program(db_path)
    assert message in str(error.value)
    assert path.read_bytes() == before


def test_a_foreign_file_at_the_database_path_is_an_error_and_untouched(db_path) -> None:
    db_path.write_text("my notes, not a database\n")
    with pytest.raises(EmmyError, match=str(db_path)):
        softmax_program(db_path)
    assert db_path.read_text() == "my notes, not a database\n"


def test_same_stores_give_byte_identical_cuda_and_ties_break_deterministically(db_path) -> None:
    with TuningDB(db_path) as db:
        # two configs measured equally fast: the canonical config text decides
        db.add([row(softmax_config(vec=8), 1e-3), row(softmax_config(vec=2), 1e-3)])
    first, second = softmax_program(db_path), softmax_program(db_path)
    assert first.source == second.source
    assert config_of(first) == softmax_config(vec=2)  # '"vec":2' sorts before '"vec":8'


def test_an_unknown_oracle_is_a_clear_error(db_path) -> None:
    with pytest.raises(EmmyError, match="unknown oracle 'crystal-ball'"):
        softmax_program(db_path, oracles="pins,crystal-ball")


def test_without_the_default_oracle_an_undecided_site_is_an_error(db_path) -> None:
    with pytest.raises(EmmyError, match="no oracle decided site softmax_0"):
        softmax_program(db_path, oracles="golden,db")


def test_the_prior_decides_nothing_until_one_is_fitted(db_path) -> None:
    from emmy.recall.prior import load_prior

    assert load_prior("emu") is None
    program = softmax_program(db_path, oracles="prior,default")
    assert decision(program).oracle == "default"


class Fixed:
    """A stack of one answer, handed to resolve-forks in place of the oracles."""

    def __init__(self, config: dict) -> None:
        self.config = config
        self.asked: list[str] = []

    def decide(self, query: SiteQuery) -> Decision:
        self.asked.append(str(query.site.key))
        return Decision(dict(self.config), "fixed", {"why": "handed in"})


def test_resolve_forks_asks_the_stack_it_is_handed_and_reads_no_store() -> None:
    module = single_site_module("softmax", {"rows": 8, "cols": 64, "T": "f32"}, [8, 64])
    stack = Fixed(softmax_config(vec=8))
    ResolveForks(pin="algo=two_pass", stack=stack).apply(Context(), module)
    (site,) = [op for op in module.ops if isinstance(op, fork.SiteOp)]
    assert stack.asked == [SOFTMAX_KEY]
    assert {k.knob_name.data: fork.option_value(k.value) for k in site.knobs()}["vec"] == 8
    assert site.decision is not None and site.decision.oracle.data == "fixed"


def test_resolve_forks_builds_its_stack_from_its_textual_options(tmp_path) -> None:
    """The pass a compile runs is the one emmy-opt spells: its options are the compile's,
    as text, and it builds the oracle stack from them (here a pin and no database)."""
    module = single_site_module("softmax", {"rows": 8, "cols": 64, "T": "f32"}, [8, 64])
    options = CompileOptions.parse(pins="algo=two_pass", db="none")
    resolve = ResolveForks.of(options)
    assert str(resolve.spec()).startswith('resolve-forks{pin="algo=two_pass"')
    resolve.apply(Context(), module)
    (site,) = [op for op in module.ops if isinstance(op, fork.SiteOp)]
    assert site.decision is not None and site.decision.oracle.data == "default"
    sources = {k.knob_name.data: k.provenance for k in site.knobs()}
    assert sources["algo"] is not None and sources["algo"].data == "pin"
    with pytest.raises(EmmyError, match="bad pin"):
        ResolveForks(pin="no_such_fork=1", db="none").apply(Context(), module)


GPU = "nvidia-h200-sm90"


def path_decision(target: str, db_path, **options) -> dict:
    """The decision of the matmul_path site of a bf16 matmul compiled for `target` (no
    NVRTC: only the decisions are read)."""
    from stores import matmul_module

    from emmy.compiler import compile_graph

    options = CompileOptions.parse(target=target, db=db_path, **options)
    program = compile_graph(matmul_module(64, 96, 128), options, compile_kernels=False)
    ((name, choice),) = program.choices.items()
    return {
        **program.provenance[name].to_json(),
        "config": choice.config,
        "key": str(choice.site.key),
    }


def test_a_gpu_site_with_no_evidence_takes_the_vendor_library(db_path) -> None:
    decided = path_decision(GPU, db_path)
    assert decided["config"] == {"matmul": "vendor"}
    assert decided["oracle"] == "target"
    assert decided["forks"] == {"matmul": "target"}
    assert decided["evidence"] == {"device_class": "gpu", "options": {"matmul": "vendor"}}
    # the emulator keeps the declared default: emmy's kernel
    on_emu = path_decision("emu", db_path)
    assert (on_emu["config"], on_emu["oracle"]) == ({"matmul": "kernel"}, "default")
    # without the target oracle, the declared default again
    trimmed = path_decision(GPU, db_path, oracles="pins,golden,db,prior,default")
    assert (trimmed["config"], trimmed["oracle"]) == ({"matmul": "kernel"}, "default")


def test_pins_golden_and_rows_come_before_the_target_default(
    db_path, tmp_path, monkeypatch
) -> None:
    pinned = path_decision(GPU, db_path, pins="matmul=kernel")
    assert (pinned["config"], pinned["oracle"]) == ({"matmul": "kernel"}, "pins")
    # rows where emmy's kernel won, measured on this device under its regime
    key = path_decision(GPU, db_path)["key"]
    regime = regime_for(GPU)
    where = {"device": GPU, "regime": regime.id, "family_name": "matmul_path", "key": key}
    measured = [
        row({"matmul": option}, s, **where) for option, s in [("kernel", 1e-3), ("vendor", 2e-3)]
    ]
    with TuningDB(db_path) as db:
        db.add(measured)
    from_rows = path_decision(GPU, db_path)
    assert (from_rows["config"], from_rows["oracle"]) == ({"matmul": "kernel"}, "db")
    # a golden file of this device that names the kernel, over an empty database
    golden_dir = tmp_path / "golden"
    entry = {"family": "matmul_path", "key": key, "config": {"matmul": "kernel"}}
    write_golden(
        golden_dir / f"{GPU}.json",
        [{**entry, "median_s": 1e-3, "promoted_from": {}}],
        device=GPU,
        regime=regime.id,
    )
    monkeypatch.setattr("emmy.recall.golden.MODEL_AGNOSTIC_DIR", golden_dir)
    from_golden = path_decision(GPU, tmp_path / "empty.db")
    assert (from_golden["config"], from_golden["oracle"]) == ({"matmul": "kernel"}, "golden")


def test_the_target_default_is_the_same_decision_every_time(db_path) -> None:
    # no measurement to break ties with: the family's declared options, whatever the order
    # of sites or stores, and one decision per key
    first, second = path_decision(GPU, db_path), path_decision(GPU, db_path)
    assert first == second
