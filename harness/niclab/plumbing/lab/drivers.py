"""The driver and firmware a card gets in a lab guest: read from the lab image's own modules.alias.

A card's modalias (or its PCI ID) is matched against the table the lab image's build left beside its
initramfs, as modprobe would (niclab.model.lab.modalias); the image's manifest says which firmware files it
has (docs/lab.md, "The lab image").
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from niclab.base.errors import NiclabError
from niclab.model import nics
from niclab.model.lab.inventory import Card, Inventory
from niclab.model.lab.match import Placement
from niclab.model.lab.modalias import NETWORK_CLASS, Alias, PciDevice, drivers_for, parse_aliases, parse_builtin_aliases
from niclab.plumbing.image.store import LAB_RECIPE, Image


@dataclass(frozen=True)
class GuestDriver:
    """What the guest loads for one device: its module(s), and the firmware files the first one names."""

    device: str  # the PCI ID or modalias asked about
    modules: tuple[str, ...]  # every module whose alias matches; the first is the one shown
    builtin: bool  # the first is built into the kernel
    firmware: dict[str, bool] = field(default_factory=dict)  # file -> whether the image has it

    @property
    def module(self) -> str | None:
        return self.modules[0] if self.modules else None

    @property
    def missing_firmware(self) -> list[str]:
        return [name for name, present in self.firmware.items() if not present]

    def describe_firmware(self) -> str:
        """'none', the one file and where it is, or how many of the files the module names the image has."""
        if not self.firmware:
            return "none"
        names = list(self.firmware)
        if len(names) == 1:
            return f"{names[0]} ({'in the image' if self.firmware[names[0]] else 'NOT in the image'})"
        missing = self.missing_firmware
        have = (
            f"all {len(names)} in the image"
            if not missing
            else f"{len(names) - len(missing)} of {len(names)} in the image"
        )
        return f"{names[0]} … {names[-1]} ({have})"


class DriverTable:
    """The lab image's alias table and its modules' firmware: which module a device gets, and what it loads."""

    def __init__(self, image: Image):
        self.image = image
        alias_file = image.directory / "modules.alias"
        if not alias_file.is_file():
            raise NiclabError(
                f"image {image.id} ({image.directory}) has no modules.alias beside its initramfs: it was built before "
                "images kept it; run `niclab image build --force " + image.name + "`"
            )
        builtin = image.directory / "modules.builtin.modinfo"
        self.aliases: list[Alias] = parse_aliases(alias_file.read_text(errors="replace"))
        if builtin.is_file():
            self.aliases += parse_builtin_aliases(builtin.read_bytes())
        self.firmware: dict[str, dict[str, bool]] = image.manifest.get("module_firmware", {})

    @property
    def kernel(self) -> str:
        return str(self.image.manifest.get("kernel_version", "?"))

    def resolve(self, device: str, pci_class: int | None = None) -> GuestDriver:
        """The driver for a PCI ID ("8086:10fb", with the PCI class if known) or a modalias ("pci:v...")."""
        try:
            parsed = PciDevice.parse(device, pci_class)
        except ValueError as exc:
            raise NiclabError(str(exc)) from None
        found = drivers_for(parsed, self.aliases)
        if not found:
            return GuestDriver(device, (), False)
        first = found[0]
        return GuestDriver(
            device, tuple(a.module for a in found), first.builtin, dict(self.firmware.get(first.module, {}))
        )


def card_pci_id(lab: Inventory, card: Card) -> str | None:
    """The card's PCI ID as the inventory gives it: its own pci_id, else its model's."""
    if card.pci_id is not None:
        return card.pci_id
    spec = lab.models.get(card.model)
    found = nics.lookup(card.model)
    return spec.pci_id if spec is not None else (found.pci_id if found else None)


def placed_drivers(
    lab: Inventory,
    placement: Placement,
    tables: Mapping[str, DriverTable],
    asked: Collection[tuple[str, int, int]] = (),
) -> tuple[dict[tuple[str, int, int], GuestDriver], list[str]]:
    """Each placed port's driver in its node's guest (`tables[node]`: its image's), by the card's PCI ID, and
    the problems: a card whose PCI ID no module of the image matches, unless a scenario's `driver:` gives it
    one (`asked`: those ports; the run checks that driver's aliases when it has built it)."""
    found: dict[tuple[str, int, int], GuestDriver] = {}
    problems = []
    for key, card in placement.cards.items():
        pci_id = card_pci_id(lab, card)
        if pci_id is None:
            continue
        table = tables[key[0]]
        driver = table.resolve(pci_id, NETWORK_CLASS)
        found[key] = driver
        if driver.module is None and key not in asked:
            problems.append(
                f"card {card.id} ({pci_id}, {card.pci} on {card.host}): the lab image {table.image.id} "
                f"(kernel {table.kernel}) has no driver for {pci_id}; check the card's PCI ID (lspci -nn), or boot "
                "a kernel that has its driver (a scenario's kernel: {build: ...})"
            )
    return found, problems


def guest_driver_lines(
    lab: Inventory, placement: Placement, image: Image | None, asked: Mapping[tuple[str, int, int], str] | None = None
) -> list[str]:
    """What `run --dry-run` says of each placed card: the driver and firmware its guest gets. `asked`: port ->
    the driver a scenario's `driver:` gives it instead (built for the node's kernel when the run starts)."""
    if image is None:
        return [f"guest drivers: found when the lab image is built (niclab image build {LAB_RECIPE})"]
    table = DriverTable(image)
    found, _ = placed_drivers(lab, placement, {node: table for node, _, _ in placement.cards}, asked or {})
    lines = []
    for key, driver in found.items():
        card = placement.cards[key]
        where = f"card {card.id} ({driver.device}, {card.pci} on {card.host})"
        if key in (asked or {}):
            lines.append(
                f"{where}: guest driver from the scenario's driver: {(asked or {})[key]} (in place of "
                f"{driver.module or 'none'}; built for the node's kernel when the run starts)"
            )
        elif driver.module is None:
            lines.append(f"{where}: NO guest driver in the lab image {image.id}")
        else:
            lines.append(
                f"{where}: guest driver {driver.module} (lab image {image.id}, kernel {table.kernel}), "
                f"firmware: {driver.describe_firmware()}"
            )
    return list(dict.fromkeys(lines))
