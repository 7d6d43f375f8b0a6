"""Moving cards to vfio-pci for a run and back after it, with a journal so a crash loses nothing.

Before a card's first sysfs write its driver and driver_override are journaled (whole, fsynced) in the checked
state directory, until the card is back, so `niclab lab restore` knows every card. Binding goes through
driver_override, never new_id, network controllers only (or an allowed class), and an entry is validated
before it is acted on (docs/architecture.md, "Trust"; docs/lab.md, "Who may write where").
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from niclab.base.errors import NiclabError
from niclab.model.lab.pciclass import PCI_ADDRESS, AllowedClass, describe, is_network, refusal
from niclab.plumbing.lab.statedir import StateDir, UnsafeFile, shown
from niclab.plumbing.lab.sysfs import VFIO_PCI, Sysfs

Sleep = Callable[[float], None]
_INTERVAL = 0.1

MODULE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")  # a driver: "e1000", "vfio-pci", "mlx5_core"
RUN_LIMIT = 1024
_LEFT_ALONE = "left alone: check the card and delete the entry by hand"


class JournalEntry(BaseModel):
    """A card niclab moved: its driver and driver_override before, and what may be restored on it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    pci: str
    driver: str | None  # None: the card was unbound
    driver_override: str | None
    run: str = Field(max_length=RUN_LIMIT)
    time: float = Field(allow_inf_nan=False)
    allow_class: str | None = None  # the inventory's allow_class for the card when it was bound (AllowedClass form)

    @field_validator("pci")
    @classmethod
    def _pci(cls, value: str) -> str:
        if not PCI_ADDRESS.fullmatch(value):
            raise ValueError(f"{shown(value)} is not a PCI address as sysfs names it (0000:03:00.0)")
        return value

    @field_validator("driver", "driver_override")
    @classmethod
    def _module(cls, value: str | None) -> str | None:
        if value is not None and not MODULE_NAME.fullmatch(value):
            raise ValueError(f"{shown(value[:80])} is not a driver's name")
        return value

    @field_validator("run")
    @classmethod
    def _run(cls, value: str) -> str:
        if not value.isprintable():
            raise ValueError("the run's name has unprintable characters")
        return value

    @field_validator("allow_class")
    @classmethod
    def _allow_class(cls, value: str | None) -> str | None:
        if value is not None and ((parsed := AllowedClass.parse(value)) is None or str(parsed) != value):
            raise ValueError(f"{shown(value[:80])} is not a PCI class as 0x and 2, 4 or 6 hex digits")
        return value

    @property
    def allowed(self) -> AllowedClass | None:
        return AllowedClass.parse(self.allow_class) if self.allow_class is not None else None


@dataclass(frozen=True)
class BadEntry:
    """A file in the journal niclab will not act on: the card it is for (its file name when that names
    none) and why (the whole message)."""

    what: str
    error: str


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


class Journal:
    """The cards niclab has moved and not yet put back: one JSON file per card under <state_dir>/vfio.

    Each entry is checked before it is used: its name is <pci>.json for the pci it holds, it has the
    fields niclab writes with the types it writes (JournalEntry), and it is a regular file of the user.
    """

    def __init__(self, state: StateDir):
        self.state = state

    @property
    def dir(self) -> StateDir:
        return self.state.sub("vfio")

    def path(self, pci: str) -> str:
        """The entry's path, for messages."""
        return shown(str(self.state.path / "vfio" / f"{pci}.json"))

    def problem(self, name: str, why: str) -> str:
        return f"journal entry {shown(str(self.state.path / 'vfio' / name))}: {why}; {_LEFT_ALONE}"

    def get(self, pci: str) -> JournalEntry | None:
        """The card's entry, None if it has none; an entry that fails its checks raises (and is left alone)."""
        if not PCI_ADDRESS.fullmatch(pci):
            raise NiclabError(f"{shown(pci)} is not a PCI address as sysfs names it (0000:03:00.0, lowercase)")
        return self._load(f"{pci}.json", pci)

    def _load(self, name: str, pci: str) -> JournalEntry | None:
        try:
            data = self.dir.read(name)
        except UnsafeFile as exc:
            raise NiclabError(self.problem(name, exc.problem)) from None
        if data is None:
            return None
        try:
            entry = JournalEntry.model_validate_json(data)
        except ValidationError as exc:
            raise NiclabError(self.problem(name, _first_problem(exc))) from None
        if entry.pci != pci:
            raise NiclabError(self.problem(name, f"it names card {entry.pci}, not the {pci} of its file name"))
        return entry

    def scan(self) -> list[JournalEntry | BadEntry]:
        """Every entry in name order, each valid or with why not; temp files of an interrupted write aside."""
        found: list[JournalEntry | BadEntry] = []
        for name in self.dir.names():
            if name.startswith(".") and name.endswith(".tmp"):
                continue
            pci = name.removesuffix(".json")
            if pci == name or not PCI_ADDRESS.fullmatch(pci):
                found.append(
                    BadEntry(shown(name), self.problem(name, "its name is not <PCI address>.json (0000:03:00.0.json)"))
                )
                continue
            try:
                entry = self._load(name, pci)
            except NiclabError as exc:
                found.append(BadEntry(pci, str(exc)))
                continue
            if entry is not None:  # gone meanwhile: nothing to do
                found.append(entry)
        return found

    def entries(self) -> list[JournalEntry]:
        """The valid entries."""
        return [entry for entry in self.scan() if isinstance(entry, JournalEntry)]

    def record(self, entry: JournalEntry) -> None:
        """Write the entry durably: a crash leaves either no entry or a whole one."""
        self.dir.write(f"{entry.pci}.json", entry.model_dump_json().encode())

    def drop(self, pci: str) -> None:
        self.dir.unlink(f"{pci}.json")


@dataclass(frozen=True)
class Restored:
    """One card's restore: the driver it is on now, and what went wrong if it is not its original one.
    `pci` is the entry's file name when the entry itself is unusable."""

    pci: str
    driver: str | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _settle(sysfs: Sysfs, pci: str, want: str | None, timeout: float, sleep: Sleep) -> str | None:
    """Wait (up to timeout) for the kernel to bind the card to `want`; the driver it ends on."""
    for _ in range(max(1, round(timeout / _INTERVAL))):
        if (current := sysfs.driver(pci)) == want:
            return current
        sleep(_INTERVAL)
    return sysfs.driver(pci)


def class_refusal(sysfs: Sysfs, pci: str, allowed: AllowedClass | None) -> str | None:
    """Why the device may not go to vfio-pci for its PCI class (None: it may): a network controller, or
    the class the card's inventory model allows."""
    why = refusal(sysfs.pci_class(pci), allowed)
    if why is None:
        return None
    fix = (
        f"its inventory model's allow_class {allowed} does not cover it"
        if allowed is not None
        else "only network cards are passed through (a network card that reports another class, such as a "
        "SmartNIC function, needs allow_class: on its inventory model)"
    )
    return f"card {pci} {why}: {fix}"


def bind_to_vfio(
    sysfs: Sysfs,
    journal: Journal,
    pci: str,
    run: str,
    *,
    allowed: AllowedClass | None = None,
    timeout: float = 5.0,
    sleep: Sleep = time.sleep,
) -> None:
    """Move the card to vfio-pci; on failure put it back (or leave the journal to) and say why.

    A device that is no network controller, and not of the class `allowed` (the inventory's allow_class for
    the card), is refused before anything is journaled or written.
    """
    if not PCI_ADDRESS.fullmatch(pci):
        raise NiclabError(f"{shown(pci)} is not a PCI address as sysfs names it (0000:03:00.0, lowercase)")
    if not sysfs.exists(pci):
        raise NiclabError(f"no PCI device {pci} on this host: check the inventory's pci")
    if (why := class_refusal(sysfs, pci, allowed)) is not None:
        raise NiclabError(why)
    if journal.get(pci) is None:  # an entry left by a crash already holds the true original: keep it
        entry = JournalEntry(
            pci=pci,
            driver=sysfs.driver(pci),
            driver_override=sysfs.driver_override(pci),
            run=run,
            time=time.time(),
            allow_class=str(allowed) if allowed is not None else None,
        )
        journal.record(entry)
    if sysfs.driver(pci) == VFIO_PCI:
        return
    try:
        sysfs.set_driver_override(pci, VFIO_PCI)
        sysfs.unbind(pci)
        sysfs.drivers_probe(pci)
        driver = _settle(sysfs, pci, VFIO_PCI, timeout, sleep)
        if driver != VFIO_PCI:
            raise NiclabError(f"card {pci} did not bind to vfio-pci (it is {driver or 'unbound'}): {_why(sysfs)}")
    except BaseException as exc:
        note = _undo(sysfs, journal, pci, timeout, sleep)
        if isinstance(exc, NiclabError):
            raise NiclabError(f"{exc}; {note}") from None
        raise


def _why(sysfs: Sysfs) -> str:
    if sysfs.driver_loaded(VFIO_PCI):
        return "vfio-pci is loaded but did not take it; `dmesg` says why"
    if sysfs.vfio_available():
        return "the vfio-pci driver is not loaded: run `modprobe vfio-pci`"
    return (
        f"the vfio-pci driver is not loaded and kernel {sysfs.release} has no vfio-pci module (modprobe vfio-pci fails)"
    )


def _undo(sysfs: Sysfs, journal: Journal, pci: str, timeout: float, sleep: Sleep) -> str:
    try:
        restored = restore(sysfs, journal, pci, timeout=timeout, sleep=sleep)
    except NiclabError as exc:
        return f"putting it back failed too ({exc})"
    return f"it is back on {restored.driver or 'no driver'}"


def _unsafe(sysfs: Sysfs, entry: JournalEntry) -> str | None:
    """Why the entry may not be acted on (None: it may): no such device, a device niclab may not bind,
    or a device in a state niclab's binding never leaves a card in."""
    pci = entry.pci
    if not sysfs.exists(pci):
        return f"there is no PCI device {pci} under /sys/bus/pci/devices"
    code = sysfs.pci_class(pci)
    if (why := refusal(code, entry.allowed)) is not None:
        return f"device {pci} {why}"
    driver, override = sysfs.driver(pci), sysfs.driver_override(pci)
    if not is_network(code) and driver != VFIO_PCI:
        return (
            f"device {pci} is a {describe(code)} (class 0x{code:06x}) on {driver or 'no driver'}, not on vfio-pci "
            "where niclab would have put it"
        )
    if (driver, override) == (entry.driver, entry.driver_override) or VFIO_PCI in (driver, override):
        return None
    if driver is None and is_network(code):
        return None  # a restore that could not rebind (its module unloaded) leaves the card unbound
    return (
        f"device {pci} is on {driver or 'no driver'} with driver_override {override or '(null)'}, "
        "not on vfio-pci where niclab would have put it"
    )


def restore(sysfs: Sysfs, journal: Journal, pci: str, *, timeout: float = 5.0, sleep: Sleep = time.sleep) -> Restored:
    """Put the card back on the driver and driver_override its journal entry names, then drop the entry.

    The entry is checked first (journal.get) and so is the device it names (_unsafe): one that fails is left
    alone, entry and device, and the error says so.
    """
    entry = journal.get(pci)
    if entry is None:
        raise NiclabError(f"card {pci}: no journal entry in {journal.dir.path}, so its original driver is unknown")
    if (why := _unsafe(sysfs, entry)) is not None:
        raise NiclabError(journal.problem(f"{pci}.json", why))
    if sysfs.driver_override(pci) != entry.driver_override:
        sysfs.set_driver_override(pci, entry.driver_override)
    if sysfs.driver(pci) != entry.driver:
        sysfs.unbind(pci)
        if entry.driver is not None:
            sysfs.drivers_probe(pci)
    driver = _settle(sysfs, pci, entry.driver, timeout, sleep)
    if driver != entry.driver:
        module = entry.driver or "its driver"
        raise NiclabError(
            f"card {pci} is on {driver or 'no driver'}, not back on {entry.driver or 'no driver'}; "
            f"{journal.path(pci)} keeps the original: load {module} (modprobe {module}), then run `niclab lab restore`"
        )
    journal.drop(pci)
    return Restored(pci, driver)


def restore_all(sysfs: Sysfs, journal: Journal, *, timeout: float = 5.0, sleep: Sleep = time.sleep) -> list[Restored]:
    """Restore every card the journal names (after a crash): one result each, failures included. An entry
    that fails its checks is reported and left alone; the others are still restored."""
    results = []
    for entry in journal.scan():
        if isinstance(entry, BadEntry):
            results.append(Restored(entry.what, None, entry.error))
            continue
        try:
            results.append(restore(sysfs, journal, entry.pci, timeout=timeout, sleep=sleep))
        except NiclabError as exc:
            results.append(Restored(entry.pci, sysfs.driver(entry.pci), str(exc)))
    return results


@contextmanager
def passed_through(
    sysfs: Sysfs,
    journal: Journal,
    cards: Mapping[str, AllowedClass | None],
    run: str,
    *,
    timeout: float = 5.0,
    sleep: Sleep = time.sleep,
) -> Iterator[None]:
    """Hold the cards on vfio-pci for the block; on the way out, however it ends, put every one back.

    `cards` maps each card's PCI address to the class beyond network controllers it may report (its
    inventory model's allow_class), or None.
    """
    touched: list[str] = []
    try:
        for pci, allowed in cards.items():
            touched.append(pci)  # before binding: a bind cut short may have journaled and moved it
            bind_to_vfio(sysfs, journal, pci, run, allowed=allowed, timeout=timeout, sleep=sleep)
        yield
    finally:
        failures = []
        for pci in reversed(touched):
            try:
                if not PCI_ADDRESS.fullmatch(pci) or journal.get(pci) is None:
                    continue  # never journaled, or a failed bind already put it back
                restore(sysfs, journal, pci, timeout=timeout, sleep=sleep)
            except NiclabError as exc:
                failures.append(str(exc))
        if failures:
            raise NiclabError("; ".join(failures))
