"""Check a Vagrant rig's test network the way `niclab run` checks its own.

After each machine is up the Vagrantfile calls `niclab vagrant check`: its links are read back over SSH and
compared with the plan by netconf's code; the last machine pings every cable and writes
<dotfile>/niclab/network.json (docs/vagrant.md).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from niclab.base.node import Node, Progress
from niclab.model.scenario import Cell
from niclab.plumbing import netconf
from niclab.plumbing.backends.base import Rig
from niclab.plumbing.backends.qemu_cmd import port_macs
from niclab.plumbing.ssh import SshNode, SshTarget
from niclab.ui.vagrant.state import locked


def _checks(state: Path) -> Path:
    path = state / "check"
    path.mkdir(exist_ok=True)
    return path


def forget(state: Path, node: str) -> None:
    """Before a machine comes up or is provisioned again: its earlier check no longer holds."""
    with locked(state):
        (_checks(state) / f"{node}.json").unlink(missing_ok=True)
        (state / "network.json").unlink(missing_ok=True)


def _rig(cell: Cell, nodes: dict[str, Node]) -> Rig:
    topology = cell.topology
    return Rig(topology=topology, nodes=nodes, macs=port_macs(topology))


def check(cell: Cell, node: str, target: SshTarget, state: Path, progress: Progress) -> dict | None:
    """Check one node; if it is the last of the rig to pass, check reachability and return the whole state."""
    net = netconf.plan(cell.scenario, cell.topology)
    started = time.monotonic()
    observed = netconf.check_node(SshNode(node, target), net.on(node)) if net.on(node) else {}
    progress(
        f"{node}: links are as the scenario asks ({len(net.on(node))} interfaces, {time.monotonic() - started:.1f} s)"
    )
    with locked(state):
        (_checks(state) / f"{node}.json").write_text(
            json.dumps({"cell": cell.id, "ssh": asdict(target), "observed": observed}, indent=2) + "\n"
        )
        found = {}
        for name in cell.scenario.nodes:
            try:
                found[name] = json.loads((_checks(state) / f"{name}.json").read_text())
            except (OSError, ValueError):
                return None  # another machine is still coming up: its check pings
        if any(entry.get("cell") != cell.id for entry in found.values()):
            return None
        nodes: dict[str, Node] = {name: SshNode(name, SshTarget(**entry["ssh"])) for name, entry in found.items()}
        rtts = netconf.reachability(_rig(cell, nodes), net)
        progress("every cable passes traffic: " + ", ".join(f"{k} {v:.2f} ms" for k, v in sorted(rtts.items())))
        network = {
            "scenario": cell.scenario.name,
            "cell": cell.id,
            "idle_rtt_ms": rtts,
            "observed": {name: entry["observed"] for name, entry in found.items()},
        }
        (state / "network.json").write_text(json.dumps(network, indent=2, sort_keys=True) + "\n")
        return network
