"""Problems in scenario files, each reported as FILE:LINE:COL: path: message; hint."""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from niclab.base.errors import UsageError
from niclab.base.text import one_line
from niclab.base.yamlpos import Position, format_path

SUGGESTIONS = 500  # "did you mean" suggestions one file may get (see closest)


@dataclass(frozen=True)
class Problem:
    path: tuple[str | int, ...]
    message: str
    hint: str = ""
    at_key: bool = False  # point at the key (an unknown key) rather than its value


class Problems(ValueError):
    """Raised inside validators: problems with paths relative to the value validated."""

    def __init__(self, problems: list[Problem]):
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems


class ScenarioError(UsageError):
    """One or more problems in a scenario file, each with its position."""

    exit_code = 1  # the file failed its check: the same under validate, plan and run
    shown_as_is = True

    def __init__(self, file: str, problems: list[tuple[Position | None, Problem]]):
        self.file = file
        self.problems = sorted(problems, key=lambda item: (item[0] is None, item[0] or Position(0, 0)))
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        out = []
        for position, problem in self.problems:
            where = f"{self.file}:{position.line}:{position.column}" if position else self.file
            text = f"{where}: {format_path(problem.path)}: {problem.message}"
            out.append(one_line(f"{text}; {problem.hint}" if problem.hint else text))
        return out


def shown(value: Any, limit: int = 60) -> str:
    """repr(value), shortened with … when long: a value from the file may be a 100 kB string or list."""
    import reprlib

    short = reprlib.Repr()
    short.maxstring = short.maxother = short.maxlong = limit
    short.maxlist, short.maxdict, short.maxlevel = 6, 4, 3
    return short.repr(value)


def listing(names: Collection, limit: int = 10) -> str:
    """a, b, c — or the first `limit` and how many more: a scenario may name thousands of nodes."""
    shown_names = ", ".join(str(name) for name in itertools.islice(names, limit))
    return f"{shown_names} and {len(names) - limit} more" if len(names) > limit else shown_names


def did_you_mean(word: object, choices: Iterable[object]) -> str:
    close = closest(word, choices)
    return f"did you mean '{close}'?" if close else ""


_suggestions_left: ContextVar[int] = ContextVar("suggestions_left", default=SUGGESTIONS)


def closest(word: object, choices: Iterable[object]) -> str | None:
    """The choice most like `word`, if one is close; None when none is, or suggesting would cost too much.

    difflib compares the word with every choice. A file with thousands of
    unknown names (or a matrix repeating one in a thousand cells) would spend
    minutes on suggestions, so a file gets SUGGESTIONS of them, against at
    most 200 choices each, and no suggestion is offered for a very long word.
    """
    import difflib

    word = str(word)
    left = _suggestions_left.get()
    if left <= 0 or len(word) > 200:
        return None
    _suggestions_left.set(left - 1)
    close = difflib.get_close_matches(word, [str(c) for c in itertools.islice(choices, 200)], n=1)
    return close[0] if close else None


@contextmanager
def suggestion_budget(count: int = SUGGESTIONS) -> Iterator[None]:
    """Allow `count` suggestions (closest) inside the block: one file's check."""
    token = _suggestions_left.set(count)
    try:
        yield
    finally:
        _suggestions_left.reset(token)


def pydantic_problems(
    errors: Sequence[Mapping[str, Any]], prefix: tuple = (), model: type | None = None
) -> list[Problem]:
    """Turn pydantic's errors into Problems, unpacking the ones our validators raised. With the `model`
    validated, an unknown key gets the keys valid at its place (did you mean, or the list)."""
    problems: list[Problem] = []
    for err in errors:
        loc = prefix + tuple(part for part in err["loc"] if not str(part).startswith("function-"))
        raised = (err.get("ctx") or {}).get("error")
        if isinstance(raised, Problems):
            problems += [Problem(loc + p.path, p.message, p.hint, p.at_key) for p in raised.problems]
            continue
        kind = err["type"]
        if kind == "missing":
            problems.append(Problem(loc, "is required"))
        elif kind == "extra_forbidden":
            problems.append(Problem(loc, "unknown key", unknown_key_hint(loc[len(prefix) :], model), at_key=True))
        elif kind == "literal_error":
            expected = (err.get("ctx") or {}).get("expected", "")
            problems.append(Problem(loc, f"{shown(err['input'])} is not one of {expected}"))
        elif kind in (
            "int_type",
            "int_parsing",
            "float_type",
            "float_parsing",
            "bool_type",
            "string_type",
            "dict_type",
            "list_type",
            "model_type",
        ):
            wanted = {
                "int": "a whole number",
                "float": "a number",
                "bool": "true or false",
                "string": "a string",
                "dict": "a mapping",
                "list": "a list",
                "model": "a mapping",
            }[kind.split("_")[0]]
            problems.append(Problem(loc, f"expected {wanted}, got {shown(err['input'])}"))
        elif kind in BOUNDS:
            limit = next(iter((err.get("ctx") or {}).values()), "?")
            problems.append(Problem(loc, f"{shown(err['input'])} is {BOUNDS[kind]} {limit}"))
        elif kind == "string_pattern_mismatch":
            pattern = (err.get("ctx") or {}).get("pattern", "")
            problems.append(
                Problem(
                    loc,
                    f"{shown(err['input'])} does not match {pattern}",
                    "use lowercase letters, digits and dashes" if pattern == NAME_PATTERN else "",
                )
            )
        elif kind == "too_short":
            minimum = (err.get("ctx") or {}).get("min_length")
            problems.append(Problem(loc, f"needs at least {minimum} item{'s' if minimum != 1 else ''}"))
        elif kind == "too_long":
            maximum = (err.get("ctx") or {}).get("max_length")
            actual = (err.get("ctx") or {}).get("actual_length")
            problems.append(Problem(loc, f"takes at most {maximum} item{'s' if maximum != 1 else ''}, not {actual}"))
        else:
            problems.append(Problem(loc, err["msg"].removeprefix("Value error, ")))
    return problems


#: Words other tools use for a niclab key: answered with the key to use, where it is valid. A tool's own flags
#: (`-l:`) are found in its options' descriptions, which name them: "test length (-l)".
FOREIGN_KEYS = {"duration": "seconds", "time": "seconds", "length": "seconds", "runs": "repeat"}
FLAG = re.compile(r"\(([^()]*)\)")
KEYS_LISTED = 20  # valid keys named in one message


def unknown_key_hint(loc: Sequence[Any], model: type | None) -> str:
    """For the unknown key at `loc` (relative to `model`): the key meant (a misspelling, or another tool's
    word for it) and, when nothing is close, the keys valid there. Empty when the place's keys are unknown."""
    valid = keys_at(model, loc[:-1]) if model is not None and loc else None
    if not valid:
        return ""
    key = str(loc[-1])
    meant = _flags(model_at(model, loc[:-1])).get(key) if key.startswith("-") else FOREIGN_KEYS.get(key)
    if meant in valid:
        return f"niclab calls it {meant!r}"
    close = closest(key, valid)
    if close:
        return f"did you mean {close!r}?"
    return f"the keys here are: {listing(sorted(valid), KEYS_LISTED)}"


def keys_at(model: Any, loc: Sequence[Any]) -> list[str] | None:
    """The keys a mapping at `loc` inside `model` may have (its fields and their aliases), or None when what
    is there is not a model: pydantic's error locations walked through fields, list items and dict values."""
    return _fields(model_at(model, loc))


def model_at(model: Any, loc: Sequence[Any]) -> Any:
    """What is at `loc` inside `model` (a model class, a collection's type), or None when it is not known."""
    current: Any = model
    for part in loc:
        current = _step(current, part)
        if current is None:
            return None
    return _unwrapped(current, None)


def _flags(model: Any) -> dict[str, str]:
    """A tool's command-line flags its options' descriptions name, each with its key: "test length (-l)"."""
    if _fields(model) is None:
        return {}
    found: dict[str, str] = {}
    for name, info in model.model_fields.items():
        for inside in FLAG.findall(info.description or ""):
            for word in inside.replace(",", " ").split():
                if re.fullmatch(r"--?[A-Za-z][\w-]*", word):
                    found.setdefault(word, info.alias if isinstance(info.alias, str) else name)
    return found


def _fields(model: Any) -> list[str] | None:
    from pydantic import BaseModel

    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    keys = []
    for name, info in model.model_fields.items():
        keys.append(info.alias if isinstance(info.alias, str) else name)
    return keys


def _unwrapped(annotation: Any, part: Any) -> Any:
    """`annotation` without Annotated/Optional/Union: the member that has `part` (a field), or its only model."""
    import typing

    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrapped(typing.get_args(annotation)[0], part)
    if origin is typing.Union or type(annotation).__name__ == "UnionType":
        members = [_unwrapped(arg, part) for arg in typing.get_args(annotation) if arg is not type(None)]
        models = [m for m in members if _fields(m) is not None]
        for member in models:
            if part is None or part in (_fields(member) or []):
                return member
        collections = [m for m in members if typing.get_origin(m) in (list, tuple, dict)]
        if collections:
            return collections[0]
        return models[0] if len(models) == 1 else None
    return annotation


def _step(current: Any, part: Any) -> Any:
    """What is at `part` inside a value of type `current` (None: not known)."""
    import typing
    from collections.abc import Mapping as AbcMapping
    from collections.abc import Sequence as AbcSequence

    current = _unwrapped(current, part)
    fields = _fields(current)
    if fields is not None:
        for name, info in current.model_fields.items():
            if part in (name, info.alias):
                return info.annotation
        return None
    origin, args = typing.get_origin(current), typing.get_args(current)
    if origin in (list, tuple, AbcSequence) and args and isinstance(part, int):
        return args[0]
    if origin in (dict, AbcMapping) and len(args) == 2:
        return args[1]
    return None


NAME_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
BOUNDS = {
    "less_than_equal": "above the maximum",
    "less_than": "not below",
    "greater_than_equal": "below the minimum",
    "greater_than": "not above",
}
