"""NIC models: what a card is (driver, PCI ID, limits, the real card), apart from how it is realized.

The catalog holds the models QEMU emulates (their max MTU is what the guest driver reports,
tests/integration/test_nic_catalog.py checks it); a lab adds its own inside `extra_models(...)`
(docs/architecture.md, "Backends are plug-ins found by their module, and NIC models are not QEMU's").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class NicModel:
    name: str  # what a scenario writes (nic: e1000)
    driver: str  # the guest driver that binds (ethtool -i)
    module: str  # the kernel module that provides it
    pci_id: str  # vendor:device as the guest sees it
    max_mtu: int  # the largest MTU the driver accepts
    card: str  # the real card the model stands for
    speed_mbps: int  # the card's nominal line rate
    notes: str = ""
    emulated_by: str = ""  # a lab's model: the catalog model that stands in for it on emulated runs


def _i8255x(name: str, pci: str, card: str, notes: str = "") -> NicModel:
    return NicModel(name, "e100", "e100", pci, 1500, card, 100, notes)


_SLOW_TCP = "under TCG its TCP throughput collapses (about 5 % retransmits); UDP and RR are fine"

CATALOG: tuple[NicModel, ...] = (
    NicModel("e1000", "e1000", "e1000", "8086:100e", 16110, "Intel PRO/1000 MT Desktop (82540EM)", 1000),
    NicModel("e1000-82544gc", "e1000", "e1000", "8086:100c", 16110, "Intel PRO/1000 XT (82544GC)", 1000),
    NicModel(
        "e1000-82545em",
        "e1000",
        "e1000",
        "8086:100f",
        16110,
        "Intel PRO/1000 MT Server (82545EM)",
        1000,
    ),
    NicModel("e1000e", "e1000e", "e1000e", "8086:10d3", 9212, "Intel Gigabit CT Desktop (82574L)", 1000),
    _i8255x("i82550", "8086:1209", "Intel PRO/100 S (82550)", _SLOW_TCP),
    _i8255x(
        "i82551",
        "8086:1209",
        "Intel PRO/100 M (82551QM)",
        "needs the e100/d102e_ucode.bin microcode (in the image from firmware-misc-nonfree); " + _SLOW_TCP,
    ),
    _i8255x("i82557a", "8086:1229", "Intel EtherExpress PRO/100B (82557 A-step)"),
    _i8255x("i82557b", "8086:1229", "Intel EtherExpress PRO/100B (82557 B-step)"),
    _i8255x("i82557c", "8086:1229", "Intel EtherExpress PRO/100B (82557 C-step)"),
    _i8255x("i82558a", "8086:1229", "Intel EtherExpress PRO/100+ (82558 A-step)", _SLOW_TCP),
    _i8255x("i82558b", "8086:1229", "Intel EtherExpress PRO/100+ (82558 B-step)", _SLOW_TCP),
    _i8255x("i82559a", "8086:1229", "Intel PRO/100+ Management (82559 A-step)", _SLOW_TCP),
    _i8255x("i82559b", "8086:1229", "Intel PRO/100+ Management (82559 B-step)", _SLOW_TCP),
    _i8255x("i82559c", "8086:1229", "Intel PRO/100+ Management (82559 C-step)", _SLOW_TCP),
    _i8255x("i82559er", "8086:1209", "Intel EtherExpress PRO/100 (82559ER)", _SLOW_TCP),
    _i8255x("i82562", "8086:1209", "Intel PRO/100 VE (82562 LOM)", _SLOW_TCP),
    _i8255x("i82801", "8086:2449", "Intel 82801 (ICH) integrated 10/100", _SLOW_TCP),
    NicModel(
        "rtl8139",
        "8139cp",
        "8139cp",
        "10ec:8139",
        4096,
        "Realtek RTL8139C+ 10/100",
        100,
        "binds 8139cp: 8139too refuses this C+ revision, so the image leaves it out",
    ),
    NicModel("tulip", "tulip", "tulip", "1011:0019", 1500, "DEC 21143 Tulip (as on the LinkSys LNE100TX)", 100),
    NicModel("pcnet", "pcnet32", "pcnet32", "1022:2000", 1500, "AMD PCnet-PCI II (Am79C970A)", 10),
    NicModel("ne2k_pci", "ne2k-pci", "ne2k-pci", "10ec:8029", 1500, "Realtek RTL8029 (NE2000 PCI clone)", 10),
    NicModel("vmxnet3", "vmxnet3", "vmxnet3", "15ad:07b0", 9000, "VMware VMXNET3 paravirtual NIC", 10000),
    NicModel(
        "virtio",
        "virtio_net",
        "virtio_net",
        "1af4:1000",
        65535,
        "virtio-net paravirtual NIC (transitional)",
        10000,
        "EVENT_IDX is off: with it, a UDP flood can wedge the transmit queue under QEMU 7.2 TCG",
    ),
    NicModel(
        "virtio-net-pci-non-transitional",
        "virtio_net",
        "virtio_net",
        "1af4:1041",
        65535,
        "virtio-net paravirtual NIC (modern only)",
        10000,
        "EVENT_IDX is off: with it, a UDP flood can wedge the transmit queue under QEMU 7.2 TCG",
    ),
)

ALIASES = {"virtio-net-pci": "virtio", "virtio-net": "virtio", "e1000-82540em": "e1000"}

_BY_NAME = {model.name: model for model in CATALOG}
_extra: ContextVar[dict[str, NicModel] | None] = ContextVar("extra_models", default=None)


@contextmanager
def extra_models(models: Iterable[NicModel]) -> Iterator[None]:
    """Make a lab's own NIC models known (to scenario checks, lookups) inside the block."""
    token = _extra.set({**(_extra.get() or {}), **{m.name: m for m in models}})
    try:
        yield
    finally:
        _extra.reset(token)


def names() -> list[str]:
    return [model.name for model in CATALOG] + [name for name in _extra.get() or {} if name not in _BY_NAME]


def lookup(name: str) -> NicModel | None:
    name = ALIASES.get(name, name)
    return _BY_NAME.get(name) or (_extra.get() or {}).get(name)


def get(name: str) -> NicModel:
    model = lookup(name)
    if model is None:
        raise KeyError(name)
    return model


def is_emulated(name: str) -> bool:
    """Whether `name` is a catalog model (one QEMU emulates), not only a lab's."""
    return ALIASES.get(name, name) in _BY_NAME


def stand_in(name: str) -> NicModel | None:
    """The catalog model an emulated run uses for `name`: itself, its `emulated_by`, or None."""
    found = lookup(name)
    if found is None:
        return None
    if found.name in _BY_NAME:
        return found
    return _BY_NAME.get(ALIASES.get(found.emulated_by, found.emulated_by))
