"""Export a run's results as one flat table, CSV or Parquet, for pandas and friends.

`measurements`: one row per number, with its run's where and NICs and the
cell's parameters as columns (param_<axis>). `summaries`: one row per metric
and benchmark of each cell, with the statistics (samples as a list in
Parquet, `;`-joined in CSV).

CSV text cells that a spreadsheet would take for a formula are escaped
(niclab.ui.csvsafe); Parquet keeps every value as it is, but a column whose
values differ in type (a matrix axis of numbers and words) is written as text.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from niclab.base.atomic import replacing
from niclab.base.errors import UsageError
from niclab.run.records import NicSummary
from niclab.ui import csvsafe
from niclab.ui.report.data import load_run

MEASUREMENT_COLUMNS = (
    "scenario",
    "cell",
    "run",
    "repeat",
    "benchmark",
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
    "benchmark",
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


def rows(run_dir: Path, what: str) -> list[dict]:
    run = load_run(run_dir)
    axes = run.axes
    out = []
    for cell in run.cells:
        params = {f"param_{axis}": cell.params.get(axis) for axis in axes}
        if what == "measurements":
            for m in cell.measurements:
                measured = cell.runs.get(m.run)
                nics = measured.nics if measured is not None else {}
                client, server = nics.get(m.client) or NicSummary(), nics.get(m.server) or NicSummary()
                out.append(
                    {
                        **{k: getattr(m, k) for k in MEASUREMENT_COLUMNS},
                        **params,
                        "client_model": client.model,
                        "client_driver": client.driver,
                        "server_model": server.model,
                        "server_driver": server.driver,
                        "mtu": client.mtu,
                        "accel": measured.accel if measured is not None else None,
                    }
                )
        elif what == "summaries":
            out += [{**{k: getattr(s, k) for k in SUMMARY_COLUMNS}, **params} for s in cell.summaries]
        else:
            raise UsageError(f"export what? {what!r}: measurements or summaries")
    return out


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


def _columns_for_parquet(table: list[dict]) -> list[dict]:
    """The rows with each column of one Parquet type: a column whose values differ in type (a matrix
    axis of numbers and words), or holds mappings or mixed lists, becomes text (JSON for the structured
    ones); whole numbers beyond 64 bits become floats."""
    convert: dict[str, Any] = {}
    for column in dict.fromkeys(k for row in table for k in row):
        values = [row[column] for row in table if row.get(column) is not None]
        kinds = {_kind(v) for v in values}
        if len(kinds) > 1 or kinds & {"dict", "list"}:
            convert[column] = lambda v: v if isinstance(v, str) else json.dumps(v)
        elif kinds & {"number", "numbers"} and any(map(_beyond_int64, values)):
            convert[column] = _as_float
    return [{k: v if v is None or k not in convert else convert[k](v) for k, v in row.items()} for row in table]


def export(run_dir: Path, fmt: str, out: Path, what: str = "measurements") -> int:
    """The table at `out`, whole or not at all, never written through a symlink there (niclab.base.atomic)."""
    if fmt not in ("csv", "parquet"):
        raise UsageError(f"unknown format {fmt!r}: csv or parquet")
    table = rows(run_dir, what)
    if not table:
        raise UsageError(f"{run_dir} has no {what} to export")
    columns = list(dict.fromkeys(k for row in table for k in row))
    if fmt == "csv":
        with replacing(out, newline="", encoding="utf-8") as sink:
            writer = csv.DictWriter(sink, fieldnames=columns)
            writer.writerow({k: csvsafe.text(k) for k in columns})
            for row in table:
                writer.writerow({k: csvsafe.cell(v) for k, v in row.items()})
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        with replacing(out, "wb") as sink:
            pq.write_table(pa.Table.from_pylist(_columns_for_parquet(table)), sink)
    return len(table)
