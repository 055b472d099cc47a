"""A cache of traced expressions: the graph IR of `-c EXPR`, keyed by the expression and
the frontend's stamp (the versions of torch and emmy, and the frontend's own code). A warm
`emmy compile -c` neither imports nor runs torch. Graphs are kept as text; xDSL is
imported only to parse one."""

from __future__ import annotations

import functools
import hashlib
import json
import time
from importlib.metadata import version
from pathlib import Path

from emmy.base.paths import cache_dir, write_atomic
from emmy.base.version import __version__

#: the code a graph's text depends on: the frontend's handlers, the dialects they build,
#: the families whose rules they ask
_FRONTEND_CODE = ("frontend", "dialects", "families")


@functools.cache
def frontend_stamp() -> str:
    """What every cached graph is keyed by besides its model: torch's and emmy's versions
    and a digest of the frontend's code, so that a changed handler never reads a graph an
    older one wrote."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(f"{version('torch')}\0{__version__}".encode())
    for folder in _FRONTEND_CODE:
        for path in sorted((root / folder).glob("*.py")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _path(expression: str):
    text = "\0".join(("graph-v1", expression, frontend_stamp()))
    return cache_dir() / "frontend" / f"{hashlib.sha256(text.encode()).hexdigest()}.mlir"


def context():
    """A context with every dialect a graph uses."""
    # xDSL is imported only to parse a graph: a program-cache hit reads the text alone
    from xdsl.context import Context
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func

    from emmy.dialects.fallback import Fallback
    from emmy.dialects.graph import Graph

    ctx = Context()
    for dialect in (Builtin, Func, Graph, Fallback):
        ctx.load_dialect(dialect)
    return ctx


def traced_graph_text(expression: str) -> str:
    """The graph of an expression as text, from the cache or traced with torch (then
    cached)."""
    path = _path(expression)
    if path.exists():
        return path.read_text()
    # torch traces the expression: a warm compile finds its graph above, without torch
    from emmy.frontend.expression import trace

    module = trace(expression, meta=True).module
    text = str(module)
    write_atomic(path, text.encode())
    remember(text, module)
    return text


#: graphs this process built, by their text: a cold compile uses the module the frontend
#: made instead of parsing the text it printed (GPT-2 small: ~0.4 s)
_BUILT: dict[str, object] = {}


def remember(text: str, module) -> None:
    _BUILT[text] = module


def parse_graph(text: str, where: str):
    """A graph module from its text (xDSL is imported here, not before); the module itself
    where this process built it (each text is handed out once, as the passes change it)."""
    built = _BUILT.pop(text, None)
    if built is not None:
        return built
    # xDSL is imported only to parse a graph: a program-cache hit reads the text alone
    from xdsl.parser import Parser

    return Parser(context(), text, where).parse_module()


def cached_export(path, build, timings: dict | None = None) -> tuple[str, list[str]]:
    """A model's graph as text and the names of its constants: read from `path`, or the
    model `build()` gives (model, example inputs) exported with torch and kept at `path`;
    on an export `timings` gets the seconds spent importing torch and exporting."""
    if path.exists():
        entry = json.loads(path.read_text())
        return entry["graph"], entry["constants"]
    timings = {} if timings is None else timings
    start = time.perf_counter()
    import torch  # noqa: F401 - timed apart: a cost of any torch frontend, not of emmy's

    timings["frontend: import torch"] = time.perf_counter() - start
    # torch exports the model: a graph found in the cache above does without it
    from emmy.frontend.export import export

    start = time.perf_counter()
    model, inputs = build()
    graph = export(model, inputs)
    timings["frontend: export"] = time.perf_counter() - start
    entry = {"graph": str(graph.module), "constants": list(graph.constants)}
    write_atomic(path, json.dumps(entry).encode())
    remember(entry["graph"], graph.module)
    return entry["graph"], entry["constants"]


def traced_graph(expression: str):
    """The graph of an expression, parsed."""
    return parse_graph(traced_graph_text(expression), f"<{expression}>")
