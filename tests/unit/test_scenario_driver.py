"""The driver and kernel in a scenario: ethtool knobs and module parameters on links, `kernel:` per scenario or node."""

import pytest

from niclab.model.driver_choice import DriverChoice
from niclab.model.kernel_choice import DEFAULT_SUITE, SUITES, KernelChoice
from niclab.model.scenario import ScenarioError, load_scenario, parse

PAIR = """\
name: pair
nodes: [a, b]
links:
  - between: [a, b]
    nic: e1000
"""


def scenario(text: str):
    return parse(text, "s.yaml").cells[0].scenario


def error_lines(text: str) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        parse(text, "s.yaml")
    return caught.value.lines()


def ports(text: str) -> dict[tuple[str, int, int], tuple]:
    return {port.key: port.knobs for port in scenario(text).topology().ports}


# knobs: coalesce, rings, queues


def test_knobs_for_every_end_go_on_every_port_of_the_link_as_words():
    text = PAIR + "    count: 2\n    coalesce: {rx-usecs: 100}\n    rings: {rx: 512, tx: 256}\n"
    found = ports(text)
    expected = (("coalesce", "rx-usecs", "100"), ("rings", "rx", "512"), ("rings", "tx", "256"))
    assert found == {key: expected for key in [("a", 0, 0), ("b", 0, 0), ("a", 0, 1), ("b", 0, 1)]}


def test_knobs_per_end_go_on_that_ends_ports_only():
    text = PAIR.replace("nic: e1000", "nic: virtio") + "    queues:\n      b: {combined: 2}\n"
    text += "    coalesce: {a: {rx-usecs: 10}, b: {tx-frames: 32}}\n"
    assert ports(text) == {
        ("a", 0, 0): (("coalesce", "rx-usecs", "10"),),
        ("b", 0, 0): (("coalesce", "tx-frames", "32"), ("queues", "combined", "2")),  # kinds in ethtool's order
    }
    link = scenario(text).links[0]
    assert link.queues == {"b": {"combined": 2}}  # no empty entry for a


def test_a_link_without_knobs_has_ports_without_knobs():
    assert ports(PAIR) == {("a", 0, 0): (), ("b", 0, 0): ()}
    assert ports(PAIR + "    coalesce:\n    rings: {}\n") == {("a", 0, 0): (), ("b", 0, 0): ()}


def test_a_knob_of_zero_is_kept():
    assert ports(PAIR + "    coalesce: {rx-usecs: 0}\n")[("a", 0, 0)] == (("coalesce", "rx-usecs", "0"),)


def test_a_switch_goes_on_the_port_as_on_or_off_and_netconf_reads_it_back():
    from niclab.plumbing.netconf.script import port_knobs

    port = scenario(PAIR + "    coalesce: {adaptive-rx: on, adaptive-tx: off}\n").topology().ports[0]
    assert port.knobs == (("coalesce", "adaptive-rx", "on"), ("coalesce", "adaptive-tx", "off"))
    assert port_knobs(port) == {"coalesce": {"adaptive-rx": True, "adaptive-tx": False}}


def test_knob_mistakes_each_at_its_place():
    text = PAIR + "    coalesce: {rx-usec: 100, adaptive-rx: 5}\n    rings: {rx: -1}\n    queues: 4\n"
    assert error_lines(text) == [
        "s.yaml:6:16: links[0].coalesce.rx-usec: unknown coalesce setting 'rx-usec'; "
        "did you mean 'rx-usecs'? (ethtool -c names)",
        "s.yaml:6:43: links[0].coalesce.adaptive-rx: coalesce adaptive-rx is on or off, not 5",
        "s.yaml:7:17: links[0].rings.rx: rings rx is a whole number from 0 to 4294967295, not -1",
        "s.yaml:8:13: links[0].queues: queues maps ethtool -l names to values, e.g. {combined: 2}",
    ]


def test_knob_mistakes_per_end_name_the_end():
    text = PAIR + "    rings:\n      a: {rx: 256}\n      b: {rxx: 256}\n      c: {rx: 1}\n"
    assert error_lines(text) == [
        "s.yaml:8:11: links[0].rings.b.rxx: unknown rings setting 'rxx'; did you mean 'rx'? (ethtool -g names)",
        "s.yaml:9:7: links[0].rings.c: 'c' is not an end of this link (a, b)",
    ]


# module parameters


def test_module_params_go_on_each_nodes_kernel_command_line_by_driver_module():
    text = PAIR.replace("nodes: [a, b]", "nodes: [a, b, c]") + "    module_params: {InterruptThrottleRate: 8000}\n"
    text += "  - between: [b, c]\n    nic: {b: virtio, c: e1000-82545em}\n"
    text += "    module_params: {b: {napi_tx: 1}, c: {InterruptThrottleRate: 8000, debug: 16}}\n"
    nodes = {spec.name: spec.cmdline for spec in scenario(text).topology().nodes}
    assert nodes == {
        "a": ("e1000.InterruptThrottleRate=8000",),
        "b": ("e1000.InterruptThrottleRate=8000", "virtio_net.napi_tx=1"),
        # e1000-82545em is driven by e1000: one parameter, given once
        "c": ("e1000.InterruptThrottleRate=8000", "e1000.debug=16"),
    }
    assert scenario(text).module_params("c") == {("e1000", "InterruptThrottleRate"): 8000, ("e1000", "debug"): 16}


def test_a_node_without_module_params_boots_with_none():
    assert [spec.cmdline for spec in scenario(PAIR).topology().nodes] == [(), ()]


def test_two_links_giving_one_drivers_parameter_two_values_on_a_node_is_an_error():
    text = PAIR.replace("nodes: [a, b]", "nodes: [a, b, c]") + "    module_params: {InterruptThrottleRate: 8000}\n"
    text += "  - between: [a, c]\n    nic: e1000-82545em\n    module_params: {InterruptThrottleRate: 4000}\n"
    assert error_lines(text) == [
        "s.yaml:9:44: links[1].module_params.InterruptThrottleRate: node a's e1000 driver gets "
        "InterruptThrottleRate=4000 here and InterruptThrottleRate=8000 on link 0; "
        "a module parameter has one value per node: give both links the same"
    ]
    # Another driver, or another node, may have its own value.
    assert scenario(text.replace("nic: e1000-82545em", "nic: {a: virtio, c: e1000}"))
    assert scenario(text.replace("between: [a, c]", "between: [c, d]").replace("[a, b, c]", "[a, b, c, d]"))


def test_the_same_value_on_two_links_is_no_conflict():
    text = PAIR.replace("nodes: [a, b]", "nodes: [a, b, c]") + "    module_params: {InterruptThrottleRate: 8000}\n"
    text += "  - between: [a, c]\n    nic: e1000\n    module_params: {InterruptThrottleRate: 8000}\n"
    assert scenario(text).topology().node("a").cmdline == ("e1000.InterruptThrottleRate=8000",)


def test_a_number_and_the_same_number_quoted_are_no_conflict():
    text = PAIR.replace("nodes: [a, b]", "nodes: [a, b, c]") + "    module_params: {InterruptThrottleRate: 8000}\n"
    text += "  - between: [a, c]\n    nic: e1000\n    module_params: {InterruptThrottleRate: '8000'}\n"
    assert scenario(text).topology().node("a").cmdline == ("e1000.InterruptThrottleRate=8000",)


def test_a_conflict_given_per_end_names_the_end():
    text = PAIR.replace("nodes: [a, b]", "nodes: [a, b, c]") + "    module_params: {InterruptThrottleRate: 8000}\n"
    text += "  - between: [a, c]\n    nic: e1000\n    module_params:\n      a: {InterruptThrottleRate: 4000}\n"
    (line,) = error_lines(text)
    assert line.startswith("s.yaml:10:") and ": links[1].module_params.a.InterruptThrottleRate: node a's " in line


def test_module_param_mistakes():
    text = PAIR + "    module_params: {1st: 1, debug: true, copybreak: [1, 2], TxDescriptors: 'a b', ok: 'x,y:z'}\n"
    assert error_lines(text) == [
        "s.yaml:6:21: links[0].module_params.1st: '1st' is not a module parameter name",
        "s.yaml:6:36: links[0].module_params.debug: a module parameter is a number or a word, not True",
        "s.yaml:6:53: links[0].module_params.copybreak: a module parameter is a number or a word, not [1, 2]",
        "s.yaml:6:76: links[0].module_params.TxDescriptors: a module parameter is a number or a word, not 'a b'",
    ]
    assert error_lines(PAIR + "    module_params: [debug]\n") == [
        "s.yaml:6:20: links[0].module_params: module_params maps parameter names to values, "
        "e.g. {InterruptThrottleRate: 8000}"
    ]


# kernel


def test_the_micro_images_own_kernel_is_the_default():
    assert DEFAULT_SUITE in SUITES
    assert KernelChoice(suite=DEFAULT_SUITE).is_default and not KernelChoice(suite="trixie").is_default


def test_no_kernel_or_bookworm_is_the_images_own_kernel_however_said():
    plain = scenario(PAIR)
    assert plain.kernel is None and plain.kernel_of("a") is None
    said = scenario("kernel: bookworm\n" + PAIR)
    assert said.kernel == KernelChoice(suite="bookworm")
    assert said.kernel_of("a") is None and said.kernel_of("b") is None
    assert [spec.kernel for spec in said.topology().nodes] == [None, None]


def test_a_scenario_kernel_applies_to_every_node_a_nodes_own_wins():
    text = "kernel: trixie\n" + PAIR.replace(
        "nodes: [a, b]", "nodes:\n  a: {kernel: sid}\n  b:\n  c: {kernel: bookworm}"
    )
    text += "  - between: [b, c]\n    nic: virtio\n"
    s = scenario(text)
    assert s.kernel_of("a") == KernelChoice(suite="sid")
    assert s.kernel_of("b") == KernelChoice(suite="trixie")
    assert s.kernel_of("c") is None  # bookworm: the default, whether the scenario's is another
    assert {spec.name: spec.kernel for spec in s.topology().nodes} == {
        "a": KernelChoice(suite="sid"),
        "b": KernelChoice(suite="trixie"),
        "c": None,
    }


def test_a_build_tree_is_relative_to_the_scenario_file_not_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "linux").mkdir()
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "elsewhere").mkdir()
    path = tmp_path / "scenarios" / "s.yaml"
    path.write_text("kernel: {build: ../linux}\n" + PAIR)
    monkeypatch.chdir(tmp_path / "elsewhere")
    s = load_scenario(path).cells[0].scenario
    assert s.kernel_of("a") == KernelChoice(build=str(tmp_path / "linux"))
    assert str(s.kernel_of("b")) == f"build:{tmp_path / 'linux'}"


def test_a_build_tree_that_is_not_there_names_where_it_was_looked_for(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(PAIR.replace("nodes: [a, b]", "nodes:\n  a: {kernel: {build: linux}}\n  b:"))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert caught.value.lines() == [
        f"{path}:3:15: nodes.a.kernel: kernel build 'linux': no such directory ({tmp_path / 'linux'})"
    ]


def test_kernel_mistakes():
    assert error_lines(PAIR.replace("nodes: [a, b]", "nodes:\n  a: {kernel: bookwrm}\n  b:")) == [
        "s.yaml:3:15: nodes.a.kernel: unknown kernel 'bookwrm'; did you mean 'bookworm'? kernels are the Debian "
        "suites bookworm, bookworm-backports, trixie, sid, or {build: DIR} for a kernel tree you built"
    ]
    assert error_lines("kernel: 6.1\n" + PAIR) == [
        "s.yaml:1:9: kernel: kernel is a Debian suite (bookworm, bookworm-backports, trixie, sid) "
        "or {build: DIR}, not 6.1"
    ]
    assert error_lines("kernel: {build: ''}\n" + PAIR)[0].endswith("or {build: DIR}, not {'build': ''}")
    assert error_lines("kernel: {build: x, suite: sid}\n" + PAIR)[0].startswith("s.yaml:1:9: kernel: kernel is a")


def test_the_kernel_is_a_matrix_axis():
    text = "kernel: ${kernel}\n" + PAIR + "matrix:\n  kernel: [bookworm, trixie]\n"
    cells = parse(text, "s.yaml").cells
    assert [cell.id for cell in cells] == ["kernel=bookworm", "kernel=trixie"]
    assert [cell.scenario.kernel_of("a") for cell in cells] == [None, KernelChoice(suite="trixie")]


def test_a_build_tree_as_a_matrix_value_names_its_cell_by_the_trees_name(tmp_path):
    (tmp_path / "linux-next").mkdir()
    path = tmp_path / "s.yaml"
    path.write_text("kernel: ${kernel}\n" + PAIR + "matrix:\n  kernel: [trixie, {build: linux-next}]\n")
    cells = load_scenario(path).cells
    assert [cell.id for cell in cells] == ["kernel=trixie", "kernel=build:linux-next"]
    assert cells[1].scenario.kernel_of("b") == KernelChoice(build=str(tmp_path / "linux-next"))


def test_two_build_trees_of_one_folder_name_are_told_apart_by_more_of_their_paths(tmp_path):
    for tree in ("a/linux", "b/linux", "linux"):
        (tmp_path / tree).mkdir(parents=True)
    path = tmp_path / "s.yaml"
    path.write_text("kernel: ${kernel}\n" + PAIR + "matrix:\n  kernel: [{build: a/linux}, {build: b/linux}]\n")
    assert [cell.id for cell in load_scenario(path).cells] == ["kernel=build:a-linux", "kernel=build:b-linux"]
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "s.yaml"
    path.write_text("kernel: ${kernel}\n" + PAIR + "matrix:\n  kernel: [{build: ../linux}, {build: ../a/linux}]\n")
    assert [cell.id for cell in load_scenario(path).cells] == ["kernel=build:linux", "kernel=build:a-linux"]
    (tmp_path / "sub" / "linux").mkdir()
    path.write_text("kernel: ${kernel}\n" + PAIR + "matrix:\n  kernel: [{build: ../linux}, {build: linux}]\n")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert caught.value.lines() == [
        f"{path}:8:3: matrix: two cells are both named kernel=build:linux; give the build trees different folder names"
    ]


def test_a_bad_kernel_in_the_matrix_names_its_cell():
    text = "kernel: ${kernel}\n" + PAIR + "matrix:\n  kernel: [bookworm, trixy]\n"
    assert error_lines(text) == [
        "s.yaml:1:9: kernel: unknown kernel 'trixy'; did you mean 'trixie'? kernels are the Debian suites "
        "bookworm, bookworm-backports, trixie, sid, or {build: DIR} for a kernel tree you built (in cell kernel=trixy)"
    ]


def test_kernel_build_on_the_command_line_renames_a_kernel_axis_and_merges_its_cells(tmp_path):
    from niclab.plumbing.kernel_check import with_kernel

    (tmp_path / "linux").mkdir()
    text = "kernel: ${kernel}\n" + PAIR.replace("nic: e1000", "nic: ${nic}")
    text += "matrix:\n  kernel: [bookworm, trixie]\n  nic: [e1000, virtio]\n"
    cells = with_kernel(parse(text, "s.yaml").cells, KernelChoice(build=str(tmp_path / "linux")))
    assert [cell.id for cell in cells] == ["kernel=build:linux,nic=e1000", "kernel=build:linux,nic=virtio"]
    assert all(
        cell.scenario.kernel_of(n) == KernelChoice(build=str(tmp_path / "linux")) for n in "ab" for cell in cells
    )
    assert cells[0].params == {"kernel": {"build": str(tmp_path / "linux")}, "nic": "e1000"}
    # Without a kernel axis a cell keeps its name: the kernel it ran is in its provenance.
    (cell,) = with_kernel(parse(PAIR, "s.yaml").cells, KernelChoice(build=str(tmp_path / "linux")))
    assert cell.id == "default" and cell.scenario.kernel_of("a") == KernelChoice(build=str(tmp_path / "linux"))


# driver: which module drives the card


@pytest.fixture
def vendor(tmp_path):
    """A scenario directory beside an out-of-tree module's source (e1000e-vendor, with a Makefile)."""
    (tmp_path / "e1000e-vendor").mkdir()
    (tmp_path / "e1000e-vendor" / "Makefile").write_text("obj-m += e1000e_vendor.o\n")
    (tmp_path / "scenarios").mkdir()
    return tmp_path


def load(directory, text: str):
    path = directory / "scenarios" / "s.yaml"
    path.write_text(text)
    return load_scenario(path)


E1000E = PAIR.replace("nic: e1000", "nic: e1000e")


def test_a_driver_for_every_end_goes_on_every_port_and_node(vendor, monkeypatch):
    monkeypatch.chdir("/")  # the scenario's directory, not the working directory, is the base
    s = load(vendor, E1000E + "    count: 2\n    driver: {module: ../e1000e-vendor}\n").cells[0].scenario
    choice = DriverChoice("module", str(vendor / "e1000e-vendor"))
    assert s.links[0].driver == {"a": choice, "b": choice}
    assert s.links[0].driver.get("a") == s.links[0].driver.get("b") == choice
    topology = s.topology()
    assert [port.driver for port in topology.ports] == [choice] * 4
    assert [node.drivers for node in topology.nodes] == [(("8086:10d3", choice),)] * 2


def test_a_driver_per_end_is_told_by_its_keys_being_the_links_ends(vendor):
    text = E1000E + "    driver: {a: {module: ../e1000e-vendor, name: e1000e_vendor}, b: in-tree}\n"
    s = load(vendor, text).cells[0].scenario
    choice = DriverChoice("module", str(vendor / "e1000e-vendor"), "e1000e_vendor")
    assert s.links[0].driver == {"a": choice}  # b is on the kernel's own module: not kept
    assert (s.links[0].driver.get("a"), s.links[0].driver.get("b")) == (choice, None)
    topology = s.topology()
    assert [(port.node, port.driver) for port in topology.ports] == [("a", choice), ("b", None)]
    assert [node.drivers for node in topology.nodes] == [(("8086:10d3", choice),), ()]
    only_b = scenario(E1000E + "    driver: {b: {dkms: e1000e-dkms}}\n")
    assert only_b.links[0].driver == {"b": DriverChoice("dkms", "e1000e-dkms")}


def test_no_driver_or_in_tree_or_the_cards_own_module_by_name_is_no_driver():
    for setting in ("", "    driver: in-tree\n", "    driver:\n", "    driver: e1000e\n", "    driver: {a: e1000e}\n"):
        s = scenario(E1000E + setting)
        assert s.links[0].driver == {} and s.links[0].driver.get("a") is None
        assert all(port.driver is None for port in s.topology().ports)
        assert all(node.drivers == () for node in s.topology().nodes)
    # the topology of a cell without drivers is what it was: a rig booted for it is shared as before
    assert scenario(E1000E + "    driver: in-tree\n").topology() == scenario(E1000E).topology()


def test_another_in_tree_module_by_name():
    s = scenario(PAIR.replace("nic: e1000", "nic: rtl8139") + "    driver: {b: 8139too}\n")
    assert s.links[0].driver.get("b") == DriverChoice("named", "8139too", "8139too")
    assert s.topology().node("b").drivers == (("10ec:8139", DriverChoice("named", "8139too", "8139too")),)


def test_driver_mistakes_each_at_its_place(vendor):
    (vendor / "empty").mkdir()
    assert error_lines(E1000E + "    driver: {modul: ../x}\n") == [
        "s.yaml:6:14: links[0].driver.modul: unknown key 'modul' in a driver; did you mean 'module'? a driver is "
        "in-tree, another in-tree module's name (8139too), {module: DIR} (an out-of-tree module's source), "
        "{kernel-source: drivers/...} (a folder of the kernel's own source) or {dkms: PACKAGE}, each mapping "
        "optionally with name: (the module that drives the card)"
    ]
    lines = error_lines(E1000E + "    driver: {a: {dkms: R8168}, c: in-tree, b: intree}\n")
    assert [line.split(": ")[0:2] for line in lines] == [
        ["s.yaml:6:24", "links[0].driver.a.dkms"],
        ["s.yaml:6:32", "links[0].driver.c"],
        ["s.yaml:6:47", "links[0].driver.b"],
    ]
    assert "'c' is not an end of this link (a, b)" in lines[1]
    # a typo in an end, beside a right one, is still a driver per end
    assert error_lines(E1000E + "    driver: {a: in-tree, bb: 8139too}\n") == [
        "s.yaml:6:26: links[0].driver.bb: 'bb' is not an end of this link (a, b)"
    ]
    with pytest.raises(ScenarioError) as caught:
        load(vendor, E1000E + "    driver: {module: ../empty}\n")
    assert caught.value.lines()[0].endswith(
        "s.yaml:6:22: links[0].driver.module: driver module '../empty': neither a Kbuild nor a Makefile in it; "
        "{module: DIR} is the source directory of an out-of-tree module, built with the kernel's make M=DIR"
    )


def test_a_driver_written_once_is_reported_once():
    assert len(error_lines(E1000E + "    count: 4\n    driver: {dkms: R8168}\n")) == 1


def test_the_driver_is_a_matrix_axis_named_by_the_source_folder(vendor, monkeypatch):
    monkeypatch.chdir("/")
    text = E1000E + "    driver: ${drv}\n" + "matrix:\n  drv: [in-tree, {module: ../e1000e-vendor}, 8139too]\n"
    cells = load(vendor, text).cells
    assert [cell.id for cell in cells] == ["drv=in-tree", "drv=module:e1000e-vendor", "drv=8139too"]
    assert [cell.scenario.links[0].driver.get("a") for cell in cells] == [
        None,
        DriverChoice("module", str(vendor / "e1000e-vendor")),
        DriverChoice("named", "8139too", "8139too"),
    ]
    assert len({cell.topology for cell in cells}) == 3  # each boots its own rig
    text = E1000E + "    driver: ${drv}\n" + "matrix:\n  drv: [in-tree, {kernel-source: drivers/net/e1000e, name: x}]\n"
    assert [cell.id for cell in load(vendor, text).cells] == ["drv=in-tree", "drv=kernel-source:e1000e+name:x"]


def test_the_cards_own_module_by_name_and_in_tree_are_one_cell():
    text = E1000E + "    driver: ${drv}\n" + "matrix:\n  drv: [in-tree, e1000e]\n"
    assert error_lines(text) == [
        "s.yaml:8:3: matrix: cells drv=in-tree and drv=e1000e expand to the same configuration; "
        "drop the duplicate value or exclude one cell"
    ]


def test_a_bad_driver_in_the_matrix_names_its_cell():
    text = E1000E + "    driver: ${drv}\n" + "matrix:\n  drv: [in-tree, intree]\n"
    (line,) = error_lines(text)
    assert line.startswith("s.yaml:6:13: links[0].driver: unknown driver 'intree'; did you mean 'in-tree'?")
    assert line.endswith("(in cell drv=intree)")


RTL_TRIO = """\
name: trio
nodes: [a, b, c]
links:
  - between: [a, b]
    nic: rtl8139
  - between: [a, c]
    nic: rtl8139
"""


def test_a_nodes_cards_of_one_pci_id_take_one_driver():
    assert error_lines(RTL_TRIO + "    driver: {a: 8139too}\n") == [
        "s.yaml:8:17: links[1].driver.a: node a's 10ec:8139 cards get driver 8139too here and in-tree on link 0; "
        "the guest binds a card by its PCI ID, so a node's cards of one ID take one driver: give both links the same"
    ]
    # pointing at the setting when the earlier link has it and the later one is on the kernel's own module
    text = RTL_TRIO.replace("nic: rtl8139\n  -", "nic: rtl8139\n    driver: 8139too\n  -", 1)
    (line,) = error_lines(text)
    assert line.startswith("s.yaml:6:13: links[0].driver: node a's 10ec:8139 cards get driver 8139too here")
    assert line.split("; ")[0].endswith("and in-tree on link 1")
    # two different drivers
    text = RTL_TRIO.replace("nic: rtl8139\n  -", "nic: rtl8139\n    driver: {dkms: x-dkms}\n  -", 1)
    assert "get driver 8139too here and dkms:x-dkms on link 0" in error_lines(text + "    driver: 8139too\n")[0]


def test_one_driver_on_every_link_of_a_node_or_on_other_nodes_is_no_conflict():
    s = scenario(RTL_TRIO.replace("    nic: rtl8139\n", "    nic: rtl8139\n    driver: 8139too\n"))
    assert s.topology().node("a").drivers == (("10ec:8139", DriverChoice("named", "8139too", "8139too")),)
    # b and c are on one link each: their drivers do not meet
    s = scenario(RTL_TRIO + "    driver: {c: 8139too}\n")
    assert s.topology().node("c").drivers and not s.topology().node("a").drivers
    # cards of another default module on the same node keep theirs
    s = scenario(RTL_TRIO.replace("nic: rtl8139\n  -", "nic: e1000\n  -", 1) + "    driver: 8139too\n")
    assert s.topology().node("a").drivers == (("10ec:8139", DriverChoice("named", "8139too", "8139too")),)


def test_module_params_go_to_the_module_that_drives_the_card(vendor):
    text = E1000E + "    module_params: {InterruptThrottleRate: 8000}\n"
    s = load(vendor, text + "    driver: {a: {module: ../e1000e-vendor, name: e1000e-vendor}}\n").cells[0].scenario
    assert s.topology().node("a").cmdline == ("e1000e_vendor.InterruptThrottleRate=8000",)
    assert s.topology().node("b").cmdline == ("e1000e.InterruptThrottleRate=8000",)
    # without a name, which module takes them is only known once it is built: the file says to name it
    assert error_lines(text + "    driver: {dkms: e1000e-dkms}\n")[0] == (
        "s.yaml:7:13: links[0].driver: module_params go to the module that drives node a's card, and driver "
        "dkms:e1000e-dkms does not say which module that is; give it name: (the module it builds, e.g. name: "
        "e1000e), or drop module_params"
    )
    s = scenario(text + "    driver: {dkms: e1000e-dkms, name: e1000e}\n")  # a vendor's release of the same name
    assert s.topology().node("a").cmdline == ("e1000e.InterruptThrottleRate=8000",)
    s = scenario(PAIR.replace("e1000", "rtl8139") + "    driver: 8139too\n    module_params: {debug: 1}\n")
    assert s.module_params("a") == {("8139too", "debug"): 1}


def test_module_params_of_two_links_meet_at_the_module_that_drives_the_cards():
    text = RTL_TRIO.replace(
        "nic: rtl8139\n  -", "nic: rtl8139\n    driver: {a: 8139too}\n    module_params: {debug: 1}\n  -", 1
    )
    text += "    driver: {a: 8139too}\n    module_params: {a: {debug: 2}}\n"
    lines = error_lines(text)
    assert lines == [
        "s.yaml:11:32: links[1].module_params.a.debug: node a's 8139too driver gets debug=2 here and debug=1 on "
        "link 0; a module parameter has one value per node: give both links the same"
    ]


def test_the_plan_counts_the_driver_builds_before_anything_boots(tmp_path):
    from niclab.run.plan import plan_table

    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\nnodes: [a, b]\nkernel: ${k}\nlinks:\n  - between: [a, b]\n    nic: e1000e\n    driver: ${drv}\n"
        "matrix:\n  k: [bookworm, trixie]\n  drv: [in-tree, {dkms: r8168-dkms}, 8139too]\n"
        "benchmarks:\n  - netperf: {test: TCP_RR, seconds: 2}\n"
    )
    table = plan_table("s", load_scenario(path).cells)
    # one per kernel and driver, whatever the nodes and cells that boot it
    assert table.splitlines()[-1].startswith("and 4 driver builds before anything boots (about 4 min 00 s the first")
    path.write_text(path.read_text().replace("[in-tree, {dkms: r8168-dkms}, 8139too]", "[in-tree]"))
    assert "driver build" not in plan_table("s", load_scenario(path).cells)
