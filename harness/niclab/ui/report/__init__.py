"""Reports: one self-contained HTML page from one or more run directories (docs/reports.md).

    report_runs([Path("runs/…-nic-shootout")], Path("report.html"))   # from niclab.ui.report.page

The package itself imports nothing: a comparison or an export reading runs through report.data loads no
matplotlib.
"""
