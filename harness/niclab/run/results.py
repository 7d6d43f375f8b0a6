"""Run directories and the results they hold (docs/results.md).

Every record is flushed as soon as it is written, so a crash loses nothing measured. A cell id becomes a
directory name only through `cell_dirname`: safe, unique where case is ignored, and reversible
(`cell_id_of`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import string
import sys
import time
from pathlib import Path
from typing import Any

from niclab import __version__
from niclab.base import atomic
from niclab.run.records import FORMAT_VERSION, Record, RunInfoRecord, as_json


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# Characters a cell's directory name keeps as they are; every other byte is written %xx (lowercase hex).
_KEPT = frozenset(string.ascii_letters + string.digits + "=,._+:@-")
MAX_DIRNAME = 200  # bytes: under the file systems' 255, with room for what tools add (.tmp, ~)
_HASHED = 16  # hex digits of the hash that ends a name cut to MAX_DIRNAME


def _digest(cell_id: str, digits: int) -> str:
    return hashlib.sha256(cell_id.encode("utf-8", "surrogatepass")).hexdigest()[:digits]


def cell_dirname(cell_id: str) -> str:
    """The directory name of a cell: `nic=e1000,mtu=9000` as it is; any other byte as %xx (a leading dot
    too, so never `.` or `..`); an id with capitals ends in ~ and 8 hex digits of its hash (unique where
    case is ignored: `nic=E1000` and `nic=e1000`); a name over MAX_DIRNAME bytes is cut and ends in ~ and
    16 hex digits (then `cell_id_of` needs the run's cell ids)."""
    body = (
        "".join(
            ch
            if ch in _KEPT and not (i == 0 and ch == ".")
            else "".join(f"%{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
            for i, ch in enumerate(cell_id)
        )
        or "%"
    )  # the empty id: a name that decodes to nothing
    if any(ch.isupper() for ch in body):
        body += "~" + _digest(cell_id, 8)
    if len(body) > MAX_DIRNAME:
        cut = body[: MAX_DIRNAME - _HASHED - 1]
        cut = cut[: cut.rfind("%")] if "%" in cut[-2:] else cut  # never half an escape
        body = cut + "~" + _digest(cell_id, _HASHED)
    return body


def cell_id_of(dirname: str, known: list[str] | None = None) -> str | None:
    """The cell id a `cell_dirname` came from; a cut name is found among `known` (None if it is not there)."""
    body, tilde, tag = dirname.rpartition("~")
    if not tilde:
        body = dirname
    elif len(tag) == _HASHED:
        return next((cid for cid in known or [] if cell_dirname(cid) == dirname), None)
    if body == "%":
        return ""
    raw = bytearray()
    for piece in re.split(r"(%[0-9a-f]{2})", body):
        raw += bytes([int(piece[1:], 16)]) if re.fullmatch(r"%[0-9a-f]{2}", piece) else piece.encode()
    try:
        text = raw.decode("utf-8", "surrogatepass")
    except UnicodeError:
        return None
    return text if cell_dirname(text) == dirname else None


def new_run_dir(base: Path, scenario: str) -> Path:
    stamp = time.strftime("%Y-%m-%dT%H-%M-%S", time.gmtime())
    base.mkdir(parents=True, exist_ok=True)
    for attempt in range(1000):
        path = base / (f"{stamp}-{scenario}" if attempt == 0 else f"{stamp}-{scenario}-{attempt}")
        try:
            path.mkdir(mode=0o700)  # it will hold the guests' control sockets
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"cannot create a run directory under {base}")


LATEST = "latest"  # in a runs directory: a link to the run `niclab run` started last


def point_latest(run_dir: Path) -> None:
    """Make RUNS/latest point at `run_dir` (relative, replaced at once); a `latest` that is not a link (the
    user's own file) is left alone."""
    link = run_dir.parent / LATEST
    if link.exists() and not link.is_symlink():
        return
    fresh = run_dir.parent / f".{LATEST}.{os.getpid()}"
    try:
        fresh.unlink(missing_ok=True)
        fresh.symlink_to(run_dir.name)
        os.replace(fresh, link)
    except OSError:  # a runs directory on a file system without links: `niclab show` finds the newest anyway
        fresh.unlink(missing_ok=True)


def newest_run(runs: Path) -> Path | None:
    """The run `latest` points at, else the newest run directory in `runs` (their names begin with the time)."""
    link = runs / LATEST
    if link.is_symlink() and (target := link.resolve()).parent == runs.resolve() and (target / "run.json").is_file():
        return runs / target.name
    found = [p for p in runs.iterdir() if not p.is_symlink() and (p / "run.json").is_file()] if runs.is_dir() else []
    return max(found, key=lambda p: p.name) if found else None


def new_run_info(
    *,
    scenario: str,
    scenario_file: str,
    scenario_text: str,
    cells: list[str],
    cell_order: list[str],
    backend: str,
    host: dict[str, Any] | None = None,
    command: list[str] | None = None,
) -> RunInfoRecord:
    """run.json as a run starts it: every field given (written even while null), `running`."""
    return RunInfoRecord(
        version=FORMAT_VERSION,
        scenario=scenario,
        scenario_file=scenario_file,
        scenario_text=scenario_text,
        cells=cells,
        cell_order=cell_order,
        backend=backend,
        command=list(sys.argv) if command is None else command,
        niclab_version=__version__,
        started_at=utc_now(),
        finished_at=None,
        status="running",
        message="",
        host=host or {},
        warnings=[],
        error=None,
        internal_errors=[],
        lab=None,
    )


class RunDir:
    def __init__(self, path: Path):
        self.path = path
        self.results = path / "results.jsonl"

    def cell_dir(self, cell: str) -> Path:
        """The cell's work directory (QEMU's logs and control sockets)."""
        return self.path / "cells" / cell_dirname(cell)

    def raw_dir(self, cell: str) -> Path:
        return self.path / "raw" / cell_dirname(cell)

    def write_info(self, info: RunInfoRecord) -> None:
        atomic.write_text(self.path / "run.json", json.dumps(as_json(info), indent=2) + "\n")

    def append(self, record: Record) -> None:
        with self.results.open("a") as sink:
            sink.write(json.dumps(as_json(record)) + "\n")
            sink.flush()
            os.fsync(sink.fileno())

    def save_raw(self, cell: str, name: str, text: str) -> Path:
        return save_raw_file(self.raw_dir(cell), name, text)


def save_raw_file(directory: Path, name: str, text: str) -> Path:
    """A tool's raw output as a new file `name-N.txt` in `directory` (made if missing); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10000):
        path = directory / f"{name}-{n}.txt"
        try:
            with open(path, "x") as sink:  # O_CREAT|O_EXCL: never an existing file, nor a symlink's target
                sink.write(text)
        except FileExistsError:
            continue
        return path
    raise RuntimeError(f"too many raw files named {name} in {directory}")
