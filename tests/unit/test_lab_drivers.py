"""The lab image's recipe, cards named by PCI ID, and the driver each gets from the lab image's modules.alias."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from niclab.base.errors import NiclabError
from niclab.model.driver_choice import DriverChoice
from niclab.model.lab.inventory import InventoryError, load_inventory, parse_inventory
from niclab.model.lab.match import place
from niclab.model.scenario import parse
from niclab.plumbing.backends import BackendOptions, get_backend
from niclab.plumbing.image.recipe import load_recipe
from niclab.plumbing.image.store import LAB_RECIPE, find_image, load_image
from niclab.plumbing.lab import hostnet as hostnet_mod
from niclab.plumbing.lab.drivers import DriverTable
from niclab.ui.cli import main as cli
from tests.helpers import fake_lab_image, quiet_net
from tests.realcards import REAL_CARDS
from tests.unit.fakesysfs import FakeSysfs

SCENARIO = (
    "name: s\nnodes: [a, b]\nlinks:\n  - {{between: [a, b], nic: {{a: {a}, b: {b}}}}}\nbenchmarks:\n  - ping: {{}}\n"
)


@pytest.fixture
def lab_image(tmp_path, monkeypatch):
    path = fake_lab_image(tmp_path / "images" / "lab-0123456789abcdef", REAL_CARDS)
    monkeypatch.setenv("NICLAB_LAB_IMAGE", str(path))
    return load_image(path)


# -- the recipe ---------------------------------------------------------------


def test_the_lab_recipe_extends_micro_with_every_ethernet_driver_and_their_firmware(repo):
    micro, lab = load_recipe(repo / "images" / "micro"), load_recipe(repo / "images" / "lab")
    assert lab.parent is not None and lab.parent.name == "micro"
    assert lab.packages[: len(micro.packages)] == micro.packages and "firmware-realtek" in lab.packages
    assert (lab.binaries, lab.files, lab.modules, lab.cmdline, lab.suite) == (
        micro.binaries,
        micro.files,
        micro.modules,
        micro.cmdline,
        micro.suite,
    )
    assert lab.builds == micro.builds and lab.disk is None
    assert "kernel/drivers/net/ethernet" in lab.module_dirs and lab.firmware == "modules"
    assert lab.initrd_overlay == micro.initrd_overlay  # the same /init: it boots as micro does
    assert (micro.module_dirs, micro.firmware) == ((), "none")


def test_the_lab_hash_follows_micros_files_and_micros_ignores_the_lab_only_builder(repo, tmp_path):
    images = tmp_path / "images"
    shutil.copytree(repo / "images" / "micro", images / "micro")
    shutil.copytree(repo / "images" / "lab", images / "lab")
    micro, lab = load_recipe(images / "micro"), load_recipe(images / "lab")
    assert "drivers.py" in [p.name for p in lab.builder_sources()]
    assert "drivers.py" not in [p.name for p in micro.builder_sources()]
    assert "recipe.py" in [p.name for p in micro.builder_sources()]
    before = (micro.input_hash(), lab.input_hash())
    (images / "micro" / "rootfs" / "etc" / "niclab" / "boot").write_text("#!/bin/sh\n")
    after = (load_recipe(images / "micro").input_hash(), load_recipe(images / "lab").input_hash())
    assert after[0] != before[0] and after[1] != before[1]


def test_a_recipe_that_extends_itself_or_an_odd_name_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "recipe.toml").write_text('extends = "a"\n')
    with pytest.raises(NiclabError, match="extends = 'a': name another recipe"):
        load_recipe(tmp_path / "a")
    (tmp_path / "a" / "recipe.toml").write_text('extends = "../etc"\n')
    with pytest.raises(NiclabError, match="name another recipe beside this one"):
        load_recipe(tmp_path / "a")


def test_a_recipes_firmware_is_one_of_the_known_choices(repo, tmp_path):
    shutil.copytree(repo / "images" / "micro", tmp_path / "micro")
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "recipe.toml").write_text('extends = "micro"\nfirmware = "all"\n')
    with pytest.raises(NiclabError, match="firmware = 'all': it is one of none, modules"):
        load_recipe(tmp_path / "lab")


# -- cards named by PCI ID ----------------------------------------------------


def test_a_card_named_by_pci_id_gets_an_implicit_model_scenarios_may_name(data_dir):
    lab = load_inventory(data_dir / "lab" / "real-cards.yaml")
    x520 = lab.card("x520")
    assert (x520.model, x520.pci_id) == ("pci-8086-10fb", "8086:10fb")
    assert lab.implicit_models()["pci-10ec-8168"] == "10ec:8168"
    text = SCENARIO.format(a="pci-8086-10fb", b="pci-8086-1572")
    with pytest.raises(Exception, match="unknown NIC model 'pci-8086-10fb'"):
        parse(text, "s.yaml")
    with lab.models_known():
        topology = parse(text, "s.yaml").cells[0].scenario.topology()
        with pytest.raises(Exception, match="MTU 9000 is above"):
            parse(text.replace("}}", "}, mtu: 9000}"), "s.yaml")
        assert {c.id for c in place(topology, lab).cards.values()} == {"x520", "x710"}


def test_a_card_with_model_and_pci_id_must_agree_and_one_of_them_is_needed():
    text = (
        "hosts: {rig1: {}}\ncards:\n"
        "  - {id: a, host: rig1, pci: '0000:03:00.0', model: e1000, pci_id: '8086:100e'}\n"
        "  - {id: b, host: rig1, pci: '0000:04:00.0', model: e1000, pci_id: '8086:10fb'}\n"
        "  - {id: c, host: rig1, pci: '0000:05:00.0'}\n"
    )
    with pytest.raises(InventoryError) as caught:
        parse_inventory(text, "lab.yaml")
    assert str(caught.value).splitlines() == [
        "lab.yaml:4:68: cards[1].pci_id: card 'b' is 8086:10fb, but e1000 cards are 8086:100e; drop pci_id: (the "
        "model gives it) or the model: (the card then gets the implicit model pci-8086-10fb)",
        "lab.yaml:5:5: cards[2]: card 'c' has neither model: nor pci_id:; give its PCI ID as lspci -nn shows it "
        '(pci_id: "8086:10fb"), or a NIC model',
    ]
    with pytest.raises(InventoryError) as caught:
        parse_inventory("cards:\n  - {id: d, host: localhost, pci: '0000:06:00.0', pci_id: '8086-10fb'}\n", "lab.yaml")
    assert str(caught.value) == (
        "lab.yaml:2:59: cards[0].pci_id: '8086-10fb' is not a PCI ID; write vendor:device as lspci -nn shows it, "
        "e.g. 8086:10fb"
    )


# -- the driver each card gets ------------------------------------------------


def test_driver_and_firmware_come_from_the_images_alias_table_and_manifest(lab_image):
    r8169 = DriverTable(lab_image).resolve("10ec:8168", 0x020000)
    assert (r8169.module, r8169.firmware["rtl_nic/rtl8168h-2.fw"]) == ("r8169", True)
    assert r8169.describe_firmware() == "rtl_nic/rtl8168h-2.fw … rtl_nic/rtl8168g-3.fw (all 2 in the image)"
    ice = DriverTable(lab_image).resolve("pci:v00008086d00001592sv00008086sd00000002bc02sc00i00")
    assert (ice.module, ice.describe_firmware()) == ("ice", "intel/ice/ddp/ice.pkg (in the image)")
    assert DriverTable(lab_image).resolve("8086:10fb").describe_firmware() == "none"
    assert DriverTable(lab_image).resolve("1af4:1041").module is None


def test_an_image_without_an_alias_table_says_to_rebuild(lab_image):
    (lab_image.directory / "modules.alias").unlink()
    with pytest.raises(NiclabError, match=r"no modules\.alias beside its initramfs.*image build --force lab"):
        DriverTable(lab_image)


def real_cards_host(root: Path) -> FakeSysfs:
    """A healthy host with the 16 cards (15 models) of tests/data/lab/real-cards.yaml, each alone in its IOMMU
    group, on its host driver."""
    fake = FakeSysfs(root)
    fake.add_iommu("dmar0", intel_ecap=0xF020DF)
    fake.add_driver("vfio-pci")
    fake.add_module("vfio_pci")
    lab = load_inventory(Path(__file__).parents[1] / "data" / "lab" / "real-cards.yaml")
    for group, card in enumerate(lab.cards, start=20):
        assert card.pci_id is not None
        vendor, device = (int(part, 16) for part in card.pci_id.split(":"))
        fake.add_device(card.pci, vendor=vendor, device=device, driver=REAL_CARDS[card.pci_id], group=group)
    return fake


@pytest.fixture
def doctor(tmp_path, monkeypatch, data_dir):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "virsh").write_text("#!/bin/sh\necho 9.0.0\n")
    (bin_dir / "virsh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(hostnet_mod, "HostNet", quiet_net)
    fake = real_cards_host(tmp_path / "root")

    def run(*extra: str) -> int:
        lab = data_dir / "lab" / "real-cards.yaml"
        return cli.main(["lab", "doctor", "--lab", str(lab), "--sysfs-root", str(fake.root), *extra])

    return run


def test_the_doctor_prints_each_real_cards_guest_driver_and_firmware(lab_image, doctor, capsys):
    assert doctor() == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    lines = [" ".join(line.split()) for line in out.splitlines()]
    drivers = [line for line in lines if line.startswith("ok guest driver ")]
    assert len(drivers) == 16
    for module in REAL_CARDS.values():
        assert any(line.startswith(f"ok guest driver {module} (lab image lab-0123456789abcdef, ") for line in drivers)
    assert "ok guest driver ixgbe (lab image lab-0123456789abcdef, kernel 6.1.0-fake), firmware: none" in lines
    assert (
        "ok guest driver r8169 (lab image lab-0123456789abcdef, kernel 6.1.0-fake), firmware: rtl_nic/rtl8168h-2.fw "
        "… rtl_nic/rtl8168g-3.fw (all 2 in the image)" in lines
    )
    assert "a run would refuse" not in out


def test_the_doctor_fails_a_card_the_image_has_no_driver_for(tmp_path, monkeypatch, doctor, capsys):
    fewer = {i: m for i, m in REAL_CARDS.items() if m != "sky2"}
    monkeypatch.setenv("NICLAB_LAB_IMAGE", str(fake_lab_image(tmp_path / "lab-fewer", fewer)))
    assert doctor() == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "FAIL guest driver no driver for 11ab:4364 in the lab image lab-0123456789abcdef, kernel 6.1.0-fake" in out
    assert "fix: check the card's PCI ID (lspci -nn)" in out
    assert "a run would refuse card 88e8056 (0000:12:00.0) on rig1: no driver for 11ab:4364" in out


def test_without_a_built_lab_image_the_doctor_says_so_and_checks_the_rest(tmp_path, monkeypatch, doctor, capsys):
    monkeypatch.delenv("NICLAB_LAB_IMAGE", raising=False)
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "empty-cache"))
    assert find_image(LAB_RECIPE) is None
    assert doctor() == 0
    out = capsys.readouterr().out
    assert "guest driver" not in out.replace("guest drivers not checked", "")
    assert "guest drivers not checked: the lab image is not built (niclab image build lab)" in out


def test_a_lab_run_checks_the_cards_drivers_against_the_lab_image(lab_image, tmp_path, monkeypatch, data_dir):
    lab = load_inventory(data_dir / "lab" / "real-cards.yaml")
    with lab.models_known():
        topology = parse(SCENARIO.format(a="pci-8086-1533", b="pci-10ec-8168"), "s.yaml").cells[0].scenario.topology()
        backend = get_backend(options=BackendOptions(lab=lab))
        assert backend.check(topology) is None
        lines = backend.describe(topology, tmp_path / "dry")
        # the node asks 256 MiB; the lab image's initramfs needs its manifest's min_memory_mib
        assert '<memory unit="MiB">448</memory>' in (tmp_path / "dry" / "a.xml").read_text()
        assert (
            "card rtl8111 (10ec:8168, 0000:1d:00.0 on rig1): guest driver r8169 (lab image lab-0123456789abcdef, "
            "kernel 6.1.0-fake), firmware: rtl_nic/rtl8168h-2.fw … rtl_nic/rtl8168g-3.fw (all 2 in the image)"
        ) in lines
        assert any(line.startswith("card i210 (8086:1533, 0000:16:00.0 on rig1): guest driver igb ") for line in lines)
        fewer = {i: m for i, m in REAL_CARDS.items() if m != "sky2"}
        monkeypatch.setenv("NICLAB_LAB_IMAGE", str(fake_lab_image(tmp_path / "lab-fewer", fewer)))
        sky2 = parse(SCENARIO.format(a="pci-11ab-4364", b="pci-10de-0057"), "s.yaml").cells[0].scenario.topology()
        assert "card 88e8056 (11ab:4364, 0000:12:00.0 on rig1): the lab image lab-0123456789abcdef (kernel " in (
            get_backend(options=BackendOptions(lab=lab)).check(sky2) or ""
        )


def test_a_card_a_scenarios_driver_gives_a_module_is_not_refused_and_the_dry_run_names_that_driver(
    lab_image, tmp_path, monkeypatch, data_dir
):
    lab = load_inventory(data_dir / "lab" / "real-cards.yaml")
    text = SCENARIO.format(a="pci-11ab-4364", b="pci-10de-0057").replace(
        "}}\nbenchmarks", "}, driver: {a: {dkms: r8168-dkms}, b: in-tree}}\nbenchmarks"
    )
    fewer = {i: m for i, m in REAL_CARDS.items() if m != "sky2"}  # no module of the image drives a's card
    monkeypatch.setenv("NICLAB_LAB_IMAGE", str(fake_lab_image(tmp_path / "lab-fewer", fewer)))
    with lab.models_known():
        topology = parse(text, "s.yaml").cells[0].scenario.topology()
        backend = get_backend(options=BackendOptions(lab=lab))
        assert backend.check(topology) is None  # the driver's own aliases are checked once it is built
        lines = backend.describe(topology, tmp_path / "dry")
        assert (
            "card 88e8056 (11ab:4364, 0000:12:00.0 on rig1): guest driver from the scenario's driver: "
            "dkms:r8168-dkms (in place of none; built for the node's kernel when the run starts)"
        ) in lines
        # without the driver: setting the card is refused, as before
        plain = parse(text.replace(", driver: {a: {dkms: r8168-dkms}, b: in-tree}", ""), "s.yaml")
        refused = backend.check(plain.cells[0].scenario.topology()) or ""
        assert "card 88e8056 (11ab:4364, 0000:12:00.0 on rig1): the lab image" in refused


def test_a_driver_for_cards_named_by_their_pci_id_alone_goes_with_that_id(data_dir):
    lab = load_inventory(data_dir / "lab" / "real-cards.yaml")
    text = SCENARIO.format(a="pci-10ec-8168", b="pci-10ec-8168").replace(
        "}}\nbenchmarks", "}, driver: {dkms: r8168-dkms}}\nbenchmarks"
    )
    with lab.models_known():
        topology = parse(text, "s.yaml").cells[0].scenario.topology()
    # the guest binds the cards of that ID to r8168, whatever module the kernel has for them (r8169)
    assert topology.node("a").drivers == (("10ec:8168", DriverChoice("dkms", "r8168-dkms")),)


def test_a_recipes_initramfs_is_gzip_or_plain_and_not_taken_from_its_parent(repo, tmp_path):
    shutil.copytree(repo / "images" / "micro", tmp_path / "micro")
    assert load_recipe(tmp_path / "micro").initramfs == "plain"  # micro boots sooner under TCG unpacked
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "recipe.toml").write_text('extends = "micro"\n')
    assert load_recipe(tmp_path / "lab").initramfs == "gzip"  # a layer's modules and firmware stay packed
    (tmp_path / "lab" / "recipe.toml").write_text('extends = "micro"\ninitramfs = "zstd"\n')
    with pytest.raises(NiclabError, match=r"lab/recipe.toml: initramfs = 'zstd': it is one of gzip, plain"):
        load_recipe(tmp_path / "lab")
