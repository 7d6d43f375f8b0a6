import pytest

from niclab.errors import UsageError
from niclab.lab.inventory import load_inventory
from niclab.scenario import load_scenario

LAB = """\
name: small-lab
cards:
  - {model: e1000, pci: "0000:03:00.0", host: lab1}
  - {model: e1000-82540em, pci: "0000:03:00.1", host: lab1}
  - {model: rtl8139, pci: "0000:04:00.0", host: lab1, price: 7.60}
"""


def test_counts_cards_by_catalog_model(tmp_path):
    (tmp_path / "lab.yaml").write_text(LAB)
    lab = load_inventory(tmp_path / "lab.yaml")
    assert lab.counts() == {"e1000": 2, "rtl8139": 1}  # the alias counts as its model


def test_which_cells_the_lab_can_realize(tmp_path, repo):
    (tmp_path / "lab.yaml").write_text(LAB)
    lab = load_inventory(tmp_path / "lab.yaml")
    bonding = {c.id: c.scenario for c in load_scenario(repo / "scenarios" / "bonding.yaml").cells}
    two_node = load_scenario(repo / "scenarios" / "two-node.yaml").cells[0].scenario
    assert lab.lacks(two_node) is None
    assert lab.lacks(bonding["nic=e1000"]) == "lab small-lab lacks cards: the cell needs 8 e1000 (the lab has 2)"
    assert lab.lacks(bonding["nic=rtl8139"]) == "lab small-lab lacks cards: the cell needs 8 rtl8139 (the lab has 1)"


@pytest.mark.parametrize(
    "text,message",
    [
        ("name: x\ncards:\n  - {model: e1001, pci: '0000:03:00.0'}\n", "cards.0.model: unknown NIC model 'e1001'"),
        ("name: x\ncards:\n  - {model: e1000, pci: '3:0.0'}\n", "cards.0.pci: String should match pattern"),
        ("name: x\ncards: [\n", "cannot read the lab inventory"),
    ],
)
def test_bad_inventories_say_where(tmp_path, text, message):
    (tmp_path / "lab.yaml").write_text(text)
    with pytest.raises(UsageError, match=message):
        load_inventory(tmp_path / "lab.yaml")
