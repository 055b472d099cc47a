"""resolve-forks: decides every fork of every site and records where each choice came from.

For now the oracles are the user's pins and the kernel's declared defaults: pinned forks
take their pinned value, the others their default; where that config breaks a constraint,
the valid config that agrees with the pins and moves the fewest forks away from their
defaults is chosen (ties broken by the declared order of options), so the same input
always gives the same choices.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from emmy.dialects import fork
from emmy.errors import EmmyError
from emmy.passes.site_configs import Config, default_config, valid_configs


def parse_pins(text: str) -> dict[str, fork.Option]:
    """`vec=4,softmax.algo=online` as a dict; values that look like integers are integers.

    A plain fork name pins that fork in every site where the value is one of its options;
    `family.fork` or `site.fork` pins it in that family's or that site's sites only."""
    pins: dict[str, fork.Option] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise EmmyError(f"bad pin {item!r}: expected fork=value")
        value = value.strip()
        pins[name.strip()] = int(value) if value.lstrip("-").isdigit() else value
    return pins


def _applies(pin: str, site: fork.SiteOp) -> str | None:
    """The fork a pin names in this site, if the pin is meant for it."""
    scope, _, fork_name = pin.rpartition(".")
    if scope and scope not in (site.family.data, site.sym_name.data):
        return None
    return fork_name


def site_pins(site: fork.SiteOp, pins: dict[str, fork.Option]) -> dict[str, fork.Option]:
    """The pins that apply to a site: its fork, and a value among that fork's options."""
    knobs = {k.knob_name.data: k for k in site.knobs()}
    applied = {}
    for pin, value in pins.items():
        name = _applies(pin, site)
        if name in knobs and value in knobs[name].option_values:
            applied[name] = value
    return applied


def check_pins(module: ModuleOp, pins: dict[str, fork.Option]) -> None:
    """Every pin must name a fork of some site and one of that fork's options."""
    sites = [op for op in module.walk() if isinstance(op, fork.SiteOp)]
    for pin, value in pins.items():
        matching = [k for s in sites for k in s.knobs() if k.knob_name.data == _applies(pin, s)]
        if not matching:
            known = sorted({k.knob_name.data for s in sites for k in s.knobs()})
            raise EmmyError(
                f"bad pin {pin}={value}: no fork named {pin!r} (forks: {', '.join(known)})"
            )
        if not any(value in k.option_values for k in matching):
            raise EmmyError(
                f"bad pin {pin}={value}: not an option of fork {pin!r} {matching[0].option_values}"
            )


def choose(site: fork.SiteOp, pins: dict[str, fork.Option]) -> tuple[Config, dict[str, str]]:
    """The config of a site and, per fork, the oracle that decided it."""
    default = default_config(site)
    pinned = site_pins(site, pins)
    best: Config | None = None
    best_distance = None
    for config in valid_configs(site):
        if any(config[n] != v for n, v in pinned.items()):
            continue
        distance = sum(config[n] != default[n] for n in default)
        if best_distance is None or distance < best_distance:
            best, best_distance = config, distance
        if distance == 0:
            break
    if best is None:
        wanted = ", ".join(f"{n}={v}" for n, v in pinned.items())
        raise EmmyError(
            f"site {site.sym_name.data} ({site.family.data}, {site.key.data}) has no valid config"
            + (f" with {wanted}" if wanted else "")
        )
    sources = {
        n: "pin" if n in pinned else "default" if best[n] == default[n] else "constraint"
        for n in best
    }
    return best, sources


@dataclass(frozen=True)
class ResolveForks(ModulePass):
    """Chooses a value for every fork: `resolve-forks{pin="vec=2,algo=online"}`."""

    name = "resolve-forks"

    pin: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pins = parse_pins(self.pin)
        check_pins(op, pins)
        for site in op.walk():
            if not isinstance(site, fork.SiteOp):
                continue
            config, sources = choose(site, pins)
            for knob in site.knobs():
                name = knob.knob_name.data
                knob.resolve(config[name], {"oracle": StringAttr(sources[name])})
