"""JSON from someone else (a guest, a tool, a remote host, a run directory), parsed with a nesting cap.

Python's json parser recurses once per level: `[` a hundred thousand times raises RecursionError, wherever
the stack happens to be. `loads` first counts the levels without recursion (strings taken out, then only the
brackets walked) and refuses a text deeper than its cap, as it refuses one that is not JSON: a ValueError
whose message says which. The caller turns it into its own error, naming the tool or host.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64  # levels of nested arrays and objects; what niclab reads goes about 8 deep

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_PARENS = bytes.maketrans(b"[{]}", b"(())")


class TooDeep(ValueError):
    """A JSON text nested deeper than the cap."""


def depth(data: bytes, cap: int = MAX_DEPTH) -> int | None:
    """How deeply the arrays and objects of a JSON text nest (cap + 1 for anything deeper), counted without
    recursion and in linear time: strings taken out, brackets as parentheses, innermost pairs removed once per
    level. None when the text is not JSON (a string not closed, brackets that do not pair)."""
    rest = _STRING.sub(b"", data)
    if b'"' in rest:
        return None
    brackets = _NOT_BRACKET.sub(b"", rest).translate(_PARENS)
    levels = 0
    while brackets:
        inner = brackets.replace(b"()", b"")
        if len(inner) == len(brackets):  # ")))(((" is left: brackets that do not pair, open ones this deep too
            return cap + 1 if levels + inner.count(b"(") > cap else None
        brackets, levels = inner, levels + 1
        if levels > cap:
            return levels
    return levels


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """json.loads of `text`, or a ValueError: TooDeep past `max_depth` levels, JSONDecodeError or a plain
    ValueError for text that is not JSON, UnicodeDecodeError for bytes that are not UTF-8."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    levels = depth(data, max_depth)
    if levels is None:
        raise ValueError("not JSON: a string not closed, or brackets that do not pair")
    if levels > max_depth:
        raise TooDeep(f"nested more than the {max_depth} levels niclab reads")
    return json.loads(data)
