"""A report's page from run directories: read, built, rendered, written."""

from __future__ import annotations

from pathlib import Path

from niclab.ui.report.build import build
from niclab.ui.report.data import for_report, load_runs, picked
from niclab.ui.report.render import write_report


def report_runs(
    run_dirs: list[Path],
    out: Path,
    prices: dict[str, float] | None = None,
    cells: list[str] | None = None,
    keyword: str | None = None,
) -> Path:
    """The report of the runs (only the cells `cells` and `keyword` pick, as --cell and -k do), written to `out`."""
    runs = [picked(run, cells, keyword) for run in load_runs(run_dirs, for_report)]
    return write_report(build(runs, prices), out)
