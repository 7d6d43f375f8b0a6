"""Facts: what niclab found of the host, a rig, a cell's network, the nodes and their NICs, as models.

The layers that find them build these (niclab.plumbing.facts the host's and the nodes', the backends the
rig's, niclab.plumbing.netconf the network's, the session a run's NICs'); the records of results.jsonl
(niclab.run.records) carry them. Every field a producer writes is declared here; what a guest or an older
niclab wrote beyond them is kept as it is (`extra="allow"`). A fact not found is None, and left out when
written (Facts' serializer): a reader finds it absent, never null.
"""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)

AS_READ = {"facts": "as read"}
"""The serialization context that dumps facts as a file held them, nulls kept (niclab.run.records.as_dict)."""


class Facts(BaseModel):
    """Facts found: strict types, extra keys kept, a field that is None (not found) left out when written."""

    model_config = ConfigDict(
        extra="allow", strict=True, allow_inf_nan=False, use_attribute_docstrings=True, populate_by_name=True
    )

    @model_serializer(mode="wrap")
    def _without_none(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        found = handler(self)
        if info.context == AS_READ:
            return found
        return {key: value for key, value in found.items() if value is not None}


# -- the host and the rig


class HostFacts(Facts):
    """The host niclab ran on."""

    hostname: str | None = None
    """Its name."""
    kernel: str | None = None
    """Its kernel's release."""
    cpu_model: str | None = None
    """Its CPU's model name (`unknown` when /proc/cpuinfo does not say)."""
    python: str | None = None
    """The Python version niclab ran under."""


class RigFacts(Facts):
    """The rig the cell ran on; the backend adds more (boot times, why this accelerator)."""

    backend: str | None = None
    """The backend's name."""
    accel: str | None = None
    """kvm or tcg; `mixed` when the nodes ran on lab hosts whose accelerators differ (`accel_nodes`)."""
    accel_nodes: dict[str, str] = Field(default_factory=dict)
    """Per node, when `accel` is `mixed`: kvm or tcg, its host's verdict."""
    accel_reason: str | None = None
    """Why this accelerator (each host's, `URI: why; …`, when the nodes ran on several hosts that differ)."""
    accel_fallback: str | None = None
    """Why the guests fell back to TCG, when they did."""
    qemu: str | None = None
    """QEMU's version line."""
    image: str | None = None
    """The guest image's id (`node: id, …` when the nodes boot different ones)."""
    kernel: str | None = None
    """The guests' kernel version."""
    kernel_origin: str | None = None
    """Where the guests' kernel came from, e.g. `Debian bookworm (6.1.176-1)`."""
    kernel_boot: str | None = None
    """How the guests' kernel was booted: pvh or bzimage."""
    firmware: str | None = None
    """The QEMU backend's guest firmware: qboot.rom under TCG where QEMU has it, else seabios (or NICLAB_QBOOT=0)."""
    agent_ready_s: dict[str, float] = Field(default_factory=dict)
    """Per node: seconds from start until its agent answered."""
    restored: dict[str, str] = Field(default_factory=dict)
    """The QEMU backend's: per node restored from a saved state, that state's key (empty: the guests booted)."""
    cold_boot: str | None = None
    """The QEMU backend's: why its guests booted cold instead of being restored (asked, or what failed)."""
    cards_plugged_s: dict[str, float] = Field(default_factory=dict)
    """Per restored node: seconds from its cards' hot-plug until every card's interface was there (the drivers
    loaded and probed them)."""
    hosts: dict[str, str] | None = None
    """Per node: the lab host it ran on (a run with --lab; its libvirt URI is under `libvirt`). Comparisons
    say when their two sides ran on different hosts."""
    libvirt: dict[str, dict[str, str]] | None = None
    """The libvirt backend's: per node, the `uri` of the host it ran on and its `domain`."""
    libvirt_version: str | None = None
    """The libvirt backend's: the version of libvirt on the (first) host."""
    cards: dict[str, dict[str, str]] | None = None
    """A run with --lab: per `NODE/IFNAME`, the lab's card passed through: its `card` id, `pci` address, `host`,
    `model` and `name`, and where the guest saw it (`guest_pci`, `guest_pci_id`, `guest_driver`)."""


class BootFacts(Facts):
    """Which boot of the run a cell ran on."""

    number: int
    """The boot's number in the run, from 1."""
    reused: bool = False
    """An earlier cell of equal topology booted it (under the pytest plugin, maybe an earlier item's)."""
    first_cell: str | None = None
    """The cell it was booted for (under the pytest plugin, maybe one of an earlier item's run)."""


class Timings(Facts):
    """How long a cell's start took, in seconds."""

    boot_s: float | None = None
    """Booting the rig; 0 on a reused boot."""
    network_s: float | None = None
    """Configuring and checking the network, and reading the nodes' facts."""
    agents_ready_since_start_s: float | None = None
    """From the run's start until the rig's agents answered."""


# -- the network


class PlannedInterface(Facts):
    """An interface as the scenario asked for it (network.interfaces, keyed NODE/LINK)."""

    model: str | None = None
    """Its ports' card model."""
    address: str | None = None
    """Its address, with the prefix length (`198.18.0.1/24`)."""
    address6: str | None = None
    """Its IPv6 address, with the prefix length (`2001:2::1/64`), on a link with IPv6 (`ip: [4, 6]`)."""
    mtu: int | None = None
    """Its MTU."""
    link: int | None = None
    """The scenario's link it is on, from 0."""
    lane: int | None = None
    """Which of the link's parallel lanes, from 0; absent for a bond, which spans them all."""
    ports: list[str] = Field(default_factory=list)
    """The guest's names of its ports: one, or a bond's."""
    bond: dict[str, JsonValue] | None = None
    """A bond's: its `mode`, `miimon` and `xmit_hash_policy` if the scenario gave one."""
    netem: str | None = None
    """The netem delay and loss on it, as `tc` was given them."""
    offloads: dict[str, bool] | None = None
    """The offloads the scenario set on it: feature -> on."""


class DriverProof(Facts):
    """A port whose card a scenario's `driver:` gave another driver: what the guest says drives it."""

    module: str = ""
    """The module that owns the driver bound to the card (`device/driver/module`)."""
    bound: str = ""
    """The bound driver's name (what `ethtool -i` says: a renamed module may keep its driver's name)."""
    version: str = ""
    """The module's version."""
    srcversion: str = ""
    """The module's srcversion (a hash of its source)."""
    taint: str = ""
    """The module's taint flags (O: built out of tree, E: unsigned)."""
    build_id: str = ""
    """The GNU build id of the module the guest loaded: the one niclab built, or the cell fails."""
    asked: str = ""
    """How the scenario asked for it: `module:DIR`, `kernel-source:PATH as NAME`, `dkms:PACKAGE`, a module name."""
    source_hash: str = ""
    """sha256 of the source it was built from."""
    origin: str = ""
    """Where it came from (the source directory, the Debian package and version)."""


class ObservedEntry(Facts):
    """What a guest reported of one interface (`iface NAME`) or port (`port NAME`): as the guest printed it; a
    bond's `bond_port.PORT` (each port's MII status), and per driver knob the scenario set (ring, coalesce,
    channels ...) every value the driver reports."""

    qdisc: str | None = None
    """An interface's root qdisc, as `tc qdisc show` printed it."""
    offloads: dict[str, JsonValue] = Field(default_factory=dict)
    """A port's offload features: name -> `on` or `off`, ` [fixed]` when the driver does not let it change."""
    driver_proof: DriverProof | None = None
    """For a port given another driver (`driver:`): which module drives it, proven by its build id."""
    mtu: str | None = None
    """The MTU sysfs shows."""
    carrier: str | None = None
    """Whether it has carrier (1) or not (0), as sysfs shows it."""
    driver: str | None = None
    """A port's driver, as `ethtool -i` names it."""
    bond_mode: str | None = None
    """A bond's mode, as the guest shows it."""
    bond_miimon: str | None = None
    """A bond's link monitoring interval in ms, as the guest shows it."""


class NetworkFacts(Facts):
    """A cell's network: as asked, as the guests reported it, and how it answered the network check."""

    configure_s: float | None = None
    """Seconds to configure the network."""
    idle_rtt_ms: dict[str, float | None] = Field(default_factory=dict)
    """Per pair of ends (`a->b link0`: from a over its link0), the round trip on the idle network: a cable one
    way, a segment of more ports around a ring (each port to the next) and a few other pairs."""
    ping_seed: int | None = None
    """The seed that chose a segment's other pairs (by default from the plan: a scenario checks the same ones)."""
    interfaces: dict[str, PlannedInterface] = Field(default_factory=dict)
    """Per `NODE/IFNAME`: the interface as the scenario asked for it."""
    observed: dict[str, dict[str, ObservedEntry]] = Field(default_factory=dict)
    """Per node, per `iface NAME` and `port NAME`: what the guest reported back (and `module_params`: each
    module parameter the node's kernel command line set, as asked, as sysfs shows it, and what the kernel logged)."""
    clock_settled: dict[str, str] | None = None
    """Per node whose clock ran off the host's while the network was set up and keeps the host's time since (its
    kernel left the TSC): why (netconf.clock). The benchmarks went on."""


# -- the nodes and their NICs


class NicFacts(Facts):
    """One interface of a node as its guest saw it (ethtool -i, sysfs)."""

    driver: str | None = None
    """The bound driver's name."""
    version: str | None = None
    """The driver's version, as `ethtool -i` says."""
    module: str | None = None
    """The module that owns the bound driver."""
    srcversion: str | None = None
    """The module's srcversion."""
    build_id: str | None = None
    """The module's GNU build id."""
    taint: str | None = None
    """The module's taint flags (O: out of tree)."""
    firmware_version: str | None = Field(None, alias="firmware-version")
    """The card's firmware version, as `ethtool -i` says."""
    pci_id: str | None = None
    """The card's PCI vendor and device ID, e.g. `8086:100e`."""
    pci_subsystem: str | None = None
    """The card's PCI subsystem vendor and device ID."""
    mtu: int | None = None
    """The interface's MTU."""
    bus_info: str | None = Field(None, alias="bus-info")
    """The card's bus address, as `ethtool -i` says."""
    vendor: str | None = None
    """The PCI vendor ID, as sysfs shows it (`0x8086`)."""
    device: str | None = None
    """The PCI device ID, as sysfs shows it."""
    subsystem_vendor: str | None = None
    """The PCI subsystem vendor ID, as sysfs shows it."""
    subsystem_device: str | None = None
    """The PCI subsystem device ID, as sysfs shows it."""
    mac: str | None = None
    """The interface's MAC address."""
    module_version: str | None = None
    """The module's version, as sysfs shows it (empty for most in-tree modules)."""


class NodeFacts(Facts):
    """One node as its guest saw itself."""

    kernel: str | None = None
    """The guest's kernel release."""
    interfaces: dict[str, NicFacts] = Field(default_factory=dict)
    """Per interface the scenario gave it (and each port of a bond): what the guest says of it."""
    clocksource: str | None = None
    """The guest kernel's clocksource (hpet, not tsc: its TSC failed)."""


# -- a run's NICs and host


class NicSummary(Facts):
    """A run's NIC at one end."""

    model: str | None = None
    """The card's model, as the scenario named it."""
    driver: str | None = None
    """The bound driver's name."""
    driver_version: str | None = None
    """The driver's version."""
    module: str | None = None
    """The module that drove the card (a scenario's `driver:` may give it another than the kernel's own)."""
    driver_source: str | None = None
    """For a card given another driver: how it was asked and the sha256 of its source."""
    pci_id: str | None = None
    """The card's PCI vendor and device ID."""
    ifname: str | None = None
    """The interface the run used (`lo` for a loopback run)."""
    ports: int | None = None
    """How many ports: more than one for a bond."""
    bond: str | None = None
    """The bond mode, for a bond."""
    mtu: int | None = None
    """The interface's MTU."""


class PortCounters(Facts):
    """What one port counted during a run."""

    rx_packets: int = 0
    """Packets received."""
    tx_packets: int = 0
    """Packets sent."""
    rx_dropped: int = 0
    """Packets dropped on receive."""
    tx_dropped: int = 0
    """Packets dropped on send."""
    interrupts_per_cpu: list[int] = Field(default_factory=list)
    """The port's interrupts, per CPU of its guest."""
    shared_irqs: list[str] = Field(default_factory=list)
    """Interrupt lines that also serve other devices (their counts include those)."""
    rx_bytes: int = 0
    """Bytes received."""
    tx_bytes: int = 0
    """Bytes sent."""
    rx_errors: int = 0
    """Receive errors."""
    tx_errors: int = 0
    """Send errors."""
    interrupts: int = 0
    """The port's interrupts, over every CPU."""


class HostLoad(Facts):
    """The host while the benchmark ran (niclab.plumbing.contention)."""

    contended: bool = False
    """The host starved the guests of CPU."""
    reasons: list[str] = Field(default_factory=list)
    """Why it was contended."""
    others_cpu_pct: float | None = None
    """Other processes' CPU use (the harness included), in % of one core."""
    steal_pct: float | None = None
    """The hypervisor's steal, in % of all the host's CPUs."""
    cpus: int | None = None
    """The host's CPUs."""
