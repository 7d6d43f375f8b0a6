"""A lab host without lab hardware: an L1 QEMU guest with an emulated IOMMU and two e1000 cards.

L1 runs under TCG: q35 with an Intel IOMMU that remaps interrupts, `-cpu max`
(which exposes SVM, so KVM works inside L1 once kvm_amd is loaded), and the
Debian image, which carries QEMU, libvirt and Python. Its two e1000 cards are
cabled to each other by a pair of UDP sockets on 127.0.0.1, so traffic between
them crosses this host's loopback only. The checkout, the virtualenv's
packages and the micro image are shared read-only over 9p: niclab runs in L1
from the same code. Commands reach L1 through its guest agent (niclab's own
AgentNode), so L1 needs no network of its own.
"""

from __future__ import annotations

import site
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from niclab.accel import qemu_binary
from niclab.backends.qemu import udp_cable
from niclab.guest import AgentNode, GuestAgent
from niclab.image import Image
from niclab.paths import SOURCE_ROOT
from niclab.procs import Supervisor

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
# Without nested paging: with it, QEMU 7.2's TCG emulation of SVM now and then crashed L1's kernel in a KVM
# vCPU thread ("stack guard page was hit" in exc_page_fault) or an L2 guest (2 of 5 runs); with npt=0, none in 8.
modprobe kvm_amd npt=0 || true
systemctl start virtlogd.service libvirtd.service
mkdir -p /root/cache /root/runs
cat > /root/lab.yaml <<'EOF'
{LAB_YAML}EOF
"""


def niclab_env() -> str:
    """The environment niclab runs with in L1: this checkout's code, the virtualenv's packages, the micro image."""
    return (
        f"PYTHONPATH={MOUNT}/niclab/harness:{MOUNT}/site NICLAB_IMAGE={MOUNT}/micro NICLAB_CACHE=/root/cache HOME=/root"
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
