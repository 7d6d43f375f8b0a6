"""Load YAML into plain data and remember where each value came from.

`load` returns the data and a map from a path in the document (a tuple of
keys and indexes, like pydantic's error `loc`) to the (line, column) where it
starts, 1-based, so errors can name the exact spot. Duplicate keys, which
PyYAML silently accepts, are errors here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from yaml.constructor import SafeConstructor

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Position:
    line: int
    column: int


class YamlError(Exception):
    def __init__(self, message: str, position: Position | None):
        super().__init__(message)
        self.message = message
        self.position = position


class _Constructor(SafeConstructor):
    pass


def _build(node: yaml.Node, path: Path_, positions: dict[Path_, Position], constructor: _Constructor):
    positions[path] = Position(node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        constructor.flatten_mapping(node)
        result: dict = {}
        for key_node, value_node in node.value:
            key = constructor.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or isinstance(key, bool):
                raise YamlError(f"a mapping key must be a name, not {key!r}",
                                Position(key_node.start_mark.line + 1, key_node.start_mark.column + 1))
            key = str(key)
            if key in result:
                raise YamlError(f"duplicate key '{key}'",
                                Position(key_node.start_mark.line + 1, key_node.start_mark.column + 1))
            result[key] = _build(value_node, path + (key,), positions, constructor)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), positions, constructor) for i, item in enumerate(node.value)]
    return constructor.construct_object(node)


def load(text: str) -> tuple[object, dict[Path_, Position]]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        position = Position(mark.line + 1, mark.column + 1) if mark else None
        raise YamlError(f"not valid YAML: {exc.problem}", position) from None
    positions: dict[Path_, Position] = {}
    if node is None:
        return None, positions
    return _build(node, (), positions, _Constructor()), positions


def load_file(path: Path) -> tuple[object, dict[Path_, Position]]:
    return load(path.read_text())


def format_path(path: Path_) -> str:
    """('links', 0, 'nic') -> links[0].nic"""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def position_of(path: Path_, positions: dict[Path_, Position]) -> Position | None:
    """The position of `path`, or of its nearest ancestor that has one."""
    for end in range(len(path), -1, -1):
        if (found := positions.get(tuple(path[:end]))) is not None:
            return found
    return None
