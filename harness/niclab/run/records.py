"""The results format: the records of results.jsonl and run.json (docs/results.md says what each holds).

results.jsonl holds one JSON object per line, its kind in `type` (KINDS); run.json is one RunInfoRecord.
Every field a reader uses is typed strictly; extra provenance is kept as it is. niclab.run.reader reads
run directories, which are untrusted, into these models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, model_validator

from niclab.model.facts import (
    BootFacts,
    HostFacts,
    HostLoad,
    NetworkFacts,
    NicSummary,
    NodeFacts,
    PortCounters,
    RigFacts,
    Timings,
)

FORMAT_VERSION = 2  # what this niclab writes; it reads 1 too (niclab.run.reader maps it); no `version`: 1


# -- the models ----------------------------------------------------------------------------------------


def _none(value: Any) -> bool:
    return value is None


def _empty(value: Any) -> bool:
    """An optional field with nothing in it: left out when the record is written (Field's exclude_if)."""
    return value is None or value == "" or value == []


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="allow", strict=True, allow_inf_nan=False, use_attribute_docstrings=True, populate_by_name=True
    )


Params = dict[str, JsonValue]


class _Record(_Model):
    """What every record of results.jsonl carries."""

    type: str
    """The record's kind: cell, run, measurement, summary, cell_end, expectation, error or test."""
    version: int = Field(FORMAT_VERSION, ge=1)
    """The results format's version; absent in files written before it existed (version 1)."""
    scenario: str
    """The scenario's name."""
    cell: str
    """The matrix cell's id, e.g. `nic=e1000,mtu=9000` (`default` without a matrix)."""
    params: Params
    """The cell's axis values, as the matrix gave them."""


# -- cell and cell_end: provenance


class CellRecord(_Record):
    """Provenance at the start of a cell: host, rig, network as read back, nodes, boot, timings."""

    type: Literal["cell"]
    time: str
    """When it was written (UTC, ISO 8601)."""
    timings: Timings = Field(default_factory=Timings)
    """Seconds: `boot_s` (0 on a reused boot), `network_s`, `agents_ready_since_start_s`."""
    host: HostFacts = Field(default_factory=HostFacts)
    """The host: hostname, kernel, CPU model, Python."""
    rig: RigFacts = Field(default_factory=RigFacts)
    """The backend, the accelerator and why (each node's, `accel_nodes`, when its lab hosts' differ), QEMU's
    version, the image, the guests' kernel, agent start times; on a lab, `hosts` (node -> the lab host it ran on)
    and `libvirt` (node -> the host's URI and the domain)."""
    boot: BootFacts | None = None
    """Which boot of the run the cell ran on: `number`, `reused`, `first_cell`."""
    network: NetworkFacts = Field(default_factory=NetworkFacts)
    """Each interface as asked (address, MTU, bond, netem, offloads), `observed`: what the guests reported,
    `idle_rtt_ms`: the network check's round trips (a ring around each segment and a few more pairs, `ping_seed`),
    and `clock_settled`: the nodes whose clock ran off the host's and was settled, and why."""
    nodes: dict[str, NodeFacts] = Field(default_factory=dict)
    """Per node: its kernel, and per interface driver, version, firmware, bus, PCI ID and subsystem, MAC, MTU."""
    interleaved_with: list[str] = Field(default_factory=list)
    """The cells whose repeats alternated with this one's on one boot."""


class CellEndRecord(_Record):
    """The nodes' facts after the benchmarks."""

    type: Literal["cell_end"]
    time: str
    """When it was written (UTC, ISO 8601)."""
    nodes: dict[str, NodeFacts]
    """Per node, as in the `cell` record."""


# -- run and measurement


class RunRecord(_Record):
    """One run of one benchmark: which repeat, where, how long, and what each NIC counted meanwhile."""

    type: Literal["run"]
    run: str
    """The run's id: BENCHMARK_INDEX.REPEAT, e.g. `0.1`."""
    label: str
    """The benchmark's label, e.g. `netperf TCP_STREAM`."""
    tool: str
    """The tool, e.g. `netperf`."""
    repeat: int
    """Which repeat, from 1."""
    repeats: int
    """How many repeats the benchmark has."""
    boot: int | None = None
    """Which boot of the run it ran on (absent in runs written before it was recorded)."""
    client: str
    """The node the client ran on."""
    server: str
    """The node the server ran on."""
    link: int
    """The link it measured, from 0."""
    peer: Literal["self"] | None = None
    """`self` when client and server ran on one node over loopback (127.0.0.1): the reference beside `link`'s
    figure; absent across a link."""
    family: Literal[4, 6] = 4
    """The IP version it ran over: `6` with the benchmark's `family: 6`; absent over IPv4."""
    options: dict[str, JsonValue] = Field(default_factory=dict)
    """The benchmark's options as the scenario gave them."""
    started_at: str | None = None
    """UTC, ISO 8601."""
    finished_at: str | None = None
    """UTC, ISO 8601."""
    seconds: float | None = None
    """How long the tool ran."""
    nics: dict[str, NicSummary]
    """Per node: the NIC at that end (model, driver, PCI ID, ports, bond, MTU); a loopback run's one node has
    `ifname` lo and no card."""
    accel: str | None = None
    """kvm or tcg."""
    counters: dict[str, dict[str, PortCounters]]
    """Per node and port: what the NIC counted during the run (packets, bytes, drops, interrupts per CPU); a
    loopback run's: its node's `lo` (no interrupts)."""
    host_load: HostLoad | None = None
    """The host while the benchmark ran (guests on this host): vCPU wait, CPU pressure, steal, `contended`."""


class MeasurementExtra(_Model):
    """A measurement's tool details: NetPIPE's whole curve, netperf's confidence iteration, and what else the tool
    said (netperf's elapsed time, MSS and socket sizes, as it printed them)."""

    curve: list[Annotated[list[float], Field(min_length=3, max_length=3)]] = Field(default_factory=list)
    """NetPIPE: [message bytes, Mbit/s, half the round trip in µs] per message size."""
    confidence_level: float | None = None
    """netperf with `confidence`: the level asked (-I), in %."""
    confidence_width_pct: float | None = None
    """netperf with `confidence`: the interval's full width asked, in % of the mean."""
    confidence_achieved_width_pct: dict[str, float] = Field(default_factory=dict)
    """netperf with `confidence`: the full width it reached, in % of the mean, per figure (`throughput`,
    `local_cpu`, `remote_cpu`)."""
    confidence_iterations: float | None = None
    """netperf with `confidence`: how many iterations it ran."""
    confidence_met: bool | None = None
    """netperf with `confidence`: whether every figure reached the width asked (if not, the measurement's
    `warning` says which missed)."""


class MeasurementRecord(_Record):
    """One number of one run."""

    type: Literal["measurement"]
    run: str
    """The id of its `run` record."""
    repeat: int
    """Which repeat, from 1."""
    tool: str
    """The tool, e.g. `netperf`."""
    test: str | None
    """The tool's test, e.g. `TCP_STREAM`; null for a tool without tests."""
    metric: str
    """The metric, e.g. `throughput_mbps`."""
    name: str
    """The dotted name expectations use: netperf.TCP_STREAM.throughput_mbps."""
    value: float
    """The number."""
    unit: str
    """Its unit, e.g. `Mbit/s`."""
    client: str
    """The node the client ran on."""
    server: str
    """The node the server ran on."""
    link: int
    """The link it measured, from 0."""
    peer: Literal["self"] | None = None
    """`self` when client and server ran on one node over loopback (127.0.0.1): the reference beside `link`'s
    figure; absent across a link."""
    family: Literal[4, 6] = 4
    """The IP version it ran over: `6` with the benchmark's `family: 6`; absent over IPv4."""
    warning: str | None = None
    """Set when the tool doubted the figure."""
    extra: MeasurementExtra
    """The tool's details, e.g. NetPIPE's whole `curve`."""


class TestRecord(_Record):
    """One test program of the kernel's selftests, or one of its subtests: its result, why, and what the kernel said
    meanwhile."""

    type: Literal["test"]
    run: str
    """The id of its `run` record (the kselftest run it belongs to)."""
    repeat: int
    """Which repeat, from 1."""
    tool: str
    """The tool: `kselftest`."""
    target: str
    """The selftests' target (collection), e.g. `drivers/net`."""
    test: str
    """The test program, e.g. `ping.py`."""
    subtest: str | None = None
    """The subtest's name (`parent/child` below a subtest); null for the program as a whole."""
    result: Literal["pass", "fail", "skip", "xfail", "crash"]
    """pass, fail, skip, xfail (a failure the test expects: an unsupported feature), or crash (the guest's kernel
    oopsed or panicked during the test)."""
    reason: str | None = Field(None, exclude_if=_empty)
    """Why it skipped, failed or crashed, as the test (or the console) said; absent when it did not say."""
    seconds: float | None = Field(None, exclude_if=_none)
    """How long the program ran (absent for a subtest)."""
    node: str
    """The node the test ran on (NETIF is its port on `link`)."""
    remote: str | None = None
    """The node at the other end of the link (the tests' remote, reached over ssh)."""
    link: int
    """The link whose port it tested, from 0."""
    nic: NicSummary
    """The port under test: model, driver, driver version, PCI ID."""
    kernel: str | None = None
    """The kernel the node ran."""
    tests_from: str | None = Field(None, exclude_if=_empty)
    """Where the tests came from, e.g. `Debian trixie linux-source-6.12 6.12.107-1`."""
    dmesg: list[str] = Field(default_factory=list, exclude_if=_empty)
    """The kernel's log lines during the test, on the node that ran it (absent for a subtest)."""
    console: list[str] = Field(default_factory=list, exclude_if=_empty)
    """A crash's excerpt of the node's console (the oops or panic)."""


# -- summary, expectation, error


class SummaryRecord(_Record):
    """A metric over a benchmark's repeats: center, spread, Student-t interval, every sample, stability."""

    type: Literal["summary"]
    benchmark_index: int
    """The benchmark's place in the scenario, from 0."""
    label: str
    """The benchmark's label, e.g. `netperf TCP_STREAM`."""
    name: str
    """The metric's dotted name, e.g. `netperf.TCP_STREAM.throughput_mbps`."""
    test: str | None
    """The tool's test; null for a tool without tests."""
    metric: str
    """The metric, e.g. `throughput_mbps`."""
    unit: str
    """Its unit, e.g. `Mbit/s`."""
    headline: bool
    """Shown in the summary tables and judged by compare by default."""
    client: str
    """The node the client ran on."""
    server: str
    """The node the server ran on."""
    link: int
    """The link it measured, from 0."""
    peer: Literal["self"] | None = None
    """`self` when client and server ran on one node over loopback (127.0.0.1): the reference beside `link`'s
    figure; absent across a link."""
    family: Literal[4, 6] = 4
    """The IP version it ran over: `6` with the benchmark's `family: 6`; absent over IPv4."""
    runs: list[str]
    """The run of each sample."""
    n: int
    """How many samples."""
    mean: float
    """Their mean."""
    median: float
    """Their median."""
    stdev: float | None
    """Their standard deviation; null for one sample."""
    cv_pct: float | None
    """The coefficient of variation, in %; null for one sample."""
    min: float
    """The smallest sample."""
    max: float
    """The largest sample."""
    ci_level: float
    """The confidence level in %, e.g. 95."""
    ci_low: float | None
    """The Student-t interval of the mean: its low end; null for one sample."""
    ci_high: float | None
    """Its high end; null for one sample."""
    samples: list[float]
    """Every sample, one per run."""
    ci_width_pct: float | None = None
    """The interval's full width in % of the mean."""
    unstable: bool
    """Its spread is above what the scenario accepts, or its tool doubted it."""
    reasons: list[str]
    """Why it is unstable."""
    partial: bool = False
    """The cell failed before all its repeats ran."""
    contended: bool = False
    """The host starved the guests of CPU in some run: compare judges only a change beyond what that explains."""
    contention: list[str] = Field(default_factory=list)
    """One line: in how many runs, and the worst run's reasons."""

    @model_validator(mode="after")
    def _interval(self) -> SummaryRecord:
        if (self.ci_low is None) != (self.ci_high is None):
            raise ValueError("ci_low and ci_high are both numbers or both null")
        if self.ci_low is not None and self.ci_high is not None and self.ci_low > self.ci_high:
            raise ValueError(f"ci_low {self.ci_low:g} is above ci_high {self.ci_high:g}")
        return self


class ExpectationRecord(_Record):
    """One check of the scenario's `expect:` against the cell's summaries."""

    type: Literal["expectation"]
    time: str
    """When it was written (UTC, ISO 8601)."""
    expectation: str
    """The expectation as the scenario wrote it."""
    passed: bool
    """Whether it held."""
    measured: float | None
    """The mean; null when nothing was measured."""
    unit: str
    """The metric's unit."""
    samples: int
    """How many samples the mean is of."""
    where: str
    """client->server on link N; for a loopback run, client over loopback (beside link N)."""


class ErrorRecord(_Record):
    """A benchmark run or a cell that failed."""

    type: Literal["error"]
    time: str
    """When it was written (UTC, ISO 8601)."""
    stage: str
    """cell or benchmark."""
    run: str | None = None
    """For a benchmark: the id its run would have had."""
    label: str | None = None
    """For a benchmark: its label."""
    message: str
    """What went wrong, on one line (and where the traceback is)."""
    traceback: str | None = None
    """Set when the failure was unexpected (a bug rather than a fault niclab understands)."""


Record = Annotated[
    CellRecord
    | RunRecord
    | MeasurementRecord
    | SummaryRecord
    | CellEndRecord
    | ExpectationRecord
    | ErrorRecord
    | TestRecord,
    Field(discriminator="type"),
]
KINDS = ("cell", "run", "measurement", "summary", "cell_end", "expectation", "error", "test")
RECORD: TypeAdapter[Record] = TypeAdapter(Record)


class LabInfo(_Model):
    """A lab run's inventory."""

    file: str | None = None
    """The inventory file."""
    text: str | None = None
    """Its text."""
    name: str | None = None
    """The lab's name."""
    prices: dict[str, float] = Field(default_factory=dict)
    """Card model -> what the lab paid."""


class RunInfoRecord(_Model):
    """What ran, on what, when, and how it ended.

    niclab.run.results.new_run_info starts it; the runner updates it as the run goes."""

    model_config = ConfigDict(validate_assignment=True)  # the runner updates it as the run goes

    version: int = Field(FORMAT_VERSION, ge=1)
    """The results format's version; absent in files written before it existed (version 1)."""
    scenario: str | None = None
    """The scenario's name."""
    scenario_file: str | None = None
    """The scenario file's path."""
    scenario_text: str | None = None
    """The scenario file's text as it was run."""
    cells: list[str] = Field(default_factory=list)
    """The cells this run runs: those selected, of its shard, that its backend can realize."""
    cell_order: list[str] = Field(default_factory=list)
    """Every cell of the scenario in its order, so shards merge in it; absent in runs written before it was
    recorded (then `cells` gives the order)."""
    backend: str | None = None
    """The backend's name."""
    command: list[str] = Field(default_factory=list)
    """The command line."""
    niclab_version: str | None = None
    """The version of niclab that ran it."""
    started_at: str | None = None
    """UTC, ISO 8601."""
    finished_at: str | None = None
    """UTC, ISO 8601; null while it runs."""
    status: str | None = None
    """running, ok, failed or interrupted."""
    message: str | None = None
    """Why it failed: the failures and missed expectations."""
    host: dict[str, JsonValue] = Field(default_factory=dict)
    """The host: hostname, kernel, CPU model, Python."""
    warnings: list[str] = Field(default_factory=list)
    """What the run wants you to know although it passed (KVM fell back to TCG, cells not run)."""
    error: dict[str, JsonValue] | None = None
    """Why the run stopped early, when a reason not a cell's did: `message` and `traceback`."""
    internal_errors: list[dict[str, JsonValue]] = Field(default_factory=list)
    """Unexpected exceptions (bugs) in cells: each with its cell, stage, message and traceback."""
    lab: LabInfo | None = None
    """A lab run's inventory: its file, text, name and card prices."""

    @property
    def order(self) -> list[str]:
        """The scenario's cell order: `cell_order`, or for a run written before it was recorded, `cells`."""
        return self.cell_order or self.cells


# -- writing -------------------------------------------------------------------------------------------


def as_json(record: Record | RunInfoRecord) -> dict[str, Any]:
    """A record as niclab writes it (results.jsonl's lines, run.json): the fields it was given, in the model's
    order, names as the format spells them, and its `version` always."""
    given = record.model_dump(mode="json", by_alias=True, exclude_unset=True)
    given["version"] = record.version
    order = {name: place for place, name in enumerate(type(record).model_fields)}
    return dict(sorted(given.items(), key=lambda item: order.get(item[0], len(order))))
