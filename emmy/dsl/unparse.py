"""Prints a kernel-language expression back as source text (for IR readers and keys)."""

from emmy.dsl import ast

#: how tightly each kind of operation binds (a negation's operand binds tighter than all)
_PRECEDENCE: dict[type[ast.Expr], int] = {
    ast.Or: 1,
    ast.And: 2,
    ast.Compare: 3,
    ast.Sum: 4,
    ast.Product: 5,
}
_UNARY = 6


def unparse(expr: ast.Expr, parent: int = 0, *, grouped: bool = False) -> str:
    """The expression with the parentheses its precedence needs; `grouped` puts every
    operation and negation in parentheses of its own (`((in0 * 2.0) + in1)`, `(-in0)`), the
    form problem keys hold their chains in, so that a chain prints back as its key's text
    (a negative number stays `-0.5`)."""
    match expr:
        case ast.IntLit(value):
            return str(value)
        case ast.FloatLit(text):
            return text
        case ast.Name(id):
            return id
        case ast.Neg(operand):
            text = "-" + unparse(operand, _UNARY, grouped=grouped)
            number = isinstance(operand, ast.IntLit | ast.FloatLit)
            return f"({text})" if grouped and not number else text
        case ast.Not(operand):
            return "!" + unparse(operand, _UNARY, grouped=grouped)
        case ast.Call(function, args):
            return f"{function}({', '.join(unparse(a, grouped=grouped) for a in args)})"
        case ast.Index(tensor, indices):
            return f"{tensor}[{', '.join(unparse(i, grouped=grouped) for i in indices)}]"
        case _:
            pass  # an operation: printed below, in the parentheses its precedence needs
    level = _PRECEDENCE[type(expr)]
    match expr:
        case ast.And(operands) | ast.Or(operands):
            joiner = " && " if isinstance(expr, ast.And) else " || "
            text = joiner.join(unparse(o, level + 1, grouped=grouped) for o in operands)
        case ast.Compare(lhs, op, rhs):
            text = f"{unparse(lhs, level, grouped=grouped)} {op} {unparse(rhs, level + 1, grouped=grouped)}"
        case ast.Infix(first, rest):
            text = unparse(first, level, grouped=grouped) + "".join(
                f" {op} {unparse(rhs, level + 1, grouped=grouped)}" for op, rhs in rest
            )
        case _:
            raise TypeError(f"{type(expr).__name__} is not an expression")
    return f"({text})" if grouped or level < parent else text
