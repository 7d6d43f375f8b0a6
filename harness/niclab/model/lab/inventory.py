"""A lab inventory (`lab.yaml`): the lab's hosts, NIC models, cards and the cables between them.

    name: nic-lab
    hosts:
      rig1: {libvirt: qemu:///system, address: 192.0.2.1, capacity: {cpus: 8, memory_mib: 16384}}
    models:                       # NIC models beyond the catalog (`niclab nics`)
      x520: {driver: ixgbe, pci_id: "8086:10fb", max_mtu: 9710, card: Intel X520-DA2,
             speed_mbps: 10000, emulated_by: e1000}
      bf2: {driver: mlx5_core, pci_id: "15b3:a2d6", allow_class: "0x0200"}
    cards:
      - {id: intel-a, host: rig1, pci: "0000:03:00.0", model: e1000, name: Intel PRO/1000 MT, price: 45}
      - {id: intel-b, host: rig1, pci: "0000:04:00.0", model: e1000, name: Intel PRO/1000 MT, price: 45}
    cables:
      - [intel-a, intel-b]        # a crossover cable between these two ports

A host's `address` is the IP address it uses for UDP tunnels to other hosts:
the cables between emulated nodes (`--emulated`) that sit on two hosts. Its
`capacity` is what niclab may use there for emulated nodes at once (vCPUs and
memory, summed over the domains of every cell running there); a host
without one takes one cell at a time (niclab.model.lab.spread).

A card's `model` is a catalog model or one of `models`; a scenario's `nic:`
may then name it (niclab.model.nics.extra_models). A card may instead give
its PCI ID alone (`{id: x520-a, host: rig1, pci: "0000:03:00.0", pci_id:
"8086:10fb"}`): it then has the implicit model pci-8086-10fb (1500 MTU,
1000 Mb/s, no emulated stand-in), whose driver is the one the lab guest
image's modules.alias gives that ID (niclab.plumbing.lab.drivers). A card
with both says the model's PCI ID again. An inventory that still says
`class:` or `classes:` (the old names of `model:` and `models:`) is told to
rename them. Problems are reported like a scenario's: FILE:LINE:COL: path:
message; hint. niclab.model.lab.match maps a cell's cables onto these cards
and cables.

An inventory comes from other people and lab mode runs as root, so what
becomes a file name, a libvirt name or a URI is checked here: host names and
model names are plain names, PCI addresses and IDs are matched whole (a
trailing newline is not a match), and a host's libvirt URI is one of the
transports qemu, qemu+ssh, qemu+tls or qemu+unix, with a plain host and user
and no parameter that makes libvirt run a program or open another socket
(command=, socket=, netcat=, ...) unless the caller allows URI parameters
(`--allow-uri-params`): the ext transport, or those parameters, would run
that program as root. A card whose PCI class is not a network controller is
passed through only with its model's `allow_class:` (niclab.model.lab.pciclass).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from niclab.base.errors import UsageError
from niclab.base.problems import (
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
from niclab.base.yamlpos import YamlError, load
from niclab.model import nics
from niclab.model.lab.pciclass import NEVER_TEXT, PCI_ADDRESS, AllowedClass
from niclab.model.nics import NicModel
from niclab.model.scenario.template import decode

PCI_ID_PATTERN = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{4}"
HOST_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")  # a lease file's name and a log's: no /, no dots, no newline
MODEL_NAME = re.compile(r"[a-z0-9][a-z0-9_.+-]{0,62}")  # a NIC model's name in scenarios and cell ids
LOCAL_URI = "qemu:///system"
URI_TRANSPORTS = ("qemu", "qemu+ssh", "qemu+tls", "qemu+unix")
# Parameters of a libvirt URI that only choose among libvirt's own ways to connect and check the peer.
# Any other (command=, socket=, netcat=, and those libvirt adds later) needs --allow-uri-params.
URI_SAFE_PARAMETERS = frozenset(
    {"no_verify", "no_tty", "known_hosts", "known_hosts_verify", "sshauth", "keyfile", "pkipath", "tls_priority"}
)
_URI_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*|\[[0-9A-Fa-f:.]+\]")  # a name or address, never -oOption
_URI_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_URI_PATH = re.compile(r"/(system|session)?")
ALLOW_URI_PARAMS = "allow_uri_params"  # the validation context's key: --allow-uri-params was given


def _host_part(netloc: str) -> str:
    """The host of user@host:port, an IPv6 address with its brackets."""
    rest = netloc.rpartition("@")[2]
    return rest[: rest.index("]") + 1] if rest.startswith("[") and "]" in rest else rest.partition(":")[0]


def check_uri(uri: str, allow_params: bool = False) -> tuple[str, str] | None:
    """Why a lab host's libvirt URI is refused, and the hint; None if it is accepted."""
    shown_uri = shown(uri)
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        return f"{shown_uri} is not a libvirt URI", "write e.g. qemu:///system or qemu+ssh://root@rig2/system"
    if not uri.isprintable() or any(ch.isspace() for ch in uri):
        return f"{shown_uri} holds a space or a control character", "write the URI on one line, without spaces"
    if parts.scheme not in URI_TRANSPORTS or "://" not in uri:
        return (
            f"{shown_uri} uses the transport {shown(parts.scheme or uri)}",
            f"a lab host is reached through {', '.join(URI_TRANSPORTS)} (the ext transport would run a program "
            "as the user niclab runs as, root in lab mode)",
        )
    if parts.fragment:
        return f"{shown_uri} has a #fragment", "drop it"
    if (parts.username is not None and not _URI_USER.fullmatch(parts.username)) or parts.password is not None:
        return f"{shown_uri} has an odd user part", "write a plain user name, e.g. qemu+ssh://root@rig2/system"
    if parts.hostname is not None and not _URI_HOST.fullmatch(_host_part(parts.netloc)):
        return f"{shown_uri} has an odd host part", "write a host name or an address, e.g. qemu+ssh://rig2/system"
    if port is not None and parts.scheme == "qemu":
        return f"{shown_uri} names a port for a local connection", "drop the port"
    if not _URI_PATH.fullmatch(parts.path):
        return f"{shown_uri} has the path {shown(parts.path)}", "write /system (or /session)"
    # as libvirt reads them (virURIParseParams): pairs split at & and at ;, names %-unescaped and compared
    # without regard to case (Command= is command=)
    params = [unquote(pair.partition("=")[0]).lower() for pair in re.split(r"[&;]", parts.query) if pair]
    unsafe = sorted({name for name in params if name not in URI_SAFE_PARAMETERS})
    if unsafe and not allow_params:
        names = ", ".join(f"{name if name.isprintable() else repr(name)}=" for name in unsafe)
        return (
            f"{shown_uri} has the parameter{'s' if len(unsafe) > 1 else ''} {names}, which "
            f"{'make' if len(unsafe) > 1 else 'makes'} libvirt run a program or open another socket "
            "as the user niclab runs as (root in lab mode)",
            f"drop {'them' if len(unsafe) > 1 else 'it'}, or pass --allow-uri-params if you trust this inventory",
        )
    return None


class InventoryError(ScenarioError):
    """One or more problems in a lab inventory, each with its position."""


class Capacity(BaseModel):
    """What niclab may use on a host for emulated nodes at once: vCPUs and memory, over all its domains."""

    model_config = ConfigDict(extra="forbid")

    cpus: int = Field(ge=1, le=4096)
    memory_mib: int = Field(ge=64, le=64 * 1024 * 1024)


class Host(BaseModel):
    model_config = ConfigDict(extra="forbid")

    libvirt: str = Field(LOCAL_URI, description="the libvirt URI of this host, e.g. qemu+ssh://root@rig2/system")
    address: str | None = Field(None, description="the IP address this host uses for UDP tunnels to other hosts")
    capacity: Capacity | None = Field(
        None, description="what emulated nodes may use there at once; without it, one cell at a time"
    )

    @field_validator("address", mode="before")
    @classmethod
    def _address(cls, value: Any) -> Any:
        try:
            parsed = ipaddress.ip_address(value) if isinstance(value, str) else None
        except ValueError:
            parsed = None
        if parsed is None or value != value.strip():
            raise Problems(
                [
                    Problem(
                        (),
                        f"{shown(value)} is not an IP address",
                        "write the address other hosts reach this one at, e.g. 192.0.2.2 (an address, not a name: "
                        "QEMU would resolve a name on each host)",
                    )
                ]
            )
        if parsed.is_unspecified or parsed.is_multicast:
            raise Problems(
                [Problem((), f"{parsed} is not one host's address", "write the address other hosts reach it at")]
            )
        return str(parsed)

    @field_validator("libvirt")
    @classmethod
    def _uri(cls, value: str, info: ValidationInfo) -> str:
        allow = bool((info.context or {}).get(ALLOW_URI_PARAMS))
        if (refused := check_uri(value, allow)) is not None:
            raise Problems([Problem((), *refused)])
        return value

    @property
    def local(self) -> bool:
        """Whether the host is the machine niclab runs on (its sysfs is ours to read and bind)."""
        return "://" in self.libvirt and self.libvirt.split("://", 1)[1].startswith("/")


class ModelSpec(BaseModel):
    """A NIC model the catalog lacks: what the card is, and which emulated model stands in for it."""

    model_config = ConfigDict(extra="forbid")

    driver: str = Field(min_length=1)
    pci_id: str
    max_mtu: int = Field(1500, ge=68, le=65535)
    card: str = ""
    speed_mbps: int = Field(1000, ge=1)
    module: str = ""
    emulated_by: str = ""
    notes: str = ""
    allow_class: AllowedClass | None = Field(
        None, description="a PCI class other than network (0x02) that cards of this model may report, e.g. 0x1200"
    )

    @field_validator("allow_class", mode="before")
    @classmethod
    def _allow_class(cls, value: Any) -> Any:
        if value is None or isinstance(value, AllowedClass):
            return value
        parsed = AllowedClass.parse(value) if isinstance(value, str) else None
        if parsed is not None and (kind := parsed.forbidden()) is not None:
            raise Problems(
                [
                    Problem(
                        (),
                        f"allow_class {parsed} would let niclab pass a {kind} through",
                        f'{NEVER_TEXT}; allow the card\'s own class (e.g. "0x1200")',
                    )
                ]
            )
        if parsed is None:
            raise Problems(
                [
                    Problem(
                        (),
                        f"{shown(value)} is not a PCI class",
                        "write it in quotes as 0x and 2, 4 or 6 hex digits (class, subclass, interface) as "
                        'lspci -n shows it, e.g. "0x1200"',
                    )
                ]
            )
        return parsed

    @field_validator("pci_id")
    @classmethod
    def _pci_id(cls, value: str) -> str:
        if not re.fullmatch(PCI_ID_PATTERN, value):
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
                        (), f"{shown(value)} is not an emulated model", f"{hint + ' ' if hint else ''}see niclab nics"
                    )
                ]
            )
        return nics.get(value).name if value else value


class Card(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=NAME_PATTERN)
    host: str
    pci: str
    model: str = ""
    pci_id: str | None = Field(None, description="vendor:device, for a card named without a model")
    name: str = ""
    price: float | None = Field(None, ge=0)

    @field_validator("pci_id")
    @classmethod
    def _pci_id(cls, value: str | None) -> str | None:
        return None if value is None else ModelSpec._pci_id(value)

    @field_validator("pci")
    @classmethod
    def _pci(cls, value: str) -> str:
        if not PCI_ADDRESS.fullmatch(value.lower()):
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
    models: dict[str, ModelSpec] = Field(default_factory=dict)
    cards: list[Card] = Field(default_factory=list)
    cables: list[list[str]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, data: Any) -> Any:
        """An inventory written when a card's model was its class: one problem per old key, naming the fix."""
        if not isinstance(data, dict):
            return data
        problems = []
        if "classes" in data:
            problems.append(
                Problem(
                    ("classes",),
                    "a lab names its own NIC models under models: (classes: is its old name)",
                    "rename it",
                    at_key=True,
                )
            )
        cards = data.get("cards")
        for i, card in enumerate(cards if isinstance(cards, list) else []):
            if isinstance(card, dict) and "class" in card:
                problems.append(
                    Problem(
                        ("cards", i, "class"),
                        "a card names its model with model: (class: is its old name)",
                        "rename it",
                        at_key=True,
                    )
                )
        if problems:
            raise Problems(problems)
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Inventory:
        problems = [
            *self._host_name_problems(),
            *self._model_name_problems(),
            *self._card_problems(),
            *self._cable_problems(),
        ]
        if problems:
            raise Problems(problems)
        return self

    def _host_name_problems(self) -> Iterator[Problem]:
        """Host names become file names and log names: plain names only."""
        for name in self.hosts:
            if not HOST_NAME.fullmatch(name):
                yield Problem(
                    ("hosts", name),
                    f"host name {shown(name)} must match [a-z0-9-]+ (at most 63 characters)",
                    "name the host with lowercase letters, digits and dashes; its address goes in libvirt:",
                    at_key=True,
                )

    def _model_name_problems(self) -> Iterator[Problem]:
        """Model names are plain names, and none is a catalog model's."""
        for name in self.models:
            if not MODEL_NAME.fullmatch(name):
                yield Problem(
                    ("models", name),
                    f"model name {shown(name)} must match [a-z0-9_.+-]+ (at most 63 characters)",
                    "name the model with lowercase letters, digits, dots and dashes",
                    at_key=True,
                )
            elif nics.is_emulated(name):
                yield Problem(
                    ("models", name),
                    f"{shown(name)} is a catalog model already",
                    "give the lab's model another name, or drop it and use the catalog's",
                    at_key=True,
                )

    def _card_problems(self) -> Iterator[Problem]:
        """Each card's problems in turn: an id or a PCI function taken already, an unknown host, its model.

        One card after the other, not one check after the other: problems an alias
        (*card) places at one spot are reported in the cards' order."""
        known = {m.name for m in nics.CATALOG} | set(self.models)
        seen_ids: dict[str, int] = {}
        seen_pci: dict[tuple[str, str], str] = {}
        for i, card in enumerate(self.cards):
            if card.id in seen_ids:
                yield Problem(("cards", i, "id"), f"card {shown(card.id)} twice (also cards[{seen_ids[card.id]}])")
            seen_ids.setdefault(card.id, i)
            if card.host not in self.hosts:
                yield Problem(
                    ("cards", i, "host"),
                    f"unknown host {shown(card.host)}",
                    did_you_mean(card.host, self.hosts) or f"hosts are: {listing(self.hosts) or 'none'}",
                )
            if (card.host, card.pci) in seen_pci:
                yield Problem(
                    ("cards", i, "pci"),
                    f"{card.pci} on {card.host} is card {shown(seen_pci[(card.host, card.pci)])} already",
                    "each card is one PCI function: check lspci -D on the host",
                )
            seen_pci.setdefault((card.host, card.pci), card.id)
            yield from self._card_model_problems(i, card, known)

    def _card_model_problems(self, i: int, card: Card, known: set[str]) -> Iterator[Problem]:
        """What is wrong with the card's model and PCI ID; and, once checked, the card names its model by the
        model's canonical name (or the implicit model of its PCI ID)."""
        if not card.model:
            if card.pci_id is None:
                yield Problem(
                    ("cards", i),
                    f"card {shown(card.id)} has neither model: nor pci_id:",
                    'give its PCI ID as lspci -nn shows it (pci_id: "8086:10fb"), or a NIC model',
                )
            else:
                card.model = implicit_model(card.pci_id)
            return
        canonical = nics.ALIASES.get(card.model, card.model)
        if canonical in known and card.pci_id is not None:
            spec = self.models.get(canonical)
            expected = spec.pci_id if spec is not None else nics.get(canonical).pci_id
            if expected.lower() != card.pci_id:
                yield Problem(
                    ("cards", i, "pci_id"),
                    f"card {shown(card.id)} is {card.pci_id}, but {canonical} cards are {expected}",
                    "drop pci_id: (the model gives it) or the model: (the card then gets the implicit model "
                    f"{implicit_model(card.pci_id)})",
                )
        if canonical not in known:
            hint = did_you_mean(card.model, sorted(known))
            yield Problem(
                ("cards", i, "model"),
                f"unknown NIC model {shown(card.model)}",
                f"{hint + ' ' if hint else ''}a model is a catalog one (niclab nics) or one under models:",
            )
        else:
            card.model = canonical

    def _cable_problems(self) -> Iterator[Problem]:
        """Each cable joins two different known cards, and a card takes one cable."""
        card_ids = dict.fromkeys(card.id for card in self.cards)
        cabled: dict[str, int] = {}
        for i, cable in enumerate(self.cables):
            if len(cable) != 2:
                yield Problem(("cables", i), f"a cable has two ends, not {len(cable)}", "write [card-a, card-b]")
                continue
            if cable[0] == cable[1]:
                yield Problem(("cables", i), f"a cable from card {shown(cable[0])} to itself")
                continue
            for j, end in enumerate(cable):
                if end not in card_ids:
                    yield Problem(
                        ("cables", i, j),
                        f"unknown card {shown(end)}",
                        did_you_mean(end, card_ids) or f"cards are: {listing(card_ids) or 'none'}",
                    )
                elif end in cabled:
                    yield Problem(
                        ("cables", i, j),
                        f"card {shown(end)} is on cable {cabled[end]} already",
                        "a port takes one cable",
                    )
                else:
                    cabled[end] = i

    # -- what the rest of niclab asks -------------------------------------

    def card(self, card_id: str) -> Card:
        return next(card for card in self.cards if card.id == card_id)

    def allowed_class(self, card_id: str) -> AllowedClass | None:
        """The PCI class beyond network controllers the card may report (its model's allow_class)."""
        spec = self.models.get(self.card(card_id).model)
        return spec.allow_class if spec is not None else None

    def implicit_models(self) -> dict[str, str]:
        """The models of cards named by PCI ID alone: model name -> PCI ID (models: of that name win)."""
        return {
            card.model: card.pci_id
            for card in self.cards
            if card.pci_id is not None and card.model == implicit_model(card.pci_id)
            if card.model not in self.models
        }

    def nic_models(self) -> list[NicModel]:
        implicit = [
            NicModel(
                name,
                "",  # the lab image's modules.alias says which (niclab.plumbing.lab.drivers)
                "",
                pci_id,
                1500,
                f"PCI {pci_id}",
                1000,
                "a card named by its PCI ID: its driver is the one the lab image's modules.alias gives that ID",
            )
            for name, pci_id in self.implicit_models().items()
        ]
        return implicit + [
            NicModel(
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
            for name, spec in self.models.items()
        ]

    @contextmanager
    def models_known(self) -> Iterator[None]:
        """Inside the block, scenarios may name this lab's NIC models."""
        with nics.extra_models(self.nic_models()):
            yield

    def prices(self) -> dict[str, float]:
        """Price per NIC model, from the cards that give one (the first price of a model wins)."""
        out: dict[str, float] = {}
        for card in self.cards:
            if card.price is not None:
                out.setdefault(card.model, card.price)
        return out


def implicit_model(pci_id: str) -> str:
    """The model of a card named by its PCI ID alone: 8086:10fb -> pci-8086-10fb."""
    return "pci-" + pci_id.lower().replace(":", "-")


def parse_inventory(text: str, display: str, *, allow_uri_params: bool = False) -> Inventory:
    with suggestion_budget():
        try:
            raw, positions = load(text)
        except YamlError as exc:
            raise InventoryError(display, [(exc.position, Problem(exc.path, exc.message, exc.hint))]) from None
        if not isinstance(raw, dict):
            problem = Problem((), "a lab inventory is a mapping with hosts, cards and cables", "see docs/lab.md")
            raise InventoryError(display, [(positions.of(()), problem)])
        try:
            return Inventory.model_validate(raw, context={ALLOW_URI_PARAMS: allow_uri_params})
        except ValidationError as exc:
            problems = pydantic_problems(exc.errors(), model=Inventory)
            raise InventoryError(display, [(positions.of(p.path, p.at_key), p) for p in problems]) from None


def load_inventory(path: Path, *, allow_uri_params: bool = False) -> Inventory:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such lab inventory") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the lab inventory ({exc.strerror or exc})") from None
    return parse_inventory(decode(data, str(path)), str(path), allow_uri_params=allow_uri_params)
