"""A Session is one realized cell: nodes up, network configured and checked.

The runner runs a cell's benchmarks through it, and tests open one directly:

    with Session(cell, get_backend("qemu"), workdir) as s:
        s.bench("netperf", test="TCP_RR", seconds=5)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from niclab.base.errors import NiclabError, UsageError
from niclab.base.node import Node, NodeGone, Progress
from niclab.base.problems import Problems
from niclab.model import bench as benchmarks
from niclab.model.bench.base import LOOPBACK, LOOPBACK6, BenchContext, Endpoints, Measurement, PartialRun, TestOutcome
from niclab.model.facts import BootFacts, HostFacts, NetworkFacts, NicFacts, NicSummary, NodeFacts, RigFacts
from niclab.model.scenario import BenchmarkSpec, Cell
from niclab.model.scenario.model import benchmark_problems, benchmark_spec
from niclab.model.selftests import SelftestBundle
from niclab.plumbing import contention, facts, netconf
from niclab.plumbing.backends.base import Backend, Rig
from niclab.plumbing.contention import HostLoad
from niclab.run.results import save_raw_file
from niclab.run.rigs import Booted, BootKeeper
from niclab.run.selftests import kselftest_bundle

LOOPBACK_IFNAME = "lo"  # what a `peer: self` run's traffic goes through


def _quiet(message: str) -> None:
    pass


@dataclass
class BenchRun:
    """One run of one benchmark: where it ran, what it measured, what the NICs counted meanwhile."""

    ends: Endpoints
    measurements: list[Measurement]
    counters: dict[str, dict]  # node -> port -> counter deltas (packets, bytes, drops, interrupts per CPU)
    seconds: float
    host_load: HostLoad | None = None  # whether the guests got their CPU meanwhile (None: not on this host)
    tests: list[TestOutcome] = field(default_factory=list)  # the kernel's selftests it ran, and how each ended
    stopped: str | None = None  # why it stopped part-way (its results are what it found until then)


@dataclass
class CellFacts:
    """What a cell's `cell` record says of where it ran: the host, the rig, the boot, the network, the nodes."""

    host: HostFacts
    rig: RigFacts
    boot: BootFacts
    network: NetworkFacts
    nodes: dict[str, NodeFacts]


def describe_gone(gone: dict[str, str]) -> str:
    return "; ".join(f"node {node} is gone: {why}" for node, why in sorted(gone.items()))


class Session:
    def __init__(
        self,
        cell: Cell,
        backend: Backend,
        workdir: Path,
        progress: Progress = _quiet,
        save_raw: Callable[[str, str], Path] | None = None,
        selftests: Callable[[str, BenchmarkSpec], SelftestBundle] | None = None,
    ):
        self.cell = cell
        self.scenario = cell.scenario
        self.backend = backend
        self.workdir = workdir
        self.progress = progress
        self._save_raw = save_raw or self._save_in_workdir
        self.net = netconf.plan(self.scenario, cell.topology)
        self.rig: Rig | None = None
        self.booted: Booted | None = None
        self._boot_place = 0  # how many cells used the boot before this one
        self.facts: CellFacts | None = None
        self.timings: dict = {}
        self.gone: dict[str, str] = {}  # nodes found dead when the session ended on an error: node -> why
        self._stack = ExitStack()
        self._rigs: BootKeeper | None = None  # what booted the rig, to boot it anew after a crash
        # node, spec -> the selftests of the node's kernel (the kselftest benchmark); tests may give their own
        self._selftests = selftests or partial(kselftest_bundle, self.scenario, progress)

    def __enter__(self) -> Session:
        """Boot this cell's own rig and configure it; on exit stop it."""
        rigs = self._stack.enter_context(BootKeeper(self.backend, self.progress))
        try:
            self.prepare(rigs)
        except BaseException:
            self.abandon(rigs)
            self._stack.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None:
            self._note_the_dead()
        self._stack.close()
        self.rig = None

    def prepare(self, rigs: BootKeeper) -> None:
        """Make the rig this cell runs on ready: booted (or kept from an earlier cell), its network this cell's.

        The first call fills `facts` and `timings`; a later one (the cell's next
        round on a shared rig) configures and checks the network again if
        another cell changed it meanwhile.
        """
        started = time.monotonic()
        self._rigs = rigs
        was_on, self.rig, self.booted = self.booted, None, None  # a boot that fails leaves no stale rig here
        booted = rigs.get(self.cell.topology, self.workdir)
        if was_on is not booted:  # this cell's first time on this boot
            self._boot_place = len(booted.cells)
            booted.cells.append(self.cell.id)
        self.rig, self.booted = booted.rig, booted
        if booted.net is self.net:
            return
        boot_s = time.monotonic() - started
        if booted.net is not None:  # another cell's network: undo it first
            undone, booted.net = booted.net, None
            netconf.reset(booted.rig, undone, booted.baseline)
        if any(i.offloads for i in self.net.ifaces):
            for node, ports in netconf.offload_baseline(booted.rig, self.net).items():
                for port, features in ports.items():
                    booted.baseline.setdefault(node, {}).setdefault(port, features)
        network = netconf.configure(booted.rig, self.net, self.progress, booted.baseline)
        booted.net = self.net
        if self.facts:
            return
        nodes = self.facts_now()
        self.timings = {
            "boot_s": 0.0 if self._boot_place else booted.boot_s,
            "network_s": round(time.monotonic() - started - boot_s, 2),
        }
        self.facts = CellFacts(
            host=facts.host_facts(),
            rig=booted.rig.facts,
            boot=BootFacts(number=booted.number, reused=self._boot_place > 0, first_cell=booted.cells[0]),
            network=network,
            nodes=nodes,
        )

    def abandon(self, rigs: BootKeeper) -> None:
        """After a failure: note which guests had died (the cause), then stop the rig; the next cell boots anew."""
        self._note_the_dead()
        if self.booted is not None and rigs.current is self.booted:
            rigs.drop()
        self.rig = self.booted = None

    def _note_the_dead(self) -> None:
        """Before the guests are stopped: which ones had already died, and why (the cause of an error)."""
        if self.rig is not None:
            self.gone = self.rig.gone()

    # -- handles ----------------------------------------------------------

    def node(self, name: str) -> Node:
        if self.rig is None:
            raise NiclabError("the session is not running (use it inside `with`)")
        return self.rig.node(name)

    def check_nodes(self) -> None:
        """Raise NodeGone if a node's guest died (killed, crashed): nothing more can run in this cell."""
        if self.rig is None:
            return
        if gone := self.rig.gone():
            raise NodeGone(describe_gone(gone))

    def iface(self, node: str, link: int = 0, lane: int = 0) -> netconf.Iface:
        return self.net.find(node, link, lane)

    def endpoints(self, spec: BenchmarkSpec) -> Endpoints:
        """Where a benchmark runs: across its link, or with `peer: self` on one node over loopback."""
        options = spec.options
        link = self.scenario.links[options.link]
        client = options.from_ or link.between[0]
        v6 = options.family == 6
        if options.peer == "self":
            node = self.node(client)
            loopback = LOOPBACK6 if v6 else LOOPBACK
            return Endpoints(node, node, loopback, loopback, options.link, peer="self")
        server = options.to or next(n for n in link.between if n != client)
        near, far = self.net.find(client, options.link), self.net.find(server, options.link)
        if v6 and (near.address6 is None or far.address6 is None):  # the scenario's check refuses it first
            raise NiclabError(f"{spec.tool}: family 6 on link {options.link}, which has no IPv6 (ip: 4)")
        return Endpoints(
            client=self.node(client),
            server=self.node(server),
            client_address=(near.address6 or "") if v6 else near.address,
            server_address=(far.address6 or "") if v6 else far.address,
            link=options.link,
            client_ifname=near.name,
            server_ifname=far.name,
            client_address6=near.address6,
            server_address6=far.address6,
        )

    def nic_summary(self, node: str, link: int, loopback: bool = False) -> NicSummary:
        """The NIC a run used at `node`: the link's interface, or for a loopback run the node's `lo` (no card)."""
        if loopback:
            return NicSummary(ifname=LOOPBACK_IFNAME)
        iface = self.net.find(node, link)
        port = iface.ports[0].ifname
        seen = self.facts.nodes.get(node) if self.facts is not None else None
        found = seen.interfaces.get(port) if seen is not None else None
        found = found or NicFacts()
        observed = self.facts.network.observed.get(node, {}) if self.facts is not None else {}
        proof = entry.driver_proof if (entry := observed.get(f"port {port}")) is not None else None
        return NicSummary(
            model=iface.ports[0].model,
            driver=found.driver,
            driver_version=found.version,
            module=found.module or None,
            driver_source=f"{proof.asked} (sha256 {proof.source_hash})" if proof and proof.source_hash else None,
            pci_id=found.pci_id,
            ifname=iface.name,
            ports=len(iface.ports),
            bond=iface.bond.mode if iface.bond else None,
            mtu=iface.mtu,
        )

    # -- measuring --------------------------------------------------------

    def spec(self, tool: str, **options: object) -> BenchmarkSpec:
        """A benchmark spec checked as the scenario file would check it."""
        if "from_" in options:
            options["from"] = options.pop("from_")
        try:
            spec = benchmark_spec({tool: options})
            problems = benchmark_problems(spec, self.scenario)
        except Problems as exc:
            problems = exc.problems
        if problems:
            raise UsageError("; ".join(f"{'.'.join(map(str, p.path))}: {p.message}" for p in problems))
        return spec

    def run(self, spec: BenchmarkSpec) -> BenchRun:
        """Run a benchmark once, with what the ports it used counted meanwhile (a loopback run's: the node's `lo`)."""
        ends = self.endpoints(spec)
        ports = {
            node: [LOOPBACK_IFNAME] if ends.loopback else [p.ifname for p in self.net.find(node, ends.link).ports]
            for node in (ends.client.name, ends.server.name)
        }

        def read(n: str) -> dict[str, dict]:
            return facts.read_counters(self.node(n), ports[n], pci=not ends.loopback)

        before = netconf.parallel({n: partial(read, n) for n in ports})
        started = time.monotonic()
        boots = self.booted
        ctx = BenchContext(
            ends=ends,
            save_raw=self._save_raw,
            progress=self.progress,
            selftests=lambda node: self._selftests(node, spec),
            restart=partial(self._restart, spec) if self._rigs is not None else None,
            gone=self._gone,  # the rig's as it is when asked: a restart replaces it
            console=self._console,
            journal=self.workdir / "kselftest.attempted",
            accel=(self.rig.facts.accel or "") if self.rig is not None else "",
        )
        stopped: str | None = None
        with contention.watch(self.rig.host_pids() if self.rig is not None else {}) as host:
            try:
                found = spec.plugin.run(ctx, spec.options)
            except PartialRun as exc:  # what it found before it stopped is recorded, and so is why it stopped
                found, stopped = exc.found, str(exc)
        seconds = time.monotonic() - started
        load = host.load
        if self.booted is boots and stopped is None:
            after = netconf.parallel({n: partial(read, n) for n in ports})
            counters = {n: facts.counter_deltas(before[n], after[n]) for n in ports}
        else:  # booted anew after a crash (or stopped part-way): the counters and the guests' PIDs started again
            counters, load = {n: {} for n in ports}, None
        measured = [m for m in found if isinstance(m, Measurement)]
        tests = [t for t in found if isinstance(t, TestOutcome)]
        return BenchRun(ends, measured, counters, round(seconds, 2), load, tests, stopped)

    def _gone(self) -> dict[str, str]:
        return self.rig.gone() if self.rig is not None else {}

    def _console(self, node: str) -> str:
        return self.rig.console(node) if self.rig is not None else ""

    def _restart(self, spec: BenchmarkSpec) -> Endpoints:
        """Boot the rig anew (a test crashed a guest), configure its network again; the benchmark's new ends."""
        assert self._rigs is not None
        rigs = self._rigs
        self.abandon(rigs)
        self.gone = {}
        self.prepare(rigs)
        return self.endpoints(spec)

    def facts_now(self) -> dict[str, NodeFacts]:
        """The nodes' facts as they are now (for the end of a cell: counters, drivers)."""

        def read(name: str, node: Node) -> NodeFacts:
            ifaces = self.net.on(name)
            bonded = [p.ifname for i in ifaces for p in i.ports if i.bond]
            return facts.node_facts(node, [i.name for i in ifaces] + bonded)

        nodes = self.rig.nodes.items() if self.rig else []
        return netconf.parallel({name: partial(read, name, node) for name, node in nodes})  # one node's = 0.4 s

    def bench(self, tool: str, **options: object) -> list[Measurement]:
        """Run one benchmark now, e.g. bench("netperf", test="TCP_RR", link=1)."""
        return self.run(self.spec(tool, **options)).measurements

    def _save_in_workdir(self, name: str, text: str) -> Path:
        return save_raw_file(self.workdir / "raw", name, text)


__all__ = ["CellFacts", "Session", "benchmarks"]
