"""CSV cells a spreadsheet shows as text, never runs as a formula.

Text from a run directory (a benchmark label, a driver name a guest reported,
a cell id) can start like a formula: `=HYPERLINK(...)`, `+cmd|...`, `@SUM(...)`.
As OWASP's CSV injection guidance says, a text cell that starts with =, +, -,
@, a tab or a carriage return gets a leading ' so spreadsheets take it as text.
Numbers stay numbers (a negative one is a number, not a formula), and a list
of numbers is its numbers joined by ; (nothing a spreadsheet can run).
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
