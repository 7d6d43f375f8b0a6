"""A card's driver from a kernel's alias table, matched as modprobe matches a device's modalias."""

from __future__ import annotations

import pytest

from niclab.model.lab.modalias import PciDevice, drivers_for, is_pci_modalias, parse_aliases, parse_builtin_aliases

TABLE = parse_aliases(
    "# Aliases extracted from modules themselves.\n"
    "alias pci:v00008086d000010FBsv*sd*bc*sc*i* ixgbe\n"
    "alias pci:v00008086d0000100Esv*sd*bc*sc*i* e1000\n"
    "alias pci:v000014E4d00001657sv*sd*bc*sc*i* tg3\n"
    "alias pci:v000010ECd00008168sv*sd*bc*sc*i* r8169\n"
    "alias pci:v000010ECd00008139sv*sd*bc*sc*i* 8139too\n"
    "alias pci:v000010ECd00008139sv*sd*bc*sc*i* 8139cp\n"
    "alias pci:v00001186d00004300sv00001186sd00004B10bc*sc*i* r8169\n"  # one subsystem only
    "alias pci:v0000106Bd00001645sv*sd*bc02sc00i* tg3\n"  # by class too
    "alias pci:v*d*sv*sd*bc0Csc03i30 xhci_pci\n"
    "alias usb:v0BDAp8153d*dc*dsc*dp*ic*isc*ip*in* r8152\n"
    "alias ne2k-pci-variant ne2k-pci\n"
)


def modules(device: str, pci_class: int | None = None) -> list[str]:
    return [a.module for a in drivers_for(PciDevice.parse(device, pci_class), TABLE)]


def test_a_pci_id_finds_the_module_whose_alias_names_it():
    assert modules("8086:10fb") == ["ixgbe"]
    assert modules("8086:10FB") == ["ixgbe"]  # lspci -nn writes lower case, modules.alias upper
    assert modules("14e4:1657", 0x020000) == ["tg3"]
    assert modules("1af4:1000") == []


def test_every_module_that_matches_is_given_as_modprobe_would_load_each():
    assert modules("10ec:8139") == ["8139too", "8139cp"]


def test_a_full_modalias_matches_subsystem_and_class_fields_exactly():
    dlink = "pci:v00001186d00004300sv00001186sd00004B10bc02sc00i00"
    other = "pci:v00001186d00004300sv00001186sd00000001bc02sc00i00"
    assert modules(dlink) == ["r8169"]
    assert modules(other) == []
    # an ID alone leaves the subsystem unknown: any subsystem's alias could be the card's
    assert modules("1186:4300") == ["r8169"]
    assert modules("pci:v0000106Bd00001645sv0000106Bsd00000000bc02sc00i00") == ["tg3"]
    assert modules("pci:v0000106Bd00001645sv0000106Bsd00000000bc02sc80i00") == []  # another subclass
    assert modules("106b:1645", 0x028000) == [] and modules("106b:1645") == ["tg3"]


def test_class_aliases_match_by_class_and_never_an_ethernet_card():
    assert modules("8086:10fb", 0x020000) == ["ixgbe"]
    assert modules("1b21:1142", 0x0C0330) == ["xhci_pci"]


def test_builtin_aliases_count_and_come_first():
    modinfo = b"e1000e.alias=pci:v00008086d000010D3sv*sd*bc*sc*i*\0e1000e.parm=debug:x\0igb.license=GPL\0"
    table = parse_builtin_aliases(modinfo) + TABLE
    found = drivers_for(PciDevice.parse("8086:10d3"), table)
    assert [(a.module, a.builtin) for a in found] == [("e1000e", True)]
    both = parse_aliases("alias pci:v00008086d000010D3sv*sd*bc*sc*i* e1000e_mod\n") + parse_builtin_aliases(modinfo)
    assert [a.module for a in drivers_for(PciDevice.parse("8086:10d3"), both)] == ["e1000e", "e1000e_mod"]


def test_module_names_are_modprobes_and_odd_lines_are_skipped():
    assert [a.module for a in TABLE if a.pattern == "ne2k-pci-variant"] == ["ne2k_pci"]
    assert len(TABLE) == 11


@pytest.mark.parametrize("text", ["8086-10fb", "8086:10fb0", "pci:v8086", "pci:v00008086d000010FBsv*sd*bc*sc*i*", ""])
def test_what_is_neither_an_id_nor_a_modalias_is_refused(text):
    with pytest.raises(ValueError, match="PCI"):
        PciDevice.parse(text)


def test_a_modalias_is_the_kernels_form_only():
    assert is_pci_modalias("pci:v00008086d000010FBsv00008086sd0000000Cbc02sc00i00")
    assert not is_pci_modalias("pci:v00008086d000010FBsv00008086sd0000000Cbc02sc00i00\n")
    assert not is_pci_modalias("pci:v00008086d000010FBsv*sd*bc*sc*i*")
