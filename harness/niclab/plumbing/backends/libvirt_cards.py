"""What a lab run learns about its passed-through cards inside the guests, for netconf and provenance."""

from __future__ import annotations

from niclab.base.errors import NiclabError
from niclab.model.lab.match import Placement
from niclab.model.topology import Topology
from niclab.plumbing.backends.libvirt_xml import guest_pci
from niclab.plumbing.backends.qemu_cmd import FIRST_NIC_SLOT
from niclab.plumbing.guest import AgentNode


def card_macs(topology: Topology, nodes: dict[str, AgentNode]) -> tuple[dict[tuple[str, int, int], str], dict]:
    """A passed-through card keeps its own MAC: read it in the guest, at the slot the card was given,
    with what the guest sees there (PCI ID, driver) for the run's provenance."""
    macs, seen = {}, {}
    for spec in topology.nodes:
        slots = {guest_pci(FIRST_NIC_SLOT + i): port for i, port in enumerate(spec.ports)}
        if not slots:
            continue
        script = (
            f"for s in {' '.join(slots)}; do d=/sys/bus/pci/devices/$s; for n in $d/net/*; do "
            '[ -e "$n/address" ] && echo "$s $(cat $n/address) $(cat $d/vendor):$(cat $d/device) '
            '$(basename $(readlink $d/driver))"; done; done; true'
        )
        lines = nodes[spec.name].run(script, timeout=30).stdout.splitlines()
        found = {fields[0]: fields[1:] for line in lines if len(fields := line.split()) == 4}
        for slot, port in slots.items():
            if slot not in found:
                raise NiclabError(
                    f"{spec.name}: no network interface on the card passed through at {slot} ({port.ifname}): "
                    f"does the guest's kernel have the {port.model} driver?"
                )
            mac, pci_id, driver = found[slot]
            macs[port.key] = mac.lower()
            seen[f"{port.node}/{port.ifname}"] = {
                "guest_pci": slot,
                "guest_pci_id": pci_id.replace("0x", ""),
                "guest_driver": driver,
            }
    return macs, seen


def cards_facts(topology: Topology, placement: Placement, seen: dict) -> dict[str, dict]:
    return {
        f"{port.node}/{port.ifname}": {
            "card": placement.cards[port.key].id,
            "pci": placement.cards[port.key].pci,
            "host": placement.cards[port.key].host,
            "model": placement.cards[port.key].model,
            "name": placement.cards[port.key].name,
            **seen.get(f"{port.node}/{port.ifname}", {}),
        }
        for port in topology.ports
    }
