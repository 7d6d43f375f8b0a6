"""Every option of every benchmark reaches its `run` record, and comes back from it as it was given.

The options are drawn from each benchmark's own options model (tests/helpers.options_entries: every field,
within its declared bounds, in every combination the model accepts), so a new option or a new benchmark is
covered here without a new test. Two properties:

- an option's JSON form in a `run` record, written and read back by the results reader, validates to the
  same options (tuples, nested models, paths and literals included);
- a scenario of such benchmarks run by the Runner over the replay fake writes one `run` record per repeat
  of each, with those options, and no error. The plug-ins' `run` is canned here (one figure, or one test
  result for the selftests): what reaches the records is the runner's business; what the tools print and
  how it is parsed is the parsers' tests'.

Found this way: a netperf benchmark with `confidence:` failed every cell with an internal error, because
its `iterations` (a tuple) was not JSON (issue 40).
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from niclab.model import bench
from niclab.model.bench import BenchContext, BenchOptions, Measurement
from niclab.model.bench.base import TestOutcome as Outcome
from niclab.model.scenario import load_scenario
from niclab.model.selftests import TARGETS
from niclab.run import records
from niclab.run.reader import read_results
from niclab.run.records import RunRecord
from tests.fakes import FakeBackend, Replay
from tests.helpers import LO_COUNTERS, LO_COUNTERS_READ, harness, options_entries

TOOLS = sorted(bench.REGISTRY)

#: What only a plug-in knows of its free-text options: kselftest takes only the targets it knows; pktgen's frames
#: fit the scenario's link (MTU 1500: 1518 bytes on the wire).
EXTRA: dict[str, dict[str, st.SearchStrategy]] = {
    "kselftest": {"targets": st.lists(st.sampled_from(TARGETS), min_size=1, max_size=len(TARGETS))},
    "pktgen": {"frame_size": st.integers(64, 1518)},
}

SETTINGS = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
#: Through the runner: no shrinking (a failing example is shown as found; shrinking it ran a run per step, for
#: minutes, when the options' JSON form was broken).
RUNNER_SETTINGS = dict(SETTINGS, phases=[Phase.explicit, Phase.reuse, Phase.generate])


def entries(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    return options_entries(bench.get(tool).Options, EXTRA.get(tool))


def a_run_record(options: BenchOptions) -> RunRecord:
    return RunRecord(
        type="run",
        scenario="options",
        cell="default",
        params={},
        run="0.1",
        label="a label",
        tool="a tool",
        repeat=1,
        repeats=1,
        client="a",
        server="b",
        link=0,
        options=options.recorded(),
        nics={},
        counters={},
    )


def read_back(record: RunRecord) -> RunRecord:
    """The record written as the runner writes it, and read by the results reader."""
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "results.jsonl"
        path.write_text(json.dumps(records.as_json(record)) + "\n")
        [(_, back)] = list(read_results(path))
    assert isinstance(back, RunRecord)
    return back


@pytest.mark.parametrize("tool", TOOLS)
@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_a_benchmarks_options_come_back_from_its_run_record(tool, data):
    model = bench.get(tool).Options
    options = model.model_validate(data.draw(entries(tool), label="options"))
    back = read_back(a_run_record(options))
    assert back.options == options.recorded()
    assert model.model_validate(back.options) == options


def test_netperfs_confidence_and_iterations_are_recorded_as_json():
    options = bench.get("netperf").Options.model_validate({"confidence": {"level": 99, "width": 5}})
    assert options.recorded()["iterations"] == [3, 10]
    assert options.recorded()["confidence"] == {"level": 99, "width": 5.0}
    assert read_back(a_run_record(options)).options["iterations"] == [3, 10]


# -- through the runner -------------------------------------------------------------------------------------


class Canned:
    """A registered plug-in whose run() gives its first figure for these options (and, for a benchmark that runs
    tests, one passed test) instead of running its tool; everything else is the plug-in's own."""

    def __init__(self, plugin: bench.Benchmark):
        self.plugin = plugin

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plugin, name)

    def run(self, ctx: BenchContext, options: BenchOptions) -> list[Measurement | Outcome]:
        prefix = getattr(self.plugin, "metric_prefix", lambda o: f"{self.plugin.name}.")(options)
        metric = next(m for m in self.plugin.metrics() if m.name.startswith(prefix))
        tool, *test, name = metric.name.split(".")
        found: list[Measurement | Outcome] = [Measurement(tool, ".".join(test) or None, name, 1.0, metric.unit)]
        if self.plugin.name == "kselftest":
            found.append(Outcome(tool, "drivers/net", "ping.py", None, "pass", node=ctx.ends.client.name))
        return found


@pytest.fixture(scope="module")
def canned():
    with pytest.MonkeyPatch.context() as patch:
        for tool, plugin in list(bench.REGISTRY.items()):
            patch.setitem(bench.REGISTRY, tool, Canned(plugin))
        yield


replay = functools.cache(Replay.load)  # not a fixture: Hypothesis would print all of it with a failing example


def scenario_text(benchmarks: list[tuple[str, dict[str, Any]]]) -> str:
    # JSON is YAML: each entry as the scenario writes it, e.g. {"netperf": {"confidence": {"level": 99}}}
    kernel = "kernel: trixie\n" if any(tool == "kselftest" for tool, _ in benchmarks) else ""  # has the selftests
    lines = "".join(f"  - {json.dumps({tool: options})}\n" for tool, options in benchmarks)
    return (
        "name: options\nnodes: [a, b]\n" + kernel + "links:\n  - between: [a, b]\n    nic: e1000\nbenchmarks:\n" + lines
    )


@st.composite
def benchmark_lists(draw: st.DrawFn) -> list[tuple[str, dict[str, Any]]]:
    tools = draw(st.lists(st.sampled_from(TOOLS), min_size=1, max_size=4))
    return [(tool, draw(entries(tool), label=tool)) for tool in tools]


def run_through_the_fake(benchmarks: list[tuple[str, dict[str, Any]]]) -> None:
    """Run a scenario of these benchmark entries over the fake; check a `run` record per repeat with its options."""
    with tempfile.TemporaryDirectory() as where:
        text = scenario_text(benchmarks)
        base = {"base": Path(where)}  # a bundle's path is relative to the scenario's folder
        given_options = [bench.get(tool).Options.model_validate(options, context=base) for tool, options in benchmarks]
        path = Path(where) / "written.yaml"
        path.write_text(text)
        written = load_scenario(path).cells[0].scenario.benchmarks
        assert [spec.options for spec in written] == given_options  # the text says what was drawn

        backend = FakeBackend(replay())
        backend.when(LO_COUNTERS_READ, result=LO_COUNTERS.format(n=10))  # peer: self
        h = harness(Path(where), backend, text)
        outcome = h.run()
        found = h.records
        info = h.info()

    assert backend.misses == []
    assert info["internal_errors"] == []
    assert [r["message"] for r in found if r["type"] == "error"] == []
    assert outcome.ok
    for index, options in enumerate(given_options):
        runs = [r for r in found if r["type"] == "run" and r["run"].split(".")[0] == str(index)]
        assert [r["repeat"] for r in runs] == list(range(1, (options.repeat or 1) + 1))
        for run in runs:
            assert run["options"] == options.recorded()
            assert type(options).model_validate(run["options"]) == options
            assert any(r["type"] == "measurement" and r["run"] == run["run"] for r in found)


#: Options a plug-in refuses whatever their value: the NFS share, the selftests and pktgen take no `peer: self`.
REFUSED = {("bonnie", "peer"), ("kselftest", "peer"), ("nfs", "peer"), ("pktgen", "peer")}
FIELDS = [(tool, name) for tool in TOOLS for name in bench.get(tool).Options.model_fields]
FIELDS = [field for field in FIELDS if field not in REFUSED]


def test_the_refused_options_are_refused():
    for tool, name in REFUSED:
        with pytest.raises(ValidationError, match="peer"):
            bench.get(tool).Options.model_validate({name: "self"})


@pytest.mark.parametrize(("tool", "name"), FIELDS, ids=[f"{tool}.{name}" for tool, name in FIELDS])
@settings(max_examples=5, **RUNNER_SETTINGS)
@given(data=st.data())
def test_each_option_of_each_benchmark_reaches_a_run_record_through_the_runner(canned, tool, name, data):
    entry = data.draw(options_entries(bench.get(tool).Options, EXTRA.get(tool), present=name), label=tool)
    run_through_the_fake([(tool, entry)])


@settings(max_examples=40, **RUNNER_SETTINGS)
@given(benchmarks=benchmark_lists())
def test_benchmarks_of_any_options_side_by_side_in_one_scenario_each_reach_their_records(canned, benchmarks):
    run_through_the_fake(benchmarks)
