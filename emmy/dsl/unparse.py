"""Prints a kernel-language expression back as source text (for IR readers and keys)."""

from lark import Token, Tree

_PRECEDENCE = {"or_expr": 1, "and_expr": 2, "cmp_expr": 3, "sum_expr": 4, "product": 5}
_JOINERS = {"or_expr": " || ", "and_expr": " && "}


def unparse(node: Tree | Token, parent: int = 0) -> str:
    if isinstance(node, Token):
        return str(node)
    kind, children = node.data, node.children
    if kind in ("int_lit", "float_lit", "name"):
        return str(children[0])
    if kind == "neg":
        return "-" + unparse(children[0], 6)
    if kind == "not_":
        return "!" + unparse(children[0], 6)
    if kind == "call":
        args = children[1].children if children[1] is not None else []
        return f"{children[0]!s}({', '.join(unparse(a) for a in args)})"
    if kind == "index":
        return f"{children[0]!s}[{', '.join(unparse(a) for a in children[1].children)}]"
    level = _PRECEDENCE[kind]
    if kind in _JOINERS:
        text = _JOINERS[kind].join(unparse(c, level + 1) for c in children)
    else:
        parts = [unparse(children[0], level)]
        for op, rhs in zip(children[1::2], children[2::2], strict=True):
            parts.append(f" {op!s} {unparse(rhs, level + 1)}")
        text = "".join(parts)
    return f"({text})" if level < parent else text
