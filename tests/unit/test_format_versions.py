"""Run directories of results format version 1 still read, report, compare and export as they did.

Version 1 named two things `benchmark`: the label in run, summary and error records, the tool in measurement and
test records; version 2 calls them `label` and `tool` (docs/results.md, "Versions"). The run directories in
tests/data/runs were recorded in version 1; each is written again in version 2 and both must give the same
report, comparison and export.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from niclab.run import records
from niclab.run.reader import read_results, read_run_info
from niclab.ui.cli.main import main

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"
RECORDED = sorted(p.name for p in RUNS.iterdir() if (p / "results.jsonl").is_file())


def in_version_2(source: Path, target: Path) -> Path:
    """A copy of a version-1 run directory with every record written again as this niclab writes it."""
    shutil.copytree(source, target)
    lines = [
        json.dumps(records.as_json(record.model_copy(update={"version": records.FORMAT_VERSION})))
        for _, record in read_results(source / "results.jsonl")
    ]
    (target / "results.jsonl").write_text("\n".join(lines) + "\n")
    return target


def outputs(run: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """What a user gets from the run: its report, its comparison with itself, its exports."""
    out.mkdir()
    assert main(["report", str(run), "--out", str(out / "report.html")]) == 0
    capsys.readouterr()
    assert main(["compare", str(run), str(run), "--format", "json"]) == 0
    compared = capsys.readouterr().out.replace(str(run), "RUN")
    for what in ("measurements", "summaries"):
        assert main(["export", str(run), "--what", what, "--out", str(out / f"{what}.csv")]) == 0
    found = {name: (out / name).read_text() for name in ("report.html", "measurements.csv", "summaries.csv")}
    report = re.sub(r"Generated [0-9-]+ [0-9:]+ UTC", "Generated (when)", found["report.html"].replace(str(run), "RUN"))
    return {**found, "report.html": report, "compare": compared}


@pytest.mark.parametrize("name", RECORDED)
def test_a_version_1_run_reads_as_it_was_written_again_in_version_2(name, tmp_path, capsys):
    old = RUNS / name
    assert {r.version for _, r in read_results(old / "results.jsonl")} == {1}
    assert b'"benchmark":' in (old / "results.jsonl").read_bytes()
    new = in_version_2(old, tmp_path / "v2" / name)
    text = (new / "results.jsonl").read_text()
    assert '"benchmark":' not in text and '"label":' in text and '"version": 2' in text

    assert outputs(RUNS / name, tmp_path / "from-v1", capsys) == outputs(new, tmp_path / "from-v2", capsys)


def test_version_1_names_become_label_and_tool_by_the_records_kind():
    kinds = {}
    for _, record in read_results(RUNS / "nic-shootout" / "results.jsonl"):
        kinds.setdefault(record.type, record)
    run, measurement, summary = kinds["run"], kinds["measurement"], kinds["summary"]
    assert isinstance(run, records.RunRecord) and (run.label, run.tool) == ("netperf TCP_STREAM", "netperf")
    assert isinstance(measurement, records.MeasurementRecord) and measurement.tool == "netperf"
    assert isinstance(summary, records.SummaryRecord) and summary.label.startswith("netperf ")
    assert read_run_info(RUNS / "nic-shootout" / "run.json") is not None
