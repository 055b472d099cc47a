"""CompileOptions: each textual form parsed by one parser (a mistake is one line), and the
program cache's key, which the options' canonical form is part of."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import emmy.api
from emmy import program_cache
from emmy.base.compile_options import (
    DEFAULT_ORACLES,
    CompileOptions,
    Pins,
    option_value,
    parse_db,
    parse_golden,
    parse_oracles,
    parse_pin_values,
    parse_pins,
)
from emmy.base.errors import EmmyError
from emmy.recall.golden import MODEL_AGNOSTIC_DIR
from emmy.runtime.emu import EmuDevice

GPU = "nvidia-h200-sm90"
GRAPH = "func.func @main() { }"


def test_values_that_read_as_integers_are_integers() -> None:
    assert [option_value(t) for t in ("4", "-1", "08", "online", "--5", "-", "4k")] == [
        4, -1, 8, "online", "--5", "-", "4k",
    ]  # fmt: skip


def test_pins_keep_their_order_and_a_repeated_fork_its_last_value() -> None:
    pins = parse_pins(" vec = 4 ,softmax.algo=online,,vec=2")
    assert list(pins.items()) == [("vec", 2), ("softmax.algo", "online")]
    assert str(pins) == "vec=2,softmax.algo=online"
    assert parse_pins(str(pins)) == pins
    assert parse_pins("") == Pins() and not parse_pins(" , ")
    # the order tells which of two pins of one fork applies, so it is part of the value
    assert parse_pins("vec=4,softmax.vec=2") != parse_pins("softmax.vec=2,vec=4")
    assert parse_pins("vec=4,softmax.vec=2") == {"softmax.vec": 2, "vec": 4}


def test_bench_pins_take_several_values() -> None:
    assert parse_pin_values(["vec=1, 2", "algo=online"]) == {"vec": [1, 2], "algo": ["online"]}


@pytest.mark.parametrize(
    "parse, text, message",
    [
        (parse_pins, "vec", "bad pin 'vec': expected fork=value"),
        (parse_pins, "vec=4,=2", "bad pin '=2': expected fork=value"),
        (parse_pins, "vec=4,algo=", "bad pin 'algo=': expected fork=value"),
        (lambda t: parse_pin_values([t]), "vec", "bad pin 'vec': expected fork=value[,value...]"),
        (lambda t: parse_pin_values([t]), "=1,2", "bad pin '=1,2': expected fork=value[,value...]"),
        (
            parse_oracles,
            "pins,crystal-ball",
            "unknown oracle 'crystal-ball'; known: pins, golden, db, prior, target, default",
        ),
        (parse_oracles, "pins,db,pins", "oracle list 'pins,db,pins' names an oracle twice"),
        (
            lambda t: CompileOptions(target=t),
            "h200",
            "device identity 'h200' is malformed: expected a lowercase slug ending in"
            " '-sm<major><minor>', e.g. 'nvidia-h200-sm90'",
        ),
    ],
)
def test_a_malformed_option_is_a_one_line_error(parse, text: str, message: str) -> None:
    with pytest.raises(EmmyError) as caught:
        parse(text)
    assert str(caught.value) == message


def test_oracles_db_and_golden() -> None:
    assert parse_oracles("") == DEFAULT_ORACLES
    assert parse_oracles(" pins, default ") == ("pins", "default")
    assert parse_db("none") is None
    assert parse_db("my.db") == Path("my.db")
    assert parse_golden("") == ()
    assert parse_golden("recipes/a,recipes/b") == (Path("recipes/a"), Path("recipes/b"))


def test_the_default_database_is_in_the_cache_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EMMY_CACHE_DIR", str(tmp_path))
    assert parse_db("") == tmp_path / "autotune.db"
    assert CompileOptions().db == tmp_path / "autotune.db"


def test_parse_gives_the_typed_options() -> None:
    options = CompileOptions.parse(
        target=GPU, pins="vec=4", oracles="pins,default", db="none", golden="recipes/gpt2"
    )
    assert options == CompileOptions(
        target=GPU,
        pins=Pins({"vec": 4}),
        oracles=("pins", "default"),
        db=None,
        golden=(Path("recipes/gpt2"),),
    )
    assert not options.default_stack and CompileOptions(db=None).default_stack
    assert hash(options) == hash(replace(options))


def test_the_backend_parses_its_options_when_made() -> None:
    with pytest.raises(EmmyError, match="^bad pin 'vec': expected fork=value$"):
        emmy.api.backend(device=EmuDevice(), pins="vec")


@pytest.fixture
def stores(tmp_path, monkeypatch) -> Path:
    """A cache directory of this test alone (its default database absent)."""
    monkeypatch.setenv("EMMY_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def key(options: CompileOptions, constants: tuple[str, ...] = ()) -> str:
    return program_cache.program_key(GRAPH, options, constants)


def test_equal_options_give_the_same_key(stores) -> None:
    first = CompileOptions.parse(pins="vec=4,algo=online", db="none", golden=str(stores))
    again = CompileOptions.parse(pins="vec=04, algo=online", db="none", golden=f"{stores},")
    assert key(first) == key(again)
    assert key(CompileOptions()) == key(CompileOptions.parse())


@pytest.mark.parametrize(
    "change",
    [
        {"target": GPU},
        {"pins": Pins({"vec": 4})},
        {"oracles": ("pins", "default")},
        {"db": None},
        {"db": Path("other.db")},
        {"golden": (Path("recipes/gpt2"),)},
        {"flags": ("--use_fast_math",)},
    ],
)
def test_another_option_gives_another_key(stores, change: dict) -> None:
    options = CompileOptions()
    assert key(replace(options, **change)) != key(options)


def test_pins_differ_by_their_values_types_and_order(stores) -> None:
    options = CompileOptions()
    keys = {
        key(replace(options, pins=pins))
        for pins in (
            Pins({"vec": 4}),
            Pins({"vec": "4"}),  # a string is not the integer
            Pins({"vec": 2}),
            Pins({"vec": 4, "softmax.vec": 2}),
            Pins({"softmax.vec": 2, "vec": 4}),
        )
    }
    assert len(keys) == 5


def test_the_constants_and_the_stores_are_in_the_key(stores) -> None:
    options = CompileOptions(golden=(stores / "recipe",))
    before = key(options)
    assert key(options, ("w",)) != before
    golden = stores / "recipe" / "golden" / "emu.json"
    golden.parent.mkdir(parents=True)
    golden.write_text("{}")
    assert key(options) != before


def test_the_stores_stamped_are_the_golden_files_a_compile_reads(stores) -> None:
    options = CompileOptions(target=GPU, golden=(stores / "a", stores / "b"))
    files = program_cache.store_files(options)
    assert files[:3] == [
        MODEL_AGNOSTIC_DIR / f"{GPU}.json",
        stores / "a" / "golden" / f"{GPU}.json",
        stores / "b" / "golden" / f"{GPU}.json",
    ]
