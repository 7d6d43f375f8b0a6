"""libvirtd, virtlogd and Vagrant inside a network namespace the test makes.

vagrant-libvirt's management network is a NAT bridge with an address; in the
namespace it never appears in the host's own network. The daemons are the
test's children (started in the foreground, ended by PID), and what they
defined for the test (storage pools, box volumes) is removed again at the end.

libvirtd keeps its definitions (domains, networks, pools) and their volumes
in /etc/libvirt and /var/lib/libvirt, and what runs in /run/libvirt/qemu,
/run/libvirt/network and so on. The test's libvirtd gets empty ones of its
own, mounted over those in a private mount namespace: what an earlier,
killed test run left there (a Vagrant rig's persistent domains and disks) or
what the host's own libvirt defines is neither seen nor started, and nothing
the test defines outlives it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

URI = "qemu:///system"


def virsh(*args: str, check: bool = True) -> str:
    return subprocess.run(["virsh", "-c", URI, "-q", *args], capture_output=True, text=True, check=check).stdout


def answers() -> bool:
    return subprocess.run(["virsh", "-c", URI, "uri"], capture_output=True).returncode == 0


def names(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if line.strip()}


def volumes(pool: str) -> set[str]:
    """The volume names of a pool (this virsh's vol-list has no --name)."""
    return {line.split()[0] for line in virsh("vol-list", pool, check=False).splitlines() if line.strip()}


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def host_links() -> set[str]:
    """The network devices of the host's own namespace."""
    listing = subprocess.run(["ip", "-br", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in listing.splitlines() if line.strip()}


@dataclass
class IsolatedLibvirt:
    netns: str
    libvirtd_pid: int
    logs: Path

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside the namespace (where the management network is)."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def qemus(self) -> list[int]:
        """QEMU processes libvirtd started (its children)."""
        return [p for p in children(self.libvirtd_pid) if b"qemu" in Path(f"/proc/{p}/comm").read_bytes()]


def why_not(programs: tuple[str, ...] = ("libvirtd", "virtlogd", "virsh", "vagrant", "ip")) -> str | None:
    """Why this host cannot run the isolated libvirtd, or None."""
    if os.geteuid() != 0:
        return "a network namespace and qemu:///system need root"
    for program in programs:
        if shutil.which(program) is None:
            return f"{program} is not installed (make test installs it: scripts/setup-host --test)"
    if answers():
        return (
            "a libvirtd the tests did not start is running; the test would put its networks (vagrant-libvirt's "
            "management network) into that daemon's namespace, which may be the host's"
        )
    return None


def end_daemon(proc: subprocess.Popen, seconds: float = 20) -> None:
    """SIGTERM a daemon the test started, and SIGKILL it if it has not ended within `seconds`."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def private_state(root: Path) -> dict[str, Path]:
    """Directories for libvirtd's /etc/libvirt and /var/lib/libvirt: the host's daemon and driver settings
    (*.conf) and the filters the package ships, the directory skeleton with its owners and modes, and none
    of the host's definitions or volumes. Also for the drivers' run-time state under /run/libvirt (not its
    sockets, which virsh must reach): a libvirtd takes each domain status file there for a QEMU of its own
    and, where the QEMU is gone, kills whatever process has its PID now (seen here: a `sleep` of the
    test's); a killed earlier run's files, or the host daemon's, must not be read, nor ours left behind."""
    dirs = {"/etc/libvirt": root / "etc", "/var/lib/libvirt": root / "lib"}
    run = Path("/run/libvirt")
    if run.is_dir():
        dirs |= {str(d): root / "run" / d.name for d in sorted(run.iterdir()) if d.is_dir() and not d.is_symlink()}
    for target, source in dirs.items():
        _skeleton(Path(target), source)
    etc = dirs["/etc/libvirt"]
    for conf in Path("/etc/libvirt").glob("*.conf"):
        shutil.copy2(conf, etc / conf.name)
    if Path("/etc/libvirt/nwfilter").is_dir():
        shutil.copytree("/etc/libvirt/nwfilter", etc / "nwfilter", dirs_exist_ok=True)
    return dirs


def _skeleton(host: Path, copy: Path) -> None:
    """`host`'s directories (not its files) under `copy`, each with its owner and mode: libvirt's QEMU user
    must reach its disks and sockets there as it does in the host's."""
    for path in [host, *sorted(p for p in host.rglob("*") if p.is_dir() and not p.is_symlink())]:
        mirror = copy / path.relative_to(host)
        mirror.mkdir(parents=True, exist_ok=True)
        info = path.stat()
        os.chown(mirror, info.st_uid, info.st_gid)
        mirror.chmod(stat.S_IMODE(info.st_mode))


def daemon_argv(netns: str, daemon: str, hide_kvm: bool, no_kvm: Path, state: dict[str, Path]) -> list[str]:
    """The daemon in the namespace; libvirtd in a private mount namespace of its own, where `state`'s
    directories are mounted over libvirt's. Where KVM is broken, libvirtd must not see /dev/kvm either: its
    own probe of QEMU's capabilities (`-machine none,accel=kvm:tcg`) then hangs, and every domain definition
    waits on it for minutes. A null device of our own over /dev/kvm makes that probe fail at once. Not
    /dev/null itself: with it, libvirtd probed QEMU again before every domain (25-50 s each;
    docs/vagrant.md)."""
    argv = ["ip", "netns", "exec", netns]
    if daemon != "libvirtd":
        return [*argv, daemon]
    mounts = [(source, Path(target)) for target, source in state.items()]
    if hide_kvm and Path("/dev/kvm").exists():
        if not no_kvm.exists():
            os.mknod(no_kvm, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        mounts.append((no_kvm, Path("/dev/kvm")))
    binds = " && ".join(f"mount --bind {shlex.quote(str(s))} {shlex.quote(str(t))}" for s, t in mounts)
    # unshare and sh exec: the PID stays the daemon's own.
    return [*argv, "unshare", "--mount", "--propagation", "private", "sh", "-c", f"{binds} && exec libvirtd"]


@contextmanager
def isolated_libvirt(logs: Path, hide_kvm: bool) -> Iterator[IsolatedLibvirt]:
    netns = f"niclab-test-{os.getpid()}"
    logs.mkdir(parents=True, exist_ok=True)
    state = private_state(logs / "state")
    subprocess.run(["ip", "netns", "add", netns], check=True)
    daemons: list[subprocess.Popen] = []
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        for daemon in ("virtlogd", "libvirtd"):
            with open(logs / f"{daemon}.log", "w") as log:
                # ip netns exec execs the daemon: the PID is the daemon's own.
                daemons.append(
                    subprocess.Popen(
                        daemon_argv(netns, daemon, hide_kvm, logs / "no-kvm", state),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        deadline = time.monotonic() + 30
        while not answers():
            if time.monotonic() > deadline or daemons[-1].poll() is not None:
                raise RuntimeError(f"libvirtd did not answer on {URI}; see {logs}/libvirtd.log")
            time.sleep(0.3)
        try:
            yield IsolatedLibvirt(netns, daemons[-1].pid, logs)
        finally:
            # What runs is stopped: each domain's QEMU, each network's dnsmasq. The definitions, pools and
            # volumes are all in `state`, removed with it below.
            for domain in names(virsh("list", "--name")):
                virsh("destroy", domain, check=False)
            for network in names(virsh("net-list", "--name")):
                virsh("net-destroy", network, check=False)
    finally:
        for proc in reversed(daemons):
            end_daemon(proc)
        subprocess.run(["ip", "netns", "delete", netns], check=False)
        shutil.rmtree(logs / "state", ignore_errors=True)  # the volumes (box copies, images) go with it
