"""Moving cards to vfio-pci for a run and back after it, with a journal so a crash loses nothing.

Before the first write to a card's sysfs files, its original driver and
driver_override go to <state_dir>/vfio/<pci>.json (written whole, fsynced,
renamed, directory fsynced). The entry goes away only once the card is back
on that driver, so after a crash, a power cut included, `niclab lab restore`
(restore_all) knows what every card was. Binding goes through driver_override,
never new_id: new_id would hand vfio-pci every device of that model, the host's
own NICs included.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from niclab.errors import NiclabError
from niclab.lab.sysfs import VFIO_PCI, Sysfs

Sleep = Callable[[float], None]
_INTERVAL = 0.1


@dataclass(frozen=True)
class JournalEntry:
    pci: str
    driver: str | None  # None: the card was unbound
    driver_override: str | None
    run: str
    time: float


class Journal:
    """The cards niclab has moved and not yet put back: one JSON file per card under <state_dir>/vfio."""

    def __init__(self, state_dir: Path):
        self.dir = state_dir / "vfio"

    def path(self, pci: str) -> Path:
        return self.dir / f"{pci}.json"

    def get(self, pci: str) -> JournalEntry | None:
        path = self.path(pci)
        try:
            return JournalEntry(**json.loads(path.read_text()))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as exc:
            raise NiclabError(
                f"{path}: unreadable journal entry ({exc}); it should name the card's original driver: "
                "put the card back by hand, then delete the file"
            ) from None

    def entries(self) -> list[JournalEntry]:
        found = [self.get(path.stem) for path in sorted(self.dir.glob("*.json"))] if self.dir.is_dir() else []
        return [entry for entry in found if entry is not None]

    def record(self, entry: JournalEntry) -> None:
        """Write the entry durably: a crash leaves either no entry or a whole one."""
        self.dir.mkdir(parents=True, exist_ok=True)
        temp = self.dir / f".{entry.pci}.{os.getpid()}.tmp"
        with open(temp, "w") as handle:
            json.dump(asdict(entry), handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, self.path(entry.pci))
        self._sync_dir()

    def drop(self, pci: str) -> None:
        self.path(pci).unlink(missing_ok=True)
        self._sync_dir()

    def _sync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class Restored:
    """One card's restore: the driver it is on now, and what went wrong if it is not its original one."""

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


def bind_to_vfio(
    sysfs: Sysfs, journal: Journal, pci: str, run: str, *, timeout: float = 5.0, sleep: Sleep = time.sleep
) -> None:
    """Move the card to vfio-pci; on failure put it back (or leave the journal to) and say why."""
    if not sysfs.exists(pci):
        raise NiclabError(f"no PCI device {pci} on this host: check the inventory's pci")
    if journal.get(pci) is None:  # an entry left by a crash already holds the true original: keep it
        entry = JournalEntry(pci, sysfs.driver(pci), sysfs.driver_override(pci), run, time.time())
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


def restore(sysfs: Sysfs, journal: Journal, pci: str, *, timeout: float = 5.0, sleep: Sleep = time.sleep) -> Restored:
    """Put the card back on the driver and driver_override its journal entry names, then drop the entry."""
    entry = journal.get(pci)
    if entry is None:
        raise NiclabError(f"card {pci}: no journal entry in {journal.dir}, so its original driver is unknown")
    if not sysfs.exists(pci):
        raise NiclabError(f"card {pci} is gone from this host; its journal entry {journal.path(pci)} stays")
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
    """Restore every card the journal names (after a crash): one result each, failures included."""
    results = []
    for entry in journal.entries():
        try:
            results.append(restore(sysfs, journal, entry.pci, timeout=timeout, sleep=sleep))
        except NiclabError as exc:
            results.append(Restored(entry.pci, sysfs.driver(entry.pci), str(exc)))
    return results


@contextmanager
def passed_through(
    sysfs: Sysfs,
    journal: Journal,
    pcis: Sequence[str],
    run: str,
    *,
    timeout: float = 5.0,
    sleep: Sleep = time.sleep,
) -> Iterator[None]:
    """Hold the cards on vfio-pci for the block; on the way out, however it ends, put every one back."""
    touched: list[str] = []
    try:
        for pci in pcis:
            touched.append(pci)  # before binding: a bind cut short may have journaled and moved it
            bind_to_vfio(sysfs, journal, pci, run, timeout=timeout, sleep=sleep)
        yield
    finally:
        failures = []
        for pci in reversed(touched):
            if journal.get(pci) is None:
                continue  # never journaled, or a failed bind already put it back
            try:
                restore(sysfs, journal, pci, timeout=timeout, sleep=sleep)
            except NiclabError as exc:
                failures.append(str(exc))
        if failures:
            raise NiclabError("; ".join(failures))
