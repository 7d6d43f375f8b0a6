"""The results format: the records of results.jsonl and run.json, and how niclab reads them.

These models are the definition of what a run directory holds (docs/results.md
describes it in words). results.jsonl has one JSON object per line, each one
of eight kinds told apart by `type`:

- `cell` (CellRecord): provenance at the start of a cell;
- `run` (RunRecord): one run of one benchmark;
- `measurement` (MeasurementRecord): one number of one run;
- `summary` (SummaryRecord): a metric over a benchmark's repeats;
- `cell_end` (CellEndRecord): the nodes' facts after the benchmarks;
- `expectation` (ExpectationRecord): one check of `expect:`;
- `error` (ErrorRecord): a benchmark or cell that failed;
- `test` (TestRecord): one test or subtest of the kernel's selftests, its result and why.

run.json is one object (RunInfoRecord). Every field a reader uses is typed
strictly (no conversion: "3" is not a number, 1.0 is not a whole number); the
rich provenance the runner adds beyond them is kept as it is (extra fields).
Each record may carry `version`, the format's version: 1 when absent (files
written before it existed); a newer one is refused with a hint to update.

A run directory is untrusted data (a colleague's, or CI's): `read_results`
and `read_run_info` read only regular files (not a symlink, FIFO or device),
within size limits per file and per line, nesting at most MAX_DEPTH levels,
with finite numbers and text that is Unicode. Each defect is one RunDirError
naming the file, the line and what is wrong:
"runs/x/results.jsonl:57: measurement without 'cell'". A run killed while
writing leaves its last line cut off: that line is dropped with a warning.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, BinaryIO, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError, model_validator

from niclab.base import jsonbound
from niclab.base.errors import NiclabError

FORMAT_VERSION = 1  # what this niclab writes and reads; a record without `version` is version 1
MAX_RESULTS_BYTES = 1 << 30  # results.jsonl: a sweep of 20,000 cells is about 57 MB
MAX_INFO_BYTES = 16 << 20  # run.json: its scenario text is at most 512 KiB
MAX_LINE_BYTES = 4 << 20  # one record of results.jsonl: the runner's are up to about 10 kB
# JSON values (about: commas and colons) in one file: what memory the records take grows with their count
# (some 100 bytes each in Python), not with their bytes; a sweep of 20,000 cells has about 6 million
MAX_VALUES = 20_000_000
MAX_DEPTH = 64  # levels of nested objects and arrays in a record; the runner's go about 6 deep
PARSE_DEPTH = 512  # parsed up to this (then MAX_DEPTH is judged with the path named); deeper is refused unparsed
SHOWN_LEVELS = 8  # of a path into a record, in a message
MAX_INT = 2**64  # whole numbers beyond this are refused (they do not fit a float, and no counter gets there)

Warn = Callable[[str], None]


class RunDirError(NiclabError):
    """A file of a run directory niclab will not read: one line naming it (and the line), and what is wrong."""


def warn_on_stderr(message: str) -> None:
    print(f"niclab: warning: {message}", file=sys.stderr)


# -- the models ----------------------------------------------------------------------------------------


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


class HostFacts(_Model):
    hostname: str | None = None
    kernel: str | None = None
    cpu_model: str | None = None
    python: str | None = None


class RigFacts(_Model):
    """The rig the cell ran on; the backend adds more (boot times, why this accelerator)."""

    backend: str | None = None
    accel: str | None = None
    """kvm or tcg; `mixed` when the nodes ran on lab hosts whose accelerators differ (`accel_nodes`)."""
    accel_nodes: dict[str, str] = Field(default_factory=dict)
    """Per node, when `accel` is `mixed`: kvm or tcg, its host's verdict."""
    accel_reason: str | None = None
    """Why this accelerator (each host's, `URI: why; …`, when the nodes ran on several hosts that differ)."""
    accel_fallback: str | None = None
    """Why the guests fell back to TCG, when they did."""
    qemu: str | None = None
    """QEMU's version line."""
    image: str | None = None
    kernel: str | None = None
    """The guests' kernel version."""
    kernel_origin: str | None = None
    kernel_boot: str | None = None
    """How the guests' kernel was booted: pvh or bzimage."""
    firmware: str | None = None
    """The QEMU backend's guest firmware: qboot.rom under TCG where QEMU has it, else seabios (or NICLAB_QBOOT=0)."""
    agent_ready_s: dict[str, float] = Field(default_factory=dict)
    """Per node: seconds from start until its agent answered."""
    hosts: dict[str, str] = Field(default_factory=dict)
    """Per node: the lab host it ran on (a run with --lab; its libvirt URI is under `libvirt`). Comparisons
    say when their two sides ran on different hosts."""


class BootFacts(_Model):
    """Which boot of the run a cell ran on."""

    number: int
    reused: bool = False
    """An earlier cell of equal topology booted it (under the pytest plugin, maybe an earlier item's)."""
    first_cell: str | None = None
    """The cell it was booted for (under the pytest plugin, maybe one of an earlier item's run)."""


class PlannedInterface(_Model):
    """An interface as the scenario asked for it (network.interfaces, keyed NODE/LINK)."""

    model: str | None = None


class DriverProof(_Model):
    """A port whose card a scenario's `driver:` gave another driver: what the guest says drives it."""

    module: str = ""
    """The module that owns the driver bound to the card (`device/driver/module`)."""
    bound: str = ""
    """The bound driver's name (what `ethtool -i` says: a renamed module may keep its driver's name)."""
    version: str = ""
    srcversion: str = ""
    taint: str = ""
    """The module's taint flags (O: built out of tree, E: unsigned)."""
    build_id: str = ""
    """The GNU build id of the module the guest loaded: the one niclab built, or the cell fails."""
    asked: str = ""
    """How the scenario asked for it: `module:DIR`, `kernel-source:PATH as NAME`, `dkms:PACKAGE`, a module name."""
    source_hash: str = ""
    """sha256 of the source it was built from."""
    origin: str = ""
    """Where it came from (the source directory, the Debian package and version)."""


class ObservedEntry(_Model):
    """What a guest reported of one interface (`iface NAME`) or port (`port NAME`); bond_port.* keys for a bond."""

    qdisc: str | None = None
    offloads: dict[str, JsonValue] = Field(default_factory=dict)
    driver_proof: DriverProof | None = None
    """For a port given another driver (`driver:`): which module drives it, proven by its build id."""


class NetworkFacts(_Model):
    configure_s: float | None = None
    """Seconds to configure the network."""
    idle_rtt_ms: dict[str, float | None] = Field(default_factory=dict)
    """Per pair of ends (`a->b link0`: from a over its link0), the round trip on the idle network: a cable one
    way, a segment of more ports around a ring (each port to the next) and a few other pairs."""
    ping_seed: int | None = None
    """The seed that chose a segment's other pairs (by default from the plan: a scenario checks the same ones)."""
    interfaces: dict[str, PlannedInterface] = Field(default_factory=dict)
    observed: dict[str, dict[str, ObservedEntry]] = Field(default_factory=dict)
    """Per node, per `iface NAME` and `port NAME`: what the guest reported back."""


class NicFacts(_Model):
    """One interface of a node as its guest saw it (ethtool -i, sysfs)."""

    driver: str | None = None
    version: str | None = None
    module: str | None = None
    """The module that owns the bound driver."""
    srcversion: str | None = None
    build_id: str | None = None
    """The module's GNU build id."""
    taint: str | None = None
    """The module's taint flags (O: out of tree)."""
    firmware_version: str | None = Field(None, alias="firmware-version")
    pci_id: str | None = None
    pci_subsystem: str | None = None
    mtu: int | None = None


class NodeFacts(_Model):
    kernel: str | None = None
    interfaces: dict[str, NicFacts] = Field(default_factory=dict)


class CellRecord(_Record):
    """Provenance at the start of a cell: host, rig, network as read back, nodes, boot, timings."""

    type: Literal["cell"]
    time: str
    """When it was written (UTC, ISO 8601)."""
    timings: dict[str, float] = Field(default_factory=dict)
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
    """Each interface as asked (address, MTU, bond, netem, offloads), `observed`: what the guests reported, and
    `idle_rtt_ms`: the network check's round trips (a ring around each segment and a few more pairs, `ping_seed`)."""
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


class NicSummary(_Model):
    """A run's NIC at one end."""

    model: str | None = None
    driver: str | None = None
    driver_version: str | None = None
    module: str | None = None
    """The module that drove the card (a scenario's `driver:` may give it another than the kernel's own)."""
    driver_source: str | None = None
    """For a card given another driver: how it was asked and the sha256 of its source."""
    pci_id: str | None = None
    ifname: str | None = None
    ports: int | None = None
    """How many ports: more than one for a bond."""
    bond: str | None = None
    """The bond mode, for a bond."""
    mtu: int | None = None


class PortCounters(_Model):
    """What one port counted during a run."""

    rx_packets: int = 0
    tx_packets: int = 0
    rx_dropped: int = 0
    tx_dropped: int = 0
    interrupts_per_cpu: list[int] = Field(default_factory=list)
    shared_irqs: list[str] = Field(default_factory=list)
    """Interrupt lines that also serve other devices (their counts include those)."""


class HostLoad(_Model):
    """The host while the benchmark ran (niclab.plumbing.contention)."""

    contended: bool = False
    reasons: list[str] = Field(default_factory=list)
    others_cpu_pct: float | None = None
    """Other processes' CPU use (the harness included), in % of one core."""
    steal_pct: float | None = None
    """The hypervisor's steal, in % of all the host's CPUs."""
    cpus: int | None = None


class RunRecord(_Record):
    """One run of one benchmark: which repeat, where, how long, and what each NIC counted meanwhile."""

    type: Literal["run"]
    run: str
    """The run's id: BENCHMARK_INDEX.REPEAT, e.g. `0.1`."""
    benchmark: str
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
    benchmark: str
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
    benchmark: str
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
    reason: str | None = None
    """Why it skipped, failed or crashed, as the test (or the console) said."""
    seconds: float | None = None
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
    tests_from: str | None = None
    """Where the tests came from, e.g. `Debian trixie linux-source-6.12 6.12.107-1`."""
    dmesg: list[str] = Field(default_factory=list)
    """The kernel's log lines during the test, on the node that ran it (absent for a subtest)."""
    console: list[str] = Field(default_factory=list)
    """A crash's excerpt of the node's console (the oops or panic)."""


# -- summary, expectation, error


class SummaryRecord(_Record):
    """A metric over a benchmark's repeats: center, spread, Student-t interval, every sample, stability."""

    type: Literal["summary"]
    benchmark_index: int
    """The benchmark's place in the scenario, from 0."""
    benchmark: str
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
    benchmark: str | None = None
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
_RECORD: TypeAdapter[Record] = TypeAdapter(Record)


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


def as_dict(model: BaseModel) -> dict:
    """A validated record as a plain mapping: what the file held, names as written."""
    return model.model_dump(by_alias=True, exclude_unset=True)


# -- writing -------------------------------------------------------------------------------------------


def as_json(record: Record | RunInfoRecord) -> dict[str, Any]:
    """A record as niclab writes it (results.jsonl's lines, run.json): the fields it was given, in the model's
    order, names as the format spells them, and its `version` always."""
    given = record.model_dump(mode="json", by_alias=True, exclude_unset=True)
    given["version"] = record.version
    order = {name: place for place, name in enumerate(type(record).model_fields)}
    return dict(sorted(given.items(), key=lambda item: order.get(item[0], len(order))))


# -- reading -------------------------------------------------------------------------------------------


def _file_kind(mode: int) -> str:
    return {
        stat.S_IFIFO: "a FIFO",
        stat.S_IFCHR: "a character device",
        stat.S_IFBLK: "a block device",
        stat.S_IFDIR: "a directory",
        stat.S_IFSOCK: "a socket",
        stat.S_IFLNK: "a symbolic link",
    }.get(stat.S_IFMT(mode), "not a regular file")


def open_regular(path: Path, limit: int) -> BinaryIO:
    """`path` opened for reading, if it is a regular file (not a symlink, FIFO or device) of at most `limit` bytes.

    FileNotFoundError when it does not exist; RunDirError for anything else in the way.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP and path.is_symlink():
            raise RunDirError(f"{path}: a symbolic link; niclab reads only regular files in a run directory") from None
        raise RunDirError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise RunDirError(
                f"{path}: {_file_kind(status.st_mode)}, not a regular file; niclab reads only regular files "
                "in a run directory"
            )
        if status.st_size > limit:
            raise RunDirError(f"{path}: {status.st_size:,} bytes, more than the {_size(limit)} niclab reads")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _size(count: int) -> str:
    if count >= 1 << 30:
        return f"{count / (1 << 30):g} GiB"
    return f"{count / (1 << 20):g} MiB" if count >= 1 << 20 else f"{count:,} bytes"


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,40}")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # how a lone surrogate reaches a JSON text
_NUMBER_BYTES = bytes.maketrans(b"0123456789E-", b"0000000000e+")  # digits as 0, exponents as e, signs as +
_SURROGATE = re.compile("[\ud800-\udfff]")


def shown(value: Any, limit: int = 40) -> str:
    """A value as a message quotes it: on one line, at most about `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def where(loc: tuple) -> str:
    """A path into a record as a message names it: nics.a.ports, samples[3], offloads['rx on'];
    past SHOWN_LEVELS steps it ends in …."""
    parts = []
    for step in loc[:SHOWN_LEVELS]:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif _NAME.fullmatch(step):
            parts.append(("." if parts else "") + step)
        else:
            parts.append(f"[{shown(step)}]")
    return "".join(parts) + ("…" if len(loc) > SHOWN_LEVELS else "")


class Suspects(NamedTuple):
    """What a JSON text may hold that a record may not, judged on its bytes (cheap: most records need no walk)."""

    deep: bool  # nesting past MAX_DEPTH takes at least as many brackets
    numbers: bool  # inf, nan or a whole number past MAX_INT: NaN, Infinity, 1e400, or 20 digits in a row
    surrogates: bool  # a lone surrogate comes as an escape, \ud800 to \udfff

    @classmethod
    def of(cls, data: bytes) -> Suspects:
        digits = data.translate(_NUMBER_BYTES)
        return cls(
            data.count(b"[") + data.count(b"{") >= MAX_DEPTH,
            b"NaN" in data or b"Infinity" in data or b"0" * 20 in digits or b"0e000" in digits or b"0e+000" in digits,
            b"\\u" in data and _SURROGATE_ESCAPE.search(data) is not None,
        )


def _odd_value(value: Any, suspects: Suspects) -> tuple[tuple, str] | None:
    """The first value of a parsed JSON text that a record may not hold, and what is wrong with it.

    Nesting deeper than MAX_DEPTH, inf and nan (Python's json reads Infinity, NaN and 1e400 so),
    whole numbers beyond MAX_INT, and text with a lone surrogate (not Unicode: no file can hold it).
    Only containers are visited unless numbers or text are suspect.
    """
    scalars = suspects.numbers or suspects.surrogates
    stack: list[tuple[Any, tuple, int]] = [(value, (), 0)]
    while stack:
        item, at, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                return at, f"is nested more than {MAX_DEPTH} levels deep"
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend(
                reversed([(v, (*at, k), depth + 1) for k, v in pairs if scalars or isinstance(v, dict | list)])
            )
            if suspects.surrogates and isinstance(item, dict):
                stack.extend((k, (*at, k), depth + 1) for k in item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                return at, f"is {item}"
        elif isinstance(item, int) and not isinstance(item, bool):
            if abs(item) > MAX_INT:
                return at, "is a whole number too large (more than 2**64)"
        elif suspects.surrogates and isinstance(item, str) and _SURROGATE.search(item):
            return at, "holds a lone surrogate (\\ud800-\\udfff), which is not text"
    return None


def _kind(record: Any) -> str:
    kind = record.get("type") if isinstance(record, dict) else None
    return kind if isinstance(kind, str) and kind in KINDS else "record"


def _problem(error: Any, kind: str) -> str:
    """One pydantic error as a message names it: `measurement without 'cell'`, `summary n: should be ...`."""
    loc = tuple(error["loc"])
    if error["type"] == "union_tag_not_found":
        return "a record without 'type'"
    if error["type"] == "union_tag_invalid":
        return f"unknown record type {shown(error['input'].get('type'))}; the types are {', '.join(KINDS)}"
    if loc and loc[0] in KINDS:
        loc = loc[1:]
    prefix = f"{kind} " if kind else ""
    if error["type"] == "missing":
        inside = where(loc[:-1])
        return f"{prefix}{inside + ' ' if inside else ''}without {shown(loc[-1])}"
    message = error["msg"]
    message = re.sub(r" or instance of \w+", "", message.removeprefix("Value error, ").removeprefix("Input "))
    named = where(loc)
    if error["type"] in ("model_type", "model_attributes_type", "dict_type") and not loc:
        return f"{prefix.strip() or 'the file'}: not a JSON object"
    got = "" if error["type"] == "value_error" else f", not {shown(error['input'])}"
    return f"{prefix}{named + ': ' if named else ''}{message}{got}"


def _first_problem(exc: ValidationError, kind: str) -> str:
    return _problem(exc.errors(include_url=False)[0], kind)


def read_results(path: Path, warn: Warn = warn_on_stderr) -> Iterator[tuple[int, Record]]:
    """Each record of a results.jsonl with its line number, validated; RunDirError at the first defect.

    Read line by line: a file of up to MAX_RESULTS_BYTES, lines of up to MAX_LINE_BYTES. A cut-off
    last line (a run killed while writing it) is dropped, and `warn` says so.
    """
    with open_regular(path, MAX_RESULTS_BYTES) as source:
        total, number, values = 0, 0, 0
        while True:
            line = source.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            number += 1
            total += len(line)
            if len(line) > MAX_LINE_BYTES:
                raise RunDirError(f"{path}:{number}: the line is longer than {_size(MAX_LINE_BYTES)}")
            if total > MAX_RESULTS_BYTES:
                raise RunDirError(f"{path}: more than the {_size(MAX_RESULTS_BYTES)} niclab reads")
            values += line.count(b",") + line.count(b":")
            if values > MAX_VALUES:
                raise RunDirError(f"{path}:{number}: more than the {MAX_VALUES:,} values niclab reads in one file")
            if not line.strip():
                continue
            last = not line.endswith(b"\n")
            try:
                record = jsonbound.loads(line.decode("utf-8"), PARSE_DEPTH)
            except ValueError as exc:
                if last:
                    warn(f"{path}: the last line is cut off (the run was killed while writing it); dropped it")
                    return
                raise RunDirError(
                    f"{path}:{number}: not a results record ({_why_not_json(exc)}); the file is damaged"
                ) from None
            suspects = Suspects.of(line)
            del line
            yield number, _validated(record, path, number, suspects)


def _why_not_json(exc: Exception) -> str:
    if isinstance(exc, jsonbound.TooDeep):
        return f"nested more than {MAX_DEPTH} levels deep"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8: byte 0x{exc.object[exc.start]:02x} at column {exc.start + 1}"
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg.removesuffix(' at')} at column {exc.colno}"
    return str(exc)


def _validated(record: Any, path: Path, number: int, suspects: Suspects) -> Record:
    at = f"{path}:{number}"
    if not isinstance(record, dict):
        raise RunDirError(f"{at}: not a results record (a JSON {type(record).__name__}, not an object)")
    kind = _kind(record)
    if any(suspects) and (odd := _odd_value(record, suspects)) is not None:
        raise RunDirError(f"{at}: {kind} {where(odd[0]) or '(the whole record)'} {odd[1]}")
    try:
        model = _RECORD.validate_python(record)
    except ValidationError as exc:
        raise RunDirError(f"{at}: {_first_problem(exc, kind)}") from None
    _check_version(model.version, at)
    return model


def _check_version(version: int, at: str) -> None:
    if version > FORMAT_VERSION:
        raise RunDirError(
            f"{at}: written in results format version {version}; this niclab reads version {FORMAT_VERSION}: "
            "update niclab"
        )


def read_run_info(path: Path) -> RunInfoRecord | None:
    """run.json, validated; None when the run has none (a run that never started writing it)."""
    try:
        source = open_regular(path, MAX_INFO_BYTES)
    except FileNotFoundError:
        return None
    with source:
        data = source.read(MAX_INFO_BYTES + 1)
    if len(data) > MAX_INFO_BYTES:
        raise RunDirError(f"{path}: more than the {_size(MAX_INFO_BYTES)} niclab reads")
    if data.count(b",") + data.count(b":") > MAX_VALUES:
        raise RunDirError(f"{path}: more than the {MAX_VALUES:,} values niclab reads in one file")
    try:
        info = jsonbound.loads(data.decode("utf-8"), PARSE_DEPTH)
    except ValueError as exc:
        raise RunDirError(f"{path}: not a run description ({_why_not_json(exc)}); the file is damaged") from None
    suspects = Suspects.of(data)
    del data
    if not isinstance(info, dict):
        raise RunDirError(f"{path}: not a run description (a JSON {type(info).__name__}, not an object)")
    if any(suspects) and (odd := _odd_value(info, suspects)) is not None:
        raise RunDirError(f"{path}: {where(odd[0])} {odd[1]}")
    try:
        model = RunInfoRecord.model_validate(info)
    except ValidationError as exc:
        raise RunDirError(f"{path}: {_first_problem(exc, '')}") from None
    _check_version(model.version, str(path))
    return model
