"""niclab export on a real run (tests/data/runs/nic-shootout)."""

import csv
import json
import shutil

import pyarrow.parquet as pq
import pytest

from niclab.ui.cli.main import main


def test_csv_and_parquet_carry_every_measurement_with_its_cell(data_dir, tmp_path):
    run = data_dir / "runs" / "nic-shootout"
    lines = (run / "results.jsonl").read_text().splitlines()
    measurements = sum(1 for line in lines if '"type": "measurement"' in line)
    assert main(["export", str(run), "--out", str(tmp_path / "m.csv")]) == 0
    rows = list(csv.DictReader((tmp_path / "m.csv").open()))
    assert len(rows) == measurements
    assert {"param_nic", "name", "value", "unit", "client_driver", "repeat"} <= set(rows[0])
    e1000 = [r for r in rows if r["param_nic"] == "e1000" and r["name"] == "netperf.TCP_STREAM.throughput_mbps"]
    assert len(e1000) == 3 and all(r["client_driver"] == "e1000" and float(r["value"]) > 0 for r in e1000)
    assert (
        main(["export", str(run), "--format", "parquet", "--what", "summaries", "--out", str(tmp_path / "s.parquet")])
        == 0
    )
    table = pq.read_table(tmp_path / "s.parquet").to_pylist()
    tcp = next(r for r in table if r["param_nic"] == "e1000" and r["name"] == "netperf.TCP_STREAM.throughput_mbps")
    assert tcp["n"] == 3 and len(tcp["samples"]) == 3 and tcp["ci_low"] < tcp["mean"] < tcp["ci_high"]


def test_a_cut_off_last_line_is_dropped_with_a_warning(data_dir, tmp_path, capsys):
    from niclab.base.errors import NiclabError
    from tests.records import read_records

    cell, run = (data_dir / "runs" / "bonding" / "results.jsonl").read_text().splitlines()[:2]
    results = tmp_path / "results.jsonl"
    results.write_text(f"{cell}\n{run[:-40]}")
    assert read_records(results) == [{**json.loads(cell), "version": 1}]  # no version: 1
    assert "the last line is cut off" in capsys.readouterr().err
    results.write_text(f'{cell}\n{{"type": \n{run}\n')
    with pytest.raises(NiclabError, match=r"results.jsonl:2: not a results record"):
        read_records(results)


def killed_run(data_dir, tmp_path, name: str):
    """A copy of a captured run whose last record was cut off half-way, as by a killed harness."""
    run = tmp_path / name
    shutil.copytree(data_dir / "runs" / "nic-shootout", run)
    text = (run / "results.jsonl").read_text()
    (run / "results.jsonl").write_text(text[: len(text) - 40])
    return run


def test_report_compare_and_export_read_a_killed_run_and_say_a_line_was_dropped(data_dir, tmp_path, capsys):
    base, new = killed_run(data_dir, tmp_path, "base"), killed_run(data_dir, tmp_path, "new")
    assert main(["report", str(new), "--out", str(tmp_path / "r.html")]) == 0
    assert "the last line is cut off" in capsys.readouterr().err
    assert main(["export", str(new), "--out", str(tmp_path / "m.csv")]) == 0
    assert "the last line is cut off" in capsys.readouterr().err
    assert main(["compare", str(base), str(new)]) in (0, 1)
    captured = capsys.readouterr()
    assert "the last line is cut off" in captured.err and "Traceback" not in captured.err


@pytest.mark.parametrize(
    "value, cell",
    [
        ("=1+1", "'=1+1"),
        ("+1", "'+1"),
        ("-1", "'-1"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("e1000", "e1000"),
        ("a=b", "a=b"),
        (-1.5, -1.5),
        (-3, -3),
        (None, None),
        (False, False),
        ([-1.5, 2.0], "-1.5;2.0"),
        (["=x", "y"], "'=x;y"),
        ({"build": "=x"}, "{'build': '=x'}"),
    ],
)
def test_a_csv_cell_that_a_spreadsheet_would_run_starts_with_a_quote(value, cell):
    from niclab.ui import csvsafe

    assert csvsafe.cell(value) == cell
