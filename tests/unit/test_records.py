"""The record models (niclab.run.records) are the results format: what the runner writes, and what was captured, loads.

The runner runs through the replay fake (tests/fakes.py, as tests/unit/test_runner.py does) and every line
it writes to results.jsonl, and its run.json, must validate; so must the run directories shipped in
tests/data/runs. Then the reader's own rules: versions, messages that name the field.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from niclab.model.bench import netperf
from niclab.run import reader, records
from niclab.run.reader import RunDirError, read_results, read_run_info
from niclab.run.results import RunDir
from niclab.run.runner import RunOutcome
from niclab.ui.report.data import load_run
from tests.fakes import FakeBackend
from tests.helpers import NETPERF_RR, harness, kselftest_run
from tests.records import as_dict

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"

SCENARIO = """\
name: fake-two-node
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
repeat: 2
benchmarks:
  - netperf: {test: TCP_STREAM, seconds: 5}
  - netperf: {test: TCP_RR, seconds: 5}
expect:
  - netperf.TCP_STREAM.throughput_mbps > 1
  - netperf.TCP_RR.transaction_rate > 1e12
"""


def run_through_the_fake(tmp_path: Path, backend: FakeBackend, outcomes: list[RunOutcome] | None = None) -> Path:
    tmp_path.mkdir()
    h = harness(tmp_path, backend, SCENARIO)
    outcome = h.run()
    if outcomes is not None:
        outcomes.append(outcome)
    return h.run_dir.path


def validated_kinds(run_dir: Path) -> list[str]:
    lines = [line for line in (run_dir / "results.jsonl").read_text().splitlines() if line.strip()]
    found = list(read_results(run_dir / "results.jsonl"))
    assert len(found) == len(lines)
    for (_, model), line in zip(found, lines, strict=True):
        assert as_dict(model) == json.loads(line)  # nothing lost, nothing added
    info = read_run_info(run_dir / "run.json")
    assert info is not None and as_dict(info) == json.loads((run_dir / "run.json").read_text())
    return [model.type for _, model in found]


def test_every_record_the_runner_writes_validates(tmp_path, replay, monkeypatch):
    good = FakeBackend(replay)
    kinds = validated_kinds(run_through_the_fake(tmp_path / "good", good))
    failing = FakeBackend(replay)
    failing.when(NETPERF_RR, node="a", raises=RuntimeError("replayed bug"))
    kinds += validated_kinds(run_through_the_fake(tmp_path / "failing", failing))
    (tmp_path / "selftests").mkdir()
    found = kselftest_run(tmp_path / "selftests", replay, monkeypatch)
    kinds += validated_kinds(found)
    assert set(kinds) == set(records.KINDS)  # the three runs wrote every kind of record


def test_the_runner_writes_through_the_models_and_the_readers_read_what_it_wrote(tmp_path, replay):
    outcomes: list[RunOutcome] = []
    run_dir = run_through_the_fake(tmp_path / "run", FakeBackend(replay), outcomes)
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert {(*list(line)[:2], line["version"]) for line in lines} == {("type", "version", records.FORMAT_VERSION)}
    info = json.loads((run_dir / "run.json").read_text())
    assert (info["version"], info["cells"], info["cell_order"]) == (records.FORMAT_VERSION, ["default"], ["default"])
    written = [model for _, model in read_results(run_dir / "results.jsonl")]
    (cell,) = load_run(run_dir).cells
    assert cell.facts == next(m for m in written if isinstance(m, records.CellRecord))
    assert cell.summaries == [m for m in written if isinstance(m, records.SummaryRecord)]
    assert list(cell.runs.values()) == [m for m in written if isinstance(m, records.RunRecord)]
    assert cell.measurements == [m for m in written if isinstance(m, records.MeasurementRecord)]
    assert cell.expectations == [m for m in written if isinstance(m, records.ExpectationRecord)]
    (outcome,) = outcomes[0].cells  # what `niclab run` prints and the pytest plugin reports: the same records
    assert outcome.summaries == cell.summaries and outcome.facts == cell.facts


def test_a_record_written_again_is_the_same_line(tmp_path, replay, monkeypatch):
    """Each kind of record, read and appended again through RunDir.append: the same line, byte for byte."""
    good = run_through_the_fake(tmp_path / "good", FakeBackend(replay)) / "results.jsonl"
    failing = FakeBackend(replay)
    failing.when(NETPERF_RR, node="a", raises=RuntimeError("replayed bug"))
    bad = run_through_the_fake(tmp_path / "failing", failing) / "results.jsonl"
    (tmp_path / "selftests").mkdir()
    tests = kselftest_run(tmp_path / "selftests", replay, monkeypatch) / "results.jsonl"
    for source in (good, bad, tests):
        again = RunDir(source.parent.parent)
        again.results = source.with_name("again.jsonl")
        for _, model in read_results(source):
            again.append(model)
        assert again.results.read_text() == source.read_text()
        assert [m for _, m in read_results(again.results)] == [m for _, m in read_results(source)]
    assert {m.type for path in (good, bad, tests) for _, m in read_results(path)} == set(records.KINDS)


@pytest.mark.parametrize("name", sorted(p.name for p in RUNS.iterdir()))
def test_the_shipped_run_directories_load(name):
    lines = [line for line in (RUNS / name / "results.jsonl").read_text().splitlines() if line.strip()]
    assert len(list(read_results(RUNS / name / "results.jsonl"))) == len(lines)
    info = read_run_info(RUNS / name / "run.json")
    assert info is not None and info.cells and info.version == 1


def line_of(kind: str) -> dict:
    for line in (RUNS / "nic-shootout" / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["type"] == kind:
            return record
    raise LookupError(kind)


def problem(tmp_path: Path, record: dict | str) -> str:
    path = tmp_path / "results.jsonl"
    path.write_text((record if isinstance(record, str) else json.dumps(record)) + "\n")
    with pytest.raises(RunDirError) as caught:
        list(read_results(path))
    return str(caught.value).removeprefix(f"{path}:1: ")


def test_a_defect_is_named_by_its_field(tmp_path):
    run = line_of("run")
    del run["nics"]["a"]
    run["nics"]["a"] = {"ports": "2"}
    assert problem(tmp_path, run) == "run nics.a.ports: should be a valid integer, not '2'"
    summary = line_of("summary")
    summary["ci_high"] = None
    assert problem(tmp_path, summary) == "summary ci_low and ci_high are both numbers or both null"
    summary = line_of("summary")
    del summary["mean"]
    assert problem(tmp_path, summary) == "summary without 'mean'"
    counters = line_of("run")
    del counters["counters"]["a"]["link0"]["interrupts_per_cpu"]
    counters["counters"]["a"]["link0"]["interrupts_per_cpu"] = [1, 2.5]
    assert problem(tmp_path, counters) == (
        "run counters.a.link0.interrupts_per_cpu[1]: should be a valid integer, not 2.5"
    )
    assert problem(tmp_path, {**line_of("cell"), "type": "cel"}).startswith("unknown record type 'cel'; the types")
    assert problem(tmp_path, {"cell": "x"}) == "a record without 'type'"
    assert problem(tmp_path, "[1, 2]") == "not a results record (a JSON list, not an object)"


def test_numbers_that_are_not_finite_and_odd_text_are_refused_where_they_are(tmp_path):
    summary = json.dumps(line_of("summary"))
    samples = summary.index('"samples": [') + len('"samples": [')
    assert problem(tmp_path, summary[:samples] + "NaN, " + summary[samples:]) == "summary samples[0] is nan"
    assert problem(tmp_path, summary.replace('"n": 3', '"n": 1e999')) == "summary n is inf"
    assert problem(tmp_path, summary.replace('"n": 3', '"n": -Infinity')) == "summary n is -inf"
    huge = summary.replace('"n": 3', '"n": 1' + "0" * 25)
    assert problem(tmp_path, huge) == "summary n is a whole number too large (more than 2**64)"
    lone = summary.replace('"unit": "Mbit/s"', '"unit": "Mbit/\\udc80s"')
    assert problem(tmp_path, lone) == "summary unit holds a lone surrogate (\\ud800-\\udfff), which is not text"
    deep = {**line_of("measurement"), "extra": {"curve": [], "x": json.loads("[" * 70 + "]" * 70)}}
    assert problem(tmp_path, deep) == "measurement extra.x" + "[0]" * 6 + "… is nested more than 64 levels deep"


def test_a_newer_format_is_refused_with_a_hint_and_version_1_is_the_default(tmp_path):
    assert problem(tmp_path, {**line_of("cell"), "version": 3}) == (
        "written in results format version 3; this niclab reads versions 1 and 2: update niclab"
    )
    assert read_run_info(RUNS / "bonding" / "run.json").version == 1
    (tmp_path / "run.json").write_text(json.dumps({"version": 7, "cells": []}))
    with pytest.raises(RunDirError, match=r"run.json: written in results format version 7"):
        read_run_info(tmp_path / "run.json")


def test_a_missing_run_json_is_none_and_a_damaged_one_one_line(tmp_path):
    assert read_run_info(tmp_path / "run.json") is None
    (tmp_path / "run.json").write_text('{"cells": "nic=e1000"}')
    with pytest.raises(RunDirError, match=r"run.json: cells: should be a valid list, not 'nic=e1000'$"):
        read_run_info(tmp_path / "run.json")


def test_a_file_or_a_line_over_its_limit_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 4096)
    monkeypatch.setattr(reader, "MAX_RESULTS_BYTES", 16384)
    monkeypatch.setattr(reader, "MAX_INFO_BYTES", 1024)
    cell = json.dumps(line_of("cell"))  # about 3 kB
    path = tmp_path / "results.jsonl"
    path.write_text(cell + "\n" + json.dumps({**line_of("cell"), "x": "y" * 5000}) + "\n")
    found = read_results(path)
    assert next(found)[0] == 1  # the first line is read before the second is looked at
    with pytest.raises(RunDirError, match=r"results.jsonl:2: the line is longer than 4,096 bytes$"):
        next(found)
    path.write_text((cell + "\n") * 6)
    with pytest.raises(RunDirError, match=r"results.jsonl: [\d,]+ bytes, more than the 16,384 bytes niclab reads$"):
        list(read_results(path))
    (tmp_path / "run.json").write_text(json.dumps({"scenario_text": "x" * 2000}))
    with pytest.raises(RunDirError, match=r"run.json: 2,\d+ bytes, more than the 1,024 bytes niclab reads$"):
        read_run_info(tmp_path / "run.json")
    assert reader._size(1 << 30) == "1 GiB" and reader._size(64 << 20) == "64 MiB"


def test_a_file_of_more_values_than_memory_should_hold_is_refused(tmp_path, monkeypatch):
    """A few MiB of {"a":0,"b":0,…} take a hundred times that in memory: values are counted, not only bytes."""
    monkeypatch.setattr(reader, "MAX_VALUES", 5000)
    cell = json.dumps(line_of("cell"))
    path = tmp_path / "results.jsonl"
    path.write_text(cell + "\n" + json.dumps({**line_of("cell"), **{f"k{i}": 0 for i in range(6000)}}) + "\n")
    found = read_results(path)
    assert next(found)[0] == 1
    with pytest.raises(RunDirError, match=r"results.jsonl:2: more than the 5,000 values niclab reads in one file$"):
        next(found)
    (tmp_path / "run.json").write_text(json.dumps({f"k{i}": 0 for i in range(6000)}))
    with pytest.raises(RunDirError, match=r"run.json: more than the 5,000 values niclab reads in one file$"):
        read_run_info(tmp_path / "run.json")


def test_netperfs_confidence_iteration_is_declared_in_a_measurements_extra(data_dir):
    text = (data_dir / "netperf" / "tcp_stream_cpu_confidence.txt").read_text()
    [throughput, *_] = netperf.measurements("TCP_STREAM", netperf.parse_keyvals(text), cpu=True)
    extra = records.MeasurementExtra.model_validate(throughput.extra)
    assert (extra.confidence_level, extra.confidence_width_pct, extra.confidence_iterations) == (99, 5, 3)
    assert extra.confidence_achieved_width_pct == {"throughput": 53.592, "local_cpu": 19.116, "remote_cpu": 61.255}
    assert extra.confidence_met is False
    with pytest.raises(ValidationError, match="confidence_met"):
        records.MeasurementExtra.model_validate({"confidence_met": "no"})
