"""The fork space of a kernel: its forks, their options and defaults, the constraints that
rule configs out, and the configs a problem key allows.

    space = ForkSpace.of(declaration("softmax"))
    space.configs(key)          # every valid config at the key, in declared order
    space.default_config(key)   # the declared default, or the valid config nearest to it
    space.pairwise(keys)        # a few configs covering every pair of options

Every reader of a site's configs asks one: resolve-forks (through `ForkSpace.of_site`),
the bench, `emmy check`, `emmy eval`, the oracles, campaigns and the prior. A
declaration's space is built once; its constraints are the declaration's parsed
expressions, evaluated by emmy.dsl.interpret. A site written by hand in IR (emmy-opt's
input), whose knobs are not its family's declared forks, has a space of its knobs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from emmy.base.errors import DslError, EmmyError, EvaluationError
from emmy.base.problem_key import KeyValue, plain_values
from emmy.dialects import fork
from emmy.dsl.ast import KernelDecl
from emmy.dsl.interpret import Condition
from emmy.dsl.keys import check_key
from emmy.dsl.library import declarations
from emmy.dsl.unparse import unparse

Option = fork.Option
Config = dict[str, Option]


@dataclass(frozen=True)
class Fork:
    """One fork: its options in declared order, its default and its constraint."""

    name: str
    options: tuple[Option, ...]
    default: Option
    constraint: Condition | None = None


class ForkSpace:
    """The forks of a kernel declaration (or of a site's knobs) and the configs they allow."""

    def __init__(
        self,
        forks: Sequence[Fork],
        key_defaults: Mapping[str, Option],
        decl: KernelDecl | None = None,
        site: str | None = None,
    ):
        self.forks = tuple(forks)
        #: the names of the forks, in declared order
        self.names = tuple(f.name for f in self.forks)
        #: each fork's options, in declared order
        self.options = {f.name: f.options for f in self.forks}
        #: each fork's declared default (which the constraints may rule out at a key)
        self.declared: Config = {f.name: f.default for f in self.forks}
        self.key_defaults = dict(key_defaults)
        #: the declaration, whose keys `configs` checks and whose lines errors name
        self.decl = decl
        #: the site a space of knobs was read from, which errors name
        self.site = site

    @staticmethod
    def of(decl: KernelDecl) -> ForkSpace:
        """The space of a declaration, built once."""
        return _declared_space(decl)

    @classmethod
    def of_site(cls, site: fork.SiteOp) -> ForkSpace:
        """The space of a site: its family's declared space where its knobs are the
        declared forks (a site the compiler instantiated), else one of its knobs (a site
        written by hand)."""
        decl = declarations().get(site.family.data)
        knobs = site.knobs()
        if decl is not None and _declares(decl, knobs):
            return cls.of(decl)
        forks = [
            Fork(
                k.knob_name.data,
                tuple(k.option_values),
                fork.option_value(k.default),
                None if k.constraint is None else Condition.of(k.constraint.data),
            )
            for k in knobs
        ]
        defaults = decl.key_defaults if decl is not None else {}
        return cls(forks, defaults, site=site.sym_name.data)

    def environment(self, key: Mapping[str, KeyValue]) -> dict[str, int | str]:
        """The names a constraint may read at a key: the key's (with the names its text
        leaves out at their declared defaults), as the kernel language reads them."""
        return {**self.key_defaults, **plain_values(key)}

    def is_valid(self, key: Mapping[str, KeyValue], config: Mapping[str, Option]) -> bool:
        """Whether a config satisfies every fork's constraint at the key."""
        return self._holds({**self.environment(key), **config})

    def configs(self, key: Mapping[str, KeyValue]) -> Iterator[Config]:
        """Every valid config at the key, in the declared order of forks and options."""
        if self.decl is not None:
            check_key(self.decl, key)
        env = self.environment(key)
        for values in itertools.product(*self.options.values()):
            config = dict(zip(self.names, values, strict=True))
            if self._holds({**env, **config}):
                yield config

    def default_config(self, key: Mapping[str, KeyValue]) -> Config | None:
        """The config a compile with no evidence takes: the declared default, or the valid
        config nearest to it (see `nearest_config`); None where no config is valid."""
        return nearest_config(self.declared, self.options, lambda c: self.is_valid(key, c))

    def pairwise(
        self,
        keys: Sequence[Mapping[str, KeyValue]],
        strength: int = 2,
        keys_paired: bool = False,
        key_labels: Sequence[int] | None = None,
        key_forks: Sequence[Mapping[str, KeyValue]] | None = None,
    ) -> list[tuple[int, Config]]:
        """A small set of (index of a key, valid config there) covering every option and
        every pair of options (with `strength=1`, every option only) over the keys; with
        `keys_paired`, each key is paired with every option too (each option runs at each
        key), else each key is covered once. `key_labels` says which key each one counts as
        (its index unless given: one shape in several storage types is one key), and
        `key_forks` gives per key the values that pair with the options as a fork's do (its
        storage type). Picked greedily, the first of the best each time, so the same keys
        give the same set."""
        candidates = [(i, c) for i, key in enumerate(keys) for c in self.configs(key)]
        if not candidates:
            return []
        labels = list(key_labels) if key_labels is not None else list(range(len(keys)))
        as_forks = list(key_forks) if key_forks is not None else [{}] * len(keys)

        def cover(index: int, config: Config) -> set:
            items = [(name, config[name]) for name in self.names]
            items += sorted(as_forks[index].items())
            at_key = (_KEY_INDEX, labels[index])
            paired = [at_key, *items] if keys_paired else items
            singles = {(at_key,)} | {(item,) for item in items}
            return set(itertools.combinations(paired, strength)) | singles

        # the greedy pick scores every candidate each time; over a site's thousands of
        # configs that costs seconds unless the scores are kept and lowered as pairs get
        # covered
        covered = [cover(i, c) for i, c in candidates]
        holders: dict[tuple, list[int]] = {}
        for i, pairs in enumerate(covered):
            for pair in pairs:
                holders.setdefault(pair, []).append(i)
        gain = [len(pairs) for pairs in covered]
        chosen = []
        while holders:
            best = max(range(len(candidates)), key=gain.__getitem__)  # the first of the best
            chosen.append(candidates[best])
            for pair in covered[best]:
                for i in holders.pop(pair, ()):
                    gain[i] -= 1
        return chosen

    def _holds(self, env: Mapping[str, int | str]) -> bool:
        for each in self.forks:
            if each.constraint is None:
                continue
            try:
                if not each.constraint.holds(env):
                    return False
            except EvaluationError as error:
                raise self._refusal(each, error) from None
        return True

    def _refusal(self, each: Fork, error: EvaluationError) -> EmmyError:
        """A constraint that cannot be evaluated, as an error at its declaration or site."""
        if self.decl is not None:
            return DslError(self.decl.path, *error.at, f"constraint of fork {each.name}: {error}")
        assert each.constraint is not None, f"fork {each.name} has no constraint to refuse"
        text = unparse(each.constraint.expr)
        return EmmyError(f"site {self.site}: constraint of fork {each.name!r} ({text}): {error}")


#: the name a key's index takes among the options `pairwise` covers
_KEY_INDEX = object()


def nearest_config(
    wanted: Mapping[str, Option],
    options: Mapping[str, Sequence[Option]],
    allows: Callable[[Config], bool],
    fixed: Collection[str] = (),
) -> Config | None:
    """`wanted` where it is allowed, else the allowed config nearest to it, moving the
    forks not `fixed` only: fewest forks moved, then the smallest moves along their option
    lists, then the declared order; None where none is allowed. Constraints rarely reach
    far, so the search stops long before the whole space."""
    wanted = dict(wanted)
    if allows(wanted):
        return wanted
    free = [n for n in wanted if n not in fixed]
    choices = {n: list(options.get(n, [wanted[n]])) for n in wanted}
    for count in range(1, len(free) + 1):
        candidates = []
        for names in itertools.combinations(free, count):
            moves = [[v for v in choices[n] if v != wanted[n]] for n in names]
            for values in itertools.product(*moves):
                config = {**wanted, **dict(zip(names, values, strict=True))}
                steps = sum(
                    abs(choices[n].index(config[n]) - choices[n].index(wanted[n])) for n in names
                )
                order = tuple(choices[n].index(config[n]) for n in wanted)
                candidates.append((steps, order, config))
        candidates.sort(key=lambda c: (c[0], c[1]))
        found = next((config for _, _, config in candidates if allows(config)), None)
        if found is not None:
            return found
    return None


def _declares(decl: KernelDecl, knobs: Sequence[fork.KnobOp]) -> bool:
    """Whether a site's knobs are the declaration's forks, as instantiating it makes them."""
    made = [
        (
            k.knob_name.data,
            tuple(k.option_values),
            fork.option_value(k.default),
            None if k.constraint is None else k.constraint.data,
        )
        for k in knobs
    ]
    return made == [(f.name, f.options, f.default, f.where) for f in decl.forks]


@cache
def _declared_space(decl: KernelDecl) -> ForkSpace:
    forks = [
        Fork(f.name, f.options, f.default, None if f.where is None else Condition.of(f.where))
        for f in decl.forks
    ]
    return ForkSpace(forks, decl.key_defaults, decl=decl)
