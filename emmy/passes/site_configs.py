"""The valid configs of a site, read from its IR: each knob's options and constraint."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from functools import cache, lru_cache

from lark import Token, Tree

from emmy.dialects import fork
from emmy.dsl.evaluate import EvaluationError, evaluate
from emmy.dsl.keys import parse_key
from emmy.dsl.parser import parse_expression
from emmy.errors import EmmyError

Config = dict[str, fork.Option]


@cache
def _constraint(text: str) -> tuple[Tree, tuple[str, ...]]:
    tree = parse_expression(text, "<fork constraint>")
    return tree, tuple(sorted(_names(tree)))


def _names(node: Tree | Token) -> set[str]:
    if isinstance(node, Token):
        return set()
    if node.data == "name":
        return {str(node.children[0])}
    return set().union(set(), *(_names(c) for c in node.children if c is not None))


@lru_cache(maxsize=65536)
def _holds(text: str, values: tuple, symbols: frozenset[str]) -> bool:
    """A constraint depends on a few names only: evaluate it once per their values."""
    tree, names = _constraint(text)
    env = {name: value for name, value in zip(names, values, strict=True) if value is not _MISSING}
    return bool(evaluate(tree, env, symbols))


_MISSING = object()


class _Checker:
    """The constraints of one site, prepared once: each a (text, the names it reads)."""

    def __init__(self, site: fork.SiteOp):
        self.site = site
        knobs = site.knobs()
        self.names = [k.knob_name.data for k in knobs]
        self.options = [k.option_values for k in knobs]
        self.symbols = frozenset(o for k in knobs if k.is_symbolic for o in k.option_values)
        self.constraints = [
            (k.knob_name.data, k.constraint.data, _constraint(k.constraint.data)[1])
            for k in knobs
            if k.constraint is not None
        ]
        self.key = parse_key(site.key.data)

    def __call__(self, config: Config) -> bool:
        env = {**self.key, **config}
        for knob_name, text, names in self.constraints:
            try:
                if not _holds(text, tuple(env.get(n, _MISSING) for n in names), self.symbols):
                    return False
            except EvaluationError as error:
                raise EmmyError(
                    f"site {self.site.sym_name.data}: constraint of fork {knob_name!r} "
                    f"({text}): {error}"
                ) from None
        return True


def is_valid(site: fork.SiteOp, config: Config) -> bool:
    return _Checker(site)(config)


def valid_configs(site: fork.SiteOp) -> Iterator[Config]:
    """Every valid config, in the declared order of forks and options (deterministic)."""
    checker = _Checker(site)
    for values in itertools.product(*checker.options):
        config = dict(zip(checker.names, values, strict=True))
        if checker(config):
            yield config


def default_config(site: fork.SiteOp) -> Config:
    return {k.knob_name.data: fork.option_value(k.default) for k in site.knobs()}
