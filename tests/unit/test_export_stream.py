"""niclab export reads a run once and holds plain values, no record models: the same rows, in the same order,
as the table made from the whole load (niclab.ui.report.data.load_run)."""

import csv

import pytest

from niclab.run.records import NicSummary
from niclab.ui import export as export_module
from niclab.ui.cli.main import main
from niclab.ui.export import MEASUREMENT_COLUMNS, SUMMARY_COLUMNS, rows
from niclab.ui.report import data

RUNS = ("bonding", "mtu-sweep", "nfs", "nic-shootout")


def whole_load_rows(run_dir, what: str) -> list[dict]:
    """The table as niclab made it from every record held in memory."""
    run = data.load_run(run_dir)
    out = []
    for cell in run.cells:
        params = {f"param_{axis}": cell.params.get(axis) for axis in run.axes}
        if what == "summaries":
            out += [{**{k: getattr(s, k) for k in SUMMARY_COLUMNS}, **params} for s in cell.summaries]
            continue
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
    return out


@pytest.mark.parametrize("name", RUNS)
@pytest.mark.parametrize("what", ["measurements", "summaries"])
def test_rows_equal_the_whole_loads_in_order(data_dir, name, what):
    expected = whole_load_rows(data_dir / "runs" / name, what)
    got = list(rows(data_dir / "runs" / name, what))
    assert got == expected
    assert [list(row) for row in got] == [list(row) for row in expected]  # the columns in the same order


def test_export_holds_no_record_model(data_dir, tmp_path, monkeypatch):
    def whole_load(*args, **kwargs):
        raise AssertionError("export loaded the whole run")

    monkeypatch.setattr(data, "load_run", whole_load)
    monkeypatch.setattr(export_module, "load_run", whole_load, raising=False)
    assert main(["export", str(data_dir / "runs" / "nic-shootout"), "--out", str(tmp_path / "m.csv")]) == 0
    assert len(list(csv.DictReader((tmp_path / "m.csv").open()))) > 0


def test_a_torn_last_line_is_dropped_and_said(data_dir, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    lines = (data_dir / "runs" / "nic-shootout" / "results.jsonl").read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if '"type": "measurement"' in line)
    (run / "results.jsonl").write_text("\n".join(lines[:last]) + "\n" + lines[last][:-30])
    got = list(rows(run, "measurements"))
    assert "the last line is cut off" in capsys.readouterr().err
    assert got == whole_load_rows(run, "measurements")
    assert len(got) == sum('"type": "measurement"' in line for line in lines[:last])
