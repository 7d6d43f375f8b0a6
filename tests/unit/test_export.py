"""niclab export on a real run (tests/data/runs/nic-shootout)."""

import csv

import pyarrow.parquet as pq

from niclab.cli import main


def test_csv_and_parquet_carry_every_measurement_with_its_cell(data_dir, tmp_path):
    run = data_dir / "runs" / "nic-shootout"
    measurements = sum(1 for line in (run / "results.jsonl").read_text().splitlines() if '"type": "measurement"' in line)
    assert main(["export", str(run), "--out", str(tmp_path / "m.csv")]) == 0
    rows = list(csv.DictReader((tmp_path / "m.csv").open()))
    assert len(rows) == measurements
    assert {"param_nic", "name", "value", "unit", "client_driver", "repeat"} <= set(rows[0])
    e1000 = [r for r in rows if r["param_nic"] == "e1000" and r["name"] == "netperf.TCP_STREAM.throughput_mbps"]
    assert len(e1000) == 3 and all(r["client_driver"] == "e1000" and float(r["value"]) > 0 for r in e1000)
    assert main(["export", str(run), "--format", "parquet", "--what", "summaries", "--out",
                 str(tmp_path / "s.parquet")]) == 0
    table = pq.read_table(tmp_path / "s.parquet").to_pylist()
    tcp = next(r for r in table if r["param_nic"] == "e1000" and r["name"] == "netperf.TCP_STREAM.throughput_mbps")
    assert tcp["n"] == 3 and len(tcp["samples"]) == 3 and tcp["ci_low"] < tcp["mean"] < tcp["ci_high"]
