"""The benchmark protocol: options, the two ends it runs between, measurements.

A benchmark starts its server on one node and its client on the other
through `Node` handles, parses what they print, and stops the server. It
knows nothing of QEMU or libvirt.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal, Protocol, Self

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from niclab.base.errors import NiclabError
from niclab.base.node import CommandResult, GuestCommandError, GuestProcess, Node
from niclab.model.bench.declare import GuestNeeds, Shows
from niclab.model.selftests import SelftestBundle


class BenchOptions(BaseModel):
    """Options every benchmark takes; each benchmark extends this model."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: str | None = Field(None, alias="from", description="client node (default: the link's first end)")
    to: str | None = Field(None, description="server node (default: the link's second end)")
    link: int = Field(0, ge=0, description="which link of the scenario to measure across")
    peer: Literal["self"] | None = Field(
        None,
        description="self: server and client both on the client node, over loopback (127.0.0.1): "
        "the reference the link's figure is read against",
    )
    repeat: int | None = Field(None, ge=1, le=100, description="runs of this benchmark (default: the scenario's)")
    family: Literal[4, 6] | None = Field(
        None, description="the IP version it runs over: 4 (the default) or 6, on a link with IPv6 (ip: [4, 6])"
    )

    # the IP versions the tool speaks, and why not the others (a benchmark given another is refused)
    FAMILIES: ClassVar[tuple[int, ...]] = (4, 6)
    NOT_FAMILY: ClassVar[str] = ""

    @model_validator(mode="after")
    def _family_spoken(self) -> Self:
        if self.family is not None and self.family not in self.FAMILIES:
            raise ValueError(f"family {self.family}: {self.NOT_FAMILY}")
        return self

    def recorded(self) -> dict[str, JsonValue]:
        """The options as a `run` record keeps them: their JSON form (tuples as lists, models as mappings), by
        the names a scenario writes (`from`), unset optional ones left out. `Options.model_validate` of it gives
        these options back."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


LOOPBACK = "127.0.0.1"  # both ends' address in a `peer: self` run
LOOPBACK6 = "::1"  # and with family: 6


@dataclass(frozen=True)
class Endpoints:
    """Where a benchmark runs: its client and server, their addresses, the link it measures.

    With `peer` "self" the server runs on the client's node and both addresses
    are LOOPBACK: the traffic never leaves the node, and `link` names the link
    whose figure this one is a reference for.
    """

    client: Node
    server: Node
    client_address: str
    server_address: str
    link: int
    peer: Literal["self"] | None = None
    client_ifname: str = ""  # the link's interface in each guest (link0, bond0): the selftests' NETIF
    server_ifname: str = ""
    # their IPv6 addresses, on a link with IPv6 (`ip: [4, 6]`, the default): the selftests' LOCAL_V6, REMOTE_V6
    client_address6: str | None = None
    server_address6: str | None = None

    @property
    def loopback(self) -> bool:
        return self.peer == "self"

    @property
    def family(self) -> int:
        """The IP version of client_address and server_address."""
        return 6 if ":" in self.server_address else 4


@dataclass(frozen=True)
class MetricInfo:
    """A metric a benchmark can report, for `niclab metrics`, expectations and comparisons."""

    name: str  # the dotted name: netperf.TCP_STREAM.throughput_mbps, netpipe.latency_us
    unit: str  # Mbit/s, us, ms, %, /s, ...
    description: str
    better: str | None = None  # "higher", "lower", or None when neither is better
    pace: Literal["rate", "time"] | None = None
    """How the figure follows the guests' speed (compare's contention bound reads it): "rate", a figure per
    unit of time that a slower guest makes smaller (throughput, transactions, IOPS); "time", a typical time
    that a slower guest makes longer (a mean, median or minimum latency); None for the rest (loss, counts, CPU
    use, tails, spreads and one job's extremes), which contention moves without a known bound."""


@dataclass(frozen=True)
class Measurement:
    tool: str
    test: str | None
    metric: str
    value: float
    unit: str
    extra: dict = field(default_factory=dict)
    headline: bool = True  # shown in the summary table (all go to results.jsonl)
    warning: str | None = None  # the tool doubts this figure (e.g. its confidence target was missed)

    def __post_init__(self) -> None:
        """A figure is a finite number, made a float; anything else a tool's output led to (nan, inf, a sum that
        overflowed, text) is that benchmark's error, whichever parser let it through."""
        value = self.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BenchmarkError(f"{self.label}: {self.metric} is {value!r}, not a number")
        if isinstance(value, int):
            if abs(value) > 2**64:
                raise BenchmarkError(f"{self.label}: {self.metric} is a number too large ({len(str(value))} digits)")
            object.__setattr__(self, "value", float(value))
        elif not math.isfinite(value):
            raise BenchmarkError(f"{self.label}: {self.metric} is {value}, not a finite number")

    @property
    def label(self) -> str:
        return f"{self.tool} {self.test}" if self.test else self.tool

    @property
    def name(self) -> str:
        """The dotted name expectations use: netperf.TCP_STREAM.throughput_mbps."""
        return ".".join(p for p in (self.tool, self.test, self.metric) if p)


TestState = Literal["pass", "fail", "skip", "xfail", "crash"]


@dataclass(frozen=True)
class TestOutcome:
    """One test program (or one of its subtests) a benchmark ran: the kernel's selftests report results, not numbers.

    The runner writes each as a `test` record (niclab.run.records.TestRecord).
    """

    tool: str  # kselftest
    target: str  # the selftests' target: drivers/net
    test: str  # the program: ping.py
    subtest: str | None  # its subtest (`parent/child` deeper down); None for the program as a whole
    result: TestState
    reason: str = ""  # why it skipped, failed or crashed
    seconds: float | None = None  # how long the program ran
    node: str = ""  # where it ran
    remote: str | None = None  # the other end
    dmesg: tuple[str, ...] = ()  # the kernel's log lines during the program
    console: tuple[str, ...] = ()  # a crash's console excerpt
    tests_from: str = ""  # where the tests came from (the bundle's source)


def _nothing_gone() -> dict[str, str]:
    return {}


def _no_console(node: str) -> str:
    return ""


@dataclass
class BenchContext:
    ends: Endpoints
    save_raw: Callable[[str, str], Path]  # (file name, text) -> where it was written
    progress: Callable[[str], None]
    # What a benchmark that runs the kernel's own tests needs besides (the runner's session gives them):
    selftests: Callable[[str], SelftestBundle] | None = None  # node -> the selftests of the kernel it boots
    restart: Callable[[], Endpoints] | None = None  # boot the rig anew after a crash; the new ends
    gone: Callable[[], dict[str, str]] = _nothing_gone  # node -> why its guest is gone, for the dead ones
    console: Callable[[str], str] = _no_console  # node -> the end of its serial console since its boot
    journal: Path | None = None  # where to note each test before it starts (a crash leaves the list behind)
    accel: str = ""  # kvm, tcg, or mixed (some nodes under each): a slow machine loosens the tests' timing


class Benchmark(Protocol):
    """A benchmark plug-in: a module in niclab/model/bench/ that defines PLUGIN = <an instance>."""

    name: ClassVar[str]
    Options: ClassVar[type[BenchOptions]]
    guest: ClassVar[GuestNeeds]  # the packages, programs and kernel modules its guests need
    shows: ClassVar[Shows]  # its table rows, figures and findings in the report

    def metrics(self) -> list[MetricInfo]:
        """Every metric run() can report."""
        ...

    def describe(self, options: BenchOptions) -> str:
        """A short label for progress lines and raw file names (netperf TCP_STREAM)."""
        ...

    # Optional: def metric_prefix(self, options) -> str, what the names of the metrics these options
    # produce start with ("netperf.TCP_RR."); without it, "<name>." is assumed.

    def estimate_seconds(self, options: BenchOptions) -> float: ...

    def run(self, ctx: BenchContext, options: BenchOptions) -> Sequence[Measurement | TestOutcome]:
        """Its numbers; a benchmark that runs tests (the kernel's selftests) reports their outcomes too."""
        ...


class BenchmarkError(GuestCommandError):
    """A benchmark ran but did not produce a usable result."""


class PartialRun(BenchmarkError):
    """A benchmark that stopped part-way: what it found until then is a result too (the runner records both)."""

    def __init__(self, message: str, found: Sequence[Measurement | TestOutcome]):
        super().__init__(message)
        self.found = list(found)


def poll_script(body: str, timeout: float, interval: float, give_up: str = "exit 1") -> str:
    """A guest shell loop that runs `body` every `interval` s until the body exits, or `timeout` s pass."""
    return (
        f"end=$(( $(date +%s) + {int(timeout)} )); while [ $(date +%s) -le $end ]; do {body}; "
        f"sleep {interval}; done; {give_up}"
    )


def wait_listening(node: Node, port: int, proto: str = "tcp", timeout: float = 20.0) -> None:
    """Return once something listens on `port` in the guest (read from /proc/net)."""
    state = "0A" if proto == "tcp" else "07"
    script = poll_script(
        f'awk -v p=:{port:04X} \'$2 ~ p"$" && $4 == "{state}" {{f=1}} END {{exit !f}}\' '
        f"/proc/net/{proto} /proc/net/{proto}6 2>/dev/null && exit 0",
        timeout,
        0.05,
    )
    result = node.run(script, timeout=timeout + 10, check=False)
    if not result.ok:
        raise BenchmarkError(f"{node.name}: nothing listens on {proto} port {port} after {timeout:.0f} s")


def free_port(node: Node, port: int, proto: str = "tcp", timeout: float = 10.0) -> list[str]:
    """End whatever still listens on `port` in the guest (a server a killed run left), and wait until it is free.

    Returns what was ended, for the raw output. A benchmark calls this before
    starting its server, so one hung run cannot make the next fail to bind.
    """
    flag = "t" if proto == "tcp" else "u"
    script = "ended=''; " + poll_script(
        f"pids=$(netstat -ln{flag}p 2>/dev/null | awk '$4 ~ /:{port}$/ {{split($NF, p, \"/\"); print p[1]}}' "
        "| sort -u); "
        f'[ -z "$pids" ] && {{ echo "$ended"; exit 0; }}; '
        f'for p in $pids; do [ "$p" -gt 1 ] 2>/dev/null && ended="$ended $p:$(cat /proc/$p/comm)" '
        "&& kill -9 $p; done",
        timeout,
        0.1,
        give_up='echo "$ended"; exit 1',
    )
    result = node.run(script, timeout=timeout + 10, check=False)
    if not result.ok:
        raise BenchmarkError(f"{node.name}: {proto} port {port} is still taken after {timeout:.0f} s")
    return result.stdout.split()


def quote(argv: list[str]) -> str:
    return shlex.join(argv)


def _shell(command: str | Sequence[str]) -> str:
    return command if isinstance(command, str) else quote(list(command))


@dataclass
class Served:
    """One client run against a server `served` started: what each side did, for the raw output."""

    ctx: BenchContext
    label: str  # the raw file's name (netperf-TCP_STREAM)
    command: str  # the server's
    port: int
    proto: str
    ended: list[str] = field(default_factory=list)  # what free_port ended before the server started ("pid:comm")
    process: GuestProcess | None = None
    client_command: str | None = None
    result: CommandResult | None = None  # the client's, once run_client returned
    client_error: str | None = None  # why run_client raised, if it did
    stopped: CommandResult | None = None  # the server's, once stopped
    before: str = ""  # what before_stop said
    after: str = ""  # what after_stop said

    def run_client(self, command: str | Sequence[str], timeout: float) -> CommandResult:
        """Run the client on the client node (check=False: its exit status is the plug-in's to judge)."""
        self.client_command = _shell(command)
        try:
            self.result = self.ctx.ends.client.run(self.client_command, timeout=timeout, check=False)
        except Exception as exc:
            self.client_error = str(exc)
            raise
        return self.result

    @property
    def server_exit(self) -> str:
        """The server's exit status, for the raw output ("?" while it was not stopped)."""
        return str(self.stopped.returncode) if self.stopped else "?"

    @property
    def server_output(self) -> str:
        return f"{self.stopped.stdout}{self.stopped.stderr}" if self.stopped else ""

    @property
    def leftovers(self) -> str:
        """A line for the raw output naming what free_port ended first, or "" when the port was free."""
        return f"\n# ended a leftover on port {self.port} first: {' '.join(self.ended)}" if self.ended else ""

    def save(self, text: str) -> Path:
        return self.ctx.save_raw(self.label, text)

    def failure_text(self, error: BaseException) -> str:
        """Everything both sides printed, for a run that failed before its plug-in could write its own."""
        lines = [f"$ {self.client_command}" if self.client_command else "# the client did not run"]
        if self.result is not None:
            lines.append(
                f"# exit {self.result.returncode} after {self.result.seconds:.1f} s\n"
                f"{self.result.stdout}{self.result.stderr}"
            )
        if self.client_error:
            lines.append(f"# client: {self.client_error}")
        lines.append(f"# failed: {type(error).__name__}: {error}")
        server = (
            f"# server `{self.command}` (exit {self.stopped.returncode}): {self.server_output}"
            if self.stopped
            else f"# server `{self.command}`: not stopped"
        )
        lines += [note for note in (self.before, server.rstrip(), self.after) if note]
        return "\n".join(lines) + self.leftovers + "\n"

    def _stop(self, before_stop: Callable[[], str] | None, after_stop: Callable[[], str] | None) -> None:
        try:
            if before_stop is not None:
                self.before = before_stop()
        finally:
            if self.process is not None:  # None only before `served` spawned the server
                self.stopped = self.process.stop()
            if after_stop is not None:
                self.after = after_stop()


def _cite(error: BaseException, path: Path) -> None:
    """Name the raw output in the error's message (what the runner records), once."""
    if isinstance(error, NiclabError) and len(error.args) == 1 and isinstance(error.args[0], str):
        if "raw output: " not in error.args[0]:
            error.args = (f"{error.args[0]} (raw output: {path})",)
    else:
        error.add_note(f"raw output: {path}")


@contextmanager
def served(
    ctx: BenchContext,
    command: str | Sequence[str],
    port: int,
    proto: str = "tcp",
    *,
    label: str,
    before_stop: Callable[[], str] | None = None,
    after_stop: Callable[[], str] | None = None,
) -> Iterator[Served]:
    """A server on the server node for the length of the block, which runs the client through `run_client`.

    In order: end whatever still listens on `port` (free_port; what it ended is
    `Served.ended`), spawn `command` (a list is quoted into a shell command),
    wait until it listens, run the block, then stop the server, even when the
    block raised: `before_stop()` first (e.g. asking the server to exit), the
    process group, then `after_stop()` (e.g. a sweep for leftovers); what
    they return and the server's output stay on the `Served`.

    On success the plug-in writes its raw output itself (`Served.save`), after
    the block, when the server's output is known. When the block raises,
    everything both sides printed is saved under `label` and the error names
    that file ("(raw output: PATH)") before it propagates.
    """
    server = ctx.ends.server
    run = Served(ctx, label, _shell(command), port, proto)
    run.ended = free_port(server, port, proto)
    run.process = server.spawn(run.command)
    try:
        wait_listening(server, port, proto)
        yield run
    except Exception as error:
        try:
            run._stop(before_stop, after_stop)
        except Exception as stopping:
            error.add_note(f"stopping the server failed too: {stopping}")
        try:
            path = run.save(run.failure_text(error))
        except Exception as saving:
            error.add_note(f"saving the raw output failed: {saving}")
        else:
            _cite(error, path)
        raise
    except BaseException:
        run._stop(before_stop, after_stop)
        raise
    else:
        run._stop(before_stop, after_stop)
