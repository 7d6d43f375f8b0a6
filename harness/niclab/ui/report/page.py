"""A report's page from run directories: read, built, rendered, written."""

from __future__ import annotations

from pathlib import Path

from niclab.ui.report.build import build
from niclab.ui.report.data import for_report, load_runs
from niclab.ui.report.render import write_report


def report_runs(run_dirs: list[Path], out: Path, prices: dict[str, float] | None = None) -> Path:
    return write_report(build(load_runs(run_dirs, for_report), prices), out)
