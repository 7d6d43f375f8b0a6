"""The lab inventory: its model, NIC models beyond the catalog, and placing a cell on cards and cables."""

from __future__ import annotations

import json

import pytest

from niclab.model import nics
from niclab.model.lab.inventory import InventoryError, load_inventory, parse_inventory
from niclab.model.lab.match import Unrealizable, place
from niclab.model.scenario import load_scenario, parse
from niclab.plumbing.backends import BackendOptions, get_backend
from tests.helpers import fake_lab_image

LAB = """\
name: small-lab
hosts:
  rig1: {libvirt: qemu:///system}
  rig2: {libvirt: qemu+ssh://root@rig2/system}
models:
  x520: {driver: ixgbe, pci_id: "8086:10fb", max_mtu: 9710, card: Intel X520-DA2, speed_mbps: 10000, emulated_by: e1000}
cards:
  - {id: intel-a, host: rig1, pci: "0000:03:00.0", model: e1000, price: 45}
  - {id: intel-b, host: rig1, pci: "0000:04:00.0", model: e1000-82540em}
  - {id: rtl-a, host: rig1, pci: "0000:05:00.0", model: rtl8139, price: 7.60}
  - {id: rtl-b, host: rig2, pci: "0000:05:00.0", model: rtl8139}
  - {id: x520-a, host: rig1, pci: "0000:06:00.0", model: x520}
  - {id: x520-b, host: rig1, pci: "0000:06:00.1", model: x520}
cables:
  - [intel-a, intel-b]
  - [rtl-a, rtl-b]
  - [x520-a, x520-b]
"""


@pytest.fixture
def lab(tmp_path):
    (tmp_path / "lab.yaml").write_text(LAB)
    return load_inventory(tmp_path / "lab.yaml")


def cell(repo, scenario: str, cell_id: str | None = None):
    cells = load_scenario(repo / "scenarios" / scenario).cells
    return next(c for c in cells if cell_id is None or c.id == cell_id).scenario.topology()


def test_an_alias_model_is_its_catalog_model_and_hosts_say_whether_they_are_local(lab):
    assert lab.card("intel-b").model == "e1000"
    assert lab.hosts["rig1"].local and not lab.hosts["rig2"].local
    assert lab.prices() == {"e1000": 45, "rtl8139": 7.60}


def test_a_cell_is_placed_on_a_cable_whose_ends_match_and_each_node_on_its_cards_host(lab, repo):
    topology = cell(repo, "two-node.yaml")
    placement = place(topology, lab)
    assert {key: card.id for key, card in placement.cards.items()} == {("a", 0, 0): "intel-a", ("b", 0, 0): "intel-b"}
    assert placement.hosts == {"a": "rig1", "b": "rig1"}
    assert placement.lines(topology) == [
        "cable 0: a/link0 intel-a (e1000 0000:03:00.0 on rig1) <-> b/link0 intel-b (e1000 0000:04:00.0 on rig1)"
    ]
    rtl = place(cell(repo, "nic-shootout.yaml", "nic=rtl8139"), lab)
    assert rtl.hosts == {"a": "rig1", "b": "rig2"}  # a cable may join cards on two hosts


def test_what_the_lab_cannot_realize_says_why(lab, repo):
    with pytest.raises(Unrealizable, match=r"^lab small-lab lacks cards: the cell needs 2 tulip \(it has 0\)$"):
        place(cell(repo, "nic-shootout.yaml", "nic=tulip"), lab)
    with pytest.raises(Unrealizable, match="the cell needs 8 e1000"):
        place(cell(repo, "bonding.yaml", "nic=e1000"), lab)
    three = parse(
        "name: s\nnodes: [a, b, c]\nlinks:\n  - {between: [a, b, c], nic: e1000}\nbenchmarks:\n  - ping: {}\n",
        "s.yaml",
    ).cells[0]
    with pytest.raises(Unrealizable, match=r"joins 3 nodes \(a, b, c\) through a switch: a lab inventory lists cables"):
        place(three.scenario.topology(), lab)
    switched = parse(
        "name: s\nnodes: [a, b]\nlinks:\n  - {between: [a, b], nic: e1000, switch: true}\nbenchmarks:\n  - ping: {}\n",
        "s.yaml",
    ).cells[0]
    with pytest.raises(
        Unrealizable, match=r"^link 0 joins a and b through a switch: a lab inventory lists cables, not"
    ):
        place(switched.scenario.topology(), lab)


def test_the_cables_must_match_not_only_the_card_counts(tmp_path, repo):
    text = LAB.replace("  - [intel-a, intel-b]\n  - [rtl-a, rtl-b]\n", "  - [intel-a, rtl-a]\n  - [intel-b, rtl-b]\n")
    (tmp_path / "lab.yaml").write_text(text)
    with pytest.raises(Unrealizable, match="has 0 cables between a e1000 and a e1000 card; the cell needs 1"):
        place(cell(repo, "two-node.yaml"), load_inventory(tmp_path / "lab.yaml"))


def test_a_lab_model_is_known_to_scenarios_only_inside_the_lab_and_runs_emulated_by_its_stand_in(
    lab, tmp_path, monkeypatch
):
    image = fake_lab_image(tmp_path / "lab-image", {"8086:100e": "e1000"})  # the lab image: no ixgbe
    monkeypatch.setenv("NICLAB_LAB_IMAGE", str(image))
    text = "name: s\nnodes: [a, b]\nlinks:\n  - {between: [a, b], nic: x520, mtu: 9000}\nbenchmarks:\n  - ping: {}\n"
    with pytest.raises(Exception, match="unknown NIC model 'x520'"):
        parse(text, "s.yaml")
    with lab.models_known():
        topology = parse(text, "s.yaml").cells[0].scenario.topology()
        assert nics.stand_in("x520").name == "e1000"
        assert get_backend("qemu").check(topology) is None
        libvirt = get_backend(options=BackendOptions(lab=lab))
        assert libvirt.name == "libvirt"
        assert libvirt.check(topology) == (
            "card x520-a (8086:10fb, 0000:06:00.0 on rig1): the lab image lab-0123456789abcdef (kernel 6.1.0-fake) "
            "has no driver for 8086:10fb; check the card's PCI ID (lspci -nn), or boot a kernel that has its driver "
            "(a scenario's kernel: {build: ...}); card x520-b (8086:10fb, 0000:06:00.1 on rig1): the lab image "
            "lab-0123456789abcdef (kernel 6.1.0-fake) has no driver for 8086:10fb; check the card's PCI ID "
            "(lspci -nn), or boot a kernel that has its driver (a scenario's kernel: {build: ...})"
        )
        (image / "modules.alias").write_text("alias pci:v00008086d000010FBsv*sd*bc*sc*i* ixgbe\n")
        assert libvirt.check(topology) is None
        assert {c.id for c in place(topology, lab).cards.values()} == {"x520-a", "x520-b"}
        with pytest.raises(Exception, match="MTU 9800 is above the x520 driver's maximum"):
            parse(text.replace("9000", "9800"), "s.yaml")
    assert nics.lookup("x520") is None


def test_a_lab_model_without_a_stand_in_cannot_run_emulated(lab):
    bare = lab.model_copy(deep=True)
    bare.models["x520"].emulated_by = ""
    text = "name: s\nnodes: [a, b]\nlinks:\n  - {between: [a, b], nic: x520}\nbenchmarks:\n  - ping: {}\n"
    with bare.models_known():
        topology = parse(text, "s.yaml").cells[0].scenario.topology()
        assert "NIC model x520 has no emulated stand-in" in (get_backend("qemu").check(topology) or "")


def test_an_inventory_error_names_the_line_and_the_fix():
    with pytest.raises(InventoryError) as caught:
        parse_inventory("cards:\n  - {id: a, host: localhost, pci: '0000:03:00.0', model: e1001}\n", "lab.yaml")
    assert str(caught.value) == (
        "lab.yaml:2:58: cards[0].model: unknown NIC model 'e1001'; did you mean 'e1000'? "
        "a model is a catalog one (niclab nics) or one under models:"
    )


def test_an_inventory_in_the_old_words_is_told_each_key_to_rename():
    old = LAB.replace("models:", "classes:").replace("model:", "class:")
    with pytest.raises(InventoryError) as caught:
        parse_inventory(old, "lab.yaml")
    first, card, *others = str(caught.value).splitlines()
    assert first == (
        "lab.yaml:5:1: classes: a lab names its own NIC models under models: (classes: is its old name); rename it"
    )
    assert card == (
        "lab.yaml:8:52: cards[0].class: a card names its model with model: (class: is its old name); rename it"
    )
    assert len(others) == 5  # one per card


def test_cards_at_the_same_pci_address_on_two_hosts_are_leased_apart(lab):
    from niclab.plumbing.lab.passthrough import lease_key

    assert lease_key(lab, "rtl-a") == "rig1.0000:05:00.0"
    assert lease_key(lab, "rtl-b") == "rig2.0000:05:00.0"


def test_a_lab_runs_card_prices_stand_over_the_scenarios_and_under_report_prices(tmp_path):
    from niclab.run.records import RunInfoRecord
    from niclab.ui.report.cost import prices_of
    from niclab.ui.report.data import RunData

    info = {
        "scenario_text": "prices: {e1000: 35, rtl8139: 9}\ncurrency: USD\n",
        "lab": {"name": "small-lab", "prices": {"e1000": 45}},
    }
    run = RunData(tmp_path, RunInfoRecord.model_validate(info), [])
    assert prices_of(run) == ({"e1000": 45.0, "rtl8139": 9.0}, "USD")
    assert prices_of(run, {"e1000-82540em": 50}) == ({"e1000": 50.0, "rtl8139": 9.0}, "USD")


def test_uri_parameters_that_run_programs_pass_only_when_allowed(tmp_path, capsys):
    from niclab.ui.cli.main import main

    path = tmp_path / "lab.yaml"
    path.write_text(
        "hosts:\n  rig2: {libvirt: 'qemu+ssh://root@rig2/system?netcat=/opt/nc&keyfile=/root/.ssh/lab'}\n"
        "cards:\n  - {id: a, host: rig2, pci: '0000:03:00.0', model: e1000}\n"
    )
    assert main(["lab", "check", str(path)]) == 1
    assert "has the parameter netcat=" in capsys.readouterr().err
    assert main(["lab", "check", "--allow-uri-params", str(path)]) == 0
    assert load_inventory(path, allow_uri_params=True).hosts["rig2"].libvirt.endswith("keyfile=/root/.ssh/lab")


@pytest.mark.parametrize(
    "uri",
    [
        "qemu+ext:///system?command=/bin/sh",
        "qemu+tcp://rig2/system",
        "lxc:///",
        "qemu+ssh://-oProxyCommand=x/system",
        "qemu+ssh://-l@rig2/system",
        "qemu+ssh://rig2/system#x",
        "qemu+ssh://rig2/../../x",
        "qemu:///system\n",
    ],
)
def test_other_transports_and_odd_uris_are_refused_even_with_uri_parameters_allowed(uri):
    text = f"hosts:\n  rig2: {{libvirt: {json.dumps(uri)}}}\n"  # a JSON string is a YAML double-quoted one
    for allowed in (False, True):
        with pytest.raises(InventoryError, match=r"lab.yaml:2:\d+: hosts.rig2.libvirt: "):
            parse_inventory(text, "lab.yaml", allow_uri_params=allowed)


@pytest.mark.parametrize(
    "uri",
    [
        "qemu:///system",
        "qemu+ssh://root@rig2/system",
        "qemu+ssh://root@127.0.0.1:2222/system",
        "qemu+tls://[::1]/system",
    ],
)
def test_the_usual_uris_pass(uri):
    assert parse_inventory(f"hosts:\n  rig2: {{libvirt: '{uri}'}}\n", "lab.yaml").hosts["rig2"].libvirt == uri


def test_an_allowed_class_matches_its_digits():
    lab = parse_inventory(
        "models:\n  dpu: {driver: mlx5_core, pci_id: '15b3:a2d6', allow_class: '0x1200'}\n"
        "cards:\n  - {id: a, host: localhost, pci: '0000:03:00.0', model: dpu}\n"
        "  - {id: b, host: localhost, pci: '0000:04:00.0', model: e1000}\n",
        "lab.yaml",
    )
    allowed = lab.allowed_class("a")
    assert allowed is not None and str(allowed) == "0x1200"
    assert allowed.matches(0x120000) and allowed.matches(0x1200FF) and not allowed.matches(0x120100)
    assert lab.allowed_class("b") is None
