"""The reader of run directories, which are untrusted (a colleague's, or CI's): results.jsonl and run.json.

Only regular files, within size limits per file and per line, nesting at most MAX_DEPTH levels, finite numbers
and Unicode text; each defect is one RunDirError naming the file and the line ("runs/x/results.jsonl:57:
measurement without 'cell'"). A last line cut off by a killed run is dropped with a warning.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from pydantic import ValidationError

from niclab.base import jsonbound
from niclab.base.errors import NiclabError
from niclab.run.records import FORMAT_VERSION, KINDS, RECORD, Record, RunInfoRecord

MAX_RESULTS_BYTES = 1 << 30  # results.jsonl: a sweep of 20,000 cells is about 57 MB
MAX_INFO_BYTES = 16 << 20  # run.json: its scenario text is at most 512 KiB
MAX_LINE_BYTES = 4 << 20  # one record of results.jsonl: the runner's are up to about 10 kB
# JSON values (about: commas and colons) in one file: what memory the records take grows with their count
# (some 100 bytes each in Python), not with their bytes; a sweep of 20,000 cells has about 6 million
MAX_VALUES = 20_000_000
MAX_DEPTH = 64  # levels of nested objects and arrays in a record; the runner's go about 6 deep
PARSE_DEPTH = 512  # parsed up to this (then MAX_DEPTH is judged with the path named); deeper is refused unparsed
SHOWN_LEVELS = 8  # of a path into a record, in a message
MAX_INT = 2**64  # whole numbers beyond this are refused (they do not fit a float, and no counter gets there)

Warn = Callable[[str], None]


class RunDirError(NiclabError):
    """A file of a run directory niclab will not read: one line naming it (and the line), and what is wrong."""


def warn_on_stderr(message: str) -> None:
    print(f"niclab: warning: {message}", file=sys.stderr)


def _file_kind(mode: int) -> str:
    return {
        stat.S_IFIFO: "a FIFO",
        stat.S_IFCHR: "a character device",
        stat.S_IFBLK: "a block device",
        stat.S_IFDIR: "a directory",
        stat.S_IFSOCK: "a socket",
        stat.S_IFLNK: "a symbolic link",
    }.get(stat.S_IFMT(mode), "not a regular file")


def open_regular(path: Path, limit: int) -> BinaryIO:
    """`path` opened for reading, if it is a regular file (not a symlink, FIFO or device) of at most `limit` bytes.

    FileNotFoundError when it does not exist; RunDirError for anything else in the way.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP and path.is_symlink():
            raise RunDirError(f"{path}: a symbolic link; niclab reads only regular files in a run directory") from None
        raise RunDirError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise RunDirError(
                f"{path}: {_file_kind(status.st_mode)}, not a regular file; niclab reads only regular files "
                "in a run directory"
            )
        if status.st_size > limit:
            raise RunDirError(f"{path}: {status.st_size:,} bytes, more than the {_size(limit)} niclab reads")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _size(count: int) -> str:
    if count >= 1 << 30:
        return f"{count / (1 << 30):g} GiB"
    return f"{count / (1 << 20):g} MiB" if count >= 1 << 20 else f"{count:,} bytes"


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,40}")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # how a lone surrogate reaches a JSON text
_NUMBER_BYTES = bytes.maketrans(b"0123456789E-", b"0000000000e+")  # digits as 0, exponents as e, signs as +
_SURROGATE = re.compile("[\ud800-\udfff]")


def shown(value: Any, limit: int = 40) -> str:
    """A value as a message quotes it: on one line, at most about `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def where(loc: tuple) -> str:
    """A path into a record as a message names it: nics.a.ports, samples[3], offloads['rx on'];
    past SHOWN_LEVELS steps it ends in …."""
    parts = []
    for step in loc[:SHOWN_LEVELS]:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif _NAME.fullmatch(step):
            parts.append(("." if parts else "") + step)
        else:
            parts.append(f"[{shown(step)}]")
    return "".join(parts) + ("…" if len(loc) > SHOWN_LEVELS else "")


class Suspects(NamedTuple):
    """What a JSON text may hold that a record may not, judged on its bytes (cheap: most records need no walk)."""

    deep: bool  # nesting past MAX_DEPTH takes at least as many brackets
    numbers: bool  # inf, nan or a whole number past MAX_INT: NaN, Infinity, 1e400, or 20 digits in a row
    surrogates: bool  # a lone surrogate comes as an escape, \ud800 to \udfff

    @classmethod
    def of(cls, data: bytes) -> Suspects:
        digits = data.translate(_NUMBER_BYTES)
        return cls(
            data.count(b"[") + data.count(b"{") >= MAX_DEPTH,
            b"NaN" in data or b"Infinity" in data or b"0" * 20 in digits or b"0e000" in digits or b"0e+000" in digits,
            b"\\u" in data and _SURROGATE_ESCAPE.search(data) is not None,
        )


def _odd_value(value: Any, suspects: Suspects) -> tuple[tuple, str] | None:
    """The first value of a parsed JSON text that a record may not hold, and what is wrong with it.

    Nesting deeper than MAX_DEPTH, inf and nan (Python's json reads Infinity, NaN and 1e400 so),
    whole numbers beyond MAX_INT, and text with a lone surrogate (not Unicode: no file can hold it).
    Only containers are visited unless numbers or text are suspect.
    """
    scalars = suspects.numbers or suspects.surrogates
    stack: list[tuple[Any, tuple, int]] = [(value, (), 0)]
    while stack:
        item, at, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                return at, f"is nested more than {MAX_DEPTH} levels deep"
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend(
                reversed([(v, (*at, k), depth + 1) for k, v in pairs if scalars or isinstance(v, dict | list)])
            )
            if suspects.surrogates and isinstance(item, dict):
                stack.extend((k, (*at, k), depth + 1) for k in item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                return at, f"is {item}"
        elif isinstance(item, int) and not isinstance(item, bool):
            if abs(item) > MAX_INT:
                return at, "is a whole number too large (more than 2**64)"
        elif suspects.surrogates and isinstance(item, str) and _SURROGATE.search(item):
            return at, "holds a lone surrogate (\\ud800-\\udfff), which is not text"
    return None


def _kind(record: Any) -> str:
    kind = record.get("type") if isinstance(record, dict) else None
    return kind if isinstance(kind, str) and kind in KINDS else "record"


def _problem(error: Any, kind: str) -> str:
    """One pydantic error as a message names it: `measurement without 'cell'`, `summary n: should be ...`."""
    loc = tuple(error["loc"])
    if error["type"] == "union_tag_not_found":
        return "a record without 'type'"
    if error["type"] == "union_tag_invalid":
        return f"unknown record type {shown(error['input'].get('type'))}; the types are {', '.join(KINDS)}"
    if loc and loc[0] in KINDS:
        loc = loc[1:]
    prefix = f"{kind} " if kind else ""
    if error["type"] == "missing":
        inside = where(loc[:-1])
        return f"{prefix}{inside + ' ' if inside else ''}without {shown(loc[-1])}"
    message = error["msg"]
    message = re.sub(r" or instance of \w+", "", message.removeprefix("Value error, ").removeprefix("Input "))
    named = where(loc)
    if error["type"] in ("model_type", "model_attributes_type", "dict_type") and not loc:
        return f"{prefix.strip() or 'the file'}: not a JSON object"
    got = "" if error["type"] == "value_error" else f", not {shown(error['input'])}"
    return f"{prefix}{named + ': ' if named else ''}{message}{got}"


def _first_problem(exc: ValidationError, kind: str) -> str:
    return _problem(exc.errors(include_url=False)[0], kind)


def read_results(path: Path, warn: Warn = warn_on_stderr) -> Iterator[tuple[int, Record]]:
    """Each record of a results.jsonl with its line number, validated; RunDirError at the first defect.

    Read line by line: a file of up to MAX_RESULTS_BYTES, lines of up to MAX_LINE_BYTES. A cut-off
    last line (a run killed while writing it) is dropped, and `warn` says so.
    """
    with open_regular(path, MAX_RESULTS_BYTES) as source:
        total, number, values = 0, 0, 0
        while True:
            line = source.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            number += 1
            total += len(line)
            if len(line) > MAX_LINE_BYTES:
                raise RunDirError(f"{path}:{number}: the line is longer than {_size(MAX_LINE_BYTES)}")
            if total > MAX_RESULTS_BYTES:
                raise RunDirError(f"{path}: more than the {_size(MAX_RESULTS_BYTES)} niclab reads")
            values += line.count(b",") + line.count(b":")
            if values > MAX_VALUES:
                raise RunDirError(f"{path}:{number}: more than the {MAX_VALUES:,} values niclab reads in one file")
            if not line.strip():
                continue
            last = not line.endswith(b"\n")
            try:
                record = jsonbound.loads(line.decode("utf-8"), PARSE_DEPTH)
            except ValueError as exc:
                if last:
                    warn(f"{path}: the last line is cut off (the run was killed while writing it); dropped it")
                    return
                raise RunDirError(
                    f"{path}:{number}: not a results record ({_why_not_json(exc)}); the file is damaged"
                ) from None
            suspects = Suspects.of(line)
            del line
            yield number, _validated(record, path, number, suspects)


def _why_not_json(exc: Exception) -> str:
    if isinstance(exc, jsonbound.TooDeep):
        return f"nested more than {MAX_DEPTH} levels deep"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8: byte 0x{exc.object[exc.start]:02x} at column {exc.start + 1}"
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg.removesuffix(' at')} at column {exc.colno}"
    return str(exc)


def _validated(record: Any, path: Path, number: int, suspects: Suspects) -> Record:
    at = f"{path}:{number}"
    if not isinstance(record, dict):
        raise RunDirError(f"{at}: not a results record (a JSON {type(record).__name__}, not an object)")
    kind = _kind(record)
    if any(suspects) and (odd := _odd_value(record, suspects)) is not None:
        raise RunDirError(f"{at}: {kind} {where(odd[0]) or '(the whole record)'} {odd[1]}")
    try:
        model = RECORD.validate_python(upgraded(record))
    except ValidationError as exc:
        raise RunDirError(f"{at}: {_first_problem(exc, kind)}") from None
    _check_version(model.version, at)
    return model


# Version 1 named two things `benchmark`: the label in run, summary and error records, the tool in measurement and
# test records. Version 2 calls them `label` and `tool`.
V1_NAMES = {"run": "label", "summary": "label", "error": "label", "measurement": "tool", "test": "tool"}


def upgraded(record: dict[str, Any]) -> dict[str, Any]:
    """A record in this version's names, its `version` as written (1 when absent): a version-1 record gets
    V1_NAMES."""
    if "version" not in record:
        record = {**record, "version": 1}
    kind = record.get("type")
    new = V1_NAMES.get(kind) if isinstance(kind, str) else None
    if record["version"] != 1 or new is None or "benchmark" not in record or new in record:
        return record
    return {(new if key == "benchmark" else key): value for key, value in record.items()}


def _check_version(version: int, at: str) -> None:
    if version > FORMAT_VERSION:
        raise RunDirError(
            f"{at}: written in results format version {version}; this niclab reads versions 1 and {FORMAT_VERSION}: "
            "update niclab"
        )


def read_run_info(path: Path) -> RunInfoRecord | None:
    """run.json, validated; None when the run has none (a run that never started writing it)."""
    try:
        source = open_regular(path, MAX_INFO_BYTES)
    except FileNotFoundError:
        return None
    with source:
        data = source.read(MAX_INFO_BYTES + 1)
    if len(data) > MAX_INFO_BYTES:
        raise RunDirError(f"{path}: more than the {_size(MAX_INFO_BYTES)} niclab reads")
    if data.count(b",") + data.count(b":") > MAX_VALUES:
        raise RunDirError(f"{path}: more than the {MAX_VALUES:,} values niclab reads in one file")
    try:
        info = jsonbound.loads(data.decode("utf-8"), PARSE_DEPTH)
    except ValueError as exc:
        raise RunDirError(f"{path}: not a run description ({_why_not_json(exc)}); the file is damaged") from None
    suspects = Suspects.of(data)
    del data
    if not isinstance(info, dict):
        raise RunDirError(f"{path}: not a run description (a JSON {type(info).__name__}, not an object)")
    if any(suspects) and (odd := _odd_value(info, suspects)) is not None:
        raise RunDirError(f"{path}: {where(odd[0])} {odd[1]}")
    try:
        model = RunInfoRecord.model_validate({"version": 1, **info})  # written before it had one: version 1
    except ValidationError as exc:
        raise RunDirError(f"{path}: {_first_problem(exc, '')}") from None
    _check_version(model.version, str(path))
    return model
