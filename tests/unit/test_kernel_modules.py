import pytest

from niclab.image.modules import closure, filter_aliases, filter_modules_dep, module_name, parse_modules_dep

DEP = """\
kernel/drivers/net/ethernet/8390/ne2k-pci.ko: kernel/drivers/net/ethernet/8390/8390.ko
kernel/drivers/net/ethernet/8390/8390.ko:
kernel/drivers/net/bonding/bonding.ko: kernel/net/tls/tls.ko
kernel/net/tls/tls.ko:
kernel/drivers/net/ethernet/intel/e1000/e1000.ko:
"""
ALIAS = """\
# Aliases extracted from modules themselves.
alias pci:v000010ECd00008029sv*sd*bc*sc*i* ne2k_pci
alias pci:v00008086d0000100Esv*sd*bc*sc*i* e1000
alias rtnl-link-bond bonding
"""


def test_module_name_normalizes_dashes():
    assert module_name("kernel/drivers/net/ethernet/8390/ne2k-pci.ko") == "ne2k_pci"
    assert module_name("x/sch_netem.ko.xz") == "sch_netem"


def test_closure_pulls_dependencies():
    deps = parse_modules_dep(DEP)
    chosen = closure(deps, ["ne2k-pci", "bonding"])
    assert chosen == sorted(
        [
            "kernel/drivers/net/ethernet/8390/ne2k-pci.ko",
            "kernel/drivers/net/ethernet/8390/8390.ko",
            "kernel/drivers/net/bonding/bonding.ko",
            "kernel/net/tls/tls.ko",
        ]
    )
    text = filter_modules_dep(deps, chosen)
    assert "kernel/net/tls/tls.ko:\n" in text
    assert "e1000" not in text


def test_closure_names_what_is_missing():
    with pytest.raises(KeyError, match="nosuch"):
        closure(parse_modules_dep(DEP), ["e1000", "nosuch"])


def test_aliases_kept_only_for_chosen_modules():
    chosen = closure(parse_modules_dep(DEP), ["ne2k_pci"])
    kept = filter_aliases(ALIAS, chosen)
    assert kept == "alias pci:v000010ECd00008029sv*sd*bc*sc*i* ne2k_pci\n"
