"""plan_arena's layout, as a property: two temporaries alive at once (their lifetimes, first
to last call naming them, overlap) never share a byte, every offset is a multiple of
ARENA_ALIGNMENT, and the arena holds every temporary. Checked on every recipe's launch plan
and on a few hundred random plans."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest

from emmy.base.device_records import ARENA_ALIGNMENT, Call, TensorSpec, nbytes
from emmy.base.dtypes import DTYPES
from emmy.build import recipe_program
from emmy.passes.plan_host import plan_arena


def lifetimes(calls: Sequence[Call]) -> dict[str, tuple[int, int]]:
    """Per buffer name: the indices of the first and the last call that name it."""
    spans: dict[str, tuple[int, int]] = {}
    for index, call in enumerate(calls):
        for name in call.buffers:
            first, _ = spans.get(name, (index, index))
            spans[name] = (first, index)
    return spans


def layout_faults(
    temporaries: Sequence[TensorSpec],
    calls: Sequence[Call],
    offsets: dict[str, int],
    arena_bytes: int,
) -> list[str]:
    """What is wrong with a layout: one line per broken property."""
    faults = []
    if set(offsets) != {t.name for t in temporaries}:
        faults.append(f"offsets for {sorted(offsets)}, temporaries {[t.name for t in temporaries]}")
        return faults
    for spec in temporaries:
        offset = offsets[spec.name]
        if offset < 0 or offset % ARENA_ALIGNMENT:
            faults.append(f"{spec.name} at {offset}: not a multiple of {ARENA_ALIGNMENT}")
        if offset + nbytes(spec) > arena_bytes:
            faults.append(f"{spec.name} [{offset}, +{nbytes(spec)}) past the arena's {arena_bytes}")
    spans = lifetimes(calls)
    for a, b in itertools.combinations(temporaries, 2):
        (a_first, a_last), (b_first, b_last) = spans[a.name], spans[b.name]
        if a_last < b_first or b_last < a_first:
            continue  # never alive at the same call: they may share bytes
        a_start, b_start = offsets[a.name], offsets[b.name]
        if a_start < b_start + nbytes(b) and b_start < a_start + nbytes(a):
            faults.append(
                f"{a.name} [{a_start}, +{nbytes(a)}) calls {a_first}..{a_last} overlaps "
                f"{b.name} [{b_start}, +{nbytes(b)}) calls {b_first}..{b_last}"
            )
    return faults


RECIPE_CASES = [
    (recipe, config, target)
    for recipe in ("mlp", "gpt2", "llama")
    for config in ("tiny", None)  # None: the recipe's default config
    # a GPU and the emulator: their decisions, and so their plans, may differ
    for target in ("nvidia-h200-sm90", "emu")
]


@pytest.mark.parametrize("recipe, config, target", RECIPE_CASES)
def test_every_recipes_arena_keeps_live_temporaries_apart(recipe, config, target) -> None:
    program = recipe_program(recipe, config, 0, target)
    assert program.temporaries, "a recipe without temporaries checks nothing"
    faults = layout_faults(program.temporaries, program.calls, program.arena, program.arena_bytes)
    assert not faults, "\n".join(faults[:8])


def random_plan(rng: random.Random) -> tuple[list[TensorSpec], list[Call]]:
    """Temporaries of random shapes and dtypes (some empty, many of one size, so ties in
    the largest-first order happen), each named by one to four random calls among inputs."""
    count = rng.randint(1, 24)
    calls: list[list[str]] = [["in0"] for _ in range(rng.randint(1, 30))]
    common = [rng.randint(1, 4096) for _ in range(3)]
    temporaries = []
    for index in range(count):
        if rng.random() < 0.4:
            shape: tuple[int, ...] = (rng.choice(common),)
        else:
            shape = tuple(
                rng.choice([0, 1, 3, 64, 255, 257, 1000]) for _ in range(rng.randint(0, 3))
            )
        spec = TensorSpec(f"t{index}", shape, rng.choice(sorted(DTYPES)))
        temporaries.append(spec)
        for call in rng.sample(range(len(calls)), min(len(calls), rng.randint(1, 4))):
            calls[call].append(spec.name)
    return temporaries, [Call(f"kernel_{i}", tuple(names)) for i, names in enumerate(calls)]


def test_random_plans_keep_live_temporaries_apart() -> None:
    rng = random.Random(20261201)
    shared = 0
    for trial in range(400):
        temporaries, calls = random_plan(rng)
        offsets, arena_bytes = plan_arena(temporaries, calls)
        faults = layout_faults(temporaries, calls, offsets, arena_bytes)
        assert not faults, f"plan {trial}: " + "\n".join(faults[:8])
        shared += arena_bytes < sum(
            -(-nbytes(t) // ARENA_ALIGNMENT) * ARENA_ALIGNMENT for t in temporaries
        )
    assert shared > 100, "the random plans hardly ever let temporaries share bytes"


def test_the_property_catches_live_temporaries_that_share_bytes() -> None:
    """The check is not vacuous: two temporaries alive at one call placed at one offset fail,
    and so do a misaligned offset and one past the arena's end."""
    a, b = TensorSpec("t0", (64,), "f32"), TensorSpec("t1", (64,), "f32")
    calls = [Call("k0", ("in0", "t0")), Call("k1", ("t0", "t1")), Call("k2", ("t1",))]
    assert layout_faults([a, b], calls, {"t0": 0, "t1": 0}, 256)
    assert layout_faults([a, b], calls, {"t0": 0, "t1": 128}, 512)
    assert layout_faults([a, b], calls, {"t0": 0, "t1": 256}, 300)
    assert not layout_faults([a, b], calls, {"t0": 0, "t1": 256}, 512)
    apart = [Call("k0", ("in0", "t0")), Call("k1", ("t0",)), Call("k2", ("in0", "t1"))]
    assert not layout_faults([a, b], apart, {"t0": 0, "t1": 0}, 256)
