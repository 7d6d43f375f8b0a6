"""Export a run's results as one flat table, CSV or Parquet, for pandas and friends.

`measurements`: one row per number, with its run's where and NICs and the
cell's parameters as columns (param_<axis>). `summaries`: one row per metric
and benchmark of each cell, with the statistics (samples as a list in
Parquet, `;`-joined in CSV).
"""

from __future__ import annotations

import csv
from pathlib import Path

from niclab.errors import UsageError
from niclab.report.data import load_run

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
                nics = cell.runs.get(m["run"], {}).get("nics", {})
                client, server = nics.get(m["client"], {}), nics.get(m["server"], {})
                out.append(
                    {
                        **{k: m.get(k) for k in MEASUREMENT_COLUMNS},
                        **params,
                        "client_model": client.get("model"),
                        "client_driver": client.get("driver"),
                        "server_model": server.get("model"),
                        "server_driver": server.get("driver"),
                        "mtu": client.get("mtu"),
                        "accel": cell.runs.get(m["run"], {}).get("accel"),
                    }
                )
        elif what == "summaries":
            out += [{**{k: s.get(k) for k in SUMMARY_COLUMNS}, **params} for s in cell.summaries]
        else:
            raise UsageError(f"export what? {what!r}: measurements or summaries")
    return out


def export(run_dir: Path, fmt: str, out: Path, what: str = "measurements") -> int:
    table = rows(run_dir, what)
    if not table:
        raise UsageError(f"{run_dir} has no {what} to export")
    columns = list(dict.fromkeys(k for row in table for k in row))
    if fmt == "csv":
        with out.open("w", newline="") as sink:
            writer = csv.DictWriter(sink, fieldnames=columns)
            writer.writeheader()
            for row in table:
                writer.writerow({k: (";".join(map(str, v)) if isinstance(v, list) else v) for k, v in row.items()})
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(table), out)
    else:
        raise UsageError(f"unknown format {fmt!r}: csv or parquet")
    return len(table)
