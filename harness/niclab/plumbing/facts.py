"""Provenance: what the guests and the host were when a cell was measured.

One guest command per node collects the kernel and, for each test
interface, its driver (`ethtool -i`), PCI IDs, MAC and MTU.
"""

from __future__ import annotations

import platform
import re
import shlex

from niclab.base.node import Node
from niclab.model.facts import HostFacts, NodeFacts
from niclab.plumbing.guestsh import KV, MODULE_FACTS, PCI_DIR, note_build_id, sections


def node_script(ifnames: list[str]) -> str:
    lines = [
        PCI_DIR,
        MODULE_FACTS,
        'echo "kernel=$(uname -r)"',
        "kv clocksource /sys/devices/system/clocksource/clocksource0/current_clocksource",  # hpet: the TSC failed
    ]
    for name in ifnames:
        q = shlex.quote(name)
        lines += [
            f"echo '[{name}]'",
            f'ethtool -i {q} 2>/dev/null | awk \'{{k = $0; sub(/:.*/, "", k); v = $0; sub(/^[^:]*: */, "", v); '
            'if (k ~ /^(driver|version|firmware-version|bus-info)$/) print k "=" v}\'',
            f'pci=$(pci_dir {q}); for f in vendor device subsystem_vendor subsystem_device; do kv $f "$pci/$f"; done',
            f"kv mac /sys/class/net/{q}/address",
            f"kv mtu /sys/class/net/{q}/mtu",
            f"module_facts $(readlink -f /sys/class/net/{q}/device)",
        ]
    return "\n".join(lines) + "\n"


def parse_node_facts(text: str) -> NodeFacts:
    def keyvals(lines: list[str]) -> dict[str, str]:
        return {key.strip(): value.strip() for key, sep, value in (line.partition("=") for line in lines) if sep}

    head, named = sections(text)
    facts: dict = {**keyvals(head), "interfaces": {name: keyvals(lines) for name, lines in named.items()}}
    for iface in facts["interfaces"].values():
        if (pci_id := _pci_pair(iface.get("vendor"), iface.get("device"))) is not None:
            iface["pci_id"] = pci_id
        if (subsystem := _pci_pair(iface.get("subsystem_vendor"), iface.get("subsystem_device"))) is not None:
            iface["pci_subsystem"] = subsystem
        if "build_note" in iface:
            iface["build_id"] = note_build_id(iface.pop("build_note")) or None
        if "mtu" in iface:
            iface["mtu"] = _count(iface["mtu"])  # None: a guest's MTU that is not one
    return NodeFacts.model_validate(facts)


_HEX_ID = re.compile(r"0x([0-9a-fA-F]{4})")
_COUNT = re.compile(r"[0-9]{1,20}")


def _pci_pair(vendor: str | None, device: str | None) -> str | None:
    """ "8086:100e" from sysfs's "0x8086" and "0x100e"; None unless both are such IDs."""
    found = [_HEX_ID.fullmatch(value) if value is not None else None for value in (vendor, device)]
    return f"{found[0][1]}:{found[1][1]}" if found[0] and found[1] else None


def _count(text: str) -> int | None:
    """A counter or size the guest printed: ASCII digits under 2**64, else None (not read)."""
    text = text.strip()
    return value if _COUNT.fullmatch(text) and (value := int(text)) < 2**64 else None


def node_facts(node: Node, ifnames: list[str]) -> NodeFacts:
    return parse_node_facts(node.run(node_script(ifnames), timeout=30).stdout)


def host_facts() -> HostFacts:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return HostFacts(
        hostname=platform.node(), kernel=platform.release(), cpu_model=cpu, python=platform.python_version()
    )


# -- per-run counters: NIC statistics and interrupts -----------------------

COUNTERS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_dropped", "tx_dropped", "rx_errors", "tx_errors")
# /proc/interrupts rows of an IRQ: "irq N=<count per CPU> | <handler names>"
_IRQ_AWK = (
    '$1 == irq ":" { printf "irq %s=", irq; for (c = 2; c <= NF && $c ~ /^[0-9]+$/; c++) '
    'printf "%s ", $c; printf "|"; for (; c <= NF; c++) printf " %s", $c; print "" }'
)


def counters_script(ports: list[str], pci: bool = True) -> str:
    """Print each port's statistics and the per-CPU counts of the interrupts its PCI function uses.

    With `pci` False, the statistics alone: for a virtual device (the loopback), which has no interrupts.
    """
    lines = [KV, PCI_DIR] if pci else [KV]
    for name in ports:
        q = shlex.quote(name)
        lines += [
            f"echo '[{name}]'",
            f"for c in {' '.join(COUNTERS)}; do kv $c /sys/class/net/{q}/statistics/$c; done",
        ]
        if pci:
            lines += [
                f'pci=$(pci_dir {q}); irqs=$(ls $pci/msi_irqs 2>/dev/null); [ -n "$irqs" ] || read -r irqs < $pci/irq',
                f"for i in $irqs; do awk -v irq=$i '{_IRQ_AWK}' /proc/interrupts; done",
            ]
    return "\n".join(lines) + "\n"


def parse_counters(text: str) -> dict[str, dict]:
    ports: dict[str, dict] = {}
    for name, lines in sections(text)[1].items():
        port = ports[name] = {"irqs": {}}
        for line in lines:
            if line.startswith("irq "):
                key, _, rest = line[4:].partition("=")
                counts, _, names = rest.partition("|")
                cpus = [_count(n) for n in counts.split()]
                if all(n is not None for n in cpus):  # a count that is not one leaves the line unread
                    port["irqs"][key] = {"cpus": cpus, "names": names.strip()}
            elif "=" in line:
                key, _, value = line.partition("=")
                if (count := _count(value)) is not None:
                    port[key] = count
    return ports


def counter_deltas(before: dict[str, dict], after: dict[str, dict]) -> dict[str, dict]:
    """What each port counted during a run; interrupts per CPU, summed over the port's IRQs."""
    deltas = {}
    for port, end in after.items():
        start = before.get(port, {})
        delta = {c: end[c] - start.get(c, 0) for c in COUNTERS if c in end}
        per_cpu: list[int] = []
        shared = []
        for irq, state in end["irqs"].items():
            first = start.get("irqs", {}).get(irq, {"cpus": [0] * len(state["cpus"])})["cpus"]
            counts = [b - a for a, b in zip(first, state["cpus"], strict=False)]
            per_cpu = [x + y for x, y in zip(per_cpu, counts, strict=False)] if per_cpu else counts
            if "," in state["names"]:
                shared.append(f"{irq} ({state['names']})")
        delta["interrupts_per_cpu"] = per_cpu
        delta["interrupts"] = sum(per_cpu)
        if shared:
            delta["shared_irqs"] = shared  # counts include the other devices on these lines
        deltas[port] = delta
    return deltas


def read_counters(node: Node, ports: list[str], pci: bool = True) -> dict[str, dict]:
    return parse_counters(node.run(counters_script(ports, pci), timeout=30).stdout)
