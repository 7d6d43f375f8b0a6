"""Load YAML into plain data and remember where each value came from.

`load` returns the data and its Positions: for a path in the document (a
tuple of keys and indexes, like pydantic's error `loc`), the (line, column),
1-based, where the value starts and where its key is written, so errors can
name the exact spot. Duplicate keys, which PyYAML silently accepts, are
errors here.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml
from yaml.constructor import SafeConstructor

Path_ = tuple[str | int, ...]


@dataclass(frozen=True, order=True)
class Position:
    line: int
    column: int


@dataclass
class Positions:
    values: dict[Path_, Position]
    keys: dict[Path_, Position]

    def of(self, path: Path_, at_key: bool = False) -> Position | None:
        """Where `path` is written (its key if asked and known), else its nearest ancestor."""
        if at_key and (found := self.keys.get(tuple(path))) is not None:
            return found
        for end in range(len(path), -1, -1):
            if (found := self.values.get(tuple(path[:end]))) is not None:
                return found
        return None


class YamlError(Exception):
    def __init__(self, message: str, position: Position | None, path: Path_ = (), hint: str = ""):
        super().__init__(message)
        self.message = message
        self.position = position
        self.path = path
        self.hint = hint


class _Constructor(SafeConstructor):
    pass


def _mark(node: yaml.Node) -> Position:
    return Position(node.start_mark.line + 1, node.start_mark.column + 1)


def _build(node: yaml.Node, path: Path_, positions: Positions, constructor: _Constructor):
    positions.values[path] = _mark(node)
    if isinstance(node, yaml.MappingNode):
        constructor.flatten_mapping(node)
        result: dict = {}
        for key_node, value_node in node.value:
            key = constructor.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float)) or isinstance(key, bool):
                raise YamlError(f"a mapping key must be a name, not {key!r}", _mark(key_node), path)
            key = str(key)
            if key in result:
                raise YamlError(f"duplicate key '{key}'", _mark(key_node), path + (key,),
                                "each key may appear once in a mapping")
            positions.keys[path + (key,)] = _mark(key_node)
            result[key] = _build(value_node, path + (key,), positions, constructor)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), positions, constructor) for i, item in enumerate(node.value)]
    return constructor.construct_object(node)


def load(text: str) -> tuple[object, Positions]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        position = Position(mark.line + 1, mark.column + 1) if mark else None
        hint = "check the indentation of this line against the lines above" if "block" in str(exc.problem) else ""
        raise YamlError(f"not valid YAML: {exc.problem}", position, hint=hint) from None
    positions = Positions({}, {})
    if node is None:
        return None, positions
    return _build(node, (), positions, _Constructor()), positions


def format_path(path: Path_) -> str:
    """('links', 0, 'nic') -> links[0].nic"""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"
