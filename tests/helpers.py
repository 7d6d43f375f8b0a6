"""Helpers the tests share: the runner over the replay fake, fake guests, hosts and images, and Hypothesis
strategies for benchmark options.

`harness` sets up what `niclab run` sets up (a scenario file, a run directory,
its run.json, a Runner) around a backend, usually tests/fakes.FakeBackend, and
reads back what the runner wrote; the replay's netperf runs and a kselftest run
over it come with it. `FakeNode` stands for a guest at one end of a benchmark
and answers its commands from canned replies; `quiet_net`, `fake_lab_image` and
`FakeImage` stand for a lab host's network, its lab image and the micro image.
`options_entries` builds valid option mappings for any benchmark from its
options model alone, so a new option is covered by the property tests without a
new test; `synthetic_lab` and `synthetic_cell` build labs and cells for
placement.
"""

from __future__ import annotations

import itertools
import json
import re
import string
import tarfile
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pytest
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from niclab.base.node import Command, CommandResult, as_argv
from niclab.model.bench.base import BenchContext, Endpoints
from niclab.model.lab.inventory import Inventory, parse_inventory
from niclab.model.scenario import load_scenario
from niclab.model.selftests import SelftestBundle
from niclab.model.topology import NodeSpec, Port, Topology, Wire
from niclab.plumbing.backends import BackendOption, BackendOptions, BackendPlugin
from niclab.plumbing.lab.hostnet import HostNet
from niclab.run import session as session_module
from niclab.run.progress import Watch
from niclab.run.results import RunDir, new_run_info
from niclab.run.runner import Runner, RunOutcome
from tests.fakes import FakeBackend, Replay
from tests.records import read_records

# -- the runner over a fake backend ----------------------------------------------------------------------------

TWO_NODE = """\
name: fake-two-node
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
benchmarks:
  - netperf: {test: TCP_STREAM, seconds: 5}
  - netperf: {test: TCP_RR, seconds: 5}
"""
"""The replay's own scenario (tests/data/replay/two-node-e1000.json answers every command it runs)."""

TWO_CELLS = """\
name: fake-two-cells
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
matrix:
  secs: [5, 4]
benchmarks:
  - netperf: {test: TCP_STREAM, seconds: "${secs}"}
  - netperf: {test: TCP_RR, seconds: 5}
"""
"""Two cells that differ only in the stream's length: both replay, the second through the replay's normalization
(-l 4 is answered with what -l 5 printed)."""

NETPERF_STREAM = r"^netperf -H 198\.18\.0\.2 -p 12865 -t TCP_STREAM "
NETPERF_RR = r"^netperf -H 198\.18\.0\.2 -p 12865 -t TCP_RR "
"""The replay's netperf runs, from a to b: a test's rule on one of them changes what that benchmark measures."""

LO_COUNTERS = "[lo]\nrx_packets={n}\ntx_packets={n}\nrx_bytes=100\ntx_bytes=100\nrx_dropped=0\ntx_dropped=0\n"
"""A guest's loopback counters as netconf's facts read them (the replay's session measured no loopback)."""
LO_COUNTERS_READ = r"^kv\(\) .*\necho '\[lo\]'"
"""What reads them."""


@dataclass
class Harness:
    """A Runner set up as `niclab run` sets it up, and what it wrote."""

    runner: Runner
    run_dir: RunDir
    cells: list
    lines: list[str] = field(default_factory=list)
    """The progress lines it printed."""

    def run(self) -> RunOutcome:
        return self.runner.run(self.cells)

    @property
    def records(self) -> list[dict]:
        return read_records(self.run_dir.results)

    def info(self) -> dict:
        return json.loads((self.run_dir.path / "run.json").read_text())

    def of(self, kind: str, **where: Any) -> list[dict]:
        return [r for r in self.records if r["type"] == kind and all(r.get(k) == v for k, v in where.items())]


def harness(
    tmp_path: Path,
    backend: FakeBackend,
    text: str = TWO_NODE,
    repeat: int | None = None,
    watch: Watch | None = None,
    name: str = "run",
) -> Harness:
    """The scenario `text` in tmp_path/scenario.yaml, a run directory tmp_path/`name`, and a Runner over `backend`
    (its progress lines kept in Harness.lines, its tallies told to `watch`)."""
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    scenario = load_scenario(path)
    run_path = tmp_path / name
    run_path.mkdir()
    run_dir = RunDir(run_path)
    info = new_run_info(
        scenario=scenario.name,
        scenario_file=str(path),
        scenario_text=text,
        cells=[c.id for c in scenario.cells],
        cell_order=[c.id for c in scenario.cells],
        backend=backend.name,
        command=["niclab", "run"],
    )
    lines: list[str] = []
    runner = Runner(backend, run_dir, info, lines.append, repeat=repeat, watch=watch)
    return Harness(runner, run_dir, scenario.cells, lines)


class Fake(FakeBackend):
    """The replay fake as a whole backend: it can realize any cell (the replay answers two e1000 guests)."""

    def check(self, topology: Topology) -> str | None:
        return None

    def describe(self, topology: Topology, workdir: Path | None = None) -> list[str]:
        return ["the replay"]


def fake_plugin(kernel_check: bool = False, prepare: Callable[[Fake], None] | None = None) -> BackendPlugin:
    """The fake as a backend plug-in (`--backend fake`, `--niclab-backend fake`) with one option of its own;
    `prepare` adds a test's rules to each backend it creates."""

    def create(options: BackendOptions, **kwargs: object) -> Fake:
        fake = Fake(Replay.load(), facts={"note": options.text("fake_note")})
        if prepare is not None:
            prepare(fake)
        return fake

    return BackendPlugin(
        "fake",
        "the replay of two e1000 guests",
        create,
        options=(BackendOption("fake-note", "a note the fake backend keeps in its rig facts", metavar="TEXT"),),
        kernel_check=kernel_check,
    )


# -- the kselftest benchmark over the replay fake --------------------------------------------------------------

SELFTESTS = """\
name: selftests-fake
nodes: [a, b]
kernel: trixie
links:
  - between: [a, b]
    nic: e1000
benchmarks:
  - kselftest: {targets: [drivers/net]}
"""
"""drivers/net's selftests from a to b, on the replay's two e1000 guests."""

PING_KTAP = "TAP version 13\n1..2\nok 1 ping.test_v4\nok 2 ping.test_v6 # SKIP Test requires IPv6 connectivity\n"
STATS_KTAP = "TAP version 13\n1..1\nok 1 stats.pkt_byte_sum # SKIP qstats not supported by the device\n"
SELFTEST_PROGRAM = r"timeout -s KILL \d+ \./"
"""How the guest starts a selftest program; the program's file name follows."""


def selftests_fake(replay: Replay) -> FakeBackend:
    """The replay fake that also answers the selftests' set-up (ssh keys, unpacking) and three programs: ping.py
    passes (its IPv6 subtest skipped), stats.py skips (exit 4), queues.py fails."""
    backend = FakeBackend(replay)
    backend.when(r"ssh-keygen|tar -xzf|sshd-up|mkdir -p /root/\.ssh|ssh -q -o ConnectTimeout", result="")
    backend.when(r"\.ssh/id_ed25519\.pub", op="get", result=b"ssh-ed25519 AAAA niclab")
    backend.when(r"^dmesg", result="[ 1.0] niclab: kselftest start\n")
    backend.when(SELFTEST_PROGRAM + r"ping\.py", result={"returncode": 0, "stdout": PING_KTAP, "seconds": 2.0})
    backend.when(SELFTEST_PROGRAM + r"stats\.py", result={"returncode": 4, "stdout": STATS_KTAP, "seconds": 1.0})
    backend.when(
        SELFTEST_PROGRAM + r"queues\.py", result={"returncode": 1, "stdout": "not ok 1 queues.nl_get_queues\n"}
    )
    return backend


def run_selftests(tmp_path: Path, backend: FakeBackend) -> Path:
    """SELFTESTS run through `backend` (harness): its run directory."""
    h = harness(tmp_path, backend, SELFTESTS)
    h.run()
    return h.run_dir.path


def kselftest_run(tmp_path: Path, replay: Replay, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run of SELFTESTS through selftests_fake with a fixed bundle of ping.py alone (for tests of every record
    kind)."""
    archive = tmp_path / "bundle.tar.gz"
    with tarfile.open(archive, "w:gz"):
        pass
    found = SelftestBundle(archive, "a test's", "6.12.107", (("drivers/net", "ping.py"),))
    monkeypatch.setattr(session_module, "kselftest_bundle", lambda *args: found)
    return run_selftests(tmp_path, selftests_fake(replay))


# -- a benchmark's two ends, faked -----------------------------------------------------------------------------

SERVER, CLIENT = "198.18.0.2", "198.18.0.1"
"""The addresses of link 0's two ends, as the session gives them to a benchmark."""


def answer(stdout: str = "", returncode: int = 0, stderr: str = "", seconds: float = 0.1) -> CommandResult:
    """What a guest printed for a command, as a FakeNode's reply (the node puts in its name and the command)."""
    return CommandResult("x", ("/bin/sh", "-c", ""), returncode, stdout, stderr, seconds)


class FakeProcess:
    """A command a FakeNode started in the background: running until stopped or waited for, then its output."""

    def __init__(self, node: FakeNode, command: Command, output: CommandResult | Exception):
        self.node, self.command, self.output = node, command, output
        self.stopped = False

    def poll(self) -> CommandResult | None:
        return None

    def wait(self, timeout: float) -> CommandResult:
        return self.stop()

    def stop(self, grace: float = 5.0) -> CommandResult:
        self.stopped = True
        self.node.log.append(("stop", self.node.name, self.command))
        if isinstance(self.output, Exception):
            raise self.output
        return self.output


class FakeNode:
    """A Node that answers each command by the first needle it contains, and keeps what it was asked.

    A reply is a CommandResult (answer()), an exception to raise, or a list of them taken one per call; a command
    no needle matches succeeds with no output (so free_port finds its port free, wait_listening finds a listener,
    a set-up step succeeds). get() reads `files` and put() writes them. A command started in the background runs
    until stopped, then says `server_output`. `commands` holds every command run or started, in order; `log`
    every call as (kind, node, command or path), a list both ends of a benchmark may share.
    """

    def __init__(
        self,
        name: str,
        replies: dict[str, Any] | None = None,
        files: dict[str, bytes] | None = None,
        server_output: CommandResult | Exception | None = None,
        log: list[tuple[str, str, Any]] | None = None,
    ):
        self.name, self.replies, self.files = name, replies or {}, files or {}
        self.server_output = server_output or answer("server says hello\n", 143)
        self.log = [] if log is None else log
        self.commands: list[Command] = []
        self.spawned: list[FakeProcess] = []

    def run(self, command: Command, timeout: float = 60.0, check: bool = True) -> CommandResult:
        self.log.append(("run", self.name, command))
        self.commands.append(command)
        reply = next((reply for needle, reply in self.replies.items() if needle in command), None)
        if isinstance(reply, list):
            reply = reply.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return replace(reply or answer(), node=self.name, argv=as_argv(command))

    def spawn(self, command: Command) -> FakeProcess:
        self.log.append(("spawn", self.name, command))
        self.commands.append(command)
        self.spawned.append(FakeProcess(self, command, self.server_output))
        return self.spawned[-1]

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self.files[path] = data

    def get(self, path: str) -> bytes:
        self.log.append(("get", self.name, path))
        return self.files[path]


def bench_context(client: FakeNode, server: FakeNode, raw: list[tuple[str, str]]) -> BenchContext:
    """A benchmark from `client` to `server` over link 0; each raw output it saves is appended to `raw` as
    (name, text) and said to be at raw/NAME."""

    def save_raw(name: str, text: str) -> Path:
        raw.append((name, text))
        return Path("raw", name)

    return BenchContext(Endpoints(client, server, CLIENT, SERVER, 0), save_raw, lambda message: None)


NFS_MOUNTS = (
    b"198.18.0.2:/ /mnt/niclab-nfs nfs4 rw,relatime,vers=4.2,rsize=32768,wsize=32768,namlen=255,"
    b"hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=198.18.0.1 0 0\n"
)
"""A client's /proc/mounts once it mounted the server's NFS share (version 4.2 over TCP, 32 KiB reads)."""


def nfs_client(replies: dict[str, Any] | None = None) -> FakeNode:
    """Node a, the client of an NFS share: what it mounted reads as NFS_MOUNTS."""
    return FakeNode("a", replies, {"/proc/mounts": NFS_MOUNTS})


# -- a lab host and its images, faked --------------------------------------------------------------------------

CARD = "0000:03:00.0"
"""The PCI address of the lab host's e1000 card in the fake sysfs (tests/unit/fakesysfs.py)."""


def ip_runner(links: list[dict] | None = None, routes: list[dict] | None = None, routes6: list[dict] | None = None):
    """A fake `ip -j` that answers addr, route and -6 route from the given lists."""

    def run(argv: list[str]) -> str:
        if argv[:3] == ["ip", "-j", "addr"]:
            return json.dumps(links or [])
        return json.dumps(routes6 or [] if "-6" in argv else routes or [])

    return run


def link(name: str, *addresses: str, **extra) -> dict:
    """An interface as `ip -j addr` lists it, with these addresses (a/prefix)."""
    info = [{"family": "inet6" if ":" in a else "inet", "local": a.split("/")[0], "prefixlen": int(a.split("/")[1])}
            for a in addresses]  # fmt: skip
    return {"ifname": name, "addr_info": info, **extra}


def quiet_net() -> HostNet:
    """A host's network that no card touches: loopback, and eth0 with the default route."""
    return HostNet(
        ip_runner([link("lo", "127.0.0.1/8"), link("eth0", "10.9.0.2/16")], [{"dst": "default", "dev": "eth0"}])
    )


def check(report: Any, name: str) -> Any:
    """The check of a doctor's report that has this name."""
    return next(c for c in report.checks if c.name == name)


LAB_IMAGE_FIRMWARE = {
    "r8169": {"rtl_nic/rtl8168h-2.fw": True, "rtl_nic/rtl8168g-3.fw": True},
    "tg3": {"tigon/tg3.bin": True, "tigon/tg3_tso.bin": True, "tigon/tg3_tso5.bin": True},
    "ice": {"intel/ice/ddp/ice.pkg": True},
    "bnx2x": {"bnx2x/bnx2x-e2-7.13.21.0.fw": False},
}
"""The firmware fake_lab_image's manifest says each module names, and whether the image carries it."""


def alias(pci_id: str, module: str) -> str:
    """The modules.alias line that gives a card of this PCI ID (vendor:device) to `module`."""
    vendor, device = pci_id.upper().split(":")
    return f"alias pci:v0000{vendor}d0000{device}sv*sd*bc*sc*i* {module}\n"


def fake_lab_image(directory: Path, cards: dict[str, str]) -> Path:
    """A built lab image as far as driver resolution reads it: its manifest and modules.alias."""
    directory.mkdir(parents=True)
    for name in ("vmlinuz", "initrd.img"):
        (directory / name).write_bytes(b"")
    (directory / "modules.alias").write_text("".join(alias(i, m) for i, m in cards.items()))
    (directory / "modules.builtin.modinfo").write_bytes(b"")
    manifest = {
        "recipe": "lab",
        "input_hash": "0123456789abcdef",
        "cmdline": "console=ttyS0",
        "suite": "bookworm",
        "kernel_version": "6.1.0-fake",
        "module_firmware": LAB_IMAGE_FIRMWARE,
        "min_memory_mib": 448,
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


@dataclass(frozen=True)
class FakeImage:
    """A micro image as the accelerator's probe reads it: its id, kernels, initrd and command line."""

    id: str = "micro-0123456789abcdef"
    kernel: Path = Path("/images/vmlinuz")
    boot_kernel: Path = Path("/images/vmlinux")  # what QEMU boots: the unpacked PVH kernel
    initrd: Path = Path("/images/initrd.img")
    cmdline: str = "console=ttyS0 quiet"


# -- benchmark options, from their models ----------------------------------------------------------------------

ABSENT = object()
NAMES = string.ascii_letters + string.digits + "._-/"  # free text: names and paths (hostile text is the fuzzers')


def _bounds(metadata: list[Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for item in metadata:
        for key in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern"):
            if (value := getattr(item, key, None)) is not None:
                found[key] = value
    return found


def _number(kind: type, bounds: dict[str, Any]) -> st.SearchStrategy:
    low = bounds.get("ge", bounds.get("gt"))
    high = bounds.get("le", bounds.get("lt"))
    if kind is int:
        return st.integers(
            None if low is None else low + ("gt" in bounds),
            None if high is None else high - ("lt" in bounds),
        )
    return st.floats(
        low,
        high,
        exclude_min="gt" in bounds,
        exclude_max="lt" in bounds,
        allow_nan=False,
        allow_infinity=False,
    )


def _text(bounds: dict[str, Any]) -> st.SearchStrategy:
    if pattern := bounds.get("pattern"):
        # pydantic matches its patterns with Rust's regex, where `$` is the end; Python's would allow a newline
        return st.from_regex(re.sub(r"^\^|\$$", "", pattern), fullmatch=True)
    return st.text(NAMES, min_size=max(1, bounds.get("min_length", 1)), max_size=bounds.get("max_length", 40))


def value_strategy(annotation: Any, metadata: list[Any] | None = None) -> st.SearchStrategy:
    """Values of a field's type within its declared bounds (ge, le, gt, lt, pattern, lengths)."""
    bounds = _bounds(metadata or [])
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:
        inner, *extra = args
        extra_meta = [m for item in extra for m in (item.metadata if isinstance(item, FieldInfo) else [item])]
        return value_strategy(inner, [*(metadata or []), *extra_meta])
    if origin in (Union, types.UnionType):
        return st.one_of(*(st.none() if a is type(None) else value_strategy(a, metadata) for a in args))
    if origin is Literal:
        return st.sampled_from(args)
    if origin is tuple:
        return st.tuples(*(value_strategy(a) for a in args))
    if origin is list:
        (item,) = args
        return st.lists(
            value_strategy(item), min_size=bounds.get("min_length", 0), max_size=bounds.get("max_length", 4)
        )
    if annotation is bool:
        return st.booleans()
    if annotation in (int, float):
        return _number(annotation, bounds)
    if annotation is str:
        return _text(bounds)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return st.sampled_from([member.value for member in annotation])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_entries(annotation)
    raise TypeError(f"no strategy for {annotation!r}: teach tests/helpers.value_strategy this type")


def model_entries(
    model: type[BaseModel], overrides: dict[str, st.SearchStrategy] | None = None
) -> st.SearchStrategy[dict[str, Any]]:
    """Mappings a scenario could write for `model`: each optional field absent or given, by its alias; only those
    the model accepts (its own validators judge the combinations). `overrides` give some fields' values (ABSENT
    leaves a field out)."""
    overrides = overrides or {}
    fields: dict[str, st.SearchStrategy] = {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        if name in overrides or key in overrides:
            fields[key] = overrides.get(name, overrides.get(key))
            continue
        given = value_strategy(info.annotation, info.metadata)
        fields[key] = given if info.is_required() else st.one_of(st.just(ABSENT), given)

    def accepted(entry: dict[str, Any]) -> bool:
        try:
            model.model_validate(entry)
        except ValidationError:
            return False
        return True

    return (
        st.fixed_dictionaries(fields)
        .map(lambda drawn: {k: v for k, v in drawn.items() if v is not ABSENT})
        .filter(accepted)
    )


def _places() -> list[dict[str, Any]]:
    """Where a benchmark may run on a scenario of nodes a and b joined by link 0: each combination of `from`, `to`,
    `peer` and `link` the scenario accepts."""
    found = []
    for client, server, peer, link in itertools.product((None, "a", "b"), (None, "a", "b"), (None, "self"), (None, 0)):
        if (peer and server) or (client and client == server):
            continue  # a loopback run takes no `to`; a run goes between two nodes
        given = {"from": client, "to": server, "peer": peer, "link": link}
        found.append({key: value for key, value in given.items() if value is not None})
    return found


PLACES = _places()
PLACE_FIELDS = {"from_": "from", "to": "to", "peer": "peer", "link": "link"}


def options_entries(
    options_model: type[BaseModel], extra: dict[str, st.SearchStrategy] | None = None, present: str | None = None
) -> st.SearchStrategy[dict[str, Any]]:
    """A benchmark's entry options for a scenario of nodes a and b on link 0: the place drawn from PLACES, at most
    3 repeats, every other option from the model. `extra` overrides what only the plug-in knows (kselftest's
    targets must be known targets); `present` names a field every entry gives."""
    overrides: dict[str, st.SearchStrategy] = {field: st.just(ABSENT) for field in PLACE_FIELDS}
    overrides["repeat"] = st.one_of(st.just(ABSENT), st.integers(1, 3))
    overrides.update(extra or {})
    places = PLACES
    if present in PLACE_FIELDS:
        places = [place for place in PLACES if PLACE_FIELDS[present] in place]
    elif present is not None:
        info = options_model.model_fields[present]
        given = overrides.get(present, value_strategy(info.annotation, info.metadata))
        overrides[present] = given.filter(lambda value: value is not ABSENT)
    own = model_entries(options_model, overrides)

    def placed(pair: tuple[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
        place, entry = pair
        return {**place, **entry}

    def accepted(entry: dict[str, Any]) -> bool:
        try:
            options_model.model_validate(entry)
        except ValidationError:
            return False  # a plug-in that refuses a place (nfs and kselftest take no peer: self)
        return True

    return st.tuples(st.sampled_from(places), own).map(placed).filter(accepted)


# -- synthetic labs and cells, for placement -------------------------------------------------------------------


def synthetic_lab(cables: list[tuple[tuple[str, str], tuple[str, str]]], hosts: int) -> Inventory:
    """A lab of `hosts` hosts (h0, h1 …) and these cables, each end a (class, host) of a card of its own."""
    cards, lines = [], []
    for i, ends in enumerate(cables):
        ids = []
        for j, (cls, host) in enumerate(ends):
            ids.append(f"c{i}e{j}")
            pci = f"0000:{i // 32 + 1:02x}:{i % 32:02x}.{j}"
            cards.append(f'  - {{id: c{i}e{j}, host: {host}, pci: "{pci}", model: {cls}}}')
        lines.append(f"  - [{ids[0]}, {ids[1]}]")
    names = ", ".join(f"h{h}: {{libvirt: 'qemu+ssh://root@h{h}/system'}}" for h in range(hosts))
    text = f"name: t\nhosts: {{{names}}}\ncards:\n" + "\n".join(cards) + "\ncables:\n" + "\n".join(lines) + "\n"
    return parse_inventory(text, "lab.yaml")


def synthetic_cell(wires: list[tuple[tuple[str, str], tuple[str, str]]]) -> Topology:
    """A cell of these wires, each end a (node, class); every wire its own link."""
    made, ports = [], []
    for i, ends in enumerate(wires):
        wire_ports = tuple(Port(node, i, 0, cls, f"link{i}") for node, cls in ends)
        made.append(Wire(i, 0, wire_ports))
        ports += wire_ports
    names = list(dict.fromkeys(port.node for port in ports))
    nodes = tuple(NodeSpec(name, k, 1, 256, tuple(p for p in ports if p.node == name)) for k, name in enumerate(names))
    return Topology(nodes, tuple(made))


def ring_lab(cables: int, hosts: int) -> Inventory:
    """e1000 cables only between an even-numbered and an odd-numbered host (a bipartite lab), spread evenly."""
    even, odd = range(0, hosts, 2), range(1, hosts, 2)
    pairs = [(even[i % len(even)], odd[(i // len(even)) % len(odd)]) for i in range(cables)]
    return synthetic_lab([(("e1000", f"h{a}"), ("e1000", f"h{b}")) for a, b in pairs], hosts)


def ring(links: int, odd: bool = False) -> Topology:
    """`links` e1000 links around a ring of nodes; `odd`: a ring of links - 1 nodes (odd) and a second link
    between its first two, which no bipartite lab (ring_lab) can place, though it has the cables and cards."""
    size = links - 1 if odd else links
    wires = [((f"n{i}", "e1000"), (f"n{(i + 1) % size}", "e1000")) for i in range(size)]
    if odd:
        wires.append((("n0", "e1000"), ("n1", "e1000")))
    return synthetic_cell(wires)


#: A lab of one host with two e1000 cards cabled together: it realizes a shoot-out's e1000 cell and no other.
TWO_E1000_LAB = """\
name: fake-lab
hosts:
  rig1: {libvirt: qemu:///system}
cards:
  - {id: intel-a, host: rig1, pci: "0000:03:00.0", model: e1000, name: Intel PRO/1000 MT, price: 45}
  - {id: intel-b, host: rig1, pci: "0000:04:00.0", model: e1000, name: Intel PRO/1000 MT, price: 45}
cables:
  - [intel-a, intel-b]
"""


# -- recorded runs, edited as a failure would leave them -------------------------------------------------------

RECORDED_RUNS = Path(__file__).resolve().parent / "data" / "runs"


def edited_run(
    name: str,
    target: Path,
    drop: Callable[[dict], bool] = lambda record: False,
    add: list[dict] | None = None,
    info: dict | None = None,
) -> Path:
    """A copy of the recorded run `name` (tests/data/runs) in `target`: the records `drop` picks left out,
    `add` appended, run.json's fields updated with `info`."""
    source = RECORDED_RUNS / name
    target.mkdir(parents=True)
    lines = [line for line in (source / "results.jsonl").read_text().splitlines() if not drop(json.loads(line))]
    lines += [json.dumps(record) for record in add or []]
    (target / "results.jsonl").write_text("\n".join(lines) + "\n")
    run_info = json.loads((source / "run.json").read_text()) | (info or {})
    (target / "run.json").write_text(json.dumps(run_info, indent=2))
    return target


def failure(cell: str, message: str, label: str | None = None, run: str | None = None) -> dict:
    """An `error` record (results format version 1, as the recorded runs are) of a benchmark run, or with no
    label of the cell itself."""
    params = dict(part.split("=", 1) for part in cell.split(","))
    stage = {"stage": "benchmark", "run": run, "benchmark": label} if label else {"stage": "cell"}
    return {
        "type": "error",
        "scenario": "nic-shootout",
        "cell": cell,
        "params": params,
        "time": "2026-11-22T06:00:00Z",
        "message": message,
    } | stage


def of_benchmark(record: dict, cell: str, index: int) -> bool:
    """Whether a recorded run's record is one of benchmark `index`'s results in `cell`."""
    run = str(record.get("run") or "")
    return record["cell"] == cell and (
        record.get("benchmark_index") == index or (record["type"] != "error" and run.startswith(f"{index}."))
    )


def run_dirs(out: Path) -> list[Path]:
    """The run directories `niclab run --out OUT` made, oldest first: not the `latest` link beside them."""
    return sorted(p for p in Path(out).iterdir() if p.is_dir() and not p.is_symlink())


def image_view(image: Any, where: Path) -> Path:
    """A built image's files seen from a directory of its own under `where`: the guest states saved from it (and
    its driver layers) are the test's own, made anew."""
    view = where / image.directory.name
    view.mkdir()
    for entry in image.directory.iterdir():
        if entry.is_file():
            (view / entry.name).symlink_to(entry)
    return view
