"""CSV cells a spreadsheet shows as text, never runs as a formula.

A text cell that starts with =, +, -, @, a tab or a carriage return gets a leading ' (OWASP's CSV injection
guidance); numbers stay numbers, and a list of numbers is its numbers joined by ; (docs/reports.md).
"""

from __future__ import annotations

from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def text(value: str) -> str:
    """`value`, with a leading ' if a spreadsheet would take it for a formula."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def cell(value: Any) -> Any:
    """What to hand csv.writer for one value: numbers and empty cells as they are, text made safe."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        return ";".join(map(str, value))
    if isinstance(value, list):
        return text(";".join(map(str, value)))
    return text(str(value))
