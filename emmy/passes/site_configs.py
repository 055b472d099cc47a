"""The valid configs of a site, read from its IR: each knob's options and constraint."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from functools import cache

from lark import Tree

from emmy.dialects import fork
from emmy.dsl.evaluate import EvaluationError, evaluate
from emmy.dsl.keys import parse_key
from emmy.dsl.parser import parse_expression
from emmy.errors import EmmyError

Config = dict[str, fork.Option]


@cache
def _constraint(text: str) -> Tree:
    return parse_expression(text, "<fork constraint>")


def is_valid(site: fork.SiteOp, config: Config) -> bool:
    env = {**parse_key(site.key.data), **config}
    knobs = site.knobs()
    symbols = frozenset(o for k in knobs if k.is_symbolic for o in k.option_values)
    for knob in knobs:
        if knob.constraint is None:
            continue
        try:
            if not evaluate(_constraint(knob.constraint.data), env, symbols):
                return False
        except EvaluationError as error:
            raise EmmyError(
                f"site {site.sym_name.data}: constraint of fork {knob.knob_name.data!r} "
                f"({knob.constraint.data}): {error}"
            ) from None
    return True


def valid_configs(site: fork.SiteOp) -> Iterator[Config]:
    """Every valid config, in the declared order of forks and options (deterministic)."""
    knobs = site.knobs()
    names = [k.knob_name.data for k in knobs]
    for values in itertools.product(*(k.option_values for k in knobs)):
        config = dict(zip(names, values, strict=True))
        if is_valid(site, config):
            yield config


def default_config(site: fork.SiteOp) -> Config:
    return {k.knob_name.data: fork.option_value(k.default) for k in site.knobs()}
