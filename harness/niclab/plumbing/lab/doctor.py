"""`niclab lab doctor`: can this host pass its cards through to guests, and if not, what to do.

Every finding is a Check (ok, warn or fail, with its fix). The card checks read a host through a PciReader
and a NetReader only: Sysfs and HostNet here; another host's snapshot and `ip -j` over ssh, or its libvirt's
node devices where only libvirt answers, routes then unknown (a warning, not a pass). What each check means:
docs/lab.md, "Reading the doctor"; what is never passed through: docs/architecture.md, "Trust".
"""

from __future__ import annotations

import resource
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from niclab.model.lab import pciclass
from niclab.model.lab.pciclass import AllowedClass
from niclab.plumbing.lab.drivers import DriverTable
from niclab.plumbing.lab.hostnet import NetReader
from niclab.plumbing.lab.sysfs import VFIO_PCI, PciReader

Status = Literal["ok", "warn", "fail"]
HOST_USE = "host use"
GUEST_DRIVER = "guest driver"
_GRUB = "to GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub and reboot"
_MEMLOCK_ENOUGH = 1 << 30  # a guest's whole RAM gets pinned; below 1 GiB even a small guest fails


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


class CardLike(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def pci(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def expected_pci_id(self) -> str | None: ...
    @property
    def allowed_class(self) -> AllowedClass | None: ...


@dataclass(frozen=True)
class CardRef:
    """A card to check: its inventory id, PCI address, NIC model, that model's PCI ID ("8086:100e"), the
    PCI class beyond network controllers it may report (its model's allow_class) and its lab host."""

    id: str
    pci: str
    model: str = ""
    expected_pci_id: str | None = None
    allowed_class: AllowedClass | None = None
    host: str = ""


@dataclass
class CardReport:
    card: CardLike
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(check.status != "fail" for check in self.checks)

    def usable(self, force: bool) -> bool:
        """Whether a run may take the card: no failed check, except host use when forced."""
        return all(check.status != "fail" or (force and check.name == HOST_USE) for check in self.checks)

    def refusal(self, force: bool) -> str | None:
        """Why a run may not take the card, for an error message; None if it may."""
        failed = [c for c in self.checks if c.status == "fail" and not (force and c.name == HOST_USE)]
        if not failed:
            return None
        reasons = "; ".join(f"{c.detail}" + (f" ({c.fix})" if c.fix else "") for c in failed)
        return f"card {self.card.id} ({self.card.pci}){_on(self.card)}: {reasons}"


def _on(card: CardLike) -> str:
    return f" on {card.host}" if card.host else ""


@dataclass
class HostReport:
    checks: list[Check] = field(default_factory=list)
    title: str = "host"  # "host rig2 (qemu+ssh://root@rig2/system)" when the doctor checks several

    @property
    def ok(self) -> bool:
        return all(check.status != "fail" for check in self.checks)


def memlock_limit() -> int:
    """The soft RLIMIT_MEMLOCK in bytes (resource.RLIM_INFINITY when unlimited)."""
    return resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]


def libvirt_version() -> str | None:
    """The libvirt version virsh reports, or None when libvirt is not installed."""
    if shutil.which("virsh") is None:
        return None
    try:
        result = subprocess.run(["virsh", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    return result.stdout.strip() or None


def iommu_parameter(vendor: str | None) -> str:
    """The kernel parameter that turns the IOMMU on for this CPU vendor."""
    return {"intel": "intel_iommu=on", "amd": "amd_iommu=on"}.get(vendor or "", "intel_iommu=on or amd_iommu=on")


class HostFacts(Protocol):
    """What the host checks read of a host as a whole: Sysfs here, a snapshot.HostSnapshot elsewhere."""

    release: str

    def iommu_on(self) -> bool: ...
    def interrupt_remapping(self) -> bool | None: ...
    def unsafe_interrupts_allowed(self) -> bool: ...
    def cmdline(self) -> str: ...
    def cpu_vendor(self) -> str | None: ...
    def driver_loaded(self, name: str) -> bool: ...
    def vfio_available(self) -> bool: ...


class RemoteFacts(HostFacts, Protocol):
    """A host read over ssh also says whether it has /dev/kvm and which libvirt it runs."""

    kvm: bool
    libvirt: str | None


def diagnose_host(
    sysfs: HostFacts,
    memlock: Callable[[], int] = memlock_limit,
    libvirt: Callable[[], str | None] = libvirt_version,
) -> HostReport:
    checks = [_iommu(sysfs), _interrupts(sysfs), _vfio(sysfs), _memlock(memlock())]
    version = libvirt()
    if version is None:
        checks.append(Check("libvirt", "fail", "libvirt not found", "apt install libvirt-daemon-system"))
    else:
        checks.append(Check("libvirt", "ok", f"libvirt {version}"))
    return HostReport(checks)


def diagnose_remote_host(title: str, facts: RemoteFacts) -> HostReport:
    """Another lab host's checks, from what was read there over ssh: its IOMMU, interrupt remapping,
    vfio-pci, libvirt and KVM (memlock is libvirt's to raise for its domains there)."""
    checks = [_iommu(facts), _interrupts(facts), _vfio(facts)]
    if facts.libvirt is None:
        checks.append(Check("libvirt", "fail", "virsh not found", "apt install libvirt-daemon-system libvirt-clients"))
    else:
        checks.append(Check("libvirt", "ok", f"libvirt {facts.libvirt}"))
    if facts.kvm:
        checks.append(Check("kvm", "ok", "/dev/kvm (not probed yet: the first run probes it, or lab doctor --probe)"))
    else:
        checks.append(Check("kvm", "warn", "no /dev/kvm: guests there run under TCG, slowly", "enable VT-x/AMD-V"))
    return HostReport(checks, title)


def kvm_verdict(report: HostReport, accel: str, reason: str, probed_at: str) -> None:
    """Say the KVM probe's verdict for the host (cached, or just probed) in its kvm check, where it has /dev/kvm."""
    for index, check in enumerate(report.checks):
        if check.name != "kvm" or check.status != "ok":
            continue
        if accel == "kvm":
            report.checks[index] = Check(
                "kvm", "ok", f"/dev/kvm; the probe boots the image under KVM (probed {probed_at})"
            )
        else:
            report.checks[index] = Check(
                "kvm",
                "warn",
                f"/dev/kvm, but guests there run under TCG, slowly: {reason} (probed {probed_at})",
                "`niclab lab doctor --probe` tests it again",
            )


def _iommu(sysfs: HostFacts) -> Check:
    if sysfs.iommu_on():
        return Check("iommu", "ok", "on")
    param = iommu_parameter(sysfs.cpu_vendor())
    if any(word in sysfs.cmdline().split() for word in ("intel_iommu=on", "amd_iommu=on")):
        return Check(
            "iommu",
            "fail",
            "off, though the kernel command line turns it on",
            "enable VT-d / AMD-Vi in the firmware setup",
        )
    return Check("iommu", "fail", "off", f"add {param} (and optionally iommu=pt) {_GRUB}")


def _interrupts(sysfs: HostFacts) -> Check:
    remapping = sysfs.interrupt_remapping()
    if remapping:
        return Check("interrupt remapping", "ok", "supported")
    unsafe = (
        "vfio_iommu_type1.allow_unsafe_interrupts=1 lets vfio work without it, but unsafely: "
        "a guest can then send forged interrupts (MSI) to the host"
    )
    if sysfs.unsafe_interrupts_allowed():
        return Check("interrupt remapping", "warn", "not supported; allow_unsafe_interrupts is on (unsafe)", unsafe)
    if remapping is None:
        return Check("interrupt remapping", "warn", "unknown (no IOMMU unit listed)")
    return Check("interrupt remapping", "fail", "not supported: vfio refuses to assign devices", unsafe)


def _vfio(sysfs: HostFacts) -> Check:
    if sysfs.driver_loaded(VFIO_PCI):
        return Check("vfio-pci", "ok", "loaded")
    if sysfs.vfio_available():
        return Check("vfio-pci", "warn", "available, not loaded", "modprobe vfio-pci")
    return Check(
        "vfio-pci",
        "fail",
        f"no vfio-pci module for kernel {sysfs.release}",
        "install the kernel's modules, then modprobe vfio-pci",
    )


def _memlock(limit: int) -> Check:
    if limit == resource.RLIM_INFINITY or limit >= _MEMLOCK_ENOUGH:
        shown = "unlimited" if limit == resource.RLIM_INFINITY else f"{limit >> 20} MiB"
        return Check("memlock", "ok", shown)
    return Check(
        "memlock",
        "warn",
        f"{limit >> 20} MiB: too little to pin a guest's RAM; libvirt raises it for its own domains",
        "for QEMU started by hand: ulimit -l unlimited",
    )


def diagnose(
    sysfs: PciReader, hostnet: NetReader, cards: Sequence[CardLike], drivers: DriverTable | None = None
) -> list[CardReport]:
    """The card checks; with the lab image's `drivers`, also the driver and firmware each card gets in a guest."""
    return [CardReport(card, _card_checks(sysfs, hostnet, card, drivers)) for card in cards]


def guest_driver_check(drivers: DriverTable, pci_id: str, modalias: str | None, code: int | None) -> Check:
    """The module the lab guest loads for the card (by its modalias if the host gives it, else its ID and
    class) and the firmware that module names; a fail when the image has no driver for it."""
    found = drivers.resolve(modalias or pci_id, None if modalias else code)
    image = f"lab image {drivers.image.id}, kernel {drivers.kernel}"
    if found.module is None:
        return Check(
            GUEST_DRIVER,
            "fail",
            f"no driver for {pci_id} in the {image}: its modules.alias matches no module",
            "check the card's PCI ID (lspci -nn); a driver out of the kernel's tree needs a kernel build that has "
            "it (a scenario's kernel: {build: ...})",
        )
    others = f"; also matches {', '.join(found.modules[1:])}" if len(found.modules) > 1 else ""
    builtin = ", built in" if found.builtin else ""
    status: Status = "warn" if found.missing_firmware else "ok"
    fix = f"the image lacks {', '.join(found.missing_firmware)}: add the Debian package that has it to images/lab"
    return Check(
        GUEST_DRIVER,
        status,
        f"{found.module} ({image}{builtin}), firmware: {found.describe_firmware()}{others}",
        fix if found.missing_firmware else "",
    )


def _card_checks(sysfs: PciReader, hostnet: NetReader, card: CardLike, drivers: DriverTable | None) -> list[Check]:
    pci = card.pci
    if not sysfs.exists(pci):
        where = card.host or "this host"
        return [Check("device", "fail", f"no PCI device {pci} on {where}", "check the inventory's pci")]
    code = sysfs.pci_class(pci)
    checks = [Check("device", "ok", f"{pci}, class 0x{code:06x}"), _class(sysfs, pci, code, card.allowed_class)]
    if checks[-1].status == "fail":
        return checks  # not a card: nothing on its group, driver or use, which would read as how to bind it
    found = sysfs.pci_id(pci)
    expected = card.expected_pci_id
    if expected and found.lower() != expected.lower():
        what = f"{card.model} cards are" if card.model else "the inventory expects"
        checks.append(Check("pci id", "fail", f"{pci} is {found}, but {what} {expected}", "check the inventory's pci"))
    else:
        checks.append(Check("pci id", "ok", found))
    if drivers is not None:
        checks.append(guest_driver_check(drivers, found, sysfs.modalias(pci), code))
    checks.append(_group(sysfs, hostnet, pci))
    if (host := hostnet.unread_host()) is not None:
        checks.append(_not_checked("default route", host))
    driver, override = sysfs.driver(pci), sysfs.driver_override(pci)
    shown = (driver or "unbound") + (f", driver_override {override}" if override else "")
    ready = " (ready for passthrough)" if driver == VFIO_PCI else ""
    checks.append(Check("driver", "ok", shown + ready))
    checks.append(_host_use(sysfs, hostnet, pci))
    return checks


def _class(sysfs: PciReader, pci: str, code: int, allowed: AllowedClass | None) -> Check:
    """A network controller, or the class the inventory allows; never the controller of the host's disk."""
    why = pciclass.refusal(code, allowed)
    disks = sysfs.blockdevs(pci)
    if why is None and not disks:
        shown = pciclass.describe(code)
        if not pciclass.is_network(code):
            shown += f" (class 0x{code:06x}), allowed by allow_class {allowed}"
        return Check("class", "ok", shown)
    lspci = f"check the inventory's pci with lspci -D -s {pci}"
    if disks:
        why = (why or f"is a {pciclass.describe(code)} (class 0x{code:06x})") + f", with the host's {_disks(disks)}"
        return Check("class", "fail", f"{pci} {why}", f"{lspci}; the host's disks are never passed through")
    if pciclass.never_passed(code):
        hint = pciclass.NEVER_TEXT
    else:
        hint = (
            f'a card that reports another class needs allow_class: "0x{code >> 8:04x}" on its model (under models:) '
            "in the inventory"
        )
    return Check("class", "fail", f"{pci} {why}", f"{lspci}; {hint}")


def _disks(names: list[str]) -> str:
    return ("disk " if len(names) == 1 else "disks ") + ", ".join(names)


def _group(sysfs: PciReader, hostnet: NetReader, pci: str) -> Check:
    group = sysfs.iommu_group(pci)
    if group is None:
        return Check("iommu group", "fail", "none: the IOMMU is off", "see the host's iommu check")
    others = [other for other in sysfs.group_devices(group) if other != pci]
    needed = _needed_by_host(sysfs, hostnet, others)
    if needed:
        return Check(
            "iommu group",
            "fail",
            f"group {group} also holds {', '.join(needed)}",
            "move the card to a slot with its own IOMMU group, such as one behind a bridge with ACS; "
            "never pass the host's disk, display or default route's device through",
        )
    offenders = [
        f"{other} ({driver})"
        for other in others
        if not sysfs.is_bridge(other) and (driver := sysfs.driver(other)) not in (None, VFIO_PCI)
    ]
    if offenders:
        return Check(
            "iommu group",
            "fail",
            f"group {group} is not viable: it also holds {', '.join(offenders)}",
            "unbind those devices or pass them through too, or move the card to a slot with its own group",
        )
    return Check("iommu group", "ok", f"group {group}, viable")


def _needed_by_host(sysfs: PciReader, hostnet: NetReader, devices: list[str]) -> list[str]:
    """Those of `devices` the host needs, whatever driver they are on (or none), each with why: a display
    controller, a disk's controller, the device under the default route."""
    if not devices:
        return []
    routes: dict[str, list[str]] = {}
    for ifname in hostnet.default_route_interfaces():
        if (device := sysfs.netdev_device(ifname)) is not None:
            routes.setdefault(device, []).append(ifname)
    found = []
    for other in devices:
        code = sysfs.pci_class(other)
        why = [pciclass.describe(code)]
        if disks := sysfs.blockdevs(other):
            why.append(_disks(disks))
        if other in routes:
            why.append(f"default route via {', '.join(routes[other])}")
        if len(why) > 1 or pciclass.base(code) == pciclass.DISPLAY:
            found.append(f"{other} ({', '.join(why)})")
    return found


def _not_checked(name: str, host: str) -> Check:
    """A check that needs the host's addresses and routes, on a host whose routes niclab cannot read."""
    return Check(
        name,
        "warn",
        f"not checked on {host} (no access to its routes yet)",
        f"run niclab lab doctor --host {host} on {host} itself",
    )


def _host_use(sysfs: PciReader, hostnet: NetReader, pci: str) -> Check:
    if (host := hostnet.unread_host()) is not None:
        return _not_checked(HOST_USE, host)
    netdevs = sysfs.netdevs(pci)
    reasons = [f"{name} {reason}" for name in netdevs for reason in hostnet.uses(name)]
    if reasons:
        return Check(
            HOST_USE,
            "fail",
            f"in use by the host: {'; '.join(reasons)}",
            "move them off the card, or pass --force (the host loses them during the run)",
        )
    return Check(HOST_USE, "ok", f"{', '.join(netdevs)}: no address or route" if netdevs else "no host interface")


_MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}


def render(host: HostReport | Sequence[HostReport], cards: Sequence[CardReport]) -> str:
    """The `niclab lab doctor` listing: the host (or each host, titled with its name and URI), then one block
    per card, each fix under its check."""
    hosts = [host] if isinstance(host, HostReport) else list(host)
    blocks = [(report.title, report.checks) for report in hosts]
    for report in cards:
        card = report.card
        title = f"card {card.id} ({card.pci}" + (f", {card.model})" if card.model else ")") + _on(card)
        blocks.append((title, report.checks))
    width = max((len(check.name) for _, checks in blocks for check in checks), default=0) + 2
    lines: list[str] = []
    for title, checks in blocks:
        lines.append(title)
        for check in checks:
            lines.append(f"  {_MARK[check.status]:<5}{check.name:<{width}}{check.detail}")
            if check.fix and check.status != "ok":
                lines.append(f"  {'':<5}{'':<{width}}fix: {check.fix}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
