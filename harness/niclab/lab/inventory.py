"""A lab inventory: which real cards the lab has, so a cell it cannot realize is known up front.

    name: nic-lab
    cards:
      - {model: e1000, pci: "0000:03:00.0", host: lab1}   # an Intel PRO/1000 MT (82540EM)
      - {model: e1000, pci: "0000:03:00.1", host: lab1}
      - {model: rtl8139, pci: "0000:04:00.0", host: lab1, price: 7.60}

`model` is the catalog model the card is (`niclab nics`). A cell needs one
card per NIC port: each end of each cable of each link. The libvirt backend
that passes these cards through comes in a later issue; today the inventory
tells which cells a lab could realize (pytest --niclab-lab skips the rest).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from niclab import nics
from niclab.errors import UsageError
from niclab.scenario import Scenario


class Card(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    pci: str = Field(pattern=r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
    host: str = "localhost"
    price: float | None = Field(None, ge=0)

    @field_validator("model")
    @classmethod
    def _known(cls, value: str) -> str:
        found = nics.lookup(value)
        if found is None:
            raise ValueError(f"unknown NIC model {value!r}; run 'niclab nics'")
        return found.name


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    cards: list[Card] = Field(default_factory=list)

    def counts(self) -> Counter:
        return Counter(card.model for card in self.cards)

    def lacks(self, scenario: Scenario) -> str | None:
        """Why this lab cannot realize the scenario (a cell), or None if it can."""
        needed = Counter(port.model for port in scenario.topology().ports)
        have = self.counts()
        short = [
            f"{count} {model} (the lab has {have[model]})"
            for model, count in sorted(needed.items())
            if have[model] < count
        ]
        return f"lab {self.name} lacks cards: the cell needs {', '.join(short)}" if short else None


def load_inventory(path: Path) -> Inventory:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"{path}: cannot read the lab inventory ({exc})") from None
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise UsageError(f"{path}: {where}: {first['msg'].removeprefix('Value error, ')}") from None
