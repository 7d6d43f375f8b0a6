import json

from niclab.ui.report.build import build
from niclab.ui.report.data import load_run

SCENARIO = (
    "name: sweep\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: ${nic}\n"
    "matrix:\n  nic: [e1000, rtl8139, virtio]\n"
)


ORDER = ["nic=e1000", "nic=rtl8139", "nic=virtio"]


def shard_dir(path, cells, order: list[str] | None = ORDER):
    """A shard's run directory; its run.json gives the scenario's cell order, or (order None) is one written
    before run.json did."""
    path.mkdir()
    info = {"scenario": "sweep", "scenario_text": SCENARIO, "cells": cells}
    (path / "run.json").write_text(json.dumps(info | ({"cell_order": order} if order is not None else {})))
    records = []
    for i, cell in enumerate(cells):
        records.append(
            {
                "type": "summary",
                "scenario": "sweep",
                "cell": cell,
                "params": {"nic": cell[4:]},
                "benchmark_index": 0,
                "label": "netperf TCP_STREAM",
                "name": "netperf.TCP_STREAM.throughput_mbps",
                "test": "TCP_STREAM",
                "metric": "throughput_mbps",
                "unit": "Mbit/s",
                "headline": True,
                "client": "a",
                "server": "b",
                "link": 0,
                "runs": ["0.1"],
                "n": 1,
                "mean": 100.0 + i,
                "median": 100.0 + i,
                "stdev": None,
                "cv_pct": None,
                "min": 100.0 + i,
                "max": 100.0 + i,
                "ci_level": 95,
                "ci_low": None,
                "ci_high": None,
                "samples": [100.0 + i],
                "unstable": False,
                "reasons": [],
            }
        )
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_shards_of_one_sweep_make_one_section_in_the_scenario_order(tmp_path):
    one = shard_dir(tmp_path / "2026-11-22T10-00-00-sweep", ["nic=virtio", "nic=e1000"])
    two = shard_dir(tmp_path / "2026-11-22T10-00-05-sweep", ["nic=rtl8139"])
    report = build([load_run(two), load_run(one)])
    assert len(report.runs) == 1
    section = report.runs[0]
    assert section.table.columns == ["e1000", "rtl8139", "virtio"]
    assert [c.mean for c in section.table.rows[0][2]] == [101.0, 100.0, 100.0]
    assert len(section.run.merged_from) == 2


def test_the_order_is_run_json_s_not_the_scenario_text_s(tmp_path):
    """Merging reads the cell order from run.json: a scenario text that no longer parses changes nothing."""
    order = ["nic=virtio", "nic=rtl8139", "nic=e1000"]  # as a scenario listing its matrix the other way round
    one = shard_dir(tmp_path / "2026-11-22T10-00-00-sweep", ["nic=virtio", "nic=e1000"], order)
    two = shard_dir(tmp_path / "2026-11-22T10-00-05-sweep", ["nic=rtl8139"], order)
    for shard in (one, two):
        info = json.loads((shard / "run.json").read_text())
        (shard / "run.json").write_text(json.dumps(info | {"scenario_text": "name: [not a scenario"}))
    section = build([load_run(one), load_run(two)]).runs[0]
    assert section.table.columns == ["virtio", "rtl8139", "e1000"]


def test_runs_written_before_run_json_had_the_order_merge_in_their_cells_order(tmp_path):
    one = shard_dir(tmp_path / "2026-11-22T10-00-00-sweep", ["nic=virtio", "nic=e1000"], order=None)
    two = shard_dir(tmp_path / "2026-11-22T10-00-05-sweep", ["nic=rtl8139", "nic=e1000"], order=None)
    section = build([load_run(one), load_run(two)]).runs[0]
    assert section.run.info.cell_order == []
    assert section.table.columns == ["rtl8139", "e1000", "virtio"]  # the later run's cells, then the others'
    assert [c.mean for c in section.table.rows[0][2]] == [100.0, 101.0, 100.0]
