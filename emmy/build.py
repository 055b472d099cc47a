"""A compile through the program cache: what `emmy compile`, `emmy run`, `emmy.compile` and
the dynamo backend call to turn a graph into a program.

The same graph and CompileOptions with the same stores give the program compiled before
(emmy.program_cache); otherwise the compiler runs and its program is kept for the next time.
A hit reads one file: neither xDSL nor the passes are imported for it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from emmy import program_cache
from emmy.base.compile_options import CompileOptions
from emmy.base.identity import EMU
from emmy.frontend.cache import parse_graph
from emmy.frontend.recipes import recipe_dir, recipe_graph_text, resolve_case
from emmy.program import Program

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

#: the timing a program found in the cache carries instead of the compile's stages
CACHE_HIT = "program cache hit"


def build_program(
    graph: str | ModuleOp,
    options: CompileOptions,
    *,
    constants: Sequence[str] = (),
    use_cache: bool = True,
    where: str = "<graph>",
    verify_each: bool | None = None,
) -> Program:
    """The program of `graph` (its text, parsed only if it must be compiled, or a module
    the frontend built) compiled as `options` say, from the program cache where
    `use_cache` allows; see emmy.compiler.compile_graph (`verify_each`: verify the module
    after every pass)."""
    start = time.perf_counter()
    # another oracle stack may name a plugin oracle, whose answers no fingerprint covers
    cacheable = use_cache and options.default_stack
    text = graph if isinstance(graph, str) else str(graph) if cacheable else ""
    if cacheable:
        key = program_cache.program_key(text, options, constants)
        program = program_cache.load(key)
        if program is not None:
            program.timings = {CACHE_HIT: time.perf_counter() - start}
            program.golden_imports = []  # this compile imported nothing
            return program
    # xDSL and the passes take ~0.6 s to import, which a program-cache hit does not pay
    from emmy.compiler import compile_graph

    module = _parsed(text, where) if isinstance(graph, str) else graph
    program = compile_graph(module, options, constants=list(constants), verify_each=verify_each)
    if cacheable:
        # keyed by the stores as the compile left them (its golden step may import rows),
        # which is how the next compile finds them
        program_cache.save(program_cache.program_key(text, options, constants), program)
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

    options = CompileOptions(target=target, db=None, golden=(recipe_dir(recipe),))
    return compile_graph(
        _parsed(text, f"<recipe {recipe}>"),
        options,
        constants=constants,
        compile_kernels=compile_kernels,
    )


def _parsed(text: str, where: str) -> ModuleOp:
    # parse_graph hands out a module, parsed or the one the frontend built (its store of
    # built modules holds them untyped)
    return cast("ModuleOp", parse_graph(text, where))
