"""What the report shows of each cell's provenance: the NICs as the guests saw them, and interrupts per run."""

from __future__ import annotations

from typing import Any

from niclab.run.records import HostFacts, RigFacts
from niclab.ui.report.data import CellData


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def rig_line(cell: CellData) -> str:
    rig = cell.facts.rig if cell.facts is not None else RigFacts()
    host = cell.facts.host if cell.facts is not None else HostFacts()
    parts = [
        f"{_or(rig.backend, '?')} backend",
        f"accelerator {_or(rig.accel, '?')}"
        + (f" ({', '.join(f'{node} {accel}' for node, accel in rig.accel_nodes.items())})" if rig.accel_nodes else ""),
        rig.qemu or "",
        f"image {_or(rig.image, '?')}",
        f"guest kernel {_or(rig.kernel, '?')}" + (f" ({rig.kernel_origin})" if rig.kernel_origin else ""),
        f"host {_or(host.hostname, '?')} ({_or(host.cpu_model, '?')}, kernel {_or(host.kernel, '?')})",
    ]
    return "; ".join(p for p in parts if p)


def interfaces(cell: CellData) -> list[dict]:
    """One row per node and interface: driver, version, PCI, MTU, offloads, qdisc, bond."""
    if cell.facts is None:
        return []
    rows = []
    observed = cell.facts.network.observed
    planned = cell.facts.network.interfaces
    for node, facts in sorted(cell.facts.nodes.items()):
        for name, nic in sorted(facts.interfaces.items()):
            iface = observed.get(node, {}).get(f"iface {name}")
            port = observed.get(node, {}).get(f"port {name}")
            offloads = port.offloads if port is not None else {}
            plan = planned.get(f"{node}/{name}")
            rows.append(
                {
                    "node": node,
                    "interface": name,
                    "model": _or(plan.model if plan is not None else None, ""),
                    "driver": _or(nic.driver, ""),
                    "version": _or(nic.version, ""),
                    "firmware": _or(nic.firmware_version, ""),
                    "pci": _or(nic.pci_id, ""),
                    "subsystem": _or(nic.pci_subsystem, ""),
                    "mtu": _or(nic.mtu, ""),
                    "offloads": ", ".join(f"{k} {v}" for k, v in offloads.items()),
                    "qdisc": ((iface.qdisc if iface is not None else None) or "").replace("qdisc ", "", 1).strip(),
                    "bond": " ".join(
                        f"{k.split('.', 1)[1]} {v}"
                        for k, v in ((iface.model_extra or {}) if iface is not None else {}).items()
                        if k.startswith("bond_port.")
                    ),
                }
            )
    return rows


def interrupt_spread(cell: CellData) -> list[dict]:
    """Per benchmark run and node: each port's interrupts during the run, per CPU."""
    rows = []
    for _run_id, run in sorted(cell.runs.items()):
        for node, ports in sorted(run.counters.items()):
            for port, counts in sorted(ports.items()):
                rows.append(
                    {
                        "run": f"{run.label} #{run.repeat}",
                        "node": node,
                        "port": port,
                        "per_cpu": counts.interrupts_per_cpu,
                        "packets": counts.rx_packets + counts.tx_packets,
                        "drops": counts.rx_dropped + counts.tx_dropped,
                        "shared": ", ".join(counts.shared_irqs),
                    }
                )
    return rows
