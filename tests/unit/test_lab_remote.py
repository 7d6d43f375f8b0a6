"""Lab hosts reached over OpenSSH (niclab.plumbing.lab.remote, snapshot, remote_lease, hosts), through the fake
`ssh` of tests/unit/fakessh.py: the commands as ssh gets them, the sysfs snapshot, the doctor, and leases."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from niclab.base.errors import NiclabError
from niclab.base.procs import stop
from niclab.plumbing.lab import remote_lease, snapshot
from niclab.plumbing.lab.lease import Holder
from niclab.plumbing.lab.remote import HostShell, SshTarget, ssh_target
from niclab.plumbing.lab.remote_lease import list_leases
from niclab.plumbing.lab.remote_lease import remote_lease as lease_there
from niclab.plumbing.lab.snapshot import HostSnapshot, SnapshotError, read_snapshot
from niclab.ui.cli import main as cli
from tests.helpers import fake_lab_image
from tests.unit import fakessh
from tests.unit.fakesysfs import FakeSysfs

NIC = "0000:03:00.0"
RIG2 = "qemu+ssh://root@rig2/system"
KEY = f"rig2.{NIC}"


@pytest.fixture
def log(tmp_path, monkeypatch):
    return fakessh.use(monkeypatch, tmp_path)


def rig(tmp_path, host: str = "rig2") -> FakeSysfs:
    root = fakessh.host_root(tmp_path, host)
    fakessh.quiet_ip(root)
    fake = FakeSysfs(root)
    fake.add_iommu("dmar0", intel_ecap=0xF020DF)
    fake.add_driver("vfio-pci")
    fake.add_device(NIC, group=7, netdevs=["enp3s0"])
    fake.add_interface("enp3s0", NIC)
    return fake


@pytest.mark.parametrize(
    ("uri", "target"),
    [
        ("qemu:///system", None),
        ("qemu+unix:///system", None),
        (RIG2, SshTarget("rig2", "root")),
        ("qemu+ssh://l1a/system", SshTarget("l1a")),  # an alias of ~/.ssh/config: passed on as written
        ("qemu+ssh://root@127.0.0.1:2222/system", SshTarget("127.0.0.1", "root", 2222)),
        ("qemu+ssh://root@[fd00::2]:22/system", SshTarget("fd00::2", "root", 22)),
        (
            "qemu+ssh://rig2/system?keyfile=/root/.ssh/lab&no_verify=1",
            SshTarget("rig2", None, None, "/root/.ssh/lab", True),
        ),
        ("qemu+tls://admin@rig3:16514/system", SshTarget("rig3", "admin")),  # sshd's port, not libvirt's TLS one
    ],
)
def test_a_uri_becomes_the_ssh_target_libvirts_ssh_transport_would_use(uri, target):
    assert ssh_target(uri) == target


def test_commands_go_through_the_ssh_on_path_with_one_master_and_quoted_arguments(tmp_path, log):
    rig(tmp_path)
    hostile = ["$(touch pwned)", "a b;c", "'\"", "-oProxyCommand=x"]
    with HostShell("rig2", "qemu+ssh://root@rig2:2222/system?keyfile=/k/id&no_verify=1") as shell:
        assert shell.runner(["printf", "%s|", *hostile]) == "|".join(hostile) + "|"
    assert not (tmp_path / "pwned").exists() and not list(tmp_path.rglob("pwned"))
    run, close = fakessh.calls(log)
    options = run[: run.index("--")]
    assert run[run.index("--") + 1] == "rig2"
    for pair in (["-p", "2222"], ["-l", "root"], ["-i", "/k/id"], ["-o", "StrictHostKeyChecking=no"]):
        assert any(options[i : i + 2] == pair for i in range(len(options)))
    control = next(o.partition("=")[2] for o in options if o.startswith("ControlPath="))
    assert control.endswith("/%C")  # in a 0700 directory: the fake ssh checked it when it ran
    assert "ControlMaster=auto" in options and "BatchMode=yes" in options
    assert close[close.index("-O") + 1] == "exit" and close[-1] == "rig2"  # the master ended on leaving


def test_two_shells_to_one_host_never_share_a_master(tmp_path, log):
    """Ending one shell's master (`-O exit`) must not end another's sessions: a lease held on the host."""
    rig(tmp_path)
    with (
        HostShell("rig2", "qemu+ssh://root@rig2/system") as one,
        HostShell("rig2", "qemu+ssh://root@rig2/system") as two,
    ):
        paths = [next(o for o in shell.argv("true") if o.startswith("ControlPath=")) for shell in (one, two)]
        assert paths[0] != paths[1]
        controls = [Path(path.partition("=")[2]).parent for path in paths]
    assert not any(directory.exists() for directory in controls)  # each removed with its shell


def test_a_local_uri_runs_here_without_ssh(log):
    with HostShell("rig1", "qemu:///system") as shell:
        assert shell.runner(["echo", "here"]) == "here\n"
    assert fakessh.calls(log) == []


def test_the_snapshot_reads_what_sysfs_reads(tmp_path, log):
    fake = rig(tmp_path)
    fake.add_device("0000:01:00.0", vendor=0x144D, device=0xA808, cls=0x010802, driver="nvme", group=9)
    fake.add_disk("nvme0n1", "0000:01:00.0", under="nvme/nvme0")
    fake.add_device("0000:00:1c.0", cls=0x060400, driver="pcieport", group=7)
    with HostShell("rig2", RIG2) as shell:
        snap = read_snapshot(shell)
    local = fake.sysfs()
    for pci in (NIC, "0000:01:00.0", "0000:00:1c.0"):
        for method in ("exists", "driver", "driver_override", "pci_id", "pci_class", "is_bridge", "iommu_group"):
            assert getattr(snap, method)(pci) == getattr(local, method)(pci), (pci, method)
        assert snap.netdevs(pci) == local.netdevs(pci) and snap.blockdevs(pci) == local.blockdevs(pci)
    assert snap.group_devices(7) == local.group_devices(7) == ["0000:00:1c.0", NIC]
    assert snap.netdev_device("enp3s0") == NIC
    assert (snap.iommu_on(), snap.interrupt_remapping(), snap.driver_loaded("vfio-pci")) == (True, True, True)
    assert snap.cmdline() == local.cmdline() and snap.cpu_vendor() == "intel"


HEADER = "niclab-snapshot 1\n"


@pytest.mark.parametrize(
    "body",
    [
        f"pci\t{NIC}\t0x020000\t0x8086\t0x100e\nnet\t{NIC}\t..\n",  # a name that is a path
        f"pci\t{NIC}\t0x020000\t0x8086\t0x100e\nnet\t{NIC}\teth\n0\n",  # a name with a newline
        "netdev\teth0\t/etc/passwd\n",  # a device link out of /sys
        "netdev\teth0\t/sys/devices/../../etc\n",
        "pci\t../../etc\t0x020000\t0x8086\t0x100e\n",
        f"pci\t{NIC}\t0x020000\t0x8086\n",  # a field missing
        "driver\t0000:09:00.0\te1000\n",  # a device never listed
        "mystery\tfact\n",
        f"pci\t{NIC}\t0x020000\t0x8086\t0x100e\nmodalias\t{NIC}\tpci:v00008086\n",  # a modalias cut short
    ],
)
def test_a_hostile_snapshot_is_one_line_naming_the_host(body):
    with pytest.raises(SnapshotError) as refused:
        HostSnapshot("rig2", HEADER + body + "end\n")
    text = str(refused.value)
    assert "\n" not in text and text.startswith("lab host rig2: its sysfs snapshot is refused at line ")


def test_a_symlink_out_of_the_tree_refuses_the_snapshot(tmp_path, log):
    fake = rig(tmp_path)
    (fake.sys / "class" / "net" / "evil").mkdir(parents=True)
    (fake.sys / "class" / "net" / "evil" / "device").symlink_to("/etc")
    with HostShell("rig2", RIG2) as shell, pytest.raises(SnapshotError, match=r"line .*netdev\\tevil\\t/etc"):
        read_snapshot(shell)


def test_a_host_printing_100_mb_is_refused_in_one_line(tmp_path, log):
    root = rig(tmp_path).root
    fakessh.program(root, "uname", "head -c 100000000 /dev/zero | tr '\\0' x\n")
    with HostShell("rig2", RIG2) as shell, pytest.raises(NiclabError) as refused:
        read_snapshot(shell)
    assert str(refused.value) == (
        f"lab host rig2 ({RIG2}): reading its sysfs printed more than 4096 KiB; refused (check what runs there)"
    )


def test_a_host_that_never_answers_times_out_naming_it(tmp_path, log, monkeypatch):
    monkeypatch.setenv("FAKE_SSH_HANG", "rig2")
    monkeypatch.setattr(snapshot, "SNAPSHOT_TIMEOUT_S", 1.0)
    with HostShell("rig2", RIG2) as shell, pytest.raises(NiclabError) as refused:
        read_snapshot(shell)
    assert str(refused.value).startswith(
        f"lab host rig2 ({RIG2}) did not answer: reading its sysfs took longer than 1 s; "
        "check that `ssh -l root rig2 true` works"
    )


def lab_yaml(tmp_path, *hosts: str) -> str:
    path = tmp_path / "lab.yaml"
    names = ", ".join(f'{h}: {{libvirt: "qemu+ssh://root@{h}/system"}}' for h in hosts)
    cards = "".join(f'  - {{id: {h}-nic, host: {h}, pci: "{NIC}", model: e1000}}\n' for h in hosts)
    path.write_text(f"name: two\nhosts: {{{names}}}\ncards:\n{cards}")
    return str(path)


def test_the_doctor_checks_every_remote_host_and_names_the_one_that_does_not_answer(tmp_path, log, capsys, monkeypatch):
    rig(tmp_path, "rig2")
    fakessh.program(fakessh.host_root(tmp_path, "rig2"), "virsh", "echo 9.0.0\n")
    rig(tmp_path, "rig3")
    monkeypatch.setenv("FAKE_SSH_DEAD", "rig3")
    # the guest drivers are checked against a lab image, this test's, never whatever the user's cache holds
    monkeypatch.setenv("NICLAB_LAB_IMAGE", str(fake_lab_image(tmp_path / "lab-image", {"8086:100e": "e1000"})))
    status = cli.main(["lab", "doctor", "--lab", lab_yaml(tmp_path, "rig2", "rig3")])
    out = capsys.readouterr().out
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert status == 1
    assert lines[0] == f"host rig2 ({RIG2})"
    assert "ok libvirt libvirt 9.0.0" in lines and "ok iommu on" in lines
    start = lines.index(f"card rig2-nic ({NIC}, e1000) on rig2")
    block = [line for line in lines[start:] if not line.startswith("lab host rig3")]
    assert "ok host use enp3s0: no address or route" in block and not [x for x in block if "not checked" in x]
    [dead] = [line for line in lines if "rig3" in line]
    assert dead.startswith("lab host rig3 (qemu+ssh://root@rig3/system) does not answer over ssh: ssh: connect to")
    assert dead.endswith("its cards were not checked")


def take(shell: HostShell, run: str) -> subprocess.Popen[bytes] | Holder | None:
    record = Holder(run=run, user="u", pid=os.getpid(), start=None, since=0.0, at="controller-a/pid:[1]")
    proc, other = remote_lease._try_take(shell, KEY, record)
    return proc if proc is not None else other


def test_a_lease_is_held_on_the_cards_host_and_ends_with_its_ssh(tmp_path, log):
    rig(tmp_path)
    with HostShell("rig2", RIG2) as one, HostShell("rig2", RIG2) as two:
        first = take(one, "run-1")
        assert isinstance(first, subprocess.Popen)
        other = take(two, "run-2")
        assert isinstance(other, Holder) and other.run == "run-1" and other.at == "controller-a/pid:[1]"
        assert [(lease.key, lease.holder.run if lease.holder else None) for lease in list_leases(two)] == [
            (KEY, "run-1")
        ]
        stop(first)  # the holder's ssh ends, however it ends: the lease ends with it
        second = take(two, "run-2")
        assert isinstance(second, subprocess.Popen)
        remote_lease._release(second)
        assert list_leases(two) == []


def test_a_held_card_is_refused_naming_the_remote_holder(tmp_path, log):
    rig(tmp_path)
    with HostShell("rig2", RIG2) as one, HostShell("rig2", RIG2) as two:
        with lease_there(one, KEY, "run-1", card="far0"):
            with pytest.raises(NiclabError) as refused, lease_there(two, KEY, "run-2", card="far0"):
                pytest.fail("two holders")
    assert str(refused.value).startswith(f"card far0 ({KEY}) is leased to run run-1 (user ")
    assert str(refused.value).endswith(", on rig2; wait for it with --wait, or end that run")


@pytest.mark.parametrize("unsafe", ["symlink", "writable"])
def test_a_lease_directory_that_is_not_safe_is_refused(tmp_path, log, unsafe):
    root = rig(tmp_path).root
    state = root / "var/lib/niclab"
    if unsafe == "symlink":
        (tmp_path / "elsewhere").mkdir()
        state.symlink_to(tmp_path / "elsewhere")
    else:
        state.mkdir()
        state.chmod(0o777)
    with HostShell("rig2", RIG2) as shell, pytest.raises(NiclabError) as refused:
        take(shell, "run-1")
    assert str(refused.value).startswith(f"lab host rig2: cannot lease card {KEY} there: ")
    assert ("is a symbolic link" if unsafe == "symlink" else "is writable by others") in str(refused.value)
    assert not list(tmp_path.rglob("*.lock"))


def test_lab_leases_lists_each_hosts_leases(tmp_path, log, capsys, monkeypatch):
    rig(tmp_path, "rig2")
    monkeypatch.setenv("FAKE_SSH_DEAD", "rig3")
    with HostShell("rig2", RIG2) as shell, lease_there(shell, KEY, "run-7"):
        status = cli.main(["lab", "leases", "--lab", lab_yaml(tmp_path, "rig2", "rig3")])
    lines = capsys.readouterr().out.splitlines()
    assert status == 1
    assert lines[0] == f"host rig2 ({RIG2}): 1 card(s) leased"
    assert lines[1].startswith(f"  {KEY}: run run-7 (user ")
    assert lines[2].startswith("lab host rig3 (qemu+ssh://root@rig3/system) does not answer over ssh: ")
    assert lines[2].endswith(": its leases were not listed")


def doctor_lines(tmp_path, capsys, monkeypatch, *hosts: str) -> tuple[int, list[str]]:
    for host in hosts:
        fakessh.program(fakessh.host_root(tmp_path, host), "virsh", "echo 9.0.0\n")
    monkeypatch.setenv("NICLAB_LAB_IMAGE", str(fake_lab_image(tmp_path / "lab-image", {"8086:100e": "e1000"})))
    status = cli.main(["lab", "doctor", "--lab", lab_yaml(tmp_path, *hosts)])
    captured = capsys.readouterr()
    return status, [" ".join(line.split()) for line in (captured.out + captured.err).splitlines()]


def test_ip_json_nested_100000_deep_is_one_line_for_its_host_and_the_others_are_checked(
    tmp_path, log, capsys, monkeypatch
):
    rig(tmp_path, "rig2")
    fakessh.program(fakessh.host_root(tmp_path, "rig2"), "ip", "printf '%100000s' '' | tr ' ' '['\n")
    rig(tmp_path, "rig3")
    status, lines = doctor_lines(tmp_path, capsys, monkeypatch, "rig2", "rig3")
    assert status == 1 and not [line for line in lines if "bug in niclab" in line or "Traceback" in line]
    assert (
        "lab host rig2: ip -j addr printed JSON nested more than the 64 levels niclab reads: its cards were not "
        "checked" in lines
    )
    start = lines.index(f"card rig3-nic ({NIC}, e1000) on rig3")
    assert "ok host use enp3s0: no address or route" in lines[start:]  # rig3 is checked as ever


def test_a_vlan_chain_of_3200_links_is_read_in_linear_time(tmp_path, log, capsys, monkeypatch):
    """800 VLANs took `lab doctor` 6-12 s (each interface's uppers rescanned every link): 3,200 would take
    minutes. Read once and walked with indexes, they take well under a second here."""
    chain = [{"ifname": "enp3s0", "addr_info": []}] + [
        {"ifname": f"v{i}", "link": "enp3s0" if i == 0 else f"v{i - 1}", "addr_info": []} for i in range(3200)
    ]
    chain[-1]["addr_info"] = [{"local": "192.0.2.9", "prefixlen": 24}]
    rig(tmp_path, "rig2")
    (fakessh.host_root(tmp_path, "rig2") / "addr.json").write_text(json.dumps(chain))
    here = fakessh.host_root(tmp_path, "rig2")
    fakessh.program(here, "ip", f'case "$*" in *addr*) cat {here}/addr.json ;; *) echo "[]" ;; esac\n')
    started = time.monotonic()
    _, lines = doctor_lines(tmp_path, capsys, monkeypatch, "rig2")
    assert time.monotonic() - started < 5  # mostly the fake ssh's own start-ups
    assert "FAIL host use in use by the host: enp3s0 carries 192.0.2.9/24 (via v3199)" in lines


def test_escape_sequences_in_a_hosts_addresses_and_routes_are_shown_escaped(tmp_path, log, capsys, monkeypatch):
    hostile = "\x1b[2J\x1b[H\x1b[32mok everything fine"
    links = [{"ifname": "enp3s0", "addr_info": [{"local": f"192.0.2.9{hostile}", "prefixlen": 24}]}]
    routes = [{"dst": f"198.51.100.0/24{hostile}", "dev": "enp3s0", "table": f"t{hostile}"}]
    here = fakessh.host_root(tmp_path, "rig2")
    rig(tmp_path, "rig2")
    (here / "addr.json").write_text(json.dumps(links))
    (here / "route.json").write_text(json.dumps(routes))
    fakessh.program(here, "ip", f'case "$*" in *addr*) cat {here}/addr.json ;; *-6*) echo "[]" ;; '
                    f'*) cat {here}/route.json ;; esac\n')  # fmt: skip
    _, lines = doctor_lines(tmp_path, capsys, monkeypatch, "rig2")
    [use] = [line for line in lines if line.startswith("FAIL host use")]
    assert "\\x1b[2J\\x1b[H\\x1b[32mok everything fine" in use and "\x1b" not in "".join(lines)


@pytest.mark.parametrize("kind", ["iommu units and their ecaps", "interfaces of one card"])
def test_a_snapshot_of_50000_lines_of_one_kind_is_read_in_linear_time(kind):
    """20,000 `iommu` + `ecap` lines, or 20,000 `net` + `netdev` lines, took 10.5 s and 12 s (a list scanned per
    line); with indexes, 50,000 of each take about 0.2 s here (about 9 s and 16 s before)."""
    if kind.startswith("iommu"):
        body = "".join(f"iommu\tdmar{i}\n" for i in range(50_000)) + "".join(
            f"ecap\tdmar{i}\t0xf020df\n" for i in range(50_000)
        )
    else:
        body = f"pci\t{NIC}\t0x020000\t0x8086\t0x100e\n" + "".join(f"net\t{NIC}\teth{i}\n" for i in range(50_000))
        body += "".join(
            f"netdev\teth{i}\t/sys/devices/pci0000:00/0000:00:1c.0/{NIC}/net/eth{i}\n" for i in range(50_000)
        )
    started = time.process_time()
    snap = HostSnapshot("rig2", HEADER + body + "end\n")
    found = snap.netdevs(NIC) if kind.startswith("interfaces") else snap.interrupt_remapping()
    assert time.process_time() - started < 2
    assert found is True or len(found) == 50_000
