"""A libvirt domain's XML, as a pure function of a plan (unit-tested, and checked by virt-xml-validate).

One domain per node: direct kernel boot, the guest agent on a virtio channel and the console as a pty, both
reached through libvirt (so remote hosts work), the node's ports at fixed guest PCI slots: emulated NICs on
UDP cables, or a lab's cards as managed VFIO hostdevs (docs/architecture.md, "plumbing").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from xml.etree import ElementTree as ET

from niclab.plumbing.backends.qemu_cmd import AGENT_PORT_NAME, AGENT_SLOT, FIRST_NIC_SLOT, MAX_NICS
from niclab.plumbing.libvirt_conn import METADATA_NS


@dataclass(frozen=True)
class UdpInterface:
    """An emulated NIC whose frames go to a UDP port (remote_address:remote_port) and come to its own
    (local_address:local_port): both on 127.0.0.1 on one host, the two hosts' addresses across hosts."""

    mac: str
    model: str  # libvirt's <model type=...>
    local_port: int
    remote_port: int
    event_idx_off: bool = False  # virtio: see backends/qemu_nics.py
    local_address: str = "127.0.0.1"
    remote_address: str = "127.0.0.1"


@dataclass(frozen=True)
class Hostdev:
    """A real PCI card passed through with VFIO; libvirt detaches and reattaches it (managed)."""

    pci: str  # the host's address, 0000:03:00.0


@dataclass(frozen=True)
class DomainPlan:
    name: str
    domain_type: str  # kvm or qemu (TCG)
    memory_mib: int
    vcpus: int
    kernel: str
    initrd: str
    cmdline: str
    ports: tuple[UdpInterface | Hostdev, ...]  # in guest PCI slot order from FIRST_NIC_SLOT
    metadata: dict[str, str] = field(default_factory=dict)

    def slot(self, index: int) -> int:
        return FIRST_NIC_SLOT + index


def pci_parts(address: str) -> dict[str, str]:
    domain, bus, rest = address.split(":")
    slot, function = rest.split(".")
    return {"domain": f"0x{domain}", "bus": f"0x{bus}", "slot": f"0x{slot}", "function": f"0x{function}"}


def guest_pci(slot: int) -> str:
    return f"0000:00:{slot:02x}.0"


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    element = ET.SubElement(parent, tag, attrs)
    if text is not None:
        element.text = text
    return element


def domain_xml(plan: DomainPlan) -> str:
    if len(plan.ports) > MAX_NICS:
        raise ValueError(f"node {plan.name} has {len(plan.ports)} NICs; a pc machine has PCI slots for {MAX_NICS}")
    root = ET.Element("domain", type=plan.domain_type)
    _sub(root, "name", plan.name)
    if plan.metadata:
        ET.register_namespace("niclab", METADATA_NS)
        meta = _sub(root, "metadata")
        _sub(meta, f"{{{METADATA_NS}}}run", **plan.metadata)
    _sub(root, "memory", str(plan.memory_mib), unit="MiB")
    _sub(root, "vcpu", str(plan.vcpus))
    os_ = _sub(root, "os")
    _sub(os_, "type", "hvm", arch="x86_64", machine="pc")
    _sub(os_, "kernel", plan.kernel)
    _sub(os_, "initrd", plan.initrd)
    _sub(os_, "cmdline", plan.cmdline)
    _sub(_sub(root, "features"), "acpi")
    _sub(root, "cpu", mode="host-passthrough" if plan.domain_type == "kvm" else "maximum")
    _sub(root, "clock", offset="utc")
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        _sub(root, event, "destroy")
    devices = _sub(root, "devices")
    _sub(devices, "controller", type="usb", model="none")
    serial = _sub(devices, "controller", type="virtio-serial", index="0")
    _sub(serial, "address", type="pci", domain="0x0000", bus="0x00", slot=f"{AGENT_SLOT:#04x}", function="0x0")
    console = _sub(devices, "serial", type="pty")
    _sub(console, "target", port="0")
    channel = _sub(devices, "channel", type="unix")
    _sub(channel, "target", type="virtio", name=AGENT_PORT_NAME)
    _sub(channel, "address", type="virtio-serial", controller="0", bus="0", port="1")
    for index, port in enumerate(plan.ports):
        address = {
            "type": "pci",
            "domain": "0x0000",
            "bus": "0x00",
            "slot": f"{plan.slot(index):#04x}",
            "function": "0x0",
        }
        if isinstance(port, UdpInterface):
            nic = _sub(devices, "interface", type="udp")
            _sub(nic, "mac", address=port.mac)
            source = _sub(nic, "source", address=port.remote_address, port=str(port.remote_port))
            _sub(source, "local", address=port.local_address, port=str(port.local_port))
            _sub(nic, "model", type=port.model)
            if port.event_idx_off:
                _sub(nic, "driver", event_idx="off")
            _sub(nic, "address", **address)
        else:
            hostdev = _sub(devices, "hostdev", mode="subsystem", type="pci", managed="yes")
            _sub(hostdev, "driver", name="vfio")
            _sub(_sub(hostdev, "source"), "address", **pci_parts(port.pci))
            _sub(hostdev, "rom", bar="off")  # a card's option ROM is no use to a kernel booted directly
            _sub(hostdev, "address", **address)
    _sub(devices, "memballoon", model="none")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode") + "\n"
