"""Scenario files: load, validate, and expand the matrix into cells.

A scenario file is YAML. Loading keeps the position of every value, so each
problem is reported as FILE:LINE:COLUMN: PATH: what is wrong; hint. A file
with a `matrix:` is a template: `${axis}` is substituted per cell, then each
cell is validated as a concrete Scenario.
"""

from __future__ import annotations

import difflib
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from niclab import bench, nics
from niclab.errors import UsageError
from niclab.topology import NodeSpec, Port, Topology, Wire, port_ifname
from niclab.yamlpos import Path_, Position, YamlError, format_path, load, position_of

NAME_RE = r"^[a-z0-9][a-z0-9-]*$"
PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Problem(BaseModel):
    path: tuple[str | int, ...]
    message: str
    hint: str = ""


class ScenarioError(UsageError):
    """One or more problems in a scenario file, each with its position."""

    def __init__(self, file: str, problems: list[tuple[Position | None, Problem]]):
        self.file = file
        self.problems = problems
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        out = []
        for position, problem in self.problems:
            where = f"{self.file}:{position.line}:{position.column}" if position else self.file
            text = f"{where}: {format_path(problem.path)}: {problem.message}"
            out.append(f"{text}; {problem.hint}" if problem.hint else text)
        return out


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _memory_mib(value: Any) -> int:
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"\s*(\d+)\s*([MG])i?B?\s*", str(value), re.IGNORECASE)
    if not match:
        raise ValueError(f"memory {value!r} needs a unit: 256M or 1G")
    return int(match[1]) * (1024 if match[2].upper() == "G" else 1)


class NodeOptions(_Strict):
    cpus: int = Field(1, ge=1, le=16)
    memory: int = Field(256, description="MiB; YAML may say 256M or 1G")

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> int:
        mib = _memory_mib(value)
        if not 64 <= mib <= 65536:
            raise ValueError(f"memory {mib} MiB is outside 64M..64G")
        return mib


class Link(_Strict):
    between: list[str] = Field(min_length=2)
    nic: str | dict[str, str]
    count: int = Field(1, ge=1, le=8)
    mtu: int = Field(1500, ge=68, le=65535)

    def model_for(self, node: str) -> str:
        return self.nic if isinstance(self.nic, str) else self.nic[node]


class BenchmarkSpec(BaseModel):
    tool: str
    options: bench.BenchOptions

    @property
    def plugin(self) -> bench.Benchmark:
        return bench.get(self.tool)

    def describe(self) -> str:
        return self.plugin.describe(self.options)


class Scenario(_Strict):
    name: str = Field(pattern=NAME_RE)
    description: str = ""
    nodes: dict[str, NodeOptions]
    links: list[Link] = Field(min_length=1)
    benchmarks: list[BenchmarkSpec] = Field(default_factory=list)

    @field_validator("nodes", mode="before")
    @classmethod
    def _nodes(cls, value: Any) -> Any:
        if isinstance(value, list):
            return {name: {} for name in value} if all(isinstance(n, str) for n in value) else value
        if isinstance(value, dict):
            return {name: ({} if options is None else options) for name, options in value.items()}
        return value

    @field_validator("benchmarks", mode="before")
    @classmethod
    def _benchmarks(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        specs, problems = [], []
        for i, item in enumerate(value):
            try:
                specs.append(_benchmark_spec(item))
            except _Problems as exc:
                problems += [Problem(path=(i, *p.path), message=p.message, hint=p.hint) for p in exc.problems]
        if problems:
            raise _Problems(problems)
        return specs

    @model_validator(mode="after")
    def _semantics(self) -> "Scenario":
        problems: list[Problem] = []
        for name in self.nodes:
            if not re.match(NAME_RE, name):
                problems.append(Problem(path=("nodes", name), message=f"node name {name!r} must match [a-z0-9-]+"))
        for i, link in enumerate(self.links):
            problems += _link_problems(i, link, self.nodes)
        for i, spec in enumerate(self.benchmarks):
            options = spec.options
            for end in ("from_", "to"):
                node = getattr(options, end)
                if node is not None and node not in self.nodes:
                    problems.append(Problem(path=("benchmarks", i, spec.tool, end.rstrip("_")),
                                            message=f"unknown node {node!r}", hint=_did_you_mean(node, self.nodes)))
            if options.link >= len(self.links):
                problems.append(Problem(path=("benchmarks", i, spec.tool, "link"),
                                        message=f"there is no link {options.link} (links are 0..{len(self.links) - 1})"))
        if problems:
            raise _Problems(problems)
        return self

    def topology(self) -> Topology:
        ports: dict[str, list[Port]] = {name: [] for name in self.nodes}
        wires = []
        for i, link in enumerate(self.links):
            for lane in range(link.count):
                ends = tuple(Port(node, i, lane, nics.get(link.model_for(node)).name,
                                  port_ifname(i, lane, link.count)) for node in link.between)
                for port in ends:
                    ports[port.node].append(port)
                wires.append(Wire(i, lane, ends))
        nodes = tuple(NodeSpec(name, index, options.cpus, options.memory, tuple(ports[name]))
                      for index, (name, options) in enumerate(self.nodes.items()))
        return Topology(nodes, tuple(wires))


class _Problems(ValueError):
    """Raised inside validators to report problems with their own paths."""

    def __init__(self, problems: list[Problem]):
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems


def _did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f"did you mean '{close[0]}'?" if close else ""


def _link_problems(i: int, link: Link, nodes: dict[str, NodeOptions]) -> list[Problem]:
    problems = []
    for j, node in enumerate(link.between):
        if node not in nodes:
            problems.append(Problem(path=("links", i, "between", j), message=f"unknown node {node!r}",
                                    hint=_did_you_mean(node, nodes) or f"nodes are: {', '.join(nodes)}"))
    if len(set(link.between)) != len(link.between):
        problems.append(Problem(path=("links", i, "between"), message="a node appears twice in the same link"))
    per_end = {} if isinstance(link.nic, str) else link.nic
    for node in per_end:
        if node not in link.between:
            problems.append(Problem(path=("links", i, "nic", node),
                                    message=f"{node!r} is not an end of this link ({', '.join(link.between)})"))
    for node in link.between:
        if per_end and node not in per_end:
            problems.append(Problem(path=("links", i, "nic"), message=f"no NIC model for end {node!r}"))
    models = [(("links", i, "nic"), link.nic)] if isinstance(link.nic, str) else \
        [(("links", i, "nic", node), model) for node, model in per_end.items()]
    for path, model in models:
        found = nics.lookup(model)
        if found is None:
            hint = _did_you_mean(model, nics.names())
            problems.append(Problem(path=path, message=f"unknown NIC model {model!r}",
                                    hint=f"{hint + ' ' if hint else ''}run 'niclab nics' for the list"))
        elif link.mtu > found.max_mtu:
            problems.append(Problem(path=("links", i, "mtu"),
                                    message=f"MTU {link.mtu} is above the {found.name} driver's maximum "
                                            f"({found.max_mtu})",
                                    hint=f"use an MTU up to {found.max_mtu} or a model that takes jumbo frames"))
    return problems


def _benchmark_spec(item: Any) -> Any:
    if isinstance(item, BenchmarkSpec):
        return item
    if isinstance(item, str):
        item = {item: {}}
    if not isinstance(item, dict) or len(item) != 1:
        raise _Problems([Problem(path=(), message="each benchmark is one tool name with its options, "
                                                  "e.g. {netperf: {test: TCP_RR}}")])
    (tool, options), = item.items()
    if tool not in bench.REGISTRY:
        hint = _did_you_mean(tool, bench.REGISTRY)
        raise _Problems([Problem(path=(tool,), message=f"unknown benchmark {tool!r}",
                                 hint=f"{hint + ' ' if hint else ''}benchmarks are: {', '.join(bench.REGISTRY)}")])
    try:
        parsed = bench.get(tool).Options.model_validate(options or {})
    except ValidationError as exc:
        raise _Problems([Problem(path=(tool, *err["loc"]), message=_pydantic_message(err))
                         for err in exc.errors()]) from None
    return BenchmarkSpec(tool=tool, options=parsed)


def _pydantic_message(err: dict) -> str:
    kind = err["type"]
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "unknown key"
    message = err["msg"]
    return message.removeprefix("Value error, ")


# -- files, templates and cells -------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One combination of the matrix axes, with the concrete scenario it gives."""

    id: str
    params: dict[str, Any]
    scenario: Scenario


@dataclass
class ScenarioFile:
    path: Path
    display: str
    raw: dict
    positions: dict[Path_, Position]
    matrix: dict[str, list]
    cells: list[Cell]

    @property
    def name(self) -> str:
        return self.cells[0].scenario.name

    def select(self, wanted: list[str] | None) -> list[Cell]:
        if not wanted:
            return self.cells
        by_id = {cell.id: cell for cell in self.cells}
        chosen = []
        for cell_id in wanted:
            if cell_id not in by_id:
                hint = _did_you_mean(cell_id, by_id)
                raise UsageError(f"{self.display}: no cell {cell_id!r}; "
                                 f"{hint + ' ' if hint else ''}cells are: {', '.join(by_id)}")
            chosen.append(by_id[cell_id])
        return chosen


def _substitute(value: Any, params: dict[str, Any]) -> Any:
    if isinstance(value, str):
        whole = PLACEHOLDER.fullmatch(value)
        if whole and whole[1] in params:
            return params[whole[1]]
        return PLACEHOLDER.sub(lambda m: str(params.get(m[1], m[0])), value)
    if isinstance(value, list):
        return [_substitute(v, params) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, params) for k, v in value.items()}
    return value


def _errors_to_problems(exc: ValidationError) -> list[Problem]:
    problems: list[Problem] = []
    for err in exc.errors():
        loc = tuple(part for part in err["loc"] if part not in ("function-after[_semantics(), Scenario]",))
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, _Problems):
            problems += [Problem(path=loc + p.path, message=p.message, hint=p.hint) for p in ctx_error.problems]
        else:
            problems.append(Problem(path=loc, message=_pydantic_message(err)))
    return problems


def cell_id(params: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in params.items()) or "default"


def parse(text: str, display: str, path: Path | None = None) -> ScenarioFile:
    try:
        raw, positions = load(text)
    except YamlError as exc:
        raise ScenarioError(display, [(exc.position, Problem(path=(), message=exc.message))]) from None
    if not isinstance(raw, dict):
        raise ScenarioError(display, [(Position(1, 1), Problem(
            path=(), message="a scenario is a mapping with name, nodes, links and benchmarks"))])

    def fail(problems: list[Problem]) -> ScenarioError:
        return ScenarioError(display, [(position_of(p.path, positions), p) for p in problems])

    matrix = raw.pop("matrix", None) or {}
    if not isinstance(matrix, dict) or not all(isinstance(v, list) and v for v in matrix.values()):
        raise fail([Problem(path=("matrix",), message="matrix maps each axis to a non-empty list of values")])
    cells: list[Cell] = []
    for combo in itertools.product(*matrix.values()):
        params = dict(zip(matrix, combo))
        try:
            scenario = Scenario.model_validate(_substitute(raw, params))
        except ValidationError as exc:
            raise fail(_errors_to_problems(exc)) from None
        cells.append(Cell(cell_id(params), params, scenario))
    raw["matrix"] = matrix
    return ScenarioFile(path or Path(display), display, raw, positions, matrix, cells)


def load_scenario(path: Path) -> ScenarioFile:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such scenario file") from None
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror}") from None
    return parse(text, str(path), path)
