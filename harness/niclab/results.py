"""Run directories and the results they hold.

    runs/2026-11-22T10-00-00-two-node/
      run.json          what ran, on what, when, and how it ended
      results.jsonl     one JSON object per line, appended as measured:
                        {"type": "cell", ...provenance} then {"type": "measurement", ...}
      cells/<cell id>/  QEMU's work directory: serial logs, QEMU logs, pids
      raw/<cell id>/    each tool's own output

A crash loses nothing already measured: every record is flushed to disk as
soon as it is written.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from niclab import __version__
from niclab.errors import NiclabError


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


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


@dataclass
class RunInfo:
    scenario: str
    scenario_file: str
    scenario_text: str
    cells: list[str]
    backend: str
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    niclab_version: str = __version__
    started_at: str = field(default_factory=utc_now)
    finished_at: str | None = None
    status: str = "running"  # running, ok, failed, interrupted
    message: str = ""
    host: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # e.g. KVM did not work and the run fell back to TCG
    error: dict | None = None  # why the run stopped early: message and traceback
    internal_errors: list[dict] = field(default_factory=list)  # unexpected exceptions in cells, with tracebacks
    lab: dict | None = None  # a lab run's inventory: its name, file, text and card prices


class RunDir:
    def __init__(self, path: Path):
        self.path = path
        self.results = path / "results.jsonl"

    def cell_dir(self, cell: str) -> Path:
        """The cell's work directory (QEMU's logs and control sockets)."""
        return self.path / "cells" / cell

    def raw_dir(self, cell: str) -> Path:
        return self.path / "raw" / cell

    def write_info(self, info: RunInfo) -> None:
        tmp = self.path / "run.json.tmp"
        tmp.write_text(json.dumps(asdict(info), indent=2) + "\n")
        tmp.replace(self.path / "run.json")

    def append(self, record: dict[str, Any]) -> None:
        with self.results.open("a") as sink:
            sink.write(json.dumps(record, sort_keys=False) + "\n")
            sink.flush()
            os.fsync(sink.fileno())

    def save_raw(self, cell: str, name: str, text: str) -> Path:
        directory = self.raw_dir(cell)
        directory.mkdir(parents=True, exist_ok=True)
        for n in range(1, 10000):
            path = directory / f"{name}-{n}.txt"
            if not path.exists():
                path.write_text(text)
                return path
        raise RuntimeError(f"too many raw files named {name} in {directory}")


def _warn(message: str) -> None:
    print(f"niclab: warning: {message}", file=sys.stderr)


def read_records(path: Path, warn: Callable[[str], None] = _warn) -> list[dict]:
    """Every record of a results.jsonl.

    A killed run can leave its last line cut off: that line is dropped, and
    `warn` says so. A damaged line anywhere else is an error naming the line.
    """
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise NiclabError(f"{path}: cannot read it ({exc.strerror})") from None
    lines = text.split("\n")
    last = max((n for n, line in enumerate(lines) if line.strip()), default=-1)
    records = []
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            if n == last and not text.endswith("\n"):
                warn(f"{path}: the last line is cut off (the run was killed while writing it); dropped it")
                break
            raise NiclabError(f"{path}:{n + 1}: not a results record ({exc}); the file is damaged") from None
        records.append(record)
    return records
