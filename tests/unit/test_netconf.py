from niclab import netconf
from niclab.scenario import parse

TWO_CABLES = """\
name: t
nodes: [a, b, c]
links:
  - between: [a, b]
    nic: e1000
  - between: [b, c]
    nic: {b: virtio, c: rtl8139}
    count: 2
    mtu: 4000
"""


def test_every_cable_is_its_own_slash_24_in_the_benchmark_range():
    scenario = parse(TWO_CABLES, "t.yaml").cells[0].scenario
    net = netconf.plan(scenario)
    got = [(i.node, i.name, i.address, i.mtu) for i in net.ifaces]
    assert got == [
        ("a", "link0", "198.18.0.1", 1500), ("b", "link0", "198.18.0.2", 1500),
        ("b", "link1p0", "198.18.1.1", 4000), ("c", "link1p0", "198.18.1.2", 4000),
        ("b", "link1p1", "198.18.2.1", 4000), ("c", "link1p1", "198.18.2.2", 4000),
    ]
    assert net.find("c", 1, 1).port.model == "rtl8139"


def test_subnets_stay_inside_198_18_0_0_slash_15():
    assert str(netconf.subnet(0)) == "198.18.0.0/24"
    assert str(netconf.subnet(511)) == "198.19.255.0/24"


def test_node_script_renames_by_mac_and_waits_for_carrier():
    scenario = parse(TWO_CABLES, "t.yaml").cells[0].scenario
    net = netconf.plan(scenario)
    script = netconf.node_script(net.on("a"), {"link0": "02:4e:4c:00:00:00"})
    assert "dev=$(by_mac 02:4e:4c:00:00:00)" in script
    assert 'ip link set dev "$dev" name link0' in script
    assert "ip addr add 198.18.0.1/24 dev link0" in script
    assert "ip link set dev link0 mtu 1500" in script
    assert "/sys/class/net/$n/carrier" in script
