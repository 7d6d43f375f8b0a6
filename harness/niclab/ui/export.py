"""Export a run's results as one flat table, CSV or Parquet, for pandas and friends.

`measurements`: one row per number, with its run's where and NICs and the cell's parameters (param_<axis>);
`summaries`: one row per metric and benchmark (its `label`) of each cell. CSV text is escaped for
spreadsheets (csvsafe); Parquet keeps values as they are (docs/reports.md, `niclab export`).
"""

from __future__ import annotations

import csv
import itertools
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from niclab.base.atomic import replacing
from niclab.base.collector import collector_paused
from niclab.base.errors import UsageError
from niclab.run.reader import read_results, read_run_info
from niclab.run.records import MeasurementRecord, RunInfoRecord, RunRecord, SummaryRecord
from niclab.ui import csvsafe
from niclab.ui.report.data import params_of

MEASUREMENT_COLUMNS = (
    "scenario",
    "cell",
    "run",
    "repeat",
    "tool",
    "test",
    "metric",
    "name",
    "value",
    "unit",
    "client",
    "server",
    "link",
    "peer",
    "warning",
)
SUMMARY_COLUMNS = (
    "scenario",
    "cell",
    "label",
    "name",
    "metric",
    "unit",
    "client",
    "server",
    "link",
    "peer",
    "n",
    "mean",
    "median",
    "stdev",
    "cv_pct",
    "min",
    "max",
    "ci_level",
    "ci_low",
    "ci_high",
    "ci_width_pct",
    "unstable",
    "samples",
)


@dataclass(slots=True)
class _Cell:
    """What a cell contributes to the table, held compactly: its parameters, its runs' where and NICs, and
    the columns of its measurements or summaries as plain tuples (no record model is kept)."""

    params: dict[str, Any]
    runs: dict[str, tuple[dict[str, tuple[Any, Any, Any]], Any]] = field(default_factory=dict)
    found: list[tuple[Any, ...]] = field(default_factory=list)


def _shared(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """The values with their text interned: a sweep repeats its names and units on every row."""
    return tuple(sys.intern(v) if type(v) is str else v for v in values)


def _read(run_dir: Path, what: str) -> list[_Cell]:
    """One pass over the run's records (validated as every command reads them), keeping per cell only the
    columns `what` needs, in the cells' order (run.json's, then as first seen) and the records' order."""
    if what not in ("measurements", "summaries"):
        raise UsageError(f"export what? {what!r}: measurements or summaries")
    results = run_dir / "results.jsonl"
    if not results.exists() and not results.is_symlink():
        raise UsageError(f"{run_dir} is not a niclab run directory (it has no results.jsonl)")
    info = read_run_info(run_dir / "run.json") or RunInfoRecord()
    cells = {cid: _Cell(params_of(cid)) for cid in info.cells}
    with collector_paused():
        for _, record in read_results(results):
            cell = cells.get(record.cell)
            if cell is None:
                cell = cells[record.cell] = _Cell({})
            cell.params = record.params
            if what == "measurements" and isinstance(record, MeasurementRecord):
                cell.found.append(_shared(tuple(getattr(record, k) for k in MEASUREMENT_COLUMNS)))
            elif what == "measurements" and isinstance(record, RunRecord):
                nics = {node: _shared((n.model, n.driver, n.mtu)) for node, n in record.nics.items()}
                cell.runs[record.run] = (nics, record.accel)
            elif what == "summaries" and isinstance(record, SummaryRecord):
                cell.found.append(_shared(tuple(getattr(record, k) for k in SUMMARY_COLUMNS)))
    return list(cells.values())


NO_NIC = (None, None, None)


def _rows(cells: list[_Cell], what: str) -> Iterator[dict]:
    axes = list(dict.fromkeys(axis for cell in cells for axis in cell.params))
    for cell in cells:
        params = {f"param_{axis}": cell.params.get(axis) for axis in axes}
        for found in cell.found:
            if what == "summaries":
                yield {**dict(zip(SUMMARY_COLUMNS, found, strict=True)), **params}
                continue
            row = dict(zip(MEASUREMENT_COLUMNS, found, strict=True))
            nics, accel = cell.runs.get(row["run"], ({}, None))
            client, server = nics.get(row["client"], NO_NIC), nics.get(row["server"], NO_NIC)
            yield {
                **row,
                **params,
                "client_model": client[0],
                "client_driver": client[1],
                "server_model": server[0],
                "server_driver": server[1],
                "mtu": client[2],
                "accel": accel,
            }


def rows(run_dir: Path, what: str) -> Iterator[dict]:
    """The table's rows, made as they are asked for (a run's records are read once, first)."""
    return _rows(_read(run_dir, what), what)


def _kind(value: Any) -> str:
    """The column type a value asks for: numbers of either sort go in one column."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        return "numbers"
    return type(value).__name__


INT64 = range(-(2**63), 2**63)


def _beyond_int64(value: Any) -> bool:
    values = value if isinstance(value, list) else [value]
    return any(isinstance(v, int) and not isinstance(v, bool) and v not in INT64 for v in values)


def _as_float(value: Any) -> Any:
    return [float(v) for v in value] if isinstance(value, list) else float(value)


def _column_for_parquet(values: list[Any]) -> list[Any]:
    """A column with one Parquet type: values that differ in type (a matrix axis of numbers and words), or
    mappings or mixed lists, become text (JSON for the structured ones); whole numbers beyond 64 bits
    become floats."""
    present = [v for v in values if v is not None]
    kinds = {_kind(v) for v in present}
    if len(kinds) > 1 or kinds & {"dict", "list"}:
        return [v if v is None or isinstance(v, str) else json.dumps(v) for v in values]
    if kinds & {"number", "numbers"} and any(map(_beyond_int64, present)):
        return [v if v is None else _as_float(v) for v in values]
    return values


def export(run_dir: Path, fmt: str, out: Path, what: str = "measurements") -> int:
    """The table at `out`, whole or not at all, never written through a symlink there (niclab.base.atomic).

    The records are read once and held as plain values; CSV rows are written as they are made, Parquet
    is built column by column (a column's type is decided over all of its values).
    """
    if fmt not in ("csv", "parquet"):
        raise UsageError(f"unknown format {fmt!r}: csv or parquet")
    table = rows(run_dir, what)
    first = next(table, None)
    if first is None:
        raise UsageError(f"{run_dir} has no {what} to export")
    columns = list(first)  # every row has the same columns: the record's, then one per axis of the run
    count = 0
    if fmt == "csv":
        with replacing(out, newline="", encoding="utf-8") as sink:
            writer = csv.DictWriter(sink, fieldnames=columns)
            writer.writerow({k: csvsafe.text(k) for k in columns})
            for row in itertools.chain([first], table):
                writer.writerow({k: csvsafe.cell(v) for k, v in row.items()})
                count += 1
        return count
    import pyarrow as pa
    import pyarrow.parquet as pq

    values: dict[str, list[Any]] = {k: [] for k in columns}
    for row in itertools.chain([first], table):
        for k, v in row.items():
            values[k].append(v)
        count += 1
    arrays = [pa.array(_column_for_parquet(values.pop(k))) for k in columns]
    with replacing(out, "wb") as sink:
        pq.write_table(pa.Table.from_arrays(arrays, names=columns), sink)
    return count
