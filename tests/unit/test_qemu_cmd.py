import dataclasses

import pytest

from niclab.model import nics
from niclab.model.topology import NodeSpec, Port
from niclab.plumbing.backends.qemu import qemu_firmware
from niclab.plumbing.backends.qemu_cmd import NicPlan, VmPlan, mac_address, qemu_argv


def plan(accel="tcg", models=("e1000",)):
    ports = tuple(Port("a", i, 0, m, f"link{i}") for i, m in enumerate(models))
    node = NodeSpec("a", 0, 2, 512, ports)
    return VmPlan(
        node=node,
        accel=accel,
        kernel="/img/vmlinuz",
        initrd="/img/initrd.img",
        cmdline="console=ttyS0",
        nics=tuple(
            NicPlan(p, nics.get(p.model), mac_address(0, p.link, 0), f"dgram,local.type=fd,local.str={10 + p.link}")
            for p in ports
        ),
        serial_log="a.serial.log",
        qmp_socket="a.qmp",
        agent_socket="a.qga",
    )


def option_values(argv, flag):
    return [argv[i + 1] for i, word in enumerate(argv) if word == flag]


def test_machine_cpu_memory_and_boot():
    argv = qemu_argv("/usr/bin/qemu-system-x86_64", plan())
    assert argv[0] == "/usr/bin/qemu-system-x86_64"
    assert option_values(argv, "-machine") == ["pc,accel=tcg"]
    assert option_values(argv, "-cpu") == ["max"]
    assert option_values(argv, "-smp") == ["2"]
    assert option_values(argv, "-m") == ["512M"]
    assert option_values(argv, "-append") == ["console=ttyS0 niclab.node=a"]
    assert "-nodefaults" in argv and "-no-reboot" in argv


def test_kvm_uses_the_host_cpu():
    argv = qemu_argv("qemu", plan(accel="kvm"))
    assert option_values(argv, "-machine") == ["pc,accel=kvm"]
    assert option_values(argv, "-cpu") == ["host"]


def test_control_sockets_and_agent_port():
    argv = qemu_argv("qemu", plan())
    assert option_values(argv, "-qmp") == ["unix:a.qmp,server=on,wait=off"]
    assert "socket,id=qga0,path=a.qga,server=on,wait=off" in option_values(argv, "-chardev")
    assert "virtserialport,bus=vser0.0,chardev=qga0,name=org.qemu.guest_agent.0" in option_values(argv, "-device")


def test_one_device_and_netdev_per_port_in_slot_order():
    argv = qemu_argv("qemu", plan(models=("e1000", "rtl8139", "virtio")))
    netdevs = option_values(argv, "-netdev")
    assert netdevs == [
        "dgram,local.type=fd,local.str=10,id=net0l0",
        "dgram,local.type=fd,local.str=11,id=net1l0",
        "dgram,local.type=fd,local.str=12,id=net2l0",
    ]
    devices = [d for d in option_values(argv, "-device") if "netdev=" in d]
    assert devices == [
        "e1000,netdev=net0l0,mac=02:4e:4c:00:00:00,bus=pci.0,addr=0x3,autonegotiation=off",  # link up at once
        "rtl8139,netdev=net1l0,mac=02:4e:4c:00:01:00,bus=pci.0,addr=0x4",
        "virtio-net-pci,netdev=net2l0,mac=02:4e:4c:00:02:00,bus=pci.0,addr=0x5,event_idx=off",
    ]


def test_the_serial_line_is_a_socket_to_attach_to_and_a_log_all_the_same():
    argv = qemu_argv("qemu", dataclasses.replace(plan(), serial_socket="a.serial"))
    assert "socket,id=serial0,path=a.serial,server=on,wait=off,logfile=a.serial.log" in option_values(argv, "-chardev")
    assert option_values(argv, "-serial") == ["chardev:serial0"]
    # a guest being saved has no console to attach to: its serial line is its log
    assert "file,id=serial0,path=a.serial.log" in option_values(qemu_argv("qemu", plan()), "-chardev")


def test_mac_is_locally_administered_and_unique_per_port():
    macs = {mac_address(n, link, lane) for n in range(3) for link in range(3) for lane in range(3)}
    assert len(macs) == 27
    assert all(int(mac.split(":")[0], 16) & 0x02 for mac in macs)
    with pytest.raises(ValueError):
        mac_address(256, 0, 0)


def test_agent_port_has_its_own_slot_and_nics_are_limited_to_free_slots():
    argv = qemu_argv("qemu", plan())
    assert "virtio-serial-pci,id=vser0,bus=pci.0,addr=0x2" in option_values(argv, "-device")
    with pytest.raises(ValueError, match="PCI slots for 29"):
        qemu_argv("qemu", plan(models=("e1000",) * 30))


def test_firmware_is_qemus_default_unless_the_plan_names_one():
    assert "-bios" not in qemu_argv("qemu", plan())
    argv = qemu_argv("qemu", dataclasses.replace(plan(), firmware="/usr/share/qemu/qboot.rom"))
    assert option_values(argv, "-bios") == ["/usr/share/qemu/qboot.rom"]


def fake_qemu(tmp_path, data_dirs):
    binary = tmp_path / "qemu-system-x86_64"
    binary.write_text("#!/bin/sh\n" + "".join(f"echo {d}\n" for d in data_dirs))
    binary.chmod(0o755)
    return str(binary)


def test_qboot_is_found_in_qemus_data_directories(tmp_path, monkeypatch):
    monkeypatch.delenv("NICLAB_QBOOT", raising=False)
    (tmp_path / "seabios").mkdir()
    (tmp_path / "qemu").mkdir()
    (tmp_path / "qemu" / "qboot.rom").write_bytes(b"\0")
    binary = fake_qemu(tmp_path, [tmp_path / "seabios", tmp_path / "qemu"])
    assert qemu_firmware(binary) == str(tmp_path / "qemu" / "qboot.rom")
    monkeypatch.setenv("NICLAB_QBOOT", "0")
    assert qemu_firmware(binary) is None


def test_without_qboot_qemu_keeps_its_default_firmware(tmp_path, monkeypatch):
    monkeypatch.delenv("NICLAB_QBOOT", raising=False)
    assert qemu_firmware(fake_qemu(tmp_path, [tmp_path])) is None
    assert qemu_firmware(str(tmp_path / "no-such-qemu")) is None


def test_two_nodes_through_a_switch_get_a_vde_switch_and_a_cable_a_socket_pair():
    from niclab.model.scenario import parse
    from niclab.plumbing.backends import get_backend

    text = (
        "name: t\nnodes: [a, b]\nlinks:\n"
        "  - {between: [a, b], nic: e1000, switch: true}\n"
        "  - {between: [a, b], nic: e1000}\n"
    )
    topology = parse(text, "t.yaml").cells[0].scenario.topology()
    assert [(wire.switch, wire.switched) for wire in topology.wires] == [(True, True), (False, False)]
    assert get_backend("qemu").describe(topology) == [
        "vde_switch: a/link0 (e1000) <-> b/link0 (e1000)",
        "UDP cable on 127.0.0.1: a/link1 (e1000) <-> b/link1 (e1000)",
    ]
