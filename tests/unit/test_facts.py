from niclab.plumbing.facts import parse_node_facts

SAMPLE = """\
kernel=6.1.0-50-amd64
[link0]
driver=e1000
version=6.1.0-50-amd64
firmware-version=
bus-info=0000:00:10.0
vendor=0x8086
device=0x100e
subsystem_vendor=0x1af4
subsystem_device=0x1100
mac=02:4e:4c:00:00:00
mtu=1500
"""


def test_parse_node_facts():
    facts = parse_node_facts(SAMPLE)
    assert facts.kernel == "6.1.0-50-amd64"
    link0 = facts.interfaces["link0"]
    assert link0.driver == "e1000"
    assert link0.bus_info == "0000:00:10.0"
    assert link0.pci_id == "8086:100e"
    assert link0.pci_subsystem == "1af4:1100"
    assert link0.mtu == 1500


def test_sections_keeps_the_head_and_gathers_a_repeated_section():
    from niclab.plumbing.guestsh import sections

    head, named = sections("kernel=6.1\n[link0]\nmtu=1500\n[link1]\nmtu=9000\n[link0]\ncarrier=1\n")
    assert head == ["kernel=6.1"]
    assert named == {"link0": ["mtu=1500", "carrier=1"], "link1": ["mtu=9000"]}
