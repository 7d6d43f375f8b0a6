"""Driver knobs and module parameters in netconf: the scripts that set and read them, and the comparisons."""

import dataclasses

from niclab.model.knobs import COALESCE, QUEUES, Shown, parse_show
from niclab.model.scenario import parse
from niclab.plumbing import netconf
from niclab.plumbing.netconf import params, verify
from niclab.plumbing.netconf.script import knobs_script, port_knobs
from tests.unit.ethtool_samples import E1000_COALESCE, E1000_RINGS, RX_USECS_ONLY_COALESCE, VIRTIO_QUEUES

TOPOLOGY = """\
name: t
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000-82545em
    coalesce: {rx-usecs: 100}
    rings: {a: {rx: 512, tx: 1024}}
  - between: [a, b]
    nic: virtio
    count: 2
    queues: {b: {combined: 2}}
  - between: [a, b]
    nic: rtl8139
"""


def plan():
    return netconf.plan(parse(TOPOLOGY, "t.yaml").cells[0].scenario)


def macs_of(ifaces):
    return {p.key: f"02:4e:4c:00:{p.link:02x}:{p.lane:02x}" for i in ifaces for p in i.ports}


# port_knobs and the configuration script


def test_a_ports_knobs_by_kind_with_their_values_typed():
    net = plan()
    assert port_knobs(net.find("a", 0).ports[0]) == {"coalesce": {"rx-usecs": 100}, "rings": {"rx": 512, "tx": 1024}}
    assert port_knobs(net.find("b", 0).ports[0]) == {"coalesce": {"rx-usecs": 100}}  # rings were a's only
    assert port_knobs(net.find("b", 1, 1).ports[0]) == {"queues": {"combined": 2}}  # every lane of the link
    assert port_knobs(net.find("a", 1, 1).ports[0]) == {}
    assert port_knobs(net.find("a", 2).ports[0]) == {}


def test_port_knobs_reads_on_and_off_words_as_switches():
    port = plan().find("a", 2).ports[0]
    port = dataclasses.replace(port, knobs=(("coalesce", "adaptive-rx", "on"), ("coalesce", "tx-usecs", "0")))
    assert port_knobs(port) == {"coalesce": {"adaptive-rx": True, "tx-usecs": 0}}


def _set_lines(lines: list[str]) -> list[str]:
    """The ethtool set commands of a script, without what each does when the driver refuses."""
    return [line.split(" || ")[0] for line in lines if line.startswith("ethtool -")]


def test_the_node_script_sets_each_ports_knobs_after_its_mtu_and_before_addresses():
    net = plan()
    lines = netconf.node_script(net.on("a"), macs_of(net.on("a"))).splitlines()
    coalesce = next(i for i, line in enumerate(lines) if line.startswith("ethtool -C link0 rx-usecs 100 || "))
    assert lines[coalesce].endswith("{ echo 'link0: the e1000 driver refused ethtool -C rx-usecs 100' >&2; exit 1; }")
    rings = next(i for i, line in enumerate(lines) if line.startswith("ethtool -G link0 rx 512 tx 1024 || "))
    mtu = next(i for i, line in enumerate(lines) if "link set dev link0 mtu 1500" in line)  # batched for `ip`
    assert "ip_flush" in lines[mtu:coalesce]  # the batch has run when ethtool finds link0 by its name
    assert rings < next(i for i, line in enumerate(lines) if "addr add 198.18.0.1/24 dev link0" in line)
    # Nothing for a port without knobs; no -L on a (the queues are b's).
    assert _set_lines(lines) == ["ethtool -C link0 rx-usecs 100", "ethtool -G link0 rx 512 tx 1024"]
    b_lines = netconf.node_script(net.on("b"), macs_of(net.on("b"))).splitlines()
    assert _set_lines(b_lines) == [
        "ethtool -C link0 rx-usecs 100",
        "ethtool -L link1p0 combined 2",
        "ethtool -L link1p1 combined 2",
    ]


def test_a_knob_the_driver_already_has_at_its_value_is_not_set_again():
    # vmxnet3 shows its channels (ethtool -l) and has no way to set them (-L: Operation not supported):
    # asking for the count it already has must not fail.
    net = plan()
    shown = {
        "link1p0": {"queues": parse_show(QUEUES, VIRTIO_QUEUES.replace("Combined:\t1", "Combined:\t2"))},
        "link1p1": {"queues": parse_show(QUEUES, VIRTIO_QUEUES)},
        "link0": {"coalesce": parse_show(COALESCE, RX_USECS_ONLY_COALESCE)},
    }
    unchanged = verify.knobs_at_value(net.on("b"), shown)
    assert unchanged == {("link1p0", "queues", "combined")}
    lines = netconf.node_script(net.on("b"), macs_of(net.on("b")), unchanged).splitlines()
    assert _set_lines(lines) == ["ethtool -C link0 rx-usecs 100", "ethtool -L link1p1 combined 2"]


def test_knobs_script_asks_each_port_found_by_mac_for_each_kind_under_its_own_section():
    script = knobs_script(
        {"link0": ("02:00:00:00:00:01", ["coalesce", "rings"]), "link1p1": ("02:00:00:00:01:01", ["queues"])}
    )
    lines = script.splitlines()
    assert lines[0].startswith("by_mac() {")
    assert lines[1:] == [
        "echo '[knob link0 coalesce]'; ethtool -c \"$(by_mac 02:00:00:00:00:01)\" 2>&1",
        "echo '[knob link0 rings]'; ethtool -g \"$(by_mac 02:00:00:00:00:01)\" 2>&1",
        "echo '[knob link1p1 queues]'; ethtool -l \"$(by_mac 02:00:00:00:01:01)\" 2>&1",
        "true",  # a driver refusing ethtool -c is an answer: the script does not fail on it
    ]
    assert "set -e" not in script


# read_knobs and the comparisons, before setting and after


def knob_output(**sections: str) -> str:
    """A script's output: '[knob PORT KIND]' headers (PORT__KIND as keyword) each followed by what ethtool printed."""
    return "".join(f"[knob {key.replace('__', ' ')}]\n{text}" for key, text in sections.items())


def test_read_knobs_parses_each_section_by_its_kind_and_skips_other_sections():
    text = "[port link0]\nmtu=1500\n" + knob_output(link0__coalesce=E1000_COALESCE, link0__rings=E1000_RINGS)
    text += "[knob link0 speed]\nwhatever\n[knob link1p0 queues]\n" + VIRTIO_QUEUES
    shown = verify.read_knobs(text)
    assert set(shown) == {"link0", "link1p0"}
    assert set(shown["link0"]) == {"coalesce", "rings"}  # not 'speed', no kind of knob
    assert shown["link0"]["coalesce"].error == "netlink error: Operation not supported"
    assert shown["link0"]["rings"].maximum["rx"] == "4096"
    assert shown["link1p0"]["queues"].current["combined"] == "1"
    assert verify.read_knobs("[port link0]\nmtu=1500\n") == {}


def test_before_setting_what_the_drivers_cannot_take_naming_node_port_and_model():
    net = plan()
    shown = verify.read_knobs(knob_output(link0__coalesce=E1000_COALESCE, link0__rings=E1000_RINGS))
    assert verify.knob_problems("a", net.on("a"), shown, before=True) == [
        "a/link0 (e1000-82545em): the e1000 driver does not support coalesce rx-usecs; it supports no coalesce "
        "setting (ethtool -c: netlink error: Operation not supported)",
    ]
    shown = verify.read_knobs(knob_output(link0__coalesce=RX_USECS_ONLY_COALESCE, link0__rings=E1000_RINGS))
    assert verify.knob_problems("a", net.on("a"), shown, before=True) == []


def test_before_setting_a_maximum_and_a_port_ethtool_printed_nothing_for():
    net = plan()
    small = E1000_RINGS.replace("RX:\t\t4096", "RX:\t\t256", 1)
    shown = verify.read_knobs(knob_output(link0__coalesce=RX_USECS_ONLY_COALESCE, link0__rings=small))
    assert verify.knob_problems("a", net.on("a"), shown, before=True) == [
        "a/link0 (e1000-82545em): rings rx 512 is above the e1000 driver's maximum, 256 (ethtool -g)"
    ]
    problems = verify.knob_problems(
        "b", net.on("b"), verify.read_knobs(knob_output(link1p0__queues=VIRTIO_QUEUES)), True
    )
    assert problems == [
        "b/link0 (e1000-82545em): ethtool -c printed nothing",
        "b/link1p1 (virtio): ethtool -l printed nothing",
    ]


def test_after_setting_what_the_guest_reports_differently_from_what_was_asked():
    net = plan()
    after = RX_USECS_ONLY_COALESCE.replace("rx-usecs: 3", "rx-usecs: 98")  # e1000 rounds: within 2 %
    rings = E1000_RINGS.replace("Current hardware settings:\nRX:\t\t256", "Current hardware settings:\nRX:\t\t512")
    shown = verify.read_knobs(knob_output(link0__coalesce=after, link0__rings=rings))
    assert verify.knob_problems("a", net.on("a"), shown, before=False) == [
        "a/link0 (e1000-82545em): rings tx is 256, asked 1024"
    ]
    # Before setting, the same output is fine: 1024 is within the maximum.
    assert verify.knob_problems("a", net.on("a"), shown, before=True) == []
    unchanged = verify.read_knobs(knob_output(link0__coalesce=RX_USECS_ONLY_COALESCE, link0__rings=rings))
    assert verify.knob_problems("a", net.on("a"), unchanged, before=False) == [
        "a/link0 (e1000-82545em): coalesce rx-usecs is 3, asked 100",
        "a/link0 (e1000-82545em): rings tx is 256, asked 1024",
    ]


def test_knob_readback_keeps_every_value_the_driver_reports_not_only_those_set():
    net = plan()
    shown = verify.read_knobs(knob_output(link0__coalesce=RX_USECS_ONLY_COALESCE, link0__rings=E1000_RINGS))
    assert verify.knob_readback(net.on("a"), shown) == {
        "port link0": {"coalesce": {"rx-usecs": "3"}, "rings": {"rx": "256", "tx": "256"}}
    }
    refused = verify.read_knobs(knob_output(link0__coalesce=E1000_COALESCE))
    assert verify.knob_readback(net.on("a"), refused) == {"port link0": {"coalesce": {}}}
    # A port of another node's shown state is not this node's.
    assert verify.knob_readback(net.on("a"), {"link9": {"rings": Shown({"rx": "1"}, {})}}) == {}


def test_the_state_script_reads_knobs_only_of_ports_that_have_them():
    net = plan()
    script = verify.state_script(net.on("a"))
    knob_lines = [line for line in script.splitlines() if "[knob " in line]
    assert knob_lines == [
        "echo '[knob link0 coalesce]'; ethtool -c link0 2>&1 || true",
        "echo '[knob link0 rings]'; ethtool -g link0 2>&1 || true",
    ]
    # Each after its port's own lines, before the next interface.
    assert script.index("echo '[port link0]'") < script.index("[knob link0 coalesce]") < script.index("[iface link1p0]")
    b_knobs = [line for line in verify.state_script(net.on("b")).splitlines() if "[knob " in line]
    assert b_knobs == [
        "echo '[knob link0 coalesce]'; ethtool -c link0 2>&1 || true",
        "echo '[knob link1p0 queues]'; ethtool -l link1p0 2>&1 || true",
        "echo '[knob link1p1 queues]'; ethtool -l link1p1 2>&1 || true",
    ]
    knobless = "\n".join(line for line in TOPOLOGY.splitlines() if ": {" not in line or "nic" in line)
    assert "rx-usecs" not in knobless and "combined" not in knobless
    plain = netconf.plan(parse(knobless, "t.yaml").cells[0].scenario)
    assert "[knob " not in verify.state_script(plain.on("a"))


def test_parse_state_leaves_the_knob_sections_to_read_knobs():
    text = "[iface link0]\nmtu=1500\ncarrier=1\n[port link0]\nmtu=1500\ndriver=e1000\n"
    # ethtool's lines hold no '=', but the next line could: it must not land in the port's state either.
    text += knob_output(link0__coalesce=RX_USECS_ONLY_COALESCE + "odd=line\n")
    state = verify.parse_state(text)
    assert set(state) == {"iface link0", "port link0"}
    assert state["port link0"] == {"mtu": "1500", "driver": "e1000"}
    assert verify.read_knobs(text)["link0"]["coalesce"].current["rx-usecs"] == "3"


# module parameters: asked on the kernel command line, read back from sysfs or the driver's log


def test_asked_takes_module_parameters_from_the_command_line():
    cmdline = ("e1000.InterruptThrottleRate=8000", "quiet", "console=ttyS0", "virtio_net.napi_tx=1", "a.b=c=d")
    assert params.asked(cmdline) == {
        "e1000.InterruptThrottleRate": "8000",
        "virtio_net.napi_tx": "1",
        "a.b": "c=d",
    }
    assert params.asked(()) == {}
    assert params.asked(("root=/dev/vda1.2",)) == {}  # a dot in the value, not in the name


def test_the_readback_script_reads_sysfs_and_the_drivers_log_for_each_parameter():
    script = params.readback_script({"e1000.InterruptThrottleRate": "8000", "virtio_net.napi_tx": "1"})
    lines = script.splitlines()
    assert len(lines) == 8 and script.endswith("\n")
    assert lines[0] == "echo '[param e1000.InterruptThrottleRate]'"
    assert "/sys/module/e1000/parameters/InterruptThrottleRate" in lines[1] and "sysfs=" in lines[1]
    assert lines[2].startswith("dmesg | grep -E") and "e1000[ :]" in lines[2] and "tail -n 8" in lines[2]
    assert "] ne2k[-_]pci[ :]'" in params.readback_script({"ne2k_pci.debug": "1"})  # logged as ne2k-pci
    assert "sed 's/^/log=/'" in lines[2]
    assert lines[3] == "true"  # a parameter missing from sysfs is no failure of the script
    assert lines[4] == "echo '[param virtio_net.napi_tx]'" and "/sys/module/virtio_net/parameters/napi_tx" in lines[5]
    assert params.readback_script({}) == "\n"


READBACK = """\
[param e1000.InterruptThrottleRate]
log=[    1.234567] e1000: Intel(R) PRO/1000 Network Driver
log=[    1.502311] e1000 0000:00:03.0: Interrupt Throttling Rate (ints/sec) set to 8000
[param virtio_net.napi_tx]
sysfs=Y
[param virtio_net.napi_weight]
sysfs=64
[param virtio_net.csum]
sysfs=N
"""


def test_parse_readback_keeps_sysfs_and_the_log_lines_without_their_time():
    wanted = {
        "e1000.InterruptThrottleRate": "8000",
        "virtio_net.napi_tx": "1",
        "virtio_net.napi_weight": "64",
        "virtio_net.csum": "false",
    }
    found, problems = params.parse_readback(READBACK, wanted)
    assert problems == []
    # Only log lines: no sysfs value to compare, the log is the evidence.
    assert found["e1000.InterruptThrottleRate"] == {
        "asked": "8000",
        "sysfs": None,
        "log": [
            "e1000: Intel(R) PRO/1000 Network Driver",
            "e1000 0000:00:03.0: Interrupt Throttling Rate (ints/sec) set to 8000",
        ],
    }
    assert found["virtio_net.napi_weight"] == {"asked": "64", "sysfs": "64", "log": []}
    assert found["virtio_net.napi_tx"]["sysfs"] == "Y"  # Y reads as 1


def test_parse_readback_names_a_parameter_sysfs_shows_with_another_value():
    text = READBACK.replace("sysfs=64", "sysfs=128")
    wanted = {"virtio_net.napi_weight": "64", "virtio_net.napi_tx": "0", "virtio_net.csum": "n"}
    found, problems = params.parse_readback(text, wanted)
    assert problems == [
        "module parameter virtio_net.napi_weight is 128 in /sys/module, asked 64",
        "module parameter virtio_net.napi_tx is Y in /sys/module, asked 0",  # Y is 1, not 0
    ]
    assert found["virtio_net.csum"]["sysfs"] == "N"  # N is n: no problem


def test_parse_readback_of_a_parameter_the_guest_said_nothing_about():
    found, problems = params.parse_readback("", {"e1000.debug": "16"})
    assert found == {"e1000.debug": {"asked": "16", "sysfs": None, "log": []}}
    assert problems == []


def test_parse_readback_names_a_parameter_the_module_ignored():
    # kernel/module/main.c: a module loaded with a parameter it does not have says so, and loads without it
    text = "[param e1000.Speed]\nlog=[    1.234567] e1000: unknown parameter 'Speed' ignored\n"
    found, problems = params.parse_readback(text, {"e1000.Speed": "100"})
    assert problems == ["module parameter e1000.Speed: the driver said \"e1000: unknown parameter 'Speed' ignored\""]
    assert found["e1000.Speed"]["log"] == ["e1000: unknown parameter 'Speed' ignored"]
