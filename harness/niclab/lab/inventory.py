"""A lab inventory (`lab.yaml`): the lab's hosts, card classes, cards and the cables between them.

    name: nic-lab
    hosts:
      rig1: {libvirt: qemu:///system}
    classes:                      # card classes beyond the catalog (`niclab nics`)
      x520: {driver: ixgbe, pci_id: "8086:10fb", max_mtu: 9710, card: Intel X520-DA2,
             speed_mbps: 10000, emulated_by: e1000}
    cards:
      - {id: intel-a, host: rig1, pci: "0000:03:00.0", class: e1000, name: Intel PRO/1000 MT, price: 45}
      - {id: intel-b, host: rig1, pci: "0000:04:00.0", class: e1000, name: Intel PRO/1000 MT, price: 45}
    cables:
      - [intel-a, intel-b]        # a crossover cable between these two ports

A card's `class` is a catalog class or one of `classes`; a scenario's `nic:`
may then name it (niclab.nics.extra_classes). Problems are reported like a
scenario's: FILE:LINE:COL: path: message; hint. niclab.lab.match maps a
cell's cables onto these cards and cables.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from niclab import nics
from niclab.errors import UsageError
from niclab.nics import CardClass
from niclab.scenario.errors import (
    NAME_PATTERN,
    Problem,
    Problems,
    ScenarioError,
    did_you_mean,
    listing,
    pydantic_problems,
    shown,
    suggestion_budget,
)
from niclab.scenario.template import decode
from niclab.yamlpos import YamlError, load

PCI_PATTERN = r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$"
LOCAL_URI = "qemu:///system"


class InventoryError(ScenarioError):
    """One or more problems in a lab inventory, each with its position."""


class Host(BaseModel):
    model_config = ConfigDict(extra="forbid")

    libvirt: str = Field(LOCAL_URI, description="the libvirt URI of this host, e.g. qemu+ssh://root@rig2/system")

    @property
    def local(self) -> bool:
        """Whether the host is the machine niclab runs on (its sysfs is ours to read and bind)."""
        return "://" in self.libvirt and self.libvirt.split("://", 1)[1].startswith("/")


class ClassSpec(BaseModel):
    """A card class the catalog lacks: what the card is, and which emulated class stands in for it."""

    model_config = ConfigDict(extra="forbid")

    driver: str = Field(min_length=1)
    pci_id: str
    max_mtu: int = Field(1500, ge=68, le=65535)
    card: str = ""
    speed_mbps: int = Field(1000, ge=1)
    module: str = ""
    emulated_by: str = ""
    notes: str = ""

    @field_validator("pci_id")
    @classmethod
    def _pci_id(cls, value: str) -> str:
        if not re.match(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{4}$", value):
            raise Problems(
                [
                    Problem(
                        (),
                        f"{shown(value)} is not a PCI ID",
                        "write vendor:device as lspci -nn shows it, e.g. 8086:10fb",
                    )
                ]
            )
        return value.lower()

    @field_validator("emulated_by")
    @classmethod
    def _emulated(cls, value: str) -> str:
        if value and not nics.is_emulated(value):
            hint = did_you_mean(value, [m.name for m in nics.CATALOG])
            raise Problems(
                [
                    Problem(
                        (), f"{shown(value)} is not an emulated class", f"{hint + ' ' if hint else ''}see niclab nics"
                    )
                ]
            )
        return nics.get(value).name if value else value


class Card(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: str = Field(pattern=NAME_PATTERN)
    host: str
    pci: str
    class_name: str = Field(alias="class")
    name: str = ""
    price: float | None = Field(None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _model_is_class(cls, data: Any) -> Any:
        if isinstance(data, dict) and "model" in data and "class" not in data:
            raise Problems([Problem(("model",), "a card names its class with class:, not model:", at_key=True)])
        return data

    @field_validator("pci")
    @classmethod
    def _pci(cls, value: str) -> str:
        if not re.match(PCI_PATTERN, value):
            raise Problems(
                [
                    Problem(
                        (),
                        f"{shown(value)} is not a PCI address",
                        "write domain:bus:slot.function as lspci -D prints it, e.g. 0000:03:00.0",
                    )
                ]
            )
        return value.lower()


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "lab"
    hosts: dict[str, Host] = Field(default_factory=lambda: {"localhost": Host()})
    classes: dict[str, ClassSpec] = Field(default_factory=dict)
    cards: list[Card] = Field(default_factory=list)
    cables: list[list[str]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Inventory:
        problems: list[Problem] = []
        for name in self.classes:
            if nics.is_emulated(name):
                problems.append(
                    Problem(
                        ("classes", name),
                        f"{shown(name)} is a catalog class already",
                        "give the lab's class another name, or drop it and use the catalog's",
                        at_key=True,
                    )
                )
        known = {m.name for m in nics.CATALOG} | set(self.classes)
        seen_ids: dict[str, int] = {}
        seen_pci: dict[tuple[str, str], str] = {}
        for i, card in enumerate(self.cards):
            if card.id in seen_ids:
                problems.append(
                    Problem(("cards", i, "id"), f"card {shown(card.id)} twice (also cards[{seen_ids[card.id]}])")
                )
            seen_ids.setdefault(card.id, i)
            if card.host not in self.hosts:
                problems.append(
                    Problem(
                        ("cards", i, "host"),
                        f"unknown host {shown(card.host)}",
                        did_you_mean(card.host, self.hosts) or f"hosts are: {listing(self.hosts) or 'none'}",
                    )
                )
            if (card.host, card.pci) in seen_pci:
                problems.append(
                    Problem(
                        ("cards", i, "pci"),
                        f"{card.pci} on {card.host} is card {shown(seen_pci[(card.host, card.pci)])} already",
                        "each card is one PCI function: check lspci -D on the host",
                    )
                )
            seen_pci.setdefault((card.host, card.pci), card.id)
            canonical = nics.ALIASES.get(card.class_name, card.class_name)
            if canonical not in known:
                hint = did_you_mean(card.class_name, sorted(known))
                problems.append(
                    Problem(
                        ("cards", i, "class"),
                        f"unknown card class {shown(card.class_name)}",
                        f"{hint + ' ' if hint else ''}a class is a catalog one (niclab nics) or one under classes:",
                    )
                )
            else:
                card.class_name = canonical
        cabled: dict[str, int] = {}
        for i, cable in enumerate(self.cables):
            if len(cable) != 2:
                problems.append(
                    Problem(("cables", i), f"a cable has two ends, not {len(cable)}", "write [card-a, card-b]")
                )
                continue
            if cable[0] == cable[1]:
                problems.append(Problem(("cables", i), f"a cable from card {shown(cable[0])} to itself"))
                continue
            for j, end in enumerate(cable):
                if end not in seen_ids:
                    problems.append(
                        Problem(
                            ("cables", i, j),
                            f"unknown card {shown(end)}",
                            did_you_mean(end, seen_ids) or f"cards are: {listing(seen_ids) or 'none'}",
                        )
                    )
                elif end in cabled:
                    problems.append(
                        Problem(
                            ("cables", i, j),
                            f"card {shown(end)} is on cable {cabled[end]} already",
                            "a port takes one cable",
                        )
                    )
                else:
                    cabled[end] = i

        if problems:
            raise Problems(problems)
        return self

    # -- what the rest of niclab asks -------------------------------------

    def card(self, card_id: str) -> Card:
        return next(card for card in self.cards if card.id == card_id)

    def card_classes(self) -> list[CardClass]:
        return [
            CardClass(
                name,
                spec.driver,
                spec.module or spec.driver,
                spec.pci_id,
                spec.max_mtu,
                spec.card or name,
                spec.speed_mbps,
                spec.notes,
                spec.emulated_by,
            )
            for name, spec in self.classes.items()
        ]

    @contextmanager
    def classes_known(self) -> Iterator[None]:
        """Inside the block, scenarios may name this lab's card classes."""
        with nics.extra_classes(self.card_classes()):
            yield

    def prices(self) -> dict[str, float]:
        """Price per card class, from the cards that give one (the first price of a class wins)."""
        out: dict[str, float] = {}
        for card in self.cards:
            if card.price is not None:
                out.setdefault(card.class_name, card.price)
        return out


def parse_inventory(text: str, display: str) -> Inventory:
    with suggestion_budget():
        try:
            raw, positions = load(text)
        except YamlError as exc:
            raise InventoryError(display, [(exc.position, Problem(exc.path, exc.message, exc.hint))]) from None
        if not isinstance(raw, dict):
            problem = Problem((), "a lab inventory is a mapping with hosts, cards and cables", "see docs/lab.md")
            raise InventoryError(display, [(positions.of(()), problem)])
        try:
            return Inventory.model_validate(raw)
        except ValidationError as exc:
            problems = pydantic_problems(exc.errors())
            raise InventoryError(display, [(positions.of(p.path, p.at_key), p) for p in problems]) from None


def load_inventory(path: Path) -> Inventory:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such lab inventory") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the lab inventory ({exc.strerror or exc})") from None
    return parse_inventory(decode(data, str(path)), str(path))
