"""Problems in scenario files, each reported as FILE:LINE:COL: path: message; hint."""

from __future__ import annotations

from dataclasses import dataclass

from niclab.errors import UsageError
from niclab.yamlpos import Position, format_path


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
            out.append(f"{text}; {problem.hint}" if problem.hint else text)
        return out


def did_you_mean(word, choices) -> str:
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f"did you mean '{close[0]}'?" if close else ""


def pydantic_problems(errors: list[dict], prefix: tuple = ()) -> list[Problem]:
    """Turn pydantic's errors into Problems, unpacking the ones our validators raised."""
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
            problems.append(Problem(loc, "unknown key", at_key=True))
        elif kind == "literal_error":
            expected = (err.get("ctx") or {}).get("expected", "")
            problems.append(Problem(loc, f"{err['input']!r} is not one of {expected}"))
        elif kind in ("int_type", "int_parsing", "float_type", "float_parsing", "bool_type", "string_type",
                      "dict_type", "list_type", "model_type"):
            wanted = {"int": "a whole number", "float": "a number", "bool": "true or false", "string": "a string",
                      "dict": "a mapping", "list": "a list", "model": "a mapping"}[kind.split("_")[0]]
            problems.append(Problem(loc, f"expected {wanted}, got {err['input']!r}"))
        elif kind in BOUNDS:
            limit = next(iter((err.get("ctx") or {}).values()), "?")
            problems.append(Problem(loc, f"{err['input']!r} is {BOUNDS[kind]} {limit}"))
        elif kind == "string_pattern_mismatch":
            pattern = (err.get("ctx") or {}).get("pattern", "")
            problems.append(Problem(loc, f"{err['input']!r} does not match {pattern}",
                                    "use lowercase letters, digits and dashes" if pattern == NAME_PATTERN else ""))
        elif kind == "too_short":
            wanted = (err.get("ctx") or {}).get("min_length")
            problems.append(Problem(loc, f"needs at least {wanted} item{'s' if wanted != 1 else ''}"))
        else:
            problems.append(Problem(loc, err["msg"].removeprefix("Value error, ")))
    return problems


NAME_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
BOUNDS = {"less_than_equal": "above the maximum", "less_than": "not below", "greater_than_equal": "below the minimum",
          "greater_than": "not above"}
