"""Picking cells by id, the way a user names them: `--cell nic=e1000` (every cell with that value),
`--cell mtu=9000,nic=e1000` (axes in any order), and `-k "e1000 and not 9000"` as pytest's -k reads a name.

Works on cell ids alone (`axis=value,axis=value`), so a scenario's cells and a run directory's pick alike.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from niclab.base.errors import UsageError
from niclab.base.problems import closest, listing


def parts(cell_id: str) -> dict[str, str]:
    """A cell id's axes and values: nic=e1000,mtu=9000 -> {nic: e1000, mtu: 9000}; `default` has none."""
    if cell_id == "default":
        return {}
    return dict(part.partition("=")[::2] for part in cell_id.split(","))


def pick(ids: Sequence[str], wanted: Sequence[str] | None, keyword: str | None, where: str) -> list[str]:
    """The ids `wanted` (each an id, or some of its axes in any order) and `keyword` (a -k expression) pick,
    in the order asked for (each pattern's cells in the order of `ids`); all of them when neither is given.
    Nothing picked is a UsageError naming the fix."""
    chosen = list(ids)
    if wanted:  # in the order asked for (a cell's repeats alternate with the next one's in that order)
        found: dict[str, None] = {}
        for pattern in wanted:
            picked = _by_pattern(ids, pattern, where)
            found.update(dict.fromkeys(cell_id for cell_id in ids if cell_id in picked))
        chosen = list(found)
    if keyword:
        match = KeywordExpression(keyword, where)
        chosen = [cell_id for cell_id in chosen if match(cell_id)]
        if not chosen:
            raise UsageError(f"{where}: -k {keyword!r} matches no cell; cells are: {listing(ids)}")
    return chosen


def _by_pattern(ids: Sequence[str], pattern: str, where: str) -> set[str]:
    if pattern in ids:
        return {pattern}
    wanted = parts(pattern) if "=" in pattern else None
    if not wanted or not all(wanted.values()):
        hint = closest(pattern, ids)
        raise UsageError(
            f"{where}: no cell {pattern!r}; {f'did you mean {hint!r}? ' if hint else ''}cells are: {listing(ids)}; "
            "or name some of a cell's axes, e.g. --cell nic=e1000"
        )
    axes: dict[str, list[str]] = {}
    for cell_id in ids:
        for axis, value in parts(cell_id).items():
            axes.setdefault(axis, [])
            if value not in axes[axis]:
                axes[axis].append(value)
    for axis, value in wanted.items():
        if axis not in axes:
            hint = closest(axis, axes)
            raise UsageError(
                f"{where}: --cell {pattern}: no axis {axis!r}; {f'did you mean {hint!r}? ' if hint else ''}"
                f"axes are: {listing(axes) or 'none (one cell: default)'}"
            )
        if value not in axes[axis]:
            hint = closest(value, axes[axis])
            raise UsageError(
                f"{where}: --cell {pattern}: {axis} has no value {value!r}; "
                f"{f'did you mean {hint!r}? ' if hint else ''}its values are: {listing(axes[axis])}"
            )
    found = {cell_id for cell_id in ids if wanted.items() <= parts(cell_id).items()}
    if not found:
        raise UsageError(f"{where}: no cell has {pattern} (that combination is excluded); cells are: {listing(ids)}")
    return found


TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


class KeywordExpression:
    """pytest's -k: words matched as case-insensitive substrings of a cell id, joined by `and`, `or`, `not`
    and parentheses. Parsed here (nothing is evaluated as code); a malformed expression is a UsageError."""

    def __init__(self, text: str, where: str) -> None:
        self.text, self.where = text, where
        self.tokens = [m[1] for m in TOKEN.finditer(text)] if text.strip() else []
        self.at = 0
        if not self.tokens:
            self._fail("it is empty")
        self.tree = self._or()
        if self.at < len(self.tokens):
            self._fail(f"{self.tokens[self.at]!r} is not expected there")

    def __call__(self, cell_id: str) -> bool:
        return _holds(self.tree, cell_id.lower())

    def _fail(self, why: str) -> None:
        raise UsageError(
            f"{self.where}: -k {self.text!r}: {why}; write words of cell ids joined by and, or, not and "
            'parentheses, e.g. -k "e1000 and not mtu=9000"'
        )

    def _peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _or(self) -> tuple:
        left = self._and()
        while self._peek() == "or":
            self.at += 1
            left = ("or", left, self._and())
        return left

    def _and(self) -> tuple:
        left = self._not()
        while self._peek() == "and":
            self.at += 1
            left = ("and", left, self._not())
        return left

    def _not(self) -> tuple:
        if self._peek() == "not":
            self.at += 1
            return ("not", self._not())
        return self._word()

    def _word(self) -> tuple:
        token = self._peek()
        if token is None:
            self._fail("it ends too early")
        self.at += 1
        if token == "(":
            inside = self._or()
            if self._peek() != ")":
                self._fail("a parenthesis is not closed")
            self.at += 1
            return inside
        if token in (")", "and", "or"):
            self._fail(f"{token!r} is not expected there")
        return ("word", str(token).lower())


def _holds(tree: tuple, cell_id: str) -> bool:
    kind = tree[0]
    if kind == "word":
        return tree[1] in cell_id
    if kind == "not":
        return not _holds(tree[1], cell_id)
    if kind == "and":
        return _holds(tree[1], cell_id) and _holds(tree[2], cell_id)
    return _holds(tree[1], cell_id) or _holds(tree[2], cell_id)
