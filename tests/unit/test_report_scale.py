"""Reports, comparisons and exports of sweeps of thousands of cells: what they hold, what they draw, what they show."""

from __future__ import annotations

from pathlib import Path

import pytest

from niclab.run.records import RunInfoRecord
from niclab.ui.report.build import SHOWN_FINDINGS, build
from niclab.ui.report.data import CellData, RunData, for_compare, for_report, load_run
from niclab.ui.report.plots import MAX_BARS, MAX_LINES
from niclab.ui.report.render import render_html
from niclab.ui.report.tables import SHOWN_CELLS, summary_table
from tests import records

RUNS = Path(__file__).resolve().parents[1] / "data" / "runs"
STUDY = ["nic-shootout", "mtu-sweep", "bonding", "nfs"]


@pytest.mark.parametrize("name", STUDY)
def test_a_report_and_a_comparison_hold_what_they_read_and_nothing_else(name):
    whole = load_run(RUNS / name)
    report, compare = load_run(RUNS / name, for_report), load_run(RUNS / name, for_compare)
    assert [c.id for c in report.cells] == [c.id for c in compare.cells] == [c.id for c in whole.cells]
    for full, for_r, for_c in zip(whole.cells, report.cells, compare.cells, strict=True):
        assert for_r.summaries == for_c.summaries == full.summaries
        assert for_r.runs == for_c.runs == full.runs
        assert for_r.facts == for_c.facts == full.facts
        assert for_r.errors == full.errors and for_r.expectations == full.expectations
        assert for_r.params == for_c.params == full.params
        assert for_r.end is None and for_c.end is None and not for_c.measurements
        assert for_r.measurements == [m for m in full.measurements if m.extra.curve]
    assert render_html(build([report])).count("<figure>") == render_html(build([whole])).count("<figure>")


def test_a_report_and_a_comparison_still_refuse_a_damaged_record_they_do_not_hold(tmp_path):
    run = records.write_run(tmp_path / "run", [records.summary("netperf.TCP_STREAM.throughput_mbps")], ["default"])
    with (run / "results.jsonl").open("a") as sink:
        sink.write('{"type": "cell_end", "scenario": "s", "cell": "default", "params": {}, "time": "t"}\n')
        sink.write('{"type": "summary"}\n')
    from niclab.run.reader import RunDirError

    for keep in (for_report, for_compare):
        with pytest.raises(RunDirError, match=r"results.jsonl:2: cell_end without 'nodes'"):
            load_run(run, keep)


def _sweep(count: int) -> RunData:
    cells = []
    for n in range(count):
        params = {"nic": ("e1000", "virtio")[n % 2], "rx_usecs": n // 2}
        summary = records.summary(
            "netperf.TCP_STREAM.throughput_mbps",
            unit="Mbit/s",
            samples=[900.0 + n, 910.0 + n],
            unstable=True,
            reasons=["cv 9 %"],
        )
        cells.append(CellData(",".join(f"{k}={v}" for k, v in params.items()), params, summaries=[summary]))
    return RunData(Path("run"), RunInfoRecord(scenario="sweep"), cells)


def test_a_sweep_of_many_cells_draws_no_figure_nobody_can_read_and_says_so():
    section = build([_sweep(MAX_BARS + 1)]).runs[0]
    assert "throughput, latency and CPU" not in section.plots
    assert any(
        note.startswith(f"throughput, latency and CPU ({MAX_BARS + 1} cells, more than the") for note in section.crowded
    )
    assert "throughput, latency and CPU" not in section.missing
    assert "Not drawn, too crowded to read" in render_html(build([_sweep(MAX_BARS + 1)]))
    small = build([_sweep(6)]).runs[0]
    assert "throughput, latency and CPU" in small.plots and not small.crowded
    assert MAX_LINES < MAX_BARS


def test_a_sweep_of_many_cells_shows_the_first_cells_and_findings_and_says_how_many_more():
    run = _sweep(SHOWN_CELLS + 50)
    table = summary_table(run)
    assert len(table.columns) == SHOWN_CELLS and all(len(cells) == SHOWN_CELLS for _, _, cells in table.rows)
    assert f"The first {SHOWN_CELLS} of {SHOWN_CELLS + 50:,} cells" in table.notes[-1]
    report = build([run])
    assert len(report.runs[0].cells) == SHOWN_CELLS
    assert len(report.findings) == SHOWN_FINDINGS and report.more_findings == SHOWN_CELLS + 50 - SHOWN_FINDINGS
    html = render_html(report)
    assert f"Findings ({SHOWN_CELLS + 50})" in html and f"And {SHOWN_CELLS + 50 - SHOWN_FINDINGS} more" in html
    assert f"The first {SHOWN_CELLS} of\n  {SHOWN_CELLS + 50} cells" in html


@pytest.mark.parametrize("name", STUDY)
def test_a_comparison_of_two_runs_holds_summaries_and_what_pairing_reads_and_judges_alike(name):
    from niclab.ui.report.compare import compare, selftest_changes
    from niclab.ui.report.data import for_comparing_runs

    whole, held = load_run(RUNS / name), load_run(RUNS / name, for_comparing_runs)
    for full, slim in zip(whole.cells, held.cells, strict=True):
        assert slim.id == full.id and slim.params == full.params
        assert slim.summaries == full.summaries and slim.tests == full.tests
        assert not slim.runs and not slim.measurements and slim.end is None
        if full.facts is None or not (full.facts.rig.hosts or full.facts.interleaved_with):
            assert slim.facts is None
            continue
        assert slim.facts is not None and slim.facts.rig.hosts == full.facts.rig.hosts
        assert slim.facts.interleaved_with == full.facts.interleaved_with and not slim.facts.nodes
    assert compare(held, held, every_metric=True) == compare(whole, whole, every_metric=True)
    assert selftest_changes(held, held) == selftest_changes(whole, whole)


@pytest.mark.parametrize("name", STUDY)
def test_held_records_share_what_they_can_and_still_write_as_read(name):
    import json

    from niclab.run.reader import read_results
    from niclab.run.records import as_json

    run = load_run(RUNS / name)
    held = [
        record
        for cell in run.cells
        for record in [cell.facts, cell.end, *cell.summaries, *cell.runs.values(), *cell.measurements]
        + [*cell.errors, *cell.expectations, *cell.tests]
        if record is not None
    ]
    read = [record for _, record in read_results(RUNS / name / "results.jsonl")]
    assert sorted(json.dumps(as_json(r), sort_keys=True) for r in held) == sorted(
        json.dumps(as_json(r), sort_keys=True) for r in read
    )
    summaries = [s for cell in run.cells for s in cell.summaries]
    assert summaries[0].__pydantic_fields_set__ is summaries[-1].__pydantic_fields_set__
    with pytest.raises(TypeError, match="never assigned to"):
        summaries[0].unstable = True  # a default (unset) field: changing it would change every summary's set


def _bonded_sweep(tmp_path: Path, count: int) -> Path:
    """A sweep of `count` cells, each with its provenance and two runs; every seventh cell bonds three ports and
    puts its interrupts on one CPU (the report's bonding figure and irq finding read those runs)."""
    given = []
    for n in range(count):
        params = {"nic": ("e1000", "rtl8139")[n % 2], "ports": 3 if n % 7 == 0 else 1}
        cell_id = ",".join(f"{k}={v}" for k, v in params.items()) + f",n={n}"
        nics = {"a": {"model": params["nic"], "ports": params["ports"]}}
        counters = {"a": {"link0": {"rx_packets": 10, "interrupts_per_cpu": [900, 10]}}}
        given += records.in_cell(
            cell_id,
            params,
            records.cell(nodes={"a": {"kernel": "6.1", "interfaces": {"link0": {"driver": params["nic"]}}}}),
            records.run("0.1", nics=nics, counters=counters),
            records.run("0.2", nics=nics, counters=counters),
            records.summary(
                "netperf.TCP_STREAM.throughput_mbps", unit="Mbit/s", samples=[90.0 + n, 91.0 + n], runs=["0.1", "0.2"]
            ),
        )
    cells = list(dict.fromkeys(r.cell for r in given))
    return records.write_run(tmp_path / "sweep", given, cells, scenario="sweep")


def test_a_report_of_a_sweep_holds_the_provenance_of_the_cells_it_shows_only_and_reads_the_same(tmp_path):
    run_dir = _bonded_sweep(tmp_path, SHOWN_CELLS + 30)
    whole, held = load_run(run_dir), load_run(run_dir, for_report)
    for n, (full, slim) in enumerate(zip(whole.cells, held.cells, strict=True)):
        assert slim.summaries == full.summaries and slim.params == full.params
        if n < SHOWN_CELLS:
            assert slim.facts == full.facts and slim.runs == full.runs
            continue
        assert slim.facts is not None and not slim.facts.nodes  # that it booted, no more
        assert slim.runs == (full.runs if full.params["ports"] == 3 else {})  # the bonded ones' runs
    made = build([held]), build([whole])
    for report in made:
        report.generated_at = "then"
    assert render_html(made[0]) == render_html(made[1])
    assert [f.text for f in made[0].findings] == [f.text for f in made[1].findings]
    beyond = f"n={SHOWN_CELLS + 3}"  # a bonded cell the report does not show whole
    assert any(f.where.endswith(beyond) and "bonded ports landed on CPU 0" in f.text for f in made[0].findings)
