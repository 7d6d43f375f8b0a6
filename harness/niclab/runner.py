"""Run a scenario: for each cell, realize it, configure the network, run the benchmarks.

Records go to the run directory as they are produced. A failure in one
benchmark is recorded and the next one runs; a cell that cannot boot or whose
network does not pass traffic is recorded and the next cell runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from niclab import facts, netconf
from niclab.backends.base import Backend, Rig
from niclab.bench.base import BenchContext, Endpoints, Measurement
from niclab.errors import NiclabError
from niclab.results import RunDir, utc_now
from niclab.scenario import BenchmarkSpec, Cell, Scenario

Progress = Callable[[str], None]


@dataclass
class CellOutcome:
    cell: Cell
    measurements: list[Measurement] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


def endpoints(rig: Rig, net: netconf.NetPlan, scenario: Scenario, spec: BenchmarkSpec) -> Endpoints:
    options = spec.options
    link = scenario.links[options.link]
    client = options.from_ or link.between[0]
    server = options.to or next(n for n in link.between if n != client)
    for node in (client, server):
        if node not in link.between:
            raise NiclabError(f"{spec.describe()}: node {node!r} is not on link {options.link} "
                              f"({', '.join(link.between)})")
    return Endpoints(
        client=rig.node(client), server=rig.node(server),
        client_address=net.find(client, options.link).address,
        server_address=net.find(server, options.link).address,
        link=options.link,
    )


def nic_summary(node_facts: dict, net: netconf.NetPlan, node: str, link: int) -> dict:
    iface = net.find(node, link)
    found = node_facts.get(node, {}).get("interfaces", {}).get(iface.name, {})
    return {"model": iface.port.model, "driver": found.get("driver"), "driver_version": found.get("version"),
            "pci_id": found.get("pci_id"), "ifname": iface.name, "mtu": found.get("mtu", iface.mtu)}


class Runner:
    def __init__(self, backend: Backend, run_dir: RunDir, scenario_name: str, progress: Progress,
                 started: float | None = None):
        self.backend = backend
        self.run_dir = run_dir
        self.scenario_name = scenario_name
        self.progress = progress
        self.started = time.monotonic() if started is None else started  # when `niclab run` began

    def run_cell(self, cell: Cell) -> CellOutcome:
        outcome = CellOutcome(cell)
        base = {"scenario": self.scenario_name, "cell": cell.id, "params": cell.params}
        scenario = cell.scenario
        net = netconf.plan(scenario)
        cell_started = time.monotonic()
        try:
            with self.backend.realize(scenario.topology(), self.run_dir.cell_dir(cell.id),
                                      self.progress) as rig:
                ready_s = time.monotonic() - self.started
                net_facts = netconf.configure(rig, net, self.progress)
                node_facts = {name: facts.node_facts(node, [i.name for i in net.on(name)])
                              for name, node in rig.nodes.items()}
                outcome.facts = {"host": facts.host_facts(), "rig": rig.facts, "network": net_facts,
                                 "nodes": node_facts}
                self.run_dir.append({
                    "type": "cell", **base, "time": utc_now(),
                    "timings": {"agents_ready_since_start_s": round(ready_s, 2),
                                "boot_s": round(ready_s - (cell_started - self.started), 2)},
                    **outcome.facts,
                })
                for spec in scenario.benchmarks:
                    self._run_benchmark(rig, net, scenario, spec, base, node_facts, outcome)
        except NiclabError as exc:
            outcome.errors.append(str(exc))
            self.progress(f"cell {cell.id} failed: {exc}")
            self.run_dir.append({"type": "error", **base, "time": utc_now(), "stage": "cell", "message": str(exc)})
        return outcome

    def _run_benchmark(self, rig, net, scenario, spec, base, node_facts, outcome) -> None:
        label = spec.describe()
        self.progress(f"running {label} (about {spec.plugin.estimate_seconds(spec.options):.0f} s)")
        started_at, started = utc_now(), time.monotonic()
        try:
            ends = endpoints(rig, net, scenario, spec)
            ctx = BenchContext(
                ends=ends,
                save_raw=lambda name, text: self.run_dir.save_raw(outcome.cell.id, name, text),
                progress=self.progress,
            )
            found = spec.plugin.run(ctx, spec.options)
        except NiclabError as exc:
            outcome.errors.append(f"{label}: {exc}")
            self.progress(f"{label} failed: {exc}")
            self.run_dir.append({"type": "error", **base, "time": utc_now(), "stage": "benchmark",
                                 "benchmark": label, "message": str(exc)})
            return
        client, server = ends.client.name, ends.server.name
        for m in found:
            self.run_dir.append({
                "type": "measurement", **base,
                "benchmark": m.benchmark, "test": m.test, "metric": m.metric, "name": m.name,
                "value": m.value, "unit": m.unit,
                "client": client, "server": server, "link": ends.link,
                "nics": {n: nic_summary(node_facts, net, n, ends.link) for n in (client, server)},
                "accel": rig.facts.get("accel"),
                "options": spec.options.model_dump(by_alias=True, exclude_none=True),
                "started_at": started_at, "finished_at": utc_now(),
                "seconds": round(time.monotonic() - started, 2),
                "extra": m.extra,
            })
        outcome.measurements += found
        shown = ", ".join(f"{m.metric} {m.value:g} {m.unit}" for m in found if m.headline)
        self.progress(f"{label}: {shown}")
