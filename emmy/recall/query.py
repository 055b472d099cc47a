"""The question an oracle answers, and its answer: what resolve-forks and the oracles share.

resolve-forks asks a `Decider` (the oracle stack) one `SiteQuery` per site and writes the
`Decision` into the IR; the oracles, the prior and `emmy eval` build and answer the same
queries. This module imports only emmy's base, so every side can import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from emmy.base.problem_key import SiteRef

if TYPE_CHECKING:
    from emmy.dialects.records import EvidenceAttr, PlainValue

Config = dict[str, int | str]


@dataclass
class SiteQuery:
    """One site to decide: what it is, which configs are allowed, and the user's pins."""

    #: the site's name in the IR
    name: str
    #: its family and typed problem key (whose text is what the stores are keyed by)
    site: SiteRef
    default: Config
    pins: Config
    is_valid: Callable[[Config], bool]
    enumerate_valid: Callable[[], Iterator[Config]]
    #: each fork's options in declared order
    options: dict[str, list] = field(default_factory=dict)

    def allows(self, config: Config) -> bool:
        """Valid for the key and in agreement with the pins."""
        if set(config) != set(self.default):
            return False
        if any(config[name] != value for name, value in self.pins.items()):
            return False
        return self.is_valid(config)

    @cached_property
    def allowed(self) -> list[Config]:
        """Every allowed config, in declared order (enumerated only when an oracle needs it)."""
        return [c for c in self.enumerate_valid() if all(c[n] == v for n, v in self.pins.items())]


@dataclass(frozen=True)
class Decision:
    config: Config
    oracle: str
    #: a typed record (emmy.dialects.evidence); an oracle of another package may
    #: give its own as JSON-like values, recorded as `#fork.recorded`
    evidence: EvidenceAttr | Mapping[str, PlainValue]
    runner_up: EvidenceAttr | Mapping[str, PlainValue] | None = None


class Decider(Protocol):
    """What decides every site of a compile (the oracle stack): a decision, or EmmyError."""

    def decide(self, query: SiteQuery) -> Decision: ...
