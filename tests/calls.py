"""A compiled model is called as its users call it: more than once, with other values.

Every model test of both APIs goes through `each_call`: the example inputs (those the
program was compiled at), then other values of the same shapes (emmy.runtime.convert's
other_values), each compared with eager. The second call of a program captures its launches
as a graph and the third replays it, so a value of the first call baked into the program, a
buffer still read when it is reused, or a replay reading a stale address shows."""

from __future__ import annotations

from collections.abc import Iterator

from emmy.runtime.convert import other_values

#: the calls each model test makes: the examples', the capture's, the replay's
CALLS = 3


def each_call(args: tuple, kwargs: dict | None = None) -> Iterator[tuple[tuple, dict]]:
    """The (args, kwargs) of each call: the examples, then other values."""
    kwargs = kwargs or {}
    yield tuple(args), dict(kwargs)
    for seed in range(1, CALLS):
        other_args, other_kwargs = other_values((tuple(args), dict(kwargs)), seed)
        yield tuple(other_args), other_kwargs
