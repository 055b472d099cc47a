"""Problem keys: the canonical, hashable text of the work a site does.

`rows=4,cols=1000,T=f32`: names in the kernel's declared order, integers in decimal;
a value may hold commas inside parentheses (an elementwise chain such as `max(in0, 0.5)`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from emmy.errors import EmmyError


def format_key(names: Sequence[str], key: Mapping[str, int | str]) -> str:
    return ",".join(f"{name}={key[name]}" for name in names)


def parse_key(text: str) -> dict[str, int | str]:
    """The key's values; integers as int, everything else as text."""
    items, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current += char
    if current:
        items.append(current)
    key: dict[str, int | str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise EmmyError(f"malformed problem key {text!r}: {item!r} is not name=value")
        key[name.strip()] = int(value) if value.lstrip("-").isdigit() else value
    return key
