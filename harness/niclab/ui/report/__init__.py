"""Reports: one self-contained HTML page from one or more run directories.

from niclab.ui.report.page import report_runs
report_runs([Path("runs/…-nic-shootout")], Path("report.html"))

The package itself imports nothing: a comparison or an export that reads
runs through niclab.ui.report.data does not load matplotlib for figures it
never draws.
"""
