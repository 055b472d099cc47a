"""A compile through the program cache: what `emmy compile`, `emmy run`, `emmy.compile` and
the dynamo backend call to turn a graph into a program.

The same graph, target and options with the same stores give the program compiled before
(emmy.program_cache); otherwise the compiler runs and its program is kept for the next time.
A hit reads one file: neither xDSL nor the passes are imported for it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from emmy import program_cache
from emmy.frontend.cache import parse_graph
from emmy.frontend.recipes import recipe_dir, recipe_graph_text, resolve_case
from emmy.identity import EMU, arch_of
from emmy.program import Program

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

#: the timing a program found in the cache carries instead of the compile's stages
CACHE_HIT = "program cache hit"


def build_program(
    graph: str | ModuleOp,
    target: str,
    *,
    pins: str = "",
    oracles: str = "",
    db: str = "",
    golden: str = "",
    constants: Sequence[str] = (),
    use_cache: bool = True,
    where: str = "<graph>",
    verify_each: bool | None = None,
) -> Program:
    """The program of `graph` (its text, parsed only if it must be compiled, or a module
    the frontend built) for the device identity `target`, from the program cache where
    `use_cache` allows; see emmy.compiler.compile_graph for the options (`verify_each`:
    verify the module after every pass)."""
    if target != EMU:
        arch_of(target)  # a malformed identity is one clear line, before any work
    start = time.perf_counter()
    options = {"pins": pins, "oracles": oracles, "constants": tuple(constants)}
    # another oracle stack may name a plugin oracle, whose answers no fingerprint covers
    cacheable = use_cache and not oracles
    text = graph if isinstance(graph, str) else str(graph) if cacheable else ""
    if cacheable:
        stores = program_cache.stores_stamp(target, db, golden)
        program = program_cache.load(program_cache.program_key(text, target, options, stores))
        if program is not None:
            program.timings = {CACHE_HIT: time.perf_counter() - start}
            program.golden_imports = []  # this compile imported nothing
            return program
    # xDSL and the passes take ~0.6 s to import, which a program-cache hit does not pay
    from emmy.compiler import compile_graph

    module = parse_graph(text, where) if isinstance(graph, str) else graph
    program = compile_graph(
        module,
        target=target,
        pins=pins,
        oracles=oracles,
        db=db,
        golden=golden,
        constants=list(constants),
        verify_each=verify_each,
    )
    if cacheable:
        # keyed by the stores as the compile left them (its golden step may import rows),
        # which is how the next compile finds them
        stores = program_cache.stores_stamp(target, db, golden)
        program_cache.save(program_cache.program_key(text, target, options, stores), program)
    return program


def recipe_program(
    recipe: str,
    config: str | None = None,
    size: int = 0,
    target: str = EMU,
    *,
    compile_kernels: bool = False,
) -> Program:
    """A recipe's config (None: its default) at one of its example sizes, compiled from
    the committed stores alone (its golden files, the model-agnostic ones, the prior; no
    tuning database) and not through the program cache: what tests and scripts compare
    across trees. Without `compile_kernels`, it stops at the emitted source."""
    case = resolve_case(recipe, config, size, None)
    text, constants = recipe_graph_text(case)
    # xDSL and the passes take ~0.6 s to import, which a program-cache hit does not pay
    from emmy.compiler import compile_graph

    return compile_graph(
        parse_graph(text, f"<recipe {recipe}>"),
        target=target,
        db="none",
        golden=str(recipe_dir(recipe)),
        constants=constants,
        compile_kernels=compile_kernels,
    )
