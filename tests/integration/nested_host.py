"""A lab host without lab hardware: an L1 QEMU guest with an emulated IOMMU and two e1000 cards.

L1 runs under TCG: q35 with an Intel IOMMU that remaps interrupts, `-cpu max`
(which exposes SVM, so KVM works inside L1: kvm_amd loads at boot), and the
Debian image, which carries QEMU, libvirt and Python. Its two e1000 cards are
cabled to each other by a pair of UDP sockets on 127.0.0.1, so traffic between
them crosses this host's loopback only. The checkout, the virtualenv's
packages and the micro image are shared read-only over 9p: niclab runs in L1
from the same code. Commands reach L1 through its guest agent (niclab's own
AgentNode), so L1 needs no network of its own.

QEMU 7.2's TCG emulation of SVM now and then kills L1's kernel in the thread
of an L2 vCPU (an oops whose `Comm:` is `CPU n/KVM`, such as "stack guard page
was hit"), or an L2 guest. `NestedLabHost` boots L1 again when either dies
that way, and says so; any other death of L1 is the test's failure.
"""

from __future__ import annotations

import re
import site
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from niclab.base.node import CommandResult
from niclab.base.paths import SOURCE_ROOT
from niclab.base.procs import Supervisor
from niclab.plumbing.accel import qemu_binary
from niclab.plumbing.backends.qemu import tail, udp_cable
from niclab.plumbing.guest import AgentError, AgentNode, GuestAgent
from niclab.plumbing.image import Image

CARD_SLOTS = (0x04, 0x05)  # the cards' PCI slots in L1: 0000:00:04.0 and 0000:00:05.0
CARDS = tuple(f"0000:00:{slot:02x}.0" for slot in CARD_SLOTS)
SHARES = {"niclab": SOURCE_ROOT}  # plus "site" and "micro", found at run time
MOUNT = "/mnt"

LAB_YAML = f"""\
name: nested
hosts:
  l1: {{libvirt: "qemu:///system"}}
cards:
  - {{id: card-a, host: l1, pci: "{CARDS[0]}", class: e1000, name: QEMU e1000 in the nested host}}
  - {{id: card-b, host: l1, pci: "{CARDS[1]}", class: e1000, name: QEMU e1000 in the nested host}}
cables:
  - [card-a, card-b]
"""


def site_packages() -> Path:
    """The virtualenv's packages (pydantic, numpy, libvirt-python ...): L1's Python 3.11 imports them."""
    return Path(next(p for p in site.getsitepackages() if p.endswith("site-packages")))


def l1_argv(debian: Image, fds: tuple[int, int], shares: dict[str, Path]) -> list[str]:
    assert debian.disk is not None
    argv = [
        qemu_binary(),
        "-name",
        "lab-host,process=niclab-lab-host",
        "-machine",
        "q35,kernel-irqchip=split,accel=tcg",
        "-device",
        "intel-iommu,intremap=on",
        "-cpu",
        "max",
        "-smp",
        "2",
        "-m",
        "3G",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-kernel",
        str(debian.kernel),
        "-initrd",
        str(debian.initrd),
        "-append",
        f"{debian.cmdline} intel_iommu=on",
        "-drive",
        f"file={debian.disk},if=virtio,format=qcow2,snapshot=on",
        "-chardev",
        "file,id=serial0,path=l1.serial.log",
        "-serial",
        "chardev:serial0",
        "-chardev",
        "socket,id=qga0,path=l1.qga,server=on,wait=off",
        "-device",
        "virtio-serial-pci,id=vser0",
        "-device",
        "virtserialport,bus=vser0.0,chardev=qga0,name=org.qemu.guest_agent.0",
    ]
    for i, (slot, fd) in enumerate(zip(CARD_SLOTS, fds, strict=True)):
        argv += [
            "-netdev",
            f"dgram,id=card{i},local.type=fd,local.str={fd}",
            "-device",
            f"e1000,netdev=card{i},mac=52:54:00:4e:4c:{i + 1:02x},bus=pcie.0,addr={slot:#x}",
        ]
    for tag, path in shares.items():
        argv += ["-virtfs", f"local,path={path},mount_tag={tag},security_model=none,readonly=on"]
    return argv


def prepare_script(shares: dict[str, Path]) -> str:
    """Run in L1 as root: mount the shares, load vfio-pci and KVM, start libvirt, write the lab."""
    mounts = "\n".join(
        f"mkdir -p {MOUNT}/{tag} && mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 {tag} {MOUNT}/{tag}"
        for tag in shares
    )
    return f"""set -eu
modprobe -a 9p 9pnet_virtio
{mounts}
modprobe vfio-pci
modprobe ccp || true
# udev has loaded it at boot already, with nested paging: npt=0 would need a reload, and makes L2 so slow
# under TCG's SVM that its guests had not answered after 10 minutes.
modprobe kvm_amd || true
systemctl start virtlogd.service libvirtd.service
mkdir -p /root/cache /root/runs
cat > /root/lab.yaml <<'EOF'
{LAB_YAML}EOF
"""


def niclab_env() -> str:
    """The environment niclab runs with in L1: this checkout's code, the virtualenv's packages, the micro image,
    which is the lab runs' image too there (it has the e1000 driver, and L1's memory is short)."""
    return (
        f"PYTHONPATH={MOUNT}/niclab/harness:{MOUNT}/site NICLAB_IMAGE={MOUNT}/micro NICLAB_LAB_IMAGE={MOUNT}/micro "
        "NICLAB_CACHE=/root/cache HOME=/root"
    )


@contextmanager
def nested_lab_host(workdir: Path, debian: Image, micro: Image, boot_timeout: float = 600) -> Iterator[AgentNode]:
    """Boot L1, prepare it as a lab host, and hand out a node to run commands in it; stop it on exit."""
    shares = {**SHARES, "site": site_packages(), "micro": micro.directory}
    workdir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        supervisor = stack.enter_context(Supervisor(workdir))
        ends = udp_cable()
        try:
            child = supervisor.start(
                "qemu-lab-host",
                l1_argv(debian, (ends[0].fileno(), ends[1].fileno()), shares),
                cwd=workdir,
                log=workdir / "l1.qemu.log",
                pass_fds=[ends[0].fileno(), ends[1].fileno()],
            )
        finally:
            for end in ends:
                end.close()
        agent = GuestAgent("l1", workdir / "l1.qga")
        stack.callback(agent.close)
        agent.connect(time.monotonic() + boot_timeout, child.exit_reason)
        node = AgentNode("l1", agent)
        node.run(prepare_script(shares), timeout=300)
        yield node


# An oops in a QEMU vCPU thread of L1 that runs an L2 guest under KVM: the emulated SVM's, not niclab's.
EMULATED_SVM_CRASH = re.compile(r"Comm: CPU \d+/KVM")
# An L2 guest's kernel died (its console), or KVM in L1 gave up on it (libvirt's log of its QEMU).
GUEST_DIED = re.compile(r"Kernel panic|BUG: |Oops|general protection fault|KVM internal error|KVM: entry failed")


class LabHostGone(Exception):
    """L1 died under a command, in a way that is not the emulated SVM's known crash, or too often."""


class NestedLabHost:
    """The nested lab host for a test module, booted again when the emulated SVM kills L1 or an L2 guest.

    Two deaths are the emulated SVM's, not niclab's: L1's kernel oopses in the thread of an L2 vCPU
    (EMULATED_SVM_CRASH), or a command fails and the L2 consoles matching `consoles` (or libvirt's logs
    of their QEMUs) show a guest's kernel dead or KVM giving up on it (GUEST_DIED). Either way the command
    runs again from the start on a fresh L1 (its disk is a snapshot: nothing of the dead one is left), at
    most `reboots` times for the module, and each reboot is printed with the evidence. Any other death of
    L1 raises LabHostGone with its console.
    """

    def __init__(self, workdir: Path, debian: Image, micro: Image, reboots: int = 2) -> None:
        self.workdir, self.debian, self.micro, self.reboots = workdir, debian, micro, reboots
        self.boots: list[Path] = []  # each boot's directory (its console, QEMU log, agent socket)
        self._stack = ExitStack()
        self.node: AgentNode | None = None

    def __enter__(self) -> NestedLabHost:
        self._boot()
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    @property
    def console(self) -> Path:
        return self.boots[-1] / "l1.serial.log"

    def _boot(self) -> None:
        self._stack.close()
        self._stack = ExitStack()
        self.boots.append(self.workdir / f"boot{len(self.boots)}")
        self.node = self._stack.enter_context(nested_lab_host(self.boots[-1], self.debian, self.micro))

    def _again(self, death: str) -> None:
        """Boot a fresh L1 after the emulated SVM's `death`, if the module has a reboot left."""
        if len(self.boots) > self.reboots:
            raise LabHostGone(f"{death}\n(the emulated SVM's crash, {len(self.boots)} boots in a row)")
        print(f"\n[nested] {death}\n[nested] the emulated SVM's crash: L1 boots again", file=sys.stderr)
        self._boot()

    def run(
        self,
        command: str,
        timeout: float = 60.0,
        check: bool = True,
        consoles: str | None = None,
    ) -> CommandResult:
        while True:
            assert self.node is not None, "enter the host first"
            try:
                result = self.node.run(command, timeout=timeout, check=check)
            except AgentError as exc:
                console = tail(self.console, 40)
                gone = f"{exc}: the nested lab host is gone; the end of its console ({self.console}):\n{console}"
                if not EMULATED_SVM_CRASH.search(console):
                    raise LabHostGone(gone) from None
                self._again(gone)
                continue
            logs = self.guest_logs(consoles) if consoles and result.returncode else ""
            if not GUEST_DIED.search(logs):
                return result
            self._again(f"an L2 guest died under `{command}`:\n{logs}")

    def guest_logs(self, pattern: str) -> str:
        """The end of each L2 console matching `pattern` in L1, and of libvirt's logs of their QEMUs."""
        assert self.node is not None, "enter the host first"
        return self.node.run(f"tail -n 30 {pattern} /var/log/libvirt/qemu/*.log 2>/dev/null", check=False).stdout

    def get(self, path: str) -> bytes:
        assert self.node is not None, "enter the host first"
        return self.node.get(path)
