"""The children of kernel-language parse trees, of the kinds the grammar gives them.

lark types each child as a subtree or a token; the grammar (grammar.lark) decides which
at each position, and these say so where a use needs one of them.
"""

from __future__ import annotations

from lark import Token, Tree


def token(child: Tree | Token | None) -> Token:
    """A child the grammar makes a terminal: a name, a literal, an operator."""
    assert isinstance(child, Token), f"expected a token of the parse tree, got {child!r}"
    return child


def subtree(child: Tree | Token | None) -> Tree:
    """A child the grammar makes a rule: an expression, a statement, a list of arguments."""
    assert isinstance(child, Tree), f"expected a subtree of the parse tree, got {child!r}"
    return child
