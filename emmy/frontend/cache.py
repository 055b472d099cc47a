"""A cache of traced expressions: the graph IR of `-c EXPR`, keyed by the expression and
the versions of torch and emmy. A warm `emmy compile -c` neither imports nor runs torch."""

from __future__ import annotations

import hashlib
import os
import tempfile
from importlib.metadata import version

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

import emmy
from emmy.paths import cache_dir


def _path(expression: str):
    text = "\0".join(("graph-v1", expression, version("torch"), emmy.__version__))
    return cache_dir() / "frontend" / f"{hashlib.sha256(text.encode()).hexdigest()}.mlir"


def context() -> Context:
    """A context with every dialect a traced graph uses."""
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func

    from emmy.dialects.graph import Graph

    ctx = Context()
    for dialect in (Builtin, Func, Graph):
        ctx.load_dialect(dialect)
    return ctx


def traced_graph(expression: str) -> ModuleOp:
    """The graph of an expression, from the cache or traced with torch (then cached)."""
    path = _path(expression)
    if path.exists():
        return Parser(context(), path.read_text(), str(path)).parse_module()
    from emmy.frontend.expression import trace

    module = trace(expression, meta=True).module
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        tmp.write(str(module))
    os.replace(tmp.name, path)
    return module
