import pytest

from niclab.model.scenario import ScenarioError, load_scenario, parse

GOOD = """\
name: pair
nodes:
  a: {cpus: 2, memory: 512M}
  b:
links:
  - between: [a, b]
    nic: ${nic}
    mtu: ${mtu}
matrix:
  nic: [e1000, virtio]
  mtu: [1500, 4000]
benchmarks:
  - netperf: {test: TCP_RR, seconds: 3}
"""


def test_two_node_scenario_loads(repo):
    scenario_file = load_scenario(repo / "scenarios" / "two-node.yaml")
    assert [c.id for c in scenario_file.cells] == ["nic=e1000"]
    scenario = scenario_file.cells[0].scenario
    assert list(scenario.nodes) == ["a", "b"]
    assert scenario.benchmarks[0].tool == "netperf"
    topology = scenario.topology()
    assert [p.ifname for p in topology.ports] == ["link0", "link0"]


def test_matrix_expands_with_typed_substitution():
    scenario_file = parse(GOOD, "pair.yaml")
    assert [c.id for c in scenario_file.cells] == [
        "nic=e1000,mtu=1500",
        "nic=e1000,mtu=4000",
        "nic=virtio,mtu=1500",
        "nic=virtio,mtu=4000",
    ]
    cell = scenario_file.cells[3].scenario
    assert cell.links[0].mtu == 4000 and cell.links[0].nic == "virtio"
    assert cell.nodes["a"].memory == 512 and cell.nodes["a"].cpus == 2 and cell.nodes["b"].memory == 256


def error_lines(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        parse(text, "s.yaml")
    return caught.value.lines()


def test_errors_name_line_column_path_and_hint():
    lines = error_lines(
        GOOD.replace("${nic}", "e1001")
        .replace("${mtu}", "1500")
        .replace("matrix:\n  nic: [e1000, virtio]\n  mtu: [1500, 4000]\n", "")
    )
    assert lines == [
        "s.yaml:7:10: links[0].nic: unknown NIC model 'e1001'; did you mean 'e1000'? run 'niclab nics' for the list"
    ]


def test_mtu_above_the_model_maximum():
    lines = error_lines(GOOD.replace("[e1000, virtio]", "[rtl8139]").replace("[1500, 4000]", "[9000]"))
    assert lines == [
        "s.yaml:8:10: links[0].mtu: MTU 9000 is above the rtl8139 driver's maximum (4096); "
        "use an MTU up to 4096, a model that takes jumbo frames, or exclude the cell"
    ]


ONE_CELL = (
    GOOD.replace("${nic}", "e1000")
    .replace("${mtu}", "1500")
    .replace("matrix:\n  nic: [e1000, virtio]\n  mtu: [1500, 4000]\n", "")
)


def test_a_link_is_dual_stack_by_default_and_ipv4_alone_when_asked():
    assert parse(ONE_CELL, "s.yaml").cells[0].scenario.links[0].ip == [4, 6]
    asked = ONE_CELL.replace("    mtu: 1500\n", "    mtu: 1500\n    ip: 4\n")
    assert parse(asked, "s.yaml").cells[0].scenario.links[0].ip == [4]
    below = ONE_CELL.replace("mtu: 1500", "mtu: 1000")  # IPv6 needs 1280: such a link is IPv4 only
    assert parse(below, "s.yaml").cells[0].scenario.links[0].ip == [4]


@pytest.mark.parametrize(
    ("words", "said"),
    [
        ("mtu: 1500\n    ip: 6", "a link without IPv4 is not supported yet"),
        ("mtu: 1500\n    ip: [5]", "ip is [5]; give 4, or [4, 6] (the default)"),
        ("mtu: 1000\n    ip: [4, 6]", "IPv6 needs an MTU of 1280 or more, and this link's is 1000; use ip: 4"),
    ],
)
def test_an_ip_a_link_cannot_have_is_one_line_naming_the_fix(words, said):
    [line] = error_lines(ONE_CELL.replace("mtu: 1500", words))
    assert line.startswith("s.yaml:") and said in line


def test_bad_yaml_and_unknown_benchmark():
    assert error_lines("name: [x\n")[0].startswith("s.yaml:2:1: (top level): not valid YAML")
    lines = error_lines(GOOD.replace("netperf: {test: TCP_RR, seconds: 3}", "netpref: {}"))
    assert lines == [
        "s.yaml:13:5: benchmarks[0].netpref: unknown benchmark 'netpref'; did you mean "
        "'netperf'? benchmarks are: bonnie, iperf3, kselftest, lmbench, netperf, netpipe, nfs, ping, pktgen"
    ]


def test_select_unknown_cell_suggests():
    scenario_file = parse(GOOD, "pair.yaml")
    assert scenario_file.select(["nic=virtio,mtu=4000"])[0].params == {"nic": "virtio", "mtu": 4000}
    with pytest.raises(Exception, match="mtu has no value '150'; did you mean '1500'"):
        scenario_file.select(["nic=virtio,mtu=150"])


def test_build_trees_told_apart_by_a_folder_that_cannot_name_a_cell_are_refused(tmp_path):
    """The cell id shows as many folder names as tell two build trees apart: those are checked too."""
    for tree in ("x/a,nic=x/linux", "x/a/linux", "y/b/linux", "z/c\nd/linux"):
        (tmp_path / tree).mkdir(parents=True)
    text = (
        "name: k\nnodes: [a, b]\nkernel: ${kernel}\nlinks:\n  - between: [a, b]\n    nic: e1000\nmatrix:\n"
        f'  kernel: [{{build: "{tmp_path}/x/a,nic=x/linux"}}, {{build: "{tmp_path}/y/b/linux"}}]\n'
    )
    with pytest.raises(ScenarioError, match=r"matrix.kernel\[0\]: .* cannot name a cell \(its cell id would show "):
        parse(text, "k.yaml")
    newline = text.replace(f"{tmp_path}/x/a,nic=x/linux", f"{tmp_path}/z/c\\nd/linux")
    with pytest.raises(ScenarioError, match=r"matrix.kernel\[0\]: .* cannot name a cell"):
        parse(newline, "k.yaml")
    fine = text.replace("x/a,nic=x/linux", "x/a/linux")
    assert [c.id for c in parse(fine, "k.yaml").cells] == ["kernel=build:a-linux", "kernel=build:b-linux"]
