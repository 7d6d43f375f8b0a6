"""The report built from real run directories (captured in tests/data/runs/, see its README)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from niclab.run.records import RunInfoRecord
from niclab.ui.report.build import build
from niclab.ui.report.data import CellData, load_run
from niclab.ui.report.render import render_html
from niclab.ui.report.tables import summary_table
from tests import records

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"
STUDY = ["nic-shootout", "mtu-sweep", "bonding", "nfs"]


@pytest.fixture(scope="module")
def shootout():
    return load_run(RUNS / "nic-shootout")


def test_classic_table_has_a_row_per_test_and_a_column_per_card(shootout):
    table = summary_table(shootout)
    assert table.columns == ["rtl8139", "i82559er", "tulip", "e1000", "virtio"]
    tests = [row[0] for row in table.rows]
    assert tests[0] == "tcp"
    assert {"rr", "udp send", "udp receive", "tcp cpu (sender)", "NetPIPE peak", "lmbench bw_tcp"} <= set(tests)
    tcp = next(cells for test, unit, cells in table.rows if test == "tcp")
    assert all(cell.mean and cell.mean > 0 and cell.half for cell in tcp)  # three runs each: an interval
    rows = list(csv.reader(io.StringIO(table.csv())))
    assert rows[0][:4] == ["test", "unit", "rtl8139", "rtl8139 ±"]
    assert rows[1][0] == "tcp" and float(rows[1][2]) == pytest.approx(tcp[0].mean, rel=1e-5)
    markdown = table.markdown()
    assert markdown.startswith("| test | unit | rtl8139 | i82559er | tulip | e1000 | virtio |")
    assert "Student-t interval" in markdown


def test_a_report_over_the_whole_study_has_every_section():
    report = build([load_run(RUNS / name) for name in STUDY])
    sections = {title for run in report.runs for title in run.plots}
    assert sections == {
        "NetPIPE curves",
        "throughput, latency and CPU",
        "throughput against MTU",
        "bonding",
        "fio over NFS",
    }
    shootout = report.runs[0]
    titles = [plot.title for plot in shootout.plots["throughput, latency and CPU"]]
    assert {
        "TCP throughput per card",
        "UDP: sent against received",
        "CPU utilization, netperf TCP_STREAM",
        "Service demand, netperf TCP_STREAM",
    } <= set(titles)
    assert [row.card for row in shootout.costs] and {row.card for row in shootout.costs} <= {"rtl8139", "e1000"}
    assert all(row.per_mbps == pytest.approx(row.price / row.peak_mbps) for row in shootout.costs)
    mtu = report.runs[1]
    assert (
        any(plot.title.startswith("NetPIPE on") for plot in mtu.plots.get("NetPIPE curves", []))
        or "throughput against MTU" in mtu.plots
    )
    html = render_html(report)
    assert html.count("<img ") >= 10 and "Cost per Mbit/s" in html and "Provenance" in html
    assert "<script" not in html  # a static page: nothing to run, nothing to fail


def test_missing_run_directory_is_a_clear_error(tmp_path):
    from niclab.base.errors import UsageError

    with pytest.raises(UsageError, match="is not a niclab run directory"):
        load_run(tmp_path)


def _sweep_cell(params: dict, mean: float) -> CellData:
    summary = records.summary("netperf.rr_rate", unit="trans/s", mean=mean)
    cell_id = ",".join(f"{k}={v}" for k, v in params.items())
    return CellData(cell_id, params, summaries=[summary])


def test_a_swept_knob_is_drawn_as_a_line_per_value_of_the_other_axes():
    from niclab.ui.report.data import RunData
    from niclab.ui.report.plots import sweep_lines

    cells = [_sweep_cell({"kernel": "trixie", "rx_usecs": u}, 3000 - u) for u in (0, 100, 1000)]
    cells += [_sweep_cell({"kernel": {"build": "../linux"}, "rx_usecs": u}, 2500 - u) for u in (0, 100, 1000)]
    plots = sweep_lines(RunData(Path("run"), RunInfoRecord(scenario="coalescing"), cells))
    # rx_usecs is swept; a kernel given as {build: DIR} is an axis value that is no number (and no set member)
    assert [plot.title for plot in plots] == ["netperf.rr_rate against rx_usecs"]
