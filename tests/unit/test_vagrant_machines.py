"""The Vagrant rig of a scenario cell: machines, cables, provisioning scripts, and what it refuses."""

import json
import os
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from niclab.base.paths import SOURCE_ROOT
from niclab.model.scenario import parse
from niclab.plumbing import netconf
from niclab.plumbing.backends.qemu_cmd import mac_address
from niclab.plumbing.image import Image
from niclab.plumbing.ssh import SshTarget, remote_command
from niclab.ui.vagrant import box, machines, state

TWO_NODE = """\
name: t
nodes: [a, b]
links:
  - between: [a, b]
    nic: ${nic}
    mtu: 4000
    netem: {a: {delay: 20ms}}
matrix:
  nic: [e1000, virtio]
"""


def cell(text: str = TWO_NODE, index: int = 0):
    return parse(text, "t.yaml").cells[index]


def ports_for(c) -> dict[str, int]:
    return {key: 40000 + i for i, key in enumerate(machines.port_keys(c))}


def test_each_cable_end_sends_to_the_port_the_other_end_listens_on():
    c = cell()
    by_name = {m.name: m for m in machines.vagrant_cell(c, "t.yaml", ports_for(c)).machines}
    a, b = by_name["a"].cables[0], by_name["b"].cables[0]
    assert (a.local_port, a.remote_port) == (b.remote_port, b.local_port)
    assert a.local_port != b.local_port
    assert (a.peer, b.peer) == ("b", "a")


def test_macs_are_the_ones_the_qemu_backend_gives_so_netconf_finds_the_ports():
    c = cell()
    both = machines.vagrant_cell(c, "t.yaml", ports_for(c)).machines
    assert [m.cables[0].mac for m in both] == [mac_address(0, 0, 0), mac_address(1, 0, 0)]


def test_model_names_become_libvirt_models_and_a_full_os_gets_enough_memory():
    e1000 = machines.vagrant_cell(cell(), "t.yaml", ports_for(cell())).machines[0]
    virtio = machines.vagrant_cell(cell(index=1), "t.yaml", ports_for(cell(index=1))).machines[0]
    assert (e1000.nic_model, virtio.nic_model) == ("e1000", "virtio")
    assert e1000.memory_mib >= machines.MIN_MEMORY_MIB


def test_what_vagrant_libvirt_cannot_set_is_noted():
    c = cell(index=1)
    assert machines.vagrant_cell(cell(), "t.yaml", ports_for(cell())).notes == ()
    (note,) = machines.vagrant_cell(c, "t.yaml", ports_for(c)).notes
    assert note.startswith(
        "virtio: vagrant-libvirt cannot set the QEMU properties niclab gives this model (event_idx=off)"
    )


def test_provisioning_runs_niclabs_own_netconf_script():
    c = cell()
    machine = machines.vagrant_cell(c, "t.yaml", ports_for(c)).machines[0]
    scripts = {p.name: p.script for p in machine.provisioners}
    assert list(scripts) == ["niclab-identity", "niclab-netconf", "niclab-motd"]
    net = netconf.plan(c.scenario)
    expected = netconf.node_script(net.on("a"), {("a", 0, 0): mac_address(0, 0, 0)})
    assert expected in scripts["niclab-netconf"]
    assert "netem delay 20ms" in expected  # the same script sets the scenario's netem


def test_node_names_resolve_to_addresses_on_the_test_cable():
    c = cell()
    script = machines.vagrant_cell(c, "t.yaml", ports_for(c)).machines[0].provisioners[0].script
    assert "198.18.0.2 b # niclab" in script
    assert "127.0.1.1 a # niclab" in script
    assert "2001:2:" not in script  # names are IPv4's, as the benchmarks' default is


def test_the_identity_and_motd_scripts_run_in_a_posix_shell(tmp_path):
    c = cell()
    machine = machines.vagrant_cell(c, "t.yaml", ports_for(c)).machines[0]
    for provisioner in machine.provisioners:
        checked = subprocess.run(["sh", "-n"], input=provisioner.script, text=True, capture_output=True)
        assert checked.returncode == 0, (provisioner.name, checked.stderr)
    motd = machine.provisioners[2].script
    assert "link0: e1000 (driver " in motd


def test_the_motd_says_each_link_whole_whatever_its_netem(tmp_path):
    """netem's "loss 1%" once went to printf as its format, which cut the line at the %."""
    c = cell(TWO_NODE.replace("{a: {delay: 20ms}}", "{a: {delay: 20ms, loss: 1%}}"))
    script = machines.vagrant_cell(c, "t.yaml", ports_for(c)).machines[0].provisioners[2].script
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ethtool").write_text("#!/bin/sh\necho 'driver: e1000'\n")
    (bin_dir / "ethtool").chmod(0o755)
    motd = tmp_path / "motd"
    subprocess.run(
        ["sh", "-c", script.replace("/etc/motd", str(motd))],
        check=True,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert (
        "  link0: e1000 (driver e1000) 198.18.0.1/24 2001:2::1/64 mtu 4000, netem delay 20ms loss 1% "
        "-> b 198.18.0.2 2001:2::2\n"
    ) in motd.read_text()


def test_several_nic_models_on_one_machine_are_refused_with_the_reason():
    text = (
        "name: t\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1000\n  - between: [a, b]\n    nic: rtl8139\n"
    )
    c = cell(text)
    with pytest.raises(machines.VagrantCellError, match=r"node a has NICs of several models \(e1000, rtl8139\)"):
        machines.vagrant_cell(c, "t.yaml", ports_for(c))


def test_a_switched_segment_is_refused():
    text = "name: t\nnodes: [a, b, c]\nlinks:\n  - between: [a, b, c]\n    nic: e1000\n"
    c = cell(text)
    with pytest.raises(machines.VagrantCellError, match=r"joins 3 nodes .* through a switch"):
        machines.vagrant_cell(c, "t.yaml", ports_for(c))
    two = cell("name: t\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1000\n    switch: true\n")
    with pytest.raises(machines.VagrantCellError, match=r"^link 0 joins a and b through a switch; a Vagrant rig"):
        machines.vagrant_cell(two, "t.yaml", ports_for(two))


def test_udp_ports_stay_the_same_between_calls_and_differ_between_ends(tmp_path):
    keys = ["a/link0", "b/link0"]
    first = state.udp_ports(tmp_path, keys)
    assert len(set(first.values())) == 2
    assert state.udp_ports(tmp_path, keys) == first
    more = state.udp_ports(tmp_path, [*keys, "a/link1"])
    assert {k: more[k] for k in keys} == first


def test_two_rig_directories_get_different_domain_names(tmp_path):
    assert state.domain_prefix(tmp_path / "one") != state.domain_prefix(tmp_path / "two")


def fake_image(tmp_path: Path) -> Image:
    for name in ("vmlinuz", "initrd.img"):
        (tmp_path / name).write_bytes(b"x")
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(tmp_path / "disk.qcow2"), "3G"], check=True)
    manifest = {"built_at": "2026-11-23T06:30:05Z", "recipe": "debian", "disk": {"size_mib": 3072}}
    return Image("debian", "0123456789abcdef", tmp_path, "root=/dev/vda rw", manifest)


@pytest.mark.skipif(shutil.which("qemu-img") is None, reason="qemu-img is not installed (make setup installs it)")
def test_the_box_holds_disk_kernel_initrd_metadata_and_its_vagrantfile(tmp_path):
    image = fake_image(tmp_path)
    out = tmp_path / "debian.box"
    box.pack(image, out)
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == sorted(
            ["metadata.json", "niclab-image.json", "Vagrantfile", "vmlinuz", "initrd.img", "box.img"]
        )
        metadata = json.loads(tar.extractfile("metadata.json").read())
        info = json.loads(tar.extractfile("niclab-image.json").read())
    assert metadata == {"provider": "libvirt", "format": "qcow2", "virtual_size": 3}
    assert info["cmdline"] == "root=/dev/vda rw" and info["image"] == image.id
    assert box.box_version(image) == "2026.1123.63005"


def test_the_first_directory_others_cannot_enter_is_named():
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        top = Path(scratch)
        top.chmod(0o755)
        inner = top / "home" / "user" / "box"
        inner.mkdir(parents=True)
        (top / "home").chmod(0o755)
        assert box.unreachable_by_others(inner) is None
        (top / "home" / "user").chmod(0o700)
        assert box.unreachable_by_others(inner) == top / "home" / "user"


@pytest.mark.skipif(shutil.which("ruby") is None, reason="ruby comes with vagrant (make vagrant installs it)")
def test_the_vagrantfiles_are_valid_ruby():
    for path in (SOURCE_ROOT / "Vagrantfile", SOURCE_ROOT / "vagrant" / "box" / "Vagrantfile"):
        checked = subprocess.run(["ruby", "-c", str(path)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr


def test_ssh_commands_run_as_root_and_keep_their_words():
    remote = remote_command(("/bin/sh", "-c", "echo 'a b' \"$HOME\""))
    assert shlex.split(remote) == ["sudo", "-n", "/bin/sh", "-c", "echo 'a b' \"$HOME\""]
    argv = SshTarget("192.0.2.7", 2222, "vagrant", "/k").argv(remote)
    assert argv[0] == "ssh" and argv[-2:] == ["vagrant@192.0.2.7", remote]
    assert "BatchMode=yes" in argv and ["-p", "2222"] == argv[argv.index("-p") : argv.index("-p") + 2]
