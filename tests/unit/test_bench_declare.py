"""What benchmarks declare, and the report, kernel check and CLI asking for it instead of naming tools."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from niclab.model import bench
from niclab.model.bench import Figure, GuestNeeds, KernelModule, MetricInfo, Row, Series, Shortfall, Shows
from niclab.run.records import RunInfoRecord, SummaryRecord
from niclab.ui.report import findings, plots
from niclab.ui.report.data import CellData, RunData
from niclab.ui.report.tables import summary_table
from tests import records


def test_every_declared_metric_is_one_the_benchmark_reports():
    for plugin in bench.REGISTRY.values():
        known = {m.name for m in plugin.metrics()}
        shows = plugin.shows
        named = [r.metric for r in shows.rows] + [s.metric for f in shows.figures for s in f.series] + list(shows.peaks)
        named += [
            name for f in shows.findings for name in ((f.whole, f.part) if isinstance(f, Shortfall) else (f.metric,))
        ]
        assert set(named) <= known, f"{plugin.name} declares metrics it does not report: {set(named) - known}"
        assert all(f.section for f in plots.figures(list(shows.figures))), f"{plugin.name}: a figure without a section"


class Fake:
    """A benchmark that exists only in this test, declaring one of everything."""

    name: ClassVar[str] = "fake"
    guest: ClassVar[GuestNeeds] = GuestNeeds(
        packages=("fake-tools",), modules=(KernelModule("fake_mod", "FAKE_MOD", "the fake benchmark", ("NET",)),)
    )
    shows: ClassVar[Shows] = Shows(
        rows=(Row("fake.sent_mbps", "fake sent"),),
        figures=(
            Figure("throughput", (Series("fake.received_mbps", "fake received", order=-1),)),
            Figure(
                "bars", (Series("fake.sent_mbps", "sent"),), section="fakes", title="Fake bars", caption="c.", order=45
            ),
        ),
        findings=(Shortfall("fake-loss", "fake.sent_mbps", "fake.received_mbps", 0.5, "{part:.0f} of {whole:.0f}"),),
        peaks=("fake.received_mbps",),
    )

    def metrics(self) -> list[MetricInfo]:
        return [MetricInfo("fake.sent_mbps", "Mbit/s", "sent"), MetricInfo("fake.received_mbps", "Mbit/s", "got")]


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setitem(bench.REGISTRY, "fake", Fake())


def _run() -> RunData:
    def summary(name: str, mean: float) -> SummaryRecord:
        return records.summary(name, label="fake", metric=name.split(".")[-1], unit="Mbit/s", mean=mean)

    cell = CellData("nic=e1000", {"nic": "e1000"}, summaries=[summary("fake.sent_mbps", 900.0),
                                                              summary("fake.received_mbps", 90.0)])  # fmt: skip
    return RunData(Path("run"), RunInfoRecord(scenario="fakes"), [cell])


def test_a_benchmark_adds_its_rows_figures_and_findings_by_declaring_them(fake):
    sections = plots.sections()
    assert "fakes" in sections and list(sections).index("fakes") == list(sections).index("bonding") + 1
    throughput = next(f for f in sections[plots.BARS_SECTION] if f.kind == "throughput")
    assert throughput.series[0].label == "fake received"  # order -1: before netperf's TCP_STREAM
    assert [row[0] for row in summary_table(_run()).rows] == ["fake sent", "fake received_mbps"]
    assert [(f.kind, f.text) for f in findings.find(_run())] == [("fake-loss", "90 of 900")]
    drawn = plots.draw(_run(), sections["fakes"][0])
    assert [(p.title, p.caption) for p in drawn] == [("Fake bars", "fakes: c.")]


def test_the_kernel_check_asks_the_benchmarks_for_their_modules(fake):
    from niclab.model.scenario import parse
    from niclab.plumbing import kernel_check

    assert kernel_check.config_of("fake_mod") == ("FAKE_MOD", "the fake benchmark", ("NET",))
    assert kernel_check.config_of("nfsd") == (
        "NFSD",
        "the nfs benchmark's server",
        ("NETWORK_FILESYSTEMS", "FILE_LOCKING"),
    )
    text = (
        "name: s\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1000\nbenchmarks: [lmbench: {test: lat_tcp}]\n"
    )
    assert "nfsd" not in kernel_check.needed_modules(parse(text, "s.yaml").cells[0].scenario)
