"""What the report shows of each cell's provenance: the NICs as the guests saw them, and interrupts per run."""

from __future__ import annotations

from niclab.ui.report.data import CellData


def rig_line(cell: CellData) -> str:
    rig = cell.facts.get("rig", {})
    host = cell.facts.get("host", {})
    parts = [
        f"{rig.get('backend', '?')} backend",
        f"accelerator {rig.get('accel', '?')}",
        rig.get("qemu", ""),
        f"image {rig.get('image', '?')}",
        f"guest kernel {rig.get('kernel', '?')}" + (f" ({rig['kernel_origin']})" if rig.get("kernel_origin") else ""),
        f"host {host.get('hostname', '?')} ({host.get('cpu_model', '?')}, kernel {host.get('kernel', '?')})",
    ]
    return "; ".join(p for p in parts if p)


def interfaces(cell: CellData) -> list[dict]:
    """One row per node and interface: driver, version, PCI, MTU, offloads, qdisc, bond."""
    rows = []
    observed = cell.facts.get("network", {}).get("observed", {})
    planned = cell.facts.get("network", {}).get("interfaces", {})
    for node, facts in sorted(cell.facts.get("nodes", {}).items()):
        for name, nic in sorted(facts.get("interfaces", {}).items()):
            iface = observed.get(node, {}).get(f"iface {name}", {})
            port = observed.get(node, {}).get(f"port {name}", {})
            offloads = port.get("offloads", {})
            rows.append(
                {
                    "node": node,
                    "interface": name,
                    "model": planned.get(f"{node}/{name}", {}).get("model", ""),
                    "driver": nic.get("driver", ""),
                    "version": nic.get("version", ""),
                    "firmware": nic.get("firmware-version", ""),
                    "pci": nic.get("pci_id", ""),
                    "subsystem": nic.get("pci_subsystem", ""),
                    "mtu": nic.get("mtu", ""),
                    "offloads": ", ".join(f"{k} {v}" for k, v in offloads.items()),
                    "qdisc": (iface.get("qdisc") or "").replace("qdisc ", "", 1).strip(),
                    "bond": " ".join(
                        f"{k.split('.', 1)[1]} {v}" for k, v in iface.items() if k.startswith("bond_port.")
                    ),
                }
            )
    return rows


def interrupt_spread(cell: CellData) -> list[dict]:
    """Per benchmark run and node: each port's interrupts during the run, per CPU."""
    rows = []
    for _run_id, run in sorted(cell.runs.items()):
        for node, ports in sorted(run.get("counters", {}).items()):
            for port, counts in sorted(ports.items()):
                rows.append(
                    {
                        "run": f"{run['benchmark']} #{run.get('repeat', 1)}",
                        "node": node,
                        "port": port,
                        "per_cpu": counts.get("interrupts_per_cpu", []),
                        "packets": counts.get("rx_packets", 0) + counts.get("tx_packets", 0),
                        "drops": counts.get("rx_dropped", 0) + counts.get("tx_dropped", 0),
                        "shared": ", ".join(counts.get("shared_irqs", [])),
                    }
                )
    return rows
