"""The NIC catalog (niclab.model.nics) matches what the micro image's kernel really does.

One boot of two guests, "a" and "b", with one cable per catalog model (model k
on link k at both ends) proves, for every model:

- the driver that binds (`ethtool -i`) is `model.driver`;
- the PCI vendor:device the guest sees (sysfs, of the PCI function behind the
  interface: for virtio_net that is the parent of the virtio device) is `model.pci_id`;
- the driver's maximum MTU (`ip -d link`: maxmtu) is `model.max_mtu`, the
  driver accepts that MTU and, below 65535, refuses one byte more;
- the cable passes traffic: a ping from a to b over it is answered.

Every mismatch is reported at once, as a table of model, check, expected, found.
Only the lower layers (topology, the QEMU backend, Node.run) are used.
"""

from __future__ import annotations

import re
import sys
import threading
from dataclasses import dataclass, field

from niclab.model import nics
from niclab.model.topology import NodeSpec, Port, Topology, Wire
from niclab.plumbing.backends.base import Rig
from niclab.plumbing.backends.qemu import QemuBackend
from niclab.plumbing.guestsh import BY_MAC, PCI_DIR

NODES = ("a", "b")
MEMORY_MIB = 512
MTU_LIMIT = 65535  # the largest MTU an interface can have; nothing above it to refuse
PING_DEADLINE_S = 20
SECTION_RE = re.compile(r"^== (\d+)$", re.M)


def address(link: int, node: str) -> str:
    """Cable k's addresses: 198.18.k.1 on a, 198.18.k.2 on b (RFC 2544 range, /24 per cable)."""
    return f"198.18.{link}.{NODES.index(node) + 1}"


def catalog_topology() -> Topology:
    """Nodes a and b with one cable per catalog model: model k on link k at both ends."""
    wires = tuple(
        Wire(k, 0, tuple(Port(node, k, 0, model.name, f"link{k}") for node in NODES))
        for k, model in enumerate(nics.CATALOG)
    )
    nodes = tuple(
        NodeSpec(node, index, 1, MEMORY_MIB, tuple(w.ports[index] for w in wires)) for index, node in enumerate(NODES)
    )
    return Topology(nodes, wires)


# -- in the guest ---------------------------------------------------------

PROBE_FUNCTION = (
    BY_MAC
    + "\n"
    + PCI_DIR
    + "\n"
    + r"""
probe() {
    k=$1 mac=$2 max=$3 addr=$4
    echo "== $k"
    dev=$(by_mac "$mac" 2>&1) || { echo "no interface has MAC $mac"; return; }
    echo "dev $dev"
    pci=$(pci_dir "$dev")
    echo "pci $(cat "$pci/vendor") $(cat "$pci/device") ${pci##*/}"
    ethtool -i "$dev" 2>&1
    ip -d link show dev "$dev" 2>&1
    ip link set dev "$dev" mtu "$max" 2>&1; echo "mtu_max_rc $?"
    if [ "$max" -lt 65535 ]; then ip link set dev "$dev" mtu $((max + 1)) 2>&1; echo "mtu_over_rc $?"; fi
    ip link set dev "$dev" mtu 1500 2>&1
    ip link set dev "$dev" name "link$k" 2>&1
    ip addr add "$addr/24" dev "link$k" 2>&1
    ip link set dev "link$k" up 2>&1; echo "up_rc $?"
}
"""
)


def probe_script(rig: Rig, node: str) -> str:
    """For every port of `node`: print its facts, try its MTU limits, name, address and raise it."""
    calls = [
        f"probe {port.link} {rig.mac(port)} {nics.get(port.model).max_mtu} {address(port.link, node)}"
        for port in rig.topology.node(node).ports
    ]
    return PROBE_FUNCTION + "\n".join(calls) + "\n"


def ping_script(links: list[int]) -> str:
    """From a, ping b over every cable at once; one line per cable: `ping K RC`."""
    pings = [
        f"( ping -n -q -c 1 -i 0.5 -w {PING_DEADLINE_S} -I link{k} {address(k, 'b')} >/dev/null 2>&1; "
        f'echo "ping {k} $?" ) &'
        for k in links
    ]
    return "\n".join(pings) + "\nwait\n"


# -- on the host ----------------------------------------------------------


@dataclass
class Measured:
    """What one node's guest reported for one port."""

    dev: str | None = None
    driver: str | None = None
    pci_id: str | None = None
    max_mtu: int | None = None
    mtu_max_rc: int | None = None
    mtu_over_rc: int | None = None
    up_rc: int | None = None
    raw: str = field(default="", repr=False)


def _int(pattern: str, text: str) -> int | None:
    match = re.search(pattern, text, re.M)
    return int(match[1]) if match else None


def parse_section(text: str) -> Measured:
    dev = re.search(r"^dev (\S+)$", text, re.M)
    driver = re.search(r"^driver: (\S+)$", text, re.M)
    pci = re.search(r"^pci 0x([0-9a-f]{4}) 0x([0-9a-f]{4}) ", text, re.M)
    return Measured(
        dev=dev[1] if dev else None,
        driver=driver[1] if driver else None,
        pci_id=f"{pci[1]}:{pci[2]}" if pci else None,
        max_mtu=_int(r"\bmaxmtu (\d+)", text),
        mtu_max_rc=_int(r"^mtu_max_rc (\d+)$", text),
        mtu_over_rc=_int(r"^mtu_over_rc (\d+)$", text),
        up_rc=_int(r"^up_rc (\d+)$", text),
        raw=text,
    )


def parse_probe(stdout: str) -> dict[int, Measured]:
    """Split the probe output into its `== K` sections, one per link."""
    parts = SECTION_RE.split(stdout)
    return {int(parts[i]): parse_section(parts[i + 1]) for i in range(1, len(parts), 2)}


def parse_pings(stdout: str) -> dict[int, bool]:
    return {int(k): rc == "0" for k, rc in re.findall(r"^ping (\d+) (\d+)$", stdout, re.M)}


def probe_both(rig: Rig) -> dict[str, dict[int, Measured]]:
    """Run the probe on both nodes at once (each is one agent round trip)."""
    results: dict[str, object] = {}

    def run(node: str) -> None:
        results[node] = rig.node(node).run(probe_script(rig, node), timeout=120, check=False)

    threads = [threading.Thread(target=run, args=(node,)) for node in NODES]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {node: parse_probe(results[node].stdout) for node in NODES}


def mismatches(model: nics.NicModel, node: str, found: Measured) -> list[tuple[str, str, str, str]]:
    """(model, check, expected, found) for every way `found` disagrees with the catalog."""
    where = f"{model.name} ({node})"
    if found.dev is None:
        return [(where, "interface", f"MAC of link{nics.CATALOG.index(model)}", "no such interface")]
    rows = []
    for check, expected, actual in (
        ("driver", model.driver, found.driver),
        ("pci_id", model.pci_id, found.pci_id),
        ("max_mtu", model.max_mtu, found.max_mtu),
    ):
        if expected != actual:
            rows.append((where, check, str(expected), str(actual)))
    if found.mtu_max_rc != 0:
        rows.append((where, f"mtu {model.max_mtu}", "accepted", f"refused (rc {found.mtu_max_rc})"))
    if model.max_mtu < MTU_LIMIT and found.mtu_over_rc in (0, None):
        rows.append((where, f"mtu {model.max_mtu + 1}", "refused", f"accepted (rc {found.mtu_over_rc})"))
    if found.up_rc != 0:
        rows.append((where, "link up", "rc 0", f"rc {found.up_rc}"))
    return rows


def table(header: tuple[str, ...], rows: list[tuple]) -> str:
    cells = [tuple(str(c) for c in row) for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def measured_table(facts: dict[str, dict[int, Measured]], pings: dict[int, bool]) -> str:
    rows = []
    for k, model in enumerate(nics.CATALOG):
        found = facts["a"].get(k, Measured())
        rows.append((model.name, found.driver, found.pci_id, found.max_mtu, "yes" if pings.get(k) else "NO"))
    return table(("model", "driver", "pci_id", "max_mtu", "traffic"), rows)


def test_catalog_matches_the_guest_drivers(image, tmp_path):
    topology = catalog_topology()
    backend = QemuBackend(image=image)
    with backend.realize(topology, tmp_path, lambda m: print(f"[qemu] {m}", file=sys.stderr)) as rig:
        facts = probe_both(rig)
        pinged = rig.node("a").run(
            ping_script(list(range(len(nics.CATALOG)))), timeout=PING_DEADLINE_S + 40, check=False
        )
        pings = parse_pings(pinged.stdout)
        problems = []
        for k, model in enumerate(nics.CATALOG):
            for node in NODES:
                problems += mismatches(model, node, facts[node].get(k, Measured()))
            if not pings.get(k):
                problems.append((model.name, "ping a->b", f"reply from {address(k, 'b')}", "no reply"))
        dmesg = rig.node("a").run("dmesg", check=False).stdout if problems else ""
    print("\n" + measured_table(facts, pings), file=sys.stderr)
    assert not problems, (
        f"the NIC catalog disagrees with the guest ({len(problems)} mismatches):\n"
        + table(("model (node)", "check", "expected", "found"), problems)
        + f"\n\nmeasured (node a):\n{measured_table(facts, pings)}"
        + f"\n\nserial logs: {tmp_path}/a.serial.log, {tmp_path}/b.serial.log\n"
        + "dmesg (a, last 80 lines):\n"
        + "\n".join(dmesg.splitlines()[-80:])
    )
