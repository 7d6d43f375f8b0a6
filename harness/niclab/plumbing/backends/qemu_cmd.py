"""The QEMU command line for one node, as a pure function of a plan (unit-tested)."""

from __future__ import annotations

from dataclasses import dataclass

from niclab.model.nics import NicModel
from niclab.model.topology import NodeSpec, Port, Topology
from niclab.plumbing.backends.qemu_nics import QemuNic, qemu_nic

# PCI slots on the pc machine's bus 0: 0 host bridge, 1 PIIX (ISA, IDE, ACPI);
# with -nodefaults there is no VGA, so 2 holds virtio-serial and 3..31 the NICs.
AGENT_SLOT = 0x02
FIRST_NIC_SLOT = 0x03
MAX_NICS = 0x1F - FIRST_NIC_SLOT + 1
AGENT_PORT_NAME = "org.qemu.guest_agent.0"


def mac_address(node_index: int, link: int, lane: int) -> str:
    """A locally administered MAC, unique per port: 02:4e:4c (NL) : node : link : lane."""
    for value in (node_index, link, lane):
        if not 0 <= value <= 0xFF:
            raise ValueError(f"MAC field {value} out of range 0..255")
    return f"02:4e:4c:{node_index:02x}:{link:02x}:{lane:02x}"


def port_macs(topology: Topology) -> dict[tuple[str, int, int], str]:
    """Every port's MAC (Port.key -> MAC): what netconf finds the ports by, on any backend that sets them."""
    return {p.key: mac_address(spec.index, p.link, p.lane) for spec in topology.nodes for p in spec.ports}


@dataclass(frozen=True)
class NicPlan:
    port: Port
    model: NicModel  # the catalog model QEMU emulates for this port
    mac: str
    netdev: str  # the -netdev value without the id, e.g. "dgram,local.type=fd,local.str=7"

    @property
    def qemu(self) -> QemuNic:
        return qemu_nic(self.model.name)

    @property
    def netdev_id(self) -> str:
        return f"net{self.port.link}l{self.port.lane}"


@dataclass(frozen=True)
class VmPlan:
    node: NodeSpec
    accel: str
    kernel: str
    initrd: str
    cmdline: str
    nics: tuple[NicPlan, ...]
    # Paths relative to QEMU's working directory (keeps unix socket paths short).
    serial_log: str
    qmp_socket: str
    agent_socket: str
    # The serial console's socket (`niclab console` attaches to it; its output goes to serial_log all the
    # same), or None: the serial line is the log alone (a guest being saved).
    serial_socket: str | None = None
    # The firmware QEMU starts with (-bios), or None for its default (SeaBIOS): qboot, when the host has it,
    # hands over to the kernel sooner (docs/measurements.md, "Where a boot's time goes").
    firmware: str | None = None
    # A guest restored from a saved state (backends/saved_state.py): the state file QEMU reads (an fd it
    # inherits), the exact kernel command line the saved guest booted with, and its cards plugged in after
    # the restore (their -netdev backends are on the command line, their devices are not).
    incoming_fd: int | None = None
    append: str | None = None
    # QEMU's VM generation ID device: a restored kernel reseeds its RNG when the ID changes (saved states only;
    # qboot cannot give it the memory it needs)
    vmgenid: bool = False

    @property
    def kernel_args(self) -> str:
        """The kernel command line: the saved guest's for a restore, else the image's, the node's words and its name."""
        if self.append is not None:
            return self.append
        return " ".join([self.cmdline, *self.node.cmdline, f"niclab.node={self.node.name}"])


def nic_properties(nic: NicPlan, slot: int) -> dict[str, str]:
    """The card's -device properties after its device name, on the pc machine's bus 0 at `slot`."""
    properties = {"netdev": nic.netdev_id, "mac": nic.mac, "bus": "pci.0", "addr": f"{slot:#x}"}
    for word in nic.qemu.arguments.split(","):
        key, sep, value = word.partition("=")
        if sep:
            properties[key] = value
    return properties


def device_add(nic: NicPlan, slot: int) -> dict[str, str | bool]:
    """QMP device_add's arguments for the card: -device's, with on/off as JSON booleans (QMP's types are strict)."""
    typed = {"on": True, "off": False}
    return {"driver": nic.qemu.device} | {k: typed.get(v, v) for k, v in nic_properties(nic, slot).items()}


def nic_slots(plan: VmPlan) -> list[tuple[int, NicPlan]]:
    """Each card's PCI slot, in the order of the node's ports."""
    return list(enumerate(plan.nics, start=FIRST_NIC_SLOT))


def qemu_argv(binary: str, plan: VmPlan) -> list[str]:
    node = plan.node
    if len(plan.nics) > MAX_NICS:
        raise ValueError(f"node {node.name} has {len(plan.nics)} NICs; a pc machine has PCI slots for {MAX_NICS}")
    argv = [
        binary,
        "-name",
        f"{node.name},process=niclab-{node.name},debug-threads=on",  # vCPU threads named "CPU n/TCG": contention
        "-machine",
        f"pc,accel={plan.accel}",
        "-cpu",
        "host" if plan.accel == "kvm" else "max",
        "-smp",
        str(node.cpus),
        "-m",
        f"{node.memory_mib}M",
        *(["-bios", plan.firmware] if plan.firmware else []),
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-msg",
        "timestamp=on",
        "-kernel",
        plan.kernel,
        "-initrd",
        plan.initrd,
        "-append",
        plan.kernel_args,
        "-chardev",
        (
            f"socket,id=serial0,path={plan.serial_socket},server=on,wait=off,logfile={plan.serial_log}"
            if plan.serial_socket
            else f"file,id=serial0,path={plan.serial_log}"
        ),
        "-serial",
        "chardev:serial0",
        "-qmp",
        f"unix:{plan.qmp_socket},server=on,wait=off",
        "-chardev",
        f"socket,id=qga0,path={plan.agent_socket},server=on,wait=off",
        "-device",
        f"virtio-serial-pci,id=vser0,bus=pci.0,addr={AGENT_SLOT:#x}",
        "-device",
        f"virtserialport,bus=vser0.0,chardev=qga0,name={AGENT_PORT_NAME}",
    ]
    if plan.vmgenid:
        argv += ["-device", "vmgenid,guid=auto"]
    for slot, nic in nic_slots(plan):
        argv += ["-netdev", f"{nic.netdev},id={nic.netdev_id}"]
        if plan.incoming_fd is None:
            properties = ",".join(f"{k}={v}" for k, v in nic_properties(nic, slot).items())
            argv += ["-device", f"{nic.qemu.device},{properties}"]
    if plan.incoming_fd is not None:
        argv += ["-incoming", f"fd:{plan.incoming_fd}"]
    return argv
