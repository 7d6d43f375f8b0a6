"""Provenance: what the guests and the host were when a cell was measured.

One guest command per node collects the kernel and, for each test
interface, its driver (`ethtool -i`), PCI IDs, MAC and MTU.
"""

from __future__ import annotations

import platform
import shlex

from niclab.backends.base import Node
from niclab.guestsh import PCI_DIR

def node_script(ifnames: list[str]) -> str:
    lines = [PCI_DIR, 'echo "kernel=$(uname -r)"']
    for name in ifnames:
        q = shlex.quote(name)
        lines += [
            f"echo '[{name}]'",
            f"ethtool -i {q} 2>/dev/null | awk '{{k = $0; sub(/:.*/, \"\", k); v = $0; sub(/^[^:]*: */, \"\", v); "
            "if (k ~ /^(driver|version|firmware-version|bus-info)$/) print k \"=\" v}'",
            f"pci=$(pci_dir {q}); for f in vendor device subsystem_vendor subsystem_device; do "
            f"echo \"$f=$(cat $pci/$f 2>/dev/null)\"; done",
            f"echo \"mac=$(cat /sys/class/net/{q}/address)\"",
            f"echo \"mtu=$(cat /sys/class/net/{q}/mtu)\"",
        ]
    return "\n".join(lines) + "\n"


def parse_node_facts(text: str) -> dict:
    facts: dict = {"interfaces": {}}
    section: dict | None = None
    for line in text.splitlines():
        if line.startswith("[") and line.endswith("]"):
            section = facts["interfaces"].setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        target = facts if section is None else section
        target[key.strip()] = value.strip()
    for iface in facts["interfaces"].values():
        if iface.get("vendor", "").startswith("0x") and iface.get("device", "").startswith("0x"):
            iface["pci_id"] = f"{iface['vendor'][2:]}:{iface['device'][2:]}"
        if iface.get("subsystem_vendor", "").startswith("0x"):
            iface["pci_subsystem"] = f"{iface['subsystem_vendor'][2:]}:{iface['subsystem_device'][2:]}"
        if "mtu" in iface and iface["mtu"].isdigit():
            iface["mtu"] = int(iface["mtu"])
    return facts


def node_facts(node: Node, ifnames: list[str]) -> dict:
    return parse_node_facts(node.run(node_script(ifnames), timeout=30).stdout)


def host_facts() -> dict:
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"hostname": platform.node(), "kernel": platform.release(), "cpu_model": cpu,
            "python": platform.python_version()}
