"""A scenario file as a template: the matrix, its exclusions, ${axis} placeholders, the cells.

Each combination of the axes is a cell with a stable id (`nic=e1000,mtu=9000`); the template is checked as a
whole, then every cell as a concrete Scenario, and a problem only some cells have names them
(docs/scenarios.md, "Matrix and cells").
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from niclab.base.cellpick import pick
from niclab.base.errors import UsageError
from niclab.base.problems import (
    Problem,
    ScenarioError,
    did_you_mean,
    listing,
    pydantic_problems,
    shown,
    suggestion_budget,
)
from niclab.base.yamlpos import Path_, Positions, YamlError, load, position_at
from niclab.model.scenario.model import Scenario, partial_problems
from niclab.model.topology import Topology

PLACEHOLDER = re.compile(r"\$\{([^${}]*)\}")  # no $ or { inside: linear time even on "${${${..." strings
AXIS_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")  # matched whole (fullmatch): no trailing newline
# An axis value's text in a cell id (nic=e1000,loss=1%): no separator (, =), path character (/), space or
# control character, and not a dot first ("..").
VALUE_RE = re.compile(r"[A-Za-z0-9_%+@-][A-Za-z0-9_.:%+@-]{0,99}")
TEMPLATE_KEYS = ("matrix", "exclude")
MAX_CELLS = 1000  # combinations of the matrix axes (each is validated as a whole scenario)


@dataclass(frozen=True)
class Cell:
    """One combination of the matrix axes, with the concrete scenario it gives."""

    id: str
    params: dict[str, Any]
    scenario: Scenario

    @cached_property
    def topology(self) -> Topology:
        """The cell's nodes, ports and wires: worked out once (a cell's scenario is not changed, only copied)."""
        return self.scenario.topology()


@dataclass
class ScenarioFile:
    path: Path
    display: str
    matrix: dict[str, list]
    cells: list[Cell]
    text: str = ""  # what was parsed: a run keeps it in run.json

    @property
    def name(self) -> str:
        return self.cells[0].scenario.name

    def select(self, wanted: list[str] | None, keyword: str | None = None) -> list[Cell]:
        """The cells `--cell` (ids, or some of their axes in any order) and `-k` pick (niclab.base.cellpick),
        in the order asked for; all when neither is given."""
        if not wanted and not keyword:
            return self.cells
        by_id = {cell.id: cell for cell in self.cells}
        return [by_id[cell_id] for cell_id in pick(list(by_id), wanted, keyword, self.display)]


def value_text(value: Any, depth: int = 1) -> str:
    """An axis value as a cell id shows it: a path in a mapping is its last `depth` folder names."""

    def folder(path: Any) -> str:
        parts = [part for part in Path(str(path)).parts if part not in ("/", ".", "..")]
        return "-".join(parts[-depth:]) or str(path)

    if isinstance(value, dict):  # {build: ../linux} -> build:linux
        return "+".join(f"{k}:{folder(v)}" for k, v in value.items())
    return str(value).lower() if isinstance(value, bool) else str(value)


def cell_id(params: dict[str, Any], depth: int = 1) -> str:
    """kernel=trixie,nic=e1000; a path in a value is its last `depth` folder names (no / in a directory name)."""
    return ",".join(f"{k}={value_text(v, depth)}" for k, v in params.items()) or "default"


def substitute(value: Any, params: dict[str, Any]) -> Any:
    """${axis} becomes the axis value: typed when it is the whole string, text inside a longer one."""
    if isinstance(value, str):
        whole = PLACEHOLDER.fullmatch(value)
        if whole and whole[1] in params:
            return params[whole[1]]
        return PLACEHOLDER.sub(lambda m: str(params.get(m[1], m[0])), value)
    if isinstance(value, list):
        return [substitute(v, params) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, params) for k, v in value.items()}
    return value


def _placeholders(value: Any, path: Path_ = ()) -> Iterator[tuple[Path_, str]]:
    if isinstance(value, str):
        for match in PLACEHOLDER.finditer(value):
            yield path, match[1]
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _placeholders(item, path + (i,))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _placeholders(item, path + (key,))


def _check_matrix(matrix: Any) -> list[Problem]:
    if not isinstance(matrix, dict):
        return [Problem(("matrix",), "matrix maps each axis to a list of values, e.g. {nic: [e1000, virtio]}")]
    combinations = math.prod(len(values) for values in matrix.values() if isinstance(values, list))
    if combinations > MAX_CELLS:
        return [
            Problem(
                ("matrix",),
                f"the matrix has {combinations:,} combinations of its axes; niclab expands at most {MAX_CELLS:,}",
                "use fewer values per axis, or split the scenario into several files",
            )
        ]
    problems = []
    for axis, values in matrix.items():
        if not isinstance(axis, str) or not AXIS_RE.fullmatch(axis):
            problems.append(
                Problem(
                    ("matrix", axis),
                    f"axis name {shown(axis)} must be a name like nic or mtu",
                    "letters, digits and _, at most 32",
                    at_key=True,
                )
            )
        if not isinstance(values, list) or not values:
            problems.append(Problem(("matrix", axis), "an axis is a non-empty list of values, e.g. [1500, 9000]"))
            continue
        for i, value in enumerate(values):
            plain = (str, int, float, bool)
            if isinstance(value, dict) and value and all(isinstance(v, plain) for v in value.values()):
                pass  # a small mapping such as a kernel's {build: ../linux}
            elif not isinstance(value, plain):
                problems.append(Problem(("matrix", axis, i), f"axis values are plain values, not {shown(value)}"))
                continue
            if not VALUE_RE.fullmatch(text := value_text(value)):
                problems.append(
                    Problem(
                        ("matrix", axis, i),
                        f"{shown(value)} cannot name a cell"
                        + (f" (its cell id would show {shown(text)})" if text != str(value) else ""),
                        "a value in a cell id is letters, digits and _ . : % + @ -, at most 100, without spaces, "
                        "commas, = or /, and not starting with a dot"
                        + (" (a path's last folder name counts)" if isinstance(value, dict) else ""),
                    )
                )
            elif values.index(value) != i:
                problems.append(Problem(("matrix", axis, i), f"{shown(value)} is listed twice in axis {shown(axis)}"))
    return problems


def _check_exclude(exclude: Any, matrix: dict[str, list]) -> list[Problem]:
    if not isinstance(exclude, list):
        return [Problem(("exclude",), "exclude is a list of cells to drop, e.g. [{nic: rtl8139, mtu: 9000}]")]
    problems = []
    for i, rule in enumerate(exclude):
        if not isinstance(rule, dict) or not rule:
            problems.append(Problem(("exclude", i), "each exclusion maps axes to values, e.g. {mtu: 9000}"))
            continue
        for axis, value in rule.items():
            if axis not in matrix:
                hint = did_you_mean(axis, matrix)
                problems.append(
                    Problem(
                        ("exclude", i, axis),
                        f"no matrix axis {shown(axis)}",
                        hint or f"axes are: {listing(matrix) or 'none'}",
                        at_key=True,
                    )
                )
            elif value not in matrix[axis]:
                problems.append(
                    Problem(
                        ("exclude", i, axis),
                        f"{shown(value)} is not a value of axis {shown(axis)} ({listing(matrix[axis])})",
                    )
                )
    return problems


def _check_placeholders(body: dict, matrix: dict[str, list]) -> list[Problem]:
    problems, used = [], set()
    for path, name in _placeholders(body):
        used.add(name)
        if name not in matrix:
            hint = did_you_mean(name, matrix)
            problems.append(
                Problem(
                    path,
                    f"${{{name if len(name) <= 60 else name[:28] + '...' + name[-28:]}}} names no matrix axis",
                    hint or (f"axes are: {listing(matrix)}" if matrix else "add a matrix: with that axis"),
                )
            )
    for axis in matrix:
        if axis not in used:
            problems.append(
                Problem(
                    ("matrix", axis),
                    f"matrix axis {shown(axis)} is never used",
                    f"write ${{{axis}}} where its value belongs, or drop the axis",
                    at_key=True,
                )
            )
    return problems


def _excluded(params: dict[str, Any], exclude: list[dict]) -> bool:
    return any(all(params.get(axis) == value for axis, value in rule.items()) for rule in exclude)


def _cells_text(ids: list[str]) -> str:
    shown = ", ".join(ids[:3])
    return (
        f"cell {shown}" if len(ids) == 1 else f"cells {shown}" + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
    )


def _unique_ids(combos: list[dict[str, Any]]) -> tuple[list[str], int]:
    """Each cell's id, and how many folder names of a path they show; two build trees that end in the same
    folder name ({build: a/linux}, {build: b/linux}) are told apart by more of their paths (build:a-linux,
    build:b-linux)."""
    for depth in range(1, 8):
        ids = [cell_id(params, depth) for params in combos]
        if len(set(ids)) == len(ids):
            break
    return ids, depth


def _odd_ids(matrix: dict[str, list], depth: int) -> list[Problem]:
    """Values whose text in a cell id, with `depth` folder names of a path, cannot name a cell (checked at
    depth 1 with the matrix; a path's deeper folders only now)."""
    problems = []
    for axis, values in matrix.items():
        for i, value in enumerate(values):
            if isinstance(value, dict) and not VALUE_RE.fullmatch(text := value_text(value, depth)):
                problems.append(
                    Problem(
                        ("matrix", axis, i),
                        f"{shown(value)} cannot name a cell (its cell id would show {shown(text)})",
                        "the folder names that tell two build trees apart are letters, digits and _ . : % + @ -: "
                        "rename a folder, or give the trees folder names of their own",
                    )
                )
    return problems


def _expand(
    body: dict, matrix: dict[str, list], exclude: list[dict], base: Path | None
) -> tuple[list[Cell], list[Problem]]:
    """The cells, validated; relative paths in them (a kernel's build tree) are relative to `base`."""
    combos = [dict(zip(matrix, values, strict=True)) for values in itertools.product(*matrix.values())]
    kept = [params for params in combos if not _excluded(params, exclude)]
    if not kept:
        return [], [Problem(("exclude",), "every cell of the matrix is excluded")]
    cells: list[Cell] = []
    failing: dict[tuple, list[str]] = {}
    ids, depth = _unique_ids(kept)
    if depth > 1 and (odd := _odd_ids(matrix, depth)):
        return [], odd
    for params, cid in zip(kept, ids, strict=True):
        try:
            scenario = Scenario.model_validate(substitute(body, params), context={"base": base})
            cells.append(Cell(cid, params, scenario))
        except ValidationError as exc:
            found = pydantic_problems(exc.errors(), model=Scenario)
            said = {(p.path, p.message) for p in found}
            found += [p for p in partial_problems(substitute(body, params)) if (p.path, p.message) not in said]
            for problem in found:
                failing.setdefault((problem.path, problem.message, problem.hint, problem.at_key), []).append(cid)
    problems = []
    for (path, message, hint, at_key), ids in failing.items():
        if matrix and len(ids) < len(kept):
            message = f"{message} (in {_cells_text(ids)})"
        problems.append(Problem(path, message, hint, at_key))
    if problems:
        return cells, problems
    seen: dict[str, str] = {}
    for cell in cells:
        # serialize_as_any: each benchmark's own options too, not only the fields every benchmark shares
        config = cell.scenario.model_dump_json(exclude={"description"}, serialize_as_any=True)
        if config in seen:
            problems.append(
                Problem(
                    ("matrix",),
                    f"cells {seen[config]} and {cell.id} expand to the same configuration",
                    "drop the duplicate value or exclude one cell",
                )
            )
        else:
            seen[config] = cell.id
    ids = [cell.id for cell in cells]
    for cid in sorted({cid for cid in ids if ids.count(cid) > 1}):
        problems.append(
            Problem(("matrix",), f"two cells are both named {cid}", "give the build trees different folder names")
        )
    return cells, problems


def parse(text: str, display: str, path: Path | None = None, axes: Mapping[str, list] | None = None) -> ScenarioFile:
    """The scenario in `text`; `axes` (-D) give matrix axes their values, or set an axis for a ${AXIS}."""
    with suggestion_budget():  # difflib's suggestions are slow: a file gets a fixed number of them
        return _parse(text, display, path, axes or {})


def _overridden(raw: dict, axes: Mapping[str, list], display: str) -> dict:
    """The file's mapping with the matrix axes -D gives; an axis neither in the matrix nor used as ${AXIS}
    is refused with the axes there are."""
    if not axes:
        return raw
    given = raw.get("matrix")
    matrix: dict = given if isinstance(given, dict) else {}
    used = {name for _, name in _placeholders({k: v for k, v in raw.items() if k not in TEMPLATE_KEYS})}
    for axis in axes:
        if axis not in matrix and axis not in used:
            known = list(matrix) or sorted(used)
            hint = did_you_mean(axis, known)
            raise UsageError(
                f"{display}: -D {axis}: the scenario has no axis {axis!r} and uses no ${{{axis}}}; "
                f"{hint + ' ' if hint else ''}axes are: {', '.join(known) or 'none'}"
            )
    exclude = raw.get("exclude")
    if isinstance(exclude, list):  # an exclusion of a value -D left out excludes nothing now
        exclude = [
            rule for rule in exclude if not isinstance(rule, dict) or all(rule[a] in axes[a] for a in axes if a in rule)
        ]
        raw = raw | {"exclude": exclude}
    return raw | {"matrix": {**matrix, **axes}}


def _parse(text: str, display: str, path: Path | None, axes: Mapping[str, list]) -> ScenarioFile:
    try:
        raw, positions = load(text)
    except YamlError as exc:
        hint = exc.hint
        lines = text.splitlines()
        line = lines[exc.position.line - 1] if exc.position and exc.position.line <= len(lines) else ""
        if exc.message.startswith("not valid YAML") and "${" in line and "{" in line.replace("${", ""):
            hint = 'inside { } a placeholder must be quoted: "${axis}", or use block style'
        raise ScenarioError(display, [(exc.position, Problem(exc.path, exc.message, hint))]) from None

    def fail(problems: list[Problem], where: Positions) -> ScenarioError:
        return ScenarioError(display, [(where.of(p.path, p.at_key), p) for p in problems])

    if raw is None:
        raise fail(
            [
                Problem(
                    (),
                    "the file is empty (or only comments); a scenario is a mapping with name, nodes, "
                    "links and benchmarks",
                )
            ],
            positions,
        )
    if not isinstance(raw, dict):
        raise fail([Problem((), "a scenario is a mapping with name, nodes, links and benchmarks")], positions)
    raw = _overridden(raw, axes, display)
    matrix = raw.get("matrix") or {}
    exclude = raw.get("exclude") or []
    body = {key: value for key, value in raw.items() if key not in TEMPLATE_KEYS}
    problems = _check_matrix(matrix)
    if not problems:
        problems = _check_exclude(exclude, matrix) + _check_placeholders(body, matrix)
    if problems:
        raise fail(problems, positions)
    cells, problems = _expand(body, matrix, exclude, path.resolve().parent if path else None)
    if problems:
        raise fail(problems, positions)
    return ScenarioFile(path or Path(display), display, matrix, cells, text)


def load_scenario(path: Path, axes: Mapping[str, list] | None = None) -> ScenarioFile:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such scenario file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    return parse(decode(data, str(path)), str(path), path, axes)


def decode(data: bytes, display: str) -> str:
    """The file's text; bytes that are not UTF-8 are a problem of the file, reported where they are."""
    try:
        return data.decode("utf-8-sig")  # without a byte-order mark, which would count as a column
    except UnicodeDecodeError as exc:
        before = exc.object[: exc.start].decode("utf-8")  # exc.object: the bytes after the mark, if there is one
        bad = exc.object[exc.start : exc.end]
        problem = Problem(
            (),
            f"the file is not UTF-8 text: {'byte' if len(bad) == 1 else 'bytes'} "
            f"{' '.join(f'0x{byte:02x}' for byte in bad)} cannot be decoded ({exc.reason})",
            "save the file as UTF-8",
        )
        raise ScenarioError(display, [(position_at(before, len(before)), problem)]) from None
