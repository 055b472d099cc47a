"""The key codec: a problem key's text parses into typed values (chains, input kinds,
flags, integers) and prints back byte for byte, for every key of the committed dataset
and of every recipe's sites (recorded rows are stored under that text); the kernel
language reads and rewrites a key's chains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emmy.base.errors import DslError, EmmyError
from emmy.base.problem_key import (
    Chain,
    InputKind,
    ProblemKey,
    SiteRef,
    format_key,
    parse_input_kinds,
    parse_key,
)
from emmy.dsl.keys import (
    canonical_key,
    chain_inputs,
    chain_tree,
    parse_chain,
    problem_key,
    rename_chain,
    shift_chain,
)
from emmy.dsl.library import declaration

ROOT = Path(__file__).parent.parent
RECIPE_SITE_KEYS = Path(__file__).parent / "data" / "recipe-site-keys.json"


def dataset_keys() -> set[str]:
    """Every key of the committed freezes and of the dataset's manifest."""
    keys = set()
    for path in sorted((ROOT / "_data" / "freezes").glob("*.jsonl")):
        with path.open() as lines:
            keys |= {row["key"] for row in map(json.loads, lines) if "key" in row}
    manifest = json.loads((ROOT / "_data" / "dataset" / "manifest.json").read_text())
    keys |= {key for pool in manifest["pools"] for key in pool["keys"]}
    return keys


def recipe_site_keys() -> set[str]:
    cases = json.loads(RECIPE_SITE_KEYS.read_text())
    return {key for sites in cases.values() for _, key in sites}


def test_a_key_parses_into_typed_values() -> None:
    text = "rows=4,cols=1000,T=f32,eps=1e-05,inputs=full/row,fn=max(in0, -0.5),store=no,causal=3"
    key = ProblemKey.parse(text)
    assert list(key) == ["rows", "cols", "T", "eps", "inputs", "fn", "store", "causal"]
    assert key["rows"] == 4 and key["causal"] == 3 and key["T"] == "f32"
    assert key["eps"] == "1e-05"  # a float stays the text it was written as
    assert key["inputs"] == (InputKind.FULL, InputKind.ROW)
    assert key["store"] is False
    assert key["fn"] == Chain("max(in0, -0.5)") and chain_inputs(key["fn"]) == [0]
    assert str(key) == text
    assert ProblemKey.parse("") == ProblemKey(())


def test_values_that_would_not_print_back_stay_text() -> None:
    key = ProblemKey.parse("n=007,m=-3,inputs=")
    assert key["n"] == "007" and key["m"] == -3 and key["inputs"] == ()
    assert str(key) == "n=007,m=-3,inputs="


def test_a_key_of_values_is_typed_as_its_text_would_be() -> None:
    key = ProblemKey.of([("n", 8), ("store", "yes"), ("inputs", "full/row"), ("fn", "in0")])
    assert key == ProblemKey.parse("n=8,store=yes,inputs=full/row,fn=in0")
    assert key["store"] is True and key["inputs"] == (InputKind.FULL, InputKind.ROW)
    decl = declaration("softmax")
    site_key = problem_key(decl, {"rows": 4, "cols": 8, "T": "f32", "store": False})
    assert str(site_key) == canonical_key(decl, {"rows": 4, "cols": 8, "T": "f32"})


def test_a_typed_key_prints_as_its_plain_values_do() -> None:
    plain = parse_key("split=2,size=64,n=8,T=f32,epilogue=(acc + in0),inputs=row/scalar")
    typed = ProblemKey.parse(format_key(list(plain), plain))
    assert format_key(list(plain), typed) == format_key(list(plain), plain)
    decl = declaration("split_sum")
    assert canonical_key(decl, typed) == canonical_key(decl, plain)
    # a flag at its declared default is left out either way
    norm = declaration("layer_norm")
    flags = {"rows": 2, "cols": 8, "T": "f32", "eps": "1e-05", "store": False}
    assert canonical_key(norm, flags) == "rows=2,cols=8,T=f32,eps=1e-05"
    assert canonical_key(norm, flags | {"store": True}).endswith(",store=yes")


def test_a_site_is_named_by_its_family_and_typed_key() -> None:
    """A record names a site by one typed reference; its text is read only at a store's
    edge (`SiteRef.parse`), and the kernel language reads its plain values."""
    decl = declaration("layer_norm")
    flags = {"rows": 2, "cols": 8, "T": "f32", "eps": "1e-05", "store": True}
    site = SiteRef("layer_norm", problem_key(decl, flags))
    assert site == SiteRef.parse("layer_norm", "rows=2,cols=8,T=f32,eps=1e-05,store=yes")
    assert site.values == {"rows": 2, "cols": 8, "T": "f32", "eps": "1e-05", "store": "yes"}
    assert str(site) == "layer_norm at rows=2,cols=8,T=f32,eps=1e-05,store=yes"
    assert len({site, SiteRef.parse("layer_norm", str(site.key))}) == 1  # one site, one entry
    with pytest.raises(EmmyError, match=r"'oops' is not name=value"):
        SiteRef.parse("layer_norm", "rows=2,oops")


def test_a_chain_renumbers_its_inputs() -> None:
    chain = parse_chain("((acc * in1) + gelu_tanh((in0 - 2.0)))")
    assert chain_inputs(chain) == [1, 0]
    assert str(shift_chain(chain, 2)) == "((acc * in3) + gelu_tanh((in2 - 2.0)))"
    assert str(rename_chain(chain, {"acc": "in0", "in0": "acc"})) == (
        "((in0 * in1) + gelu_tanh((acc - 2.0)))"
    )
    assert str(parse_chain("(-in0)")) == "(-in0)"
    assert str(parse_chain("(in0 * -0.5)")) == "(in0 * -0.5)"
    # a chain written by hand takes the compiler's form: every operation in parentheses
    assert parse_chain("in0 + in1 * 2.0") == Chain("(in0 + (in1 * 2.0))")


def test_a_chains_expression_is_read_where_it_is_used() -> None:
    key = ProblemKey.parse("n=1,epilogue=(acc +")
    assert key["epilogue"] == Chain("(acc +")  # the codec holds a chain as its text
    with pytest.raises(DslError, match=r"<epilogue of the key>:1:6: unexpected end"):
        chain_tree(key["epilogue"], "<epilogue of the key>")


def test_input_kinds_are_a_closed_set() -> None:
    assert parse_input_kinds("full/row/col/scalar/mid/batch") == tuple(InputKind)
    assert parse_input_kinds("") == ()
    with pytest.raises(EmmyError, match=r"unknown input kind 'diag' in inputs='full/diag'"):
        parse_input_kinds("full/diag")


@pytest.mark.parametrize(
    "text, message",
    [
        ("n=1,inputs=full/rows", r"unknown input kind 'rows'"),
        ("n=1,oops", r"'oops' is not name=value"),
        ("n=1,T=f32,n=2", r"problem key n=1,T=f32,n=2: n given more than once"),
    ],
)
def test_a_malformed_key_is_a_one_line_error(text: str, message: str) -> None:
    with pytest.raises(EmmyError, match=message) as error:
        ProblemKey.parse(text)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "source, keys", [("dataset", dataset_keys), ("recipe sites", recipe_site_keys)]
)
def test_every_known_key_prints_back_as_its_text(source: str, keys) -> None:
    texts = keys()
    assert texts, f"no keys found in the {source}"
    changed = [t for t in sorted(texts) if str(ProblemKey.parse(t)) != t]
    assert not changed, f"{len(changed)} {source} key(s) do not print back, e.g. {changed[:3]}"
