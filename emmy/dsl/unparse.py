"""Prints a kernel-language expression back as source text (for IR readers and keys)."""

from lark import Token, Tree

_PRECEDENCE = {"or_expr": 1, "and_expr": 2, "cmp_expr": 3, "sum_expr": 4, "product": 5}
_JOINERS = {"or_expr": " || ", "and_expr": " && "}
_LITERALS = ("int_lit", "float_lit")


def unparse(node: Tree | Token, parent: int = 0, *, grouped: bool = False) -> str:
    """The expression with the parentheses its precedence needs; `grouped` puts every
    operation and negation in parentheses of its own (`((in0 * 2.0) + in1)`, `(-in0)`), the
    form problem keys hold their chains in, so that a chain prints back as its key's text
    (a negative number stays `-0.5`)."""
    if isinstance(node, Token):
        return str(node)
    kind, children = node.data, node.children
    if kind in (*_LITERALS, "name"):
        return str(children[0])
    if kind == "neg":
        text = "-" + unparse(children[0], 6, grouped=grouped)
        number = isinstance(children[0], Tree) and children[0].data in _LITERALS
        return f"({text})" if grouped and not number else text
    if kind == "not_":
        return "!" + unparse(children[0], 6, grouped=grouped)
    if kind == "call":
        args = children[1].children if children[1] is not None else []
        return f"{children[0]!s}({', '.join(unparse(a, grouped=grouped) for a in args)})"
    if kind == "index":
        indices = ", ".join(unparse(a, grouped=grouped) for a in children[1].children)
        return f"{children[0]!s}[{indices}]"
    level = _PRECEDENCE[kind]
    if kind in _JOINERS:
        text = _JOINERS[kind].join(unparse(c, level + 1, grouped=grouped) for c in children)
    else:
        parts = [unparse(children[0], level, grouped=grouped)]
        for op, rhs in zip(children[1::2], children[2::2], strict=True):
            parts.append(f" {op!s} {unparse(rhs, level + 1, grouped=grouped)}")
        text = "".join(parts)
    return f"({text})" if grouped or level < parent else text
