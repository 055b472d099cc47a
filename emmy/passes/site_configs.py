"""The config space of a site, read from its IR: each knob's options and constraint."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from emmy.dialects import fork
from emmy.dsl.interpret import EvaluationError, holds, symbols_of
from emmy.dsl.keys import complete_key, parse_key
from emmy.dsl.library import families
from emmy.errors import EmmyError

Config = dict[str, fork.Option]


class SiteSpace:
    """A site's forks, read once: names, options in declared order, defaults, constraints."""

    def __init__(self, site: fork.SiteOp):
        self.site_name = site.sym_name.data
        knobs = site.knobs()
        self.names = [k.knob_name.data for k in knobs]
        self.options = {k.knob_name.data: k.option_values for k in knobs}
        self.default = {k.knob_name.data: fork.option_value(k.default) for k in knobs}
        self.symbols = frozenset(o for k in knobs if k.is_symbolic for o in k.option_values)
        self.constraints = [
            (k.knob_name.data, k.constraint.data) for k in knobs if k.constraint is not None
        ]
        # a key's text leaves out the names at their declared defaults, which the
        # constraints may read
        decl = families().get(site.family.data)
        key = parse_key(site.key.data)
        self.key = complete_key(decl, key) if decl is not None else key

    def is_valid(self, config: Config) -> bool:
        env = {**self.key, **config}
        for knob_name, text in self.constraints:
            try:
                if not holds(text, env, self.symbols | symbols_of(text, env)):
                    return False
            except EvaluationError as error:
                raise EmmyError(
                    f"site {self.site_name}: constraint of fork {knob_name!r} ({text}): {error}"
                ) from None
        return True

    def configs(self) -> Iterator[Config]:
        """Every valid config, in the declared order of forks and options (deterministic)."""
        for values in itertools.product(*self.options.values()):
            config = dict(zip(self.names, values, strict=True))
            if self.is_valid(config):
                yield config


def valid_configs(site: fork.SiteOp) -> Iterator[Config]:
    return SiteSpace(site).configs()


def default_config(site: fork.SiteOp) -> Config:
    return {k.knob_name.data: fork.option_value(k.default) for k in site.knobs()}
