"""A tool's JSON output, read without trusting its shape (iperf3's, fio's).

A guest may print any JSON where the tool's belongs: a list, a string for a rate, null, a mapping where a list
was. Each field is taken by name through `Fields`; a field that is missing or of the wrong kind is the
benchmark's own error (BenchmarkError), naming the tool and the field's path, which fails that run only.
"""

from __future__ import annotations

import math
from typing import Any

from niclab.base.problems import shown
from niclab.model.bench.base import BenchmarkError


class Fields:
    """A value of a tool's JSON output and where it is (`end.sum_sent`), for its error messages."""

    def __init__(self, tool: str, value: Any, path: str = ""):
        self.tool, self.value, self.path = tool, value, path

    def _error(self, what: str) -> BenchmarkError:
        where = f" {self.path}" if self.path else "'s output"
        return BenchmarkError(f"{self.tool}'s JSON{where} {what}")

    def _inner(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str) -> Fields | None:
        """The field `key` of this object; None when it is absent or null. Not an object: the tool's error."""
        if not isinstance(self.value, dict):
            raise self._error(f"is {_kind(self.value)}, not an object")
        found = self.value.get(key)
        return None if found is None else Fields(self.tool, found, self._inner(key))

    def __getitem__(self, key: str) -> Fields:
        if (found := self.get(key)) is None:
            raise BenchmarkError(f"{self.tool}'s JSON has no {self._inner(key)}")
        return found

    def __contains__(self, key: str) -> bool:
        return isinstance(self.value, dict) and self.value.get(key) is not None

    def items(self) -> list[Fields]:
        """The elements of this list. Not a list: the tool's error."""
        if not isinstance(self.value, list):
            raise self._error(f"is {_kind(self.value)}, not a list")
        return [Fields(self.tool, item, self._inner(i)) for i, item in enumerate(self.value)]

    def number(self) -> float:
        """This value as a finite float. Anything else (text, a bool, nan, inf): the tool's error."""
        value = self.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._error(f"is {_kind(value)}, not a number")
        if isinstance(value, int) and abs(value) > 2**64:
            raise self._error(f"is {shown(value, 30)}, a number too large")
        if not math.isfinite(value):
            raise self._error(f"is {value}, not a finite number")
        return float(value)

    def integer(self) -> int:
        number = self.number()
        if not number.is_integer():
            raise self._error(f"is {number}, not a whole number")
        return int(number)

    def text(self) -> str:
        if not isinstance(self.value, str):
            raise self._error(f"is {_kind(self.value)}, not text")
        return self.value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return f"the number {shown(value, 30)}"
    if isinstance(value, str):
        return f"the text {shown(value, 40)}"
    return "a list" if isinstance(value, list) else "an object"
