"""A lab of two machines without lab hardware: two L1 QEMU guests, each with an emulated IOMMU and one e1000 card.

Each L1 runs under TCG: q35 with an Intel IOMMU that remaps interrupts, `-cpu max`
(which exposes SVM, so KVM works inside L1: kvm_amd loads at boot), and the
Debian image, which carries sshd, libvirt and QEMU. It is a lab host as a real
one is: niclab runs on THIS machine as the controller and reaches each L1 only
through `qemu+ssh://root@l1a/system` (libvirt) and `ssh l1a` (the doctor, the
leases), as it would reach two PCs in a lab.

The wiring crosses this host's loopback only, and nothing changes in its
network:
- the two e1000 cards are joined by a pair of UDP sockets on 127.0.0.1 (the
  studies' crossover cable between two PCs);
- a second pair joins the L1s' "tunnel" NICs (198.18.250.1 and .2 inside
  them): the hosts' own network, over which niclab's cross-host UDP tunnels of
  emulated nodes run;
- each L1's sshd is reached through a QEMU user-mode `hostfwd` on
  127.0.0.1:PORT (`restrict=on`: the L1 reaches nothing else).

The controller's `ssh` is the user's, with an ssh config that names the L1s
(`Host l1a` ... `Port`, `IdentityFile`): a wrapper first on PATH adds `-F` to
it, for libvirt's ssh transport and niclab's own connection alike, since
OpenSSH reads ~/.ssh/config from the password database's home, not $HOME.

QEMU 7.2's TCG emulation of SVM now and then kills an L1's kernel in the thread
of an L2 vCPU (an oops whose `Comm:` is `CPU n/KVM`), or an L2 guest.
The same emulation can also freeze an L1 whole as an L2 guest starts (its agent
and sshd stop answering, its console says nothing). `NestedLab.crashed()` says
whether a failure was either; the tests then boot that L1 again (`reboot`) and
run the command once more, and say so. Before a frozen L1 is booted again,
`diagnose()` keeps what can be seen of it in `hang.txt` beside its console: how
busy each QEMU thread is, what QEMU's monitor says, and the L1 kernel's own
backtrace on every CPU (an NMI, which the L1 turns into a panic).

The same crash can kill niclab's KVM probe on an L1 (its guest ends before
userspace). niclab then caches TCG for that host, as it should on a real
host, and every later run there boots L2 under TCG inside TCG: four times
slower, enough for the kernel's selftests to time out. On this rig KVM works
in every L1 (kvm_amd loads at boot), so a run whose nodes fell back to TCG
on an L1 is the emulated SVM's doing too: `kvm_lost()` finds them in the
run's records, that L1 boots again, and the command runs once more. An L1
booted again has its cached TCG verdict dropped (`forget_kvm()`): a run that
failed as its L1 crashed can leave one with no record to show it (the CI run
of 6ced9e5 kept l1a's that way; its later probes there said TCG too, and the
verdict's reason is now in the failure's message).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from niclab.base.node import CommandResult
from niclab.base.procs import Child, Supervisor
from niclab.plumbing.accel import AccelChoice, cached_host_choice, host_cache_file, qemu_binary
from niclab.plumbing.backends.qemu import tail, udp_cable
from niclab.plumbing.contention import thread_times
from niclab.plumbing.guest import AgentError, AgentNode, GuestAgent
from niclab.plumbing.image import Image
from niclab.plumbing.image.store import find_image

CARD_SLOT = 0x04  # each L1's card: 0000:00:04.0
CARD = f"0000:00:{CARD_SLOT:02x}.0"
TUNNEL_SLOT = 0x05
HOSTS = ("l1a", "l1b")
TUNNEL_NET = "198.18.250"  # the L1s' own network, inside them: l1a is .1, l1b .2


def tunnel_address(index: int) -> str:
    return f"{TUNNEL_NET}.{index + 1}"


def host_uri(name: str) -> str:
    """The libvirt URI the inventory gives the L1 `name` (the key of its cached KVM verdicts)."""
    return f"qemu+ssh://root@{name}/system"


def lab_yaml(key_dir: Path | None = None) -> str:
    """The two-host inventory the controller uses: one e1000 card on each L1, the crossover cable between them."""
    hosts = "\n".join(
        f'  {name}: {{libvirt: "{host_uri(name)}", address: {tunnel_address(i)}, '
        f"capacity: {{cpus: 2, memory_mib: 1536}}}}"
        for i, name in enumerate(HOSTS)
    )
    cards = "\n".join(
        f'  - {{id: card-{name[-1]}, host: {name}, pci: "{CARD}", model: e1000, name: QEMU e1000 in {name}}}'
        for name in HOSTS
    )
    return f"name: nested-pair\nhosts:\n{hosts}\ncards:\n{cards}\ncables:\n  - [card-a, card-b]\n"


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class L1:
    """One lab host: its name, index, the sockets of its card and tunnel NIC (kept for reboots), its ssh port."""

    name: str
    index: int
    card: socket.socket
    tunnel: socket.socket
    ssh_port: int
    boots: list[Path] = field(default_factory=list)
    node: AgentNode | None = None
    agent: GuestAgent | None = None
    child: Child | None = None
    stack: ExitStack = field(default_factory=ExitStack)

    @property
    def console(self) -> Path:
        return self.boots[-1] / "serial.log"


def l1_argv(debian: Image, host: L1) -> list[str]:
    assert debian.disk is not None
    mac = f"{host.index + 1:02x}"
    return [
        qemu_binary(),
        "-name",
        f"{host.name},process=niclab-lab-{host.name},debug-threads=on",  # its vCPU threads by name in hang.txt
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
        # the kernel's warnings on the console too (the image's loglevel=3 keeps a stall or a lockup off it)
        f"{debian.cmdline} intel_iommu=on loglevel=5",
        "-drive",
        f"file={debian.disk},if=virtio,format=qcow2,snapshot=on",
        "-chardev",
        "file,id=serial0,path=serial.log",
        "-serial",
        "chardev:serial0",
        "-qmp",
        "unix:qmp.sock,server=on,wait=off",
        "-chardev",
        "socket,id=qga0,path=qga.sock,server=on,wait=off",
        "-device",
        "virtio-serial-pci,id=vser0",
        "-device",
        "virtserialport,bus=vser0.0,chardev=qga0,name=org.qemu.guest_agent.0",
        # the card under test, and the hosts' own network for tunnels: both cables on 127.0.0.1
        "-netdev",
        f"dgram,id=card,local.type=fd,local.str={host.card.fileno()}",
        "-device",
        f"e1000,netdev=card,mac=52:54:00:4e:4c:{mac},bus=pcie.0,addr={CARD_SLOT:#x}",
        "-netdev",
        f"dgram,id=tunnel,local.type=fd,local.str={host.tunnel.fileno()}",
        "-device",
        f"virtio-net-pci,netdev=tunnel,mac=02:4e:4c:fe:00:{mac},bus=pcie.0,addr={TUNNEL_SLOT:#x}",
        # management: sshd through a forward on this host's 127.0.0.1, nothing else reachable
        "-netdev",
        f"user,id=mgmt,restrict=on,hostfwd=tcp:127.0.0.1:{host.ssh_port}-:22",
        "-device",
        "virtio-net-pci,netdev=mgmt,mac=52:54:00:4e:4d:" + mac,
    ]


def prepare_script(host: L1, public_key: str) -> str:
    """Run in L1 as root: vfio-pci and KVM, libvirt, sshd with the controller's key, the tunnel address."""
    mac = f"02:4e:4c:fe:00:{host.index + 1:02x}"
    return f"""set -eu
modprobe vfio-pci
modprobe ccp || true
# udev has loaded it at boot already, with nested paging: npt=0 would need a reload, and makes L2 so slow
# under TCG's SVM that its guests had not answered after 10 minutes.
modprobe kvm_amd || true
# an NMI from the test (diagnose(), on a frozen L1) panics, which prints where the CPU was
sysctl -qw kernel.unknown_nmi_panic=1
sysctl -qw kernel.panic_print=64 || true  # and every CPU's backtrace
systemctl start virtlogd.service libvirtd.service ssh.service
install -d -m 0700 /root/.ssh
printf '%s\\n' '{public_key}' > /root/.ssh/authorized_keys
chmod 0600 /root/.ssh/authorized_keys
tunnel=$(for d in /sys/class/net/*; do [ "$(cat $d/address)" = "{mac}" ] && basename $d; done)
ip link set "$tunnel" up
ip addr add {tunnel_address(host.index)}/24 dev "$tunnel"
"""


# An oops in a QEMU vCPU thread of L1 that runs an L2 guest under KVM: the emulated SVM's, not niclab's.
EMULATED_SVM_CRASH = re.compile(r"Comm: CPU \d+/KVM")
# An L2 guest's kernel died, or KVM in L1 gave up on it (libvirt's log of its QEMU). niclab never shuts a
# guest down (it destroys its domains: reason=destroyed), so a domain that ended with reason=shutdown is a
# guest that rebooted itself (a panic with panic=-1, or a triple fault), and on_reboot=destroy ended it.
GUEST_DIED = re.compile(
    r"Kernel panic|BUG: |Oops|general protection fault|KVM internal error|KVM: entry failed|reason=shutdown"
)


# The end of libvirt's log of each L2 guest's QEMU on an L1, not of niclab's KVM probes: a probe's guest ends
# itself (its init exits, panic=-1, on_reboot=destroy), which libvirt logs as reason=shutdown.
L2_LOGS = (
    'for f in /var/log/libvirt/qemu/*.log; do case "$f" in */niclab-probe-*) ;; *) tail -n {lines} "$f" ;; esac; '
    "done 2>/dev/null"
)


class LabHostGone(Exception):
    """An L1 died, in a way that is not the emulated SVM's known crash."""


class NestedLab:
    """Two L1 lab hosts for a test module, and the controller's ssh set-up to reach them.

    `env` is the environment niclab runs with on this machine (PATH with the ssh wrapper first).
    """

    def __init__(self, workdir: Path, debian: Image, boot_timeout: float = 600) -> None:
        self.workdir, self.debian, self.boot_timeout = workdir, debian, boot_timeout
        self._stack = ExitStack()
        self.hosts: dict[str, L1] = {}
        self.supervisor: Supervisor | None = None

    # -- set-up -------------------------------------------------------------

    def __enter__(self) -> NestedLab:
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for host in self.hosts.values():
            host.stack.close()
        self._stack.close()

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.supervisor = self._stack.enter_context(Supervisor(self.workdir))
        self._ssh_setup()
        self.forget_kvm(HOSTS, only_tcg=True)  # new L1s under old names: an earlier session's TCG is not theirs
        cards, tunnels = udp_cable(), udp_cable()
        for end in (*cards, *tunnels):
            self._stack.callback(end.close)
        for i, name in enumerate(HOSTS):
            self.hosts[name] = L1(name, i, cards[i], tunnels[i], free_tcp_port())
        self._write_ssh_config()
        for host in self.hosts.values():
            self._launch(host)
        for host in self.hosts.values():
            self._ready(host)

    def _ssh_setup(self) -> None:
        key = self.workdir / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        bin_dir = self.workdir / "bin"
        bin_dir.mkdir()
        wrapper = bin_dir / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {self.workdir / "ssh_config"} "$@"\n')
        wrapper.chmod(0o755)

    def _write_ssh_config(self) -> None:
        blocks = [
            f"Host {host.name}\n  HostName 127.0.0.1\n  Port {host.ssh_port}\n  User root\n"
            f"  IdentityFile {self.workdir / 'id_ed25519'}\n  IdentitiesOnly yes\n"
            "  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  LogLevel ERROR\n"
            for host in self.hosts.values()
        ]
        (self.workdir / "ssh_config").write_text("\n".join(blocks))
        (self.workdir / "lab.yaml").write_text(lab_yaml())

    @property
    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.workdir / 'bin'}:{os.environ['PATH']}"}

    @property
    def lab(self) -> Path:
        return self.workdir / "lab.yaml"

    def _launch(self, host: L1) -> None:
        assert self.supervisor is not None
        host.stack.close()
        host.stack = ExitStack()
        boot = self.workdir / f"{host.name}-boot{len(host.boots)}"
        boot.mkdir()
        host.boots.append(boot)
        child = self.supervisor.start(
            f"qemu-{host.name}-{len(host.boots)}",
            l1_argv(self.debian, host),
            cwd=boot,
            log=boot / "qemu.log",
            pass_fds=[host.card.fileno(), host.tunnel.fileno()],
        )
        host.stack.callback(_end, child)
        agent = GuestAgent(host.name, boot / "qga.sock")
        host.stack.callback(agent.close)
        host.node, host.agent, host.child = AgentNode(host.name, agent), agent, child

    def _ready(self, host: L1) -> None:
        assert host.node is not None and host.agent is not None and host.child is not None
        host.agent.connect(time.monotonic() + self.boot_timeout, host.child.exit_reason)
        public = (self.workdir / "id_ed25519.pub").read_text().strip()
        host.node.run(prepare_script(host, public), timeout=300)
        deadline = time.monotonic() + 120
        while self.ssh(host.name, "true", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise LabHostGone(f"{host.name}: sshd does not answer on 127.0.0.1:{host.ssh_port}")
            time.sleep(1)

    # -- use ------------------------------------------------------------------

    def ssh(self, name: str, command: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        """A command on an L1 through the controller's ssh, as niclab reaches it."""
        result = subprocess.run(
            [str(self.workdir / "bin" / "ssh"), "-o", "BatchMode=yes", name, command],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"ssh {name} {command!r}: {result.returncode}\n{result.stdout}{result.stderr}")
        return result

    def run(self, name: str, command: str, timeout: float = 60.0, check: bool = True) -> CommandResult:
        """A command on an L1 through its guest agent (works without its network)."""
        host = self.hosts[name]
        assert host.node is not None
        try:
            return host.node.run(command, timeout=timeout, check=check)
        except AgentError as exc:
            raise LabHostGone(f"{exc}: {name} is gone; the end of its console ({host.console}):\n"
                              f"{tail(host.console, 40)}") from None  # fmt: skip

    def crashed(self) -> list[str]:
        """The L1s whose kernel shows the emulated SVM's crash, whose L2 guests died, or that froze."""
        found = []
        for name, host in self.hosts.items():
            console = tail(host.console, 60)
            if EMULATED_SVM_CRASH.search(console) or (host.child and host.child.exit_reason()):
                found.append(name)
                continue
            logs = self.l2_logs(name, 30)
            if logs is None or GUEST_DIED.search(logs):
                found.append(name)
        return found

    def l2_logs(self, name: str, lines: int) -> str | None:
        """The end of libvirt's logs of the L2 guests on an L1; None if the L1 froze (diagnose() has kept why)."""
        try:
            return self.run(name, L2_LOGS.format(lines=lines), check=False).stdout
        except LabHostGone as exc:
            print(f"\n[nested] {str(exc).splitlines()[0]}\n[nested] {self.diagnose(name)}", file=sys.stderr)
            return None

    def diagnose(self, name: str) -> str:
        """What can be seen of an L1 that stopped answering, kept in `hang.txt` beside its console: each QEMU
        thread's CPU use over 3 s (a vCPU thread at 100 % spins in TCG), QEMU's status, and the end of the
        console after an NMI (which the L1 turns into a panic and a backtrace). Returns a line saying where."""
        host = self.hosts[name]
        assert host.child is not None
        report = [f"{name}: its guest agent stopped answering; QEMU pid {host.child.pid}"]
        report.append(threads_busy(host.child.pid))
        console_before = host.console.stat().st_size if host.console.exists() else 0
        report.append(qmp(host.boots[-1] / "qmp.sock", ["query-status", "inject-nmi"]))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and host.child.exit_reason() is None:
            time.sleep(1)
        report.append(f"QEMU after the NMI: {host.child.exit_reason() or 'still running'}")
        with host.console.open("rb") as console:
            console.seek(console_before)
            after = console.read().decode(errors="replace")
        report.append(f"its console after the NMI:\n{after[-6000:] or '(nothing)'}")
        where = host.boots[-1] / "hang.txt"
        where.write_text("\n".join(report) + "\n")
        return f"{name} froze: {report[1].splitlines()[0]}; the rest in {where}"

    @staticmethod
    def kvm_lost(found: list[dict]) -> set[str]:
        """The L1s on which a run's nodes ran under TCG, from the run's `cell` records."""
        lost: set[str] = set()
        for record in found:
            if record.get("type") != "cell":
                continue
            rig = record.get("rig", {})
            hosts = rig.get("hosts", {})
            accels = rig.get("accel_nodes") or dict.fromkeys(hosts, rig.get("accel"))
            lost |= {hosts[node] for node, accel in accels.items() if accel == "tcg" and hosts.get(node) in HOSTS}
        return lost

    def forget_kvm(self, names: Iterable[str], why: str = "", only_tcg: bool = False) -> None:
        """Drop the controller's cached KVM verdicts for these L1s (a lab run's is of niclab's default image,
        whatever its nodes boot): the next run there probes again. With `only_tcg`, a verdict of KVM stays: a
        probe's guest ends itself under the emulated SVM, which is one more chance of its crash."""
        for name in sorted(names):
            cached = _cached_verdict(name)
            if cached is None or (only_tcg and cached[1].accel == "kvm"):
                continue
            if why:
                print(f"\n[nested] {why} on {name}: its KVM verdict is forgotten", file=sys.stderr)
            cached[0].unlink(missing_ok=True)

    def kvm_verdict(self, name: str) -> str:
        """The controller's cached KVM verdict for an L1 and why, as niclab wrote it."""
        cached = _cached_verdict(name)
        return f"{cached[1].accel}: {cached[1].reason}" if cached is not None else "no verdict cached"

    def reboot(self, name: str, why: str) -> None:
        """Boot a fresh L1 (its disk is a snapshot: nothing of the dead one is left), and say why. A TCG verdict
        of the dead one is forgotten with it: a run that failed as its L1 crashed may have left one, with no
        record saying that its nodes ran under TCG."""
        print(f"\n[nested] {why}\n[nested] the emulated SVM's crash: {name} boots again", file=sys.stderr)
        host = self.hosts[name]
        self._launch(host)
        self._ready(host)
        self.forget_kvm([name], "it booted again", only_tcg=True)

    def kill(self, name: str) -> None:
        """Pull the plug on an L1 (its QEMU ends at once), as a lab host that goes away."""
        self.hosts[name].stack.close()


def _cached_verdict(name: str) -> tuple[Path, AccelChoice] | None:
    """Where the controller caches its KVM verdict for an L1 (a lab run's is of niclab's default image, whatever
    its nodes boot), and the verdict; None if there is none."""
    probe = find_image()
    cached = cached_host_choice(host_uri(name), probe) if probe is not None else None
    return (host_cache_file(host_uri(name), probe), cached) if probe is not None and cached is not None else None


def threads_busy(pid: int, seconds: float = 3.0) -> str:
    """Each thread of a process and its share of a CPU over `seconds` (niclab's own schedstat reader)."""
    before = thread_times(pid)
    time.sleep(seconds)
    after = thread_times(pid)
    busy = {
        f"{t.name} [{tid}]": 100 * (t.run_ns - before[tid].run_ns) / (seconds * 1e9)
        for tid, t in after.items()
        if tid in before
    }
    ranked = sorted(busy.items(), key=lambda item: -item[1])
    return "QEMU threads: " + ", ".join(f"{thread} {pct:.0f} %" for thread, pct in ranked)


def qmp(path: Path, commands: list[str], timeout: float = 10.0) -> str:
    """Each command's answer from a QEMU's QMP socket, or why there was none (a QEMU whose main loop is stuck)."""
    lines = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            stream = sock.makefile("rwb")
            stream.readline()  # the greeting
            for command in ["qmp_capabilities", *commands]:
                stream.write(json.dumps({"execute": command}).encode() + b"\n")
                stream.flush()
                while b'"event"' in (answer := stream.readline()):
                    pass
                lines.append(f"QMP {command}: {answer.decode(errors='replace').strip() or '(closed)'}")
    except OSError as exc:
        lines.append(f"QMP: no answer ({exc})")
    return "\n".join(lines)


def _end(child: Child) -> None:
    """Stop one L1's QEMU at once (the supervisor ends the rest when the module ends)."""
    if child.popen.poll() is None:
        child.popen.kill()
        child.popen.wait()
