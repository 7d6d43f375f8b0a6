"""How QEMU realizes each catalog NIC model: its -device name and any extra properties.

The card facts (driver, PCI ID, max MTU) are in niclab.model.nics; this table is
only QEMU's side, so a lab backend that passes real cards through never
sees it. tests/unit/test_qemu_cmd.py checks every catalog model has a row.
"""

from __future__ import annotations

from dataclasses import dataclass

from niclab.base.errors import UsageError
from niclab.model import nics
from niclab.model.topology import Topology

# QEMU 7.2 under TCG loses a virtqueue notification now and then when EVENT_IDX suppresses them: a UDP
# flood then wedges the guest's transmit queue for good (seen in 1 of 2-8 netperf UDP_STREAM runs; with
# event_idx=off, none in 50). Notifications without suppression cost a little throughput, not correctness.
VIRTIO_FIX = "event_idx=off"


# QEMU's e1000 models a PHY whose autonegotiation completes 500 ms after the driver restarts it; the Linux
# e1000 driver, whose watchdog is already queued for 2 s on, sees that link only then: 2.2 s from `ip link set
# up` to carrier, on every boot and every cell that brings a port up (docs/measurements.md). Without the
# emulated autonegotiation the link is up when the driver opens the port. What the benchmarks measure does not
# change: the link and the driver are the same once up.
E1000_QUICK_LINK = "autonegotiation=off"


@dataclass(frozen=True)
class QemuNic:
    device: str  # the -device name
    properties: str = ""  # extra -device properties that work around a QEMU bug
    libvirt_model: str = ""  # libvirt's <model type=...> where it differs from the device name
    quick: str = ""  # extra -device properties that only make a rig ready sooner (not set where they cannot be)

    @property
    def libvirt_type(self) -> str:
        return self.libvirt_model or self.device

    @property
    def arguments(self) -> str:
        """What the QEMU backend adds to the -device line: ",PROP=VALUE..." or nothing."""
        return "".join(f",{p}" for p in (self.properties, self.quick) if p)


_SAME_NAME = (
    "e1000",
    "e1000-82544gc",
    "e1000-82545em",
    "e1000e",
    "i82550",
    "i82551",
    "i82557a",
    "i82557b",
    "i82557c",
    "i82558a",
    "i82558b",
    "i82559a",
    "i82559b",
    "i82559c",
    "i82559er",
    "i82562",
    "i82801",
    "rtl8139",
    "tulip",
    "pcnet",
    "ne2k_pci",
    "vmxnet3",
)

DEVICES: dict[str, QemuNic] = {
    **{name: QemuNic(name) for name in _SAME_NAME},
    **{name: QemuNic(name, quick=E1000_QUICK_LINK) for name in ("e1000", "e1000-82544gc", "e1000-82545em")},
    "virtio": QemuNic("virtio-net-pci", VIRTIO_FIX, "virtio"),
    "virtio-net-pci-non-transitional": QemuNic(
        "virtio-net-pci-non-transitional", VIRTIO_FIX, "virtio-non-transitional"
    ),
}


def qemu_nic(name: str) -> QemuNic:
    """QEMU's realization of a catalog model (KeyError for a model QEMU does not emulate)."""
    return DEVICES[name]


def no_stand_in(name: str) -> str:
    return (
        f"NIC model {name} has no emulated stand-in: give it `emulated_by:` (a model of `niclab nics`) "
        "in the lab inventory, or run it on the lab"
    )


def stand_ins(topology: Topology) -> list[str]:
    """What keeps a topology off emulated NICs: ports whose NIC model no catalog model stands in for, and
    a `driver:` for a lab's model another model stands in for (the stand-in's card would not take it)."""
    problems = [
        no_stand_in(name) for name in sorted({port.model for port in topology.ports}) if nics.stand_in(name) is None
    ]
    for port in topology.ports:
        model = nics.stand_in(port.model)
        if port.driver is not None and model is not None and model.name != port.model:
            problems.append(
                f"{port.node}/{port.ifname} asks driver {port.driver} for its {port.model} card, which an emulated "
                f"run stands in for with {model.name}, whose card that driver is not for: run the cell on the "
                "lab's cards, or give the link no driver"
            )
    return list(dict.fromkeys(problems))


def emulated_model(name: str) -> nics.NicModel:
    """The catalog model an emulated run (QEMU's, or libvirt's without a lab) uses for NIC model `name`
    (UsageError if none stands in)."""
    model = nics.stand_in(name)
    if model is None:
        raise UsageError(no_stand_in(name))
    return model
