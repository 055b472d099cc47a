"""A kernel's fork space: built once per declaration from its parsed constraints, the
valid configs and the (moved) default at a key, a pairwise sample, and the space of a
site, which is its declaration's unless its knobs were written by hand."""

from __future__ import annotations

import itertools

import pytest

from emmy.base.errors import DslError, EmmyError
from emmy.base.problem_key import ProblemKey
from emmy.dialects import fork
from emmy.dsl.library import declaration
from emmy.dsl.parser import parse_expression
from emmy.sites.fork_space import ForkSpace
from emmy.sites.lower import instantiate

KEY = {"rows": 4, "cols": 1000, "T": "f32"}


def test_a_declaration_has_one_space_of_its_parsed_constraints() -> None:
    decl = declaration("softmax")
    space = ForkSpace.of(decl)
    assert ForkSpace.of(declaration("softmax")) is space
    assert space.names == tuple(f.name for f in decl.forks)
    # the constraints are the declaration's own parsed expressions, not text read again
    held = [None if f.constraint is None else f.constraint.expr for f in space.forks]
    assert held == [f.where for f in decl.forks]
    # and a site's knobs hold them as the IR's attributes, the same trees
    site = instantiate(decl, KEY, "softmax_0")
    assert [k.constraint and k.constraint.data for k in site.knobs()] == held


def test_the_default_moves_to_the_nearest_valid_config() -> None:
    space = ForkSpace.of(declaration("softmax"))
    assert space.declared["vec"] == 8
    # 8 bf16s are a 16-byte vector, as declared; 8 f32s are 32 bytes: the nearest is 4
    assert space.default_config({**KEY, "T": "bf16"}) == space.declared
    assert space.default_config(KEY) == {**space.declared, "vec": 4}
    assert space.default_config({**KEY, "cols": 7}) == {**space.declared, "vec": 1}
    assert space.default_config({**KEY, "cols": 7}) in list(space.configs({**KEY, "cols": 7}))


def test_configs_are_the_product_that_satisfies_every_constraint() -> None:
    space = ForkSpace.of(declaration("softmax"))
    every = [
        dict(zip(space.names, values, strict=True))
        for values in itertools.product(*space.options.values())
    ]
    valid = list(space.configs(KEY))
    assert valid == [c for c in every if space.is_valid(KEY, c)]
    assert 0 < len(valid) < len(every)


def test_a_key_the_declaration_does_not_allow_is_refused() -> None:
    with pytest.raises(DslError, match="kernel softmax needs key cols"):
        list(ForkSpace.of(declaration("softmax")).configs({"rows": 4, "T": "f32"}))


def test_pairwise_covers_every_pair_of_options_at_each_key() -> None:
    space = ForkSpace.of(declaration("softmax"))
    keys = [KEY, {**KEY, "cols": 7}]
    chosen = space.pairwise(keys, keys_paired=True)
    valid = [(i, c) for i, key in enumerate(keys) for c in space.configs(key)]
    assert len(chosen) < len(valid) / 10
    assert all(pick in valid for pick in chosen)

    def pairs(i: int, config: dict) -> set:
        items = [("key", i), *config.items()]
        return set(itertools.combinations(items, 2))

    wanted = set().union(*(pairs(i, c) for i, c in valid))
    assert set().union(*(pairs(i, c) for i, c in chosen)) == wanted
    assert space.pairwise([KEY]) == space.pairwise([KEY])


def test_keys_of_one_shape_in_several_types_share_the_pairs_of_one_cover() -> None:
    """A storage type as a fork of the keys: each option in each type and at each shape,
    each pair of options somewhere, far fewer configs than a cover per type."""
    space = ForkSpace.of(declaration("softmax"))
    shapes = [KEY, {**KEY, "cols": 7}]
    types = ("f32", "bf16")
    keys = [{**shape, "T": dtype} for dtype in types for shape in shapes]
    chosen = space.pairwise(
        keys,
        keys_paired=True,
        key_labels=[0, 1, 0, 1],
        key_forks=[{"T": key["T"]} for key in keys],
    )
    per_type = sum(len(space.pairwise(keys[2 * t : 2 * t + 2], keys_paired=True)) for t in (0, 1))
    assert len(chosen) < 0.7 * per_type

    def items(at: int, config: dict) -> list:
        return [("shape", at % 2), ("T", keys[at]["T"]), *config.items()]

    valid = [(i, c) for i, key in enumerate(keys) for c in space.configs(key)]
    wanted = set().union(*(set(itertools.combinations(items(i, c), 2)) for i, c in valid))
    got = set().union(*(set(itertools.combinations(items(i, c), 2)) for i, c in chosen))
    assert got == wanted


def test_a_site_the_compiler_made_has_its_declarations_space() -> None:
    decl = declaration("softmax")
    site = instantiate(decl, KEY, "softmax_0")
    assert ForkSpace.of_site(site) is ForkSpace.of(decl)


def test_a_site_written_by_hand_has_the_space_of_its_knobs() -> None:
    site = fork.SiteOp("s", "softmax", ProblemKey.parse("rows=4,cols=6,T=f32"))
    site.body.block.add_op(fork.KnobOp("vec", [1, 2, 4], 4, parse_expression("cols % vec == 0")))
    space = ForkSpace.of_site(site)
    assert space.names == ("vec",)
    assert list(space.configs({"cols": 6})) == [{"vec": 1}, {"vec": 2}]
    assert space.default_config({"cols": 6}) == {"vec": 2}


def test_a_constraint_that_cannot_be_evaluated_names_its_site() -> None:
    site = fork.SiteOp("s", "f", ProblemKey.parse("n=6"))
    site.body.block.add_op(fork.KnobOp("vec", [1, 2], 1, parse_expression("n % (vec - 1) == 0")))
    with pytest.raises(EmmyError, match=r"site s: constraint of fork 'vec' \(n % \(vec - 1\)"):
        list(ForkSpace.of_site(site).configs({"n": 6}))
