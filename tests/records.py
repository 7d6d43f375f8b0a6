"""Records for tests that build run data by hand: the fields a test names, the rest plausible defaults."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from niclab.model.facts import AS_READ
from niclab.run.reader import Warn, read_results, warn_on_stderr
from niclab.run.records import CellRecord, Record, RunInfoRecord, RunRecord, SummaryRecord, TestRecord
from niclab.run.results import RunDir

BASE: dict[str, Any] = {"scenario": "s", "cell": "default", "params": {}}


def summary(name: str, **given: Any) -> SummaryRecord:
    """A `summary` record of metric `name`: its samples (or its one mean) give n, mean, median, min and max."""
    samples = given.get("samples", [given.get("mean", 1.0)])
    parts = name.split(".")
    fields: dict[str, Any] = {
        **BASE,
        "type": "summary",
        "benchmark_index": 0,
        "label": " ".join(parts[:-1]) or name,
        "name": name,
        "test": parts[1] if len(parts) > 2 else None,
        "metric": parts[-1],
        "unit": "x",
        "headline": True,
        "client": "a",
        "server": "b",
        "link": 0,
        "runs": [],
        "n": len(samples),
        "mean": statistics.fmean(samples),
        "median": statistics.median(samples),
        "stdev": None,
        "cv_pct": None,
        "min": min(samples),
        "max": max(samples),
        "ci_level": 95.0,
        "ci_low": None,
        "ci_high": None,
        "samples": samples,
        "unstable": False,
        "reasons": [],
    }
    return SummaryRecord.model_validate(fields | given)


def run(run_id: str, **given: Any) -> RunRecord:
    """A `run` record of repeat BENCHMARK.REPEAT."""
    fields: dict[str, Any] = {
        **BASE,
        "type": "run",
        "run": run_id,
        "label": "netperf TCP_STREAM",
        "tool": "netperf",
        "repeat": int(run_id.rpartition(".")[2]),
        "repeats": 1,
        "client": "a",
        "server": "b",
        "link": 0,
        "nics": {},
        "counters": {},
    }
    return RunRecord.model_validate(fields | given)


def cell(**given: Any) -> CellRecord:
    """A `cell` record."""
    return CellRecord.model_validate({**BASE, "type": "cell", "time": "2026-11-22T10:00:00Z"} | given)


def selftest(test: str, result: str, **given: Any) -> TestRecord:
    """A `test` record: program `test` of drivers/net on node a's e1000 (or a subtest of it, `subtest`)."""
    fields: dict[str, Any] = {
        **BASE,
        "type": "test",
        "run": "0.1",
        "repeat": 1,
        "tool": "kselftest",
        "target": "drivers/net",
        "test": test,
        "result": result,
        "node": "a",
        "remote": "b",
        "link": 0,
        "nic": {"model": "e1000", "driver": "e1000", "driver_version": "7.3.21-k8-NAPI", "pci_id": "8086:100e"},
        "kernel": "6.12.57+deb13-amd64",
        "tests_from": "Debian trixie linux-source-6.12 6.12.57-1",
    }
    return TestRecord.model_validate(fields | given)


def in_cell(cell: str, params: dict[str, Any], *given: Record) -> list[Record]:
    """The records, moved to matrix cell `cell` with these parameters."""
    return [r.model_copy(update={"cell": cell, "params": params}) for r in given]


def write_run(path: Path, given: list[Record], cells: list[str], scenario: str = "selftests") -> Path:
    """A run directory at `path` holding these records, written as the runner writes them."""
    path.mkdir()
    run_dir = RunDir(path)
    run_dir.write_info(RunInfoRecord(scenario=scenario, cells=cells, status="ok"))
    for record in given:
        run_dir.append(record)
    return path


def as_dict(model: BaseModel) -> dict:
    """A validated record as a plain mapping: what the file held, names as written (its facts' nulls too)."""
    return model.model_dump(by_alias=True, exclude_unset=True, context=AS_READ)


def read_records(path: Path, warn: Warn = warn_on_stderr) -> list[dict]:
    """Every record of a results.jsonl, validated by the reader, as plain mappings (for assertions)."""
    return [as_dict(record) for _, record in read_results(path, warn)]
