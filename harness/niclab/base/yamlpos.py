"""Load YAML into plain data and remember where each value came from.

`load` returns the data and its Positions: for a path in the document (keys and indexes, like pydantic's
`loc`), the 1-based (line, column) of the value and of its key. Whatever the text, it returns or raises
YamlError with a position: duplicate keys, tags, values PyYAML cannot convert, deep nesting, self-referring
aliases and alias bombs are refused before anything expands (docs/scenarios.md, "Errors").
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

import yaml
from yaml.constructor import ConstructorError

Path_ = tuple[str | int, ...]

MAX_DEPTH = 64  # levels of nested lists and mappings; a scenario needs about 6
SHOWN_LEVELS = 4  # of the path, in an error about nesting
MAX_VALUES = 100_000  # values in the document once its aliases are expanded
MAX_DIGITS = 100  # in a whole number; larger ones are typos (and Python converts at most 4300)
MAX_BYTES = 512 * 1024  # of the file: a scenario is a few kB, and PyYAML reads about 100 kB/s
YAML_TAG = "tag:yaml.org,2002:"


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


def position_at(text: str, index: int) -> Position:
    """The line and column of the character at `index`, as editors, grep and sed count them.

    Only \\n ends a line: YAML also counts \\r, U+0085, U+2028 and U+2029, and
    its marks would name line 56 of a file that has 9.
    """
    start = text.rfind("\n", 0, index) + 1
    return Position(text.count("\n", 0, index) + 1, index - start + 1)


def _tag(tag: str) -> str:
    return "!!" + tag[len(YAML_TAG) :] if tag.startswith(YAML_TAG) else tag


class _Loader(yaml.SafeLoader):
    """SafeLoader that bounds what composing may build: depth, self-reference, and size after expansion."""

    def __init__(self, text: str):
        super().__init__(text)
        self.depth = 0
        self.open_anchors: set[str] = set()
        self.sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values once expanded, depth once expanded)
        self.composed = 0  # nodes written in the text (an alias is not one)
        self.path: list = []  # of the node being composed, for errors
        self.line_starts = [0, *(match.end() for match in re.finditer("\n", text))]

    def position(self, index: int) -> Position:
        """Position of the character at `index` (see position_at), in log time."""
        line = bisect.bisect_right(self.line_starts, index)
        return Position(line, index - self.line_starts[line - 1] + 1)

    def mark(self, node_or_event: yaml.Node | yaml.Event) -> Position:
        start = node_or_event.start_mark
        assert start is not None, "the parser marks where every event starts"
        return self.position(start.index)

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if parent is not None:  # index: the key's node in a mapping, the position in a list
            self.path.append(index if isinstance(index, int) else getattr(index, "value", "?"))
        try:
            return self._compose(parent, index)
        finally:
            if parent is not None:
                self.path.pop()

    def _where(self) -> Path_:
        """The path being composed, cut short: the first levels say where a runaway nesting starts."""
        return tuple(part if isinstance(part, int) else str(part) for part in self.path[:SHOWN_LEVELS])

    def _compose(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if event.anchor in self.open_anchors:
                raise YamlError(
                    f"the alias *{event.anchor} is inside the value &{event.anchor} it names, "
                    "so that value would never end",
                    self.mark(event),
                    self._where(),
                    hint="an alias may only repeat a value that is complete before it",
                )
            return super().compose_node(parent, index)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise YamlError(
                f"lists and mappings are nested more than {MAX_DEPTH} levels deep here",
                self.mark(event),
                self._where(),
                hint="a scenario needs only a few levels; check the brackets",
            )
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self.open_anchors.add(anchor)
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
            self.open_anchors.discard(anchor)
        self.composed += 1
        if node is not None:
            self._measure(node)
        return node

    def _measure(self, node: yaml.Node) -> None:
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        else:
            children = []
        measured = [self.sizes[id(child)] for child in children]
        size = 1 + sum(values for values, _ in measured)
        depth = 1 + max((levels for _, levels in measured), default=0)
        self.sizes[id(node)] = (size, depth)
        if size > MAX_VALUES:
            if self.composed < size:
                raise YamlError(
                    f"through its aliases this value expands to more than {MAX_VALUES:,} values (an alias bomb?)",
                    self.mark(node),
                    self._where(),
                    hint="write the values out, or repeat fewer of them with aliases (*name)",
                )
            raise YamlError(
                f"the document has more than {MAX_VALUES:,} values",
                self.mark(node),
                self._where(),
                hint="a scenario needs far fewer; use a matrix instead of writing cells out",
            )
        if depth > MAX_DEPTH:
            raise YamlError(
                f"through its aliases this value is nested more than {MAX_DEPTH} levels deep",
                self.mark(node),
                self._where(),
                hint="a scenario needs only a few levels; repeat fewer aliases",
            )


def _scalar(node: yaml.ScalarNode, loader: _Loader, path: Path_) -> object:
    """The value of a scalar, or YamlError when PyYAML cannot make one of its text."""
    implicit = loader.resolve(yaml.ScalarNode, node.value, (True, False)) == node.tag
    if node.tag == YAML_TAG + "timestamp" and implicit:
        return node.value  # a date means nothing in a scenario: keep the text (and 2024-13-45 is no error)
    if node.tag == YAML_TAG + "int" and len(node.value) > 4 * MAX_DIGITS:
        raise YamlError(
            f"the number {node.value[:20]}… ({len(node.value):,} characters) is too large",
            loader.mark(node),
            path,
            hint=f"whole numbers here have at most {MAX_DIGITS} digits",
        )
    try:
        value = loader.construct_object(node)
    except ConstructorError as exc:
        if "could not determine a constructor" in str(exc.problem):
            raise YamlError(
                f"unknown tag '{_tag(node.tag)}'",
                loader.mark(node),
                path,
                hint="a scenario is plain YAML: remove the tag",
            ) from None
        raise YamlError(
            f"{_tag(node.tag)} cannot be written as {_short(node.value)}",
            loader.mark(node),
            path,
            hint="remove the tag",
        ) from None
    except (ValueError, TypeError, AttributeError, IndexError, KeyError, OverflowError):
        kind = {
            "int": "a whole number",
            "float": "a number",
            "bool": "true or false",
            "timestamp": "a date",
            "binary": "base64 data",
        }.get(node.tag[len(YAML_TAG) :], _tag(node.tag))
        if implicit:
            raise YamlError(
                f"{_short(node.value)} looks like {kind} but is not one",
                loader.mark(node),
                path,
                hint=f'quote it if it is meant as text: "{node.value}"'
                if len(node.value) <= 60
                else "quote it if it is text",
            ) from None
        raise YamlError(
            f"{_short(node.value)} is not {kind}, as its tag {_tag(node.tag)} says",
            loader.mark(node),
            path,
            hint="remove the tag, or fix the value",
        ) from None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**MAX_DIGITS:
        raise YamlError(
            f"the number {node.value[:20]}… ({len(node.value):,} characters) is too large",
            loader.mark(node),
            path,
            hint=f"whole numbers here have at most {MAX_DIGITS} digits",
        )
    return value


def _build(node: yaml.Node, path: Path_, positions: Positions, loader: _Loader) -> object:
    positions.values[path] = loader.mark(node)
    if isinstance(node, yaml.ScalarNode):
        return _scalar(node, loader, path)
    default = YAML_TAG + ("map" if isinstance(node, yaml.MappingNode) else "seq")
    if node.tag != default:
        raise YamlError(
            f"unknown tag '{_tag(node.tag)}'"
            if not node.tag.startswith(YAML_TAG)
            else f"the tag {_tag(node.tag)} has no place in a scenario",
            loader.mark(node),
            path,
            "a scenario is plain YAML: remove the tag",
        )
    if not isinstance(node, yaml.MappingNode):
        return [_build(item, path + (i,), positions, loader) for i, item in enumerate(node.value)]
    merges = [key for key, _ in node.value if key.tag == YAML_TAG + "merge"]
    try:
        loader.flatten_mapping(node)  # merge keys (<<)
    except ConstructorError:
        raise YamlError(
            "a merge key (<<) takes a mapping or a list of mappings, e.g. <<: *defaults",
            loader.mark(merges[0] if merges else node),
            path + ("<<",),
        ) from None
    result: dict = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
            raise YamlError(f"a mapping key must be a name, not a {kind}", loader.mark(key_node), path)
        key = _scalar(key_node, loader, path)
        if not isinstance(key, (str, int, float)) or isinstance(key, bool):
            raise YamlError(f"a mapping key must be a name, not {_short(key)}", loader.mark(key_node), path)
        key = str(key)
        if key in result:
            raise YamlError(
                f"duplicate key {_short(key)}",
                loader.mark(key_node),
                path + (key,),
                "each key may appear once in a mapping",
            )
        positions.keys[path + (key,)] = loader.mark(key_node)
        result[key] = _build(value_node, path + (key,), positions, loader)
    return result


def load(text: str) -> tuple[object, Positions]:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise YamlError(f"the file is {size:,} bytes; a scenario file is at most {MAX_BYTES // 1024} KiB", None)
    if (bad := yaml.reader.Reader.NON_PRINTABLE.search(text)) is not None:
        raise YamlError(
            f"the character {bad[0]!r} (U+{ord(bad[0]):04X}) is not allowed in YAML",
            position_at(text, bad.start()),
            hint=f'delete it; inside double quotes it can be written as an escape: "{_escaped(bad[0])}"',
        )
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        position = loader.position(mark.index) if mark else None
        hint = "check the indentation of this line against the lines above" if "block" in str(exc.problem) else ""
        raise YamlError(f"not valid YAML: {exc.problem}", position, hint=hint) from None
    except (ValueError, OverflowError) as exc:  # PyYAML's scanner calls chr() and int() on what it reads
        index = loader.get_mark().index
        if "chr()" in str(exc):  # the reader is at the escape's hex digits, after \\U
            message, hint, index = (
                "not valid YAML: this escape names no character",
                "the last is \\U0010ffff",
                index - 2,
            )
        else:
            message, hint = "not valid YAML: a number here has too many digits", ""
        raise YamlError(message, loader.position(index), hint=hint) from None
    finally:
        loader.dispose()
    positions = Positions({}, {})
    if node is None:
        return None, positions
    return _build(node, (), positions, loader), positions


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _short(value: object, limit: int = 60) -> str:
    """repr(value), with the middle cut out when longer than `limit`."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit // 2 - 2]}...{text[-(limit // 2 - 2) :]}"


def format_path(path: Path_) -> str:
    """('links', 0, 'nic') -> links[0].nic; a key that is not a plain word is quoted: prices['a.b']"""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif PLAIN_KEY.fullmatch(part) and len(part) <= 60:
            text += f".{part}" if text else part
        else:  # quoted, and cut short if long: a key may be any text, 100 kB of it
            text += f"[{_short(part)}]"
    return text or "(top level)"


PLAIN_KEY = re.compile(r"[^\s.\[\]'\"\\:,]+")
