"""Card leases: two runs never hold the same card.

A lease is an exclusive flock on <state_dir>/leases/<pci>.lock, held for the
run, plus a holder record <pci>.json naming the run, user and PID, so a refusal
can say who holds the card. The kernel drops the flock when its process dies,
however it dies; the record it leaves is then stale (its PID is gone, or was
reused: another start time) and the next run takes the card over. A record of a
live process other than ours also counts as held, even with the flock free:
someone may have deleted the lock file under a running holder.
"""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from niclab.errors import NiclabError
from niclab.procs import pid_namespace, process_start_time

Progress = Callable[[str], None]
_NOBODY = object()


@dataclass(frozen=True)
class Holder:
    run: str
    user: str
    pid: int
    start: int | None  # the PID's start time (clock ticks since boot): tells a reused PID apart
    since: float
    at: str | None = None  # procs.pid_namespace() of the holder: its PID means nothing in another one

    def elsewhere(self) -> bool:
        """Whether the holder ran in another container or on another host (its PID cannot be checked here)."""
        return self.at is not None and self.at != pid_namespace()

    def alive(self) -> bool:
        """Whether the holder's process runs, as far as this namespace can tell (never for one elsewhere:
        there the lease's flock alone decides, see `locked`)."""
        return not self.elsewhere() and self.start is not None and process_start_time(self.pid) == self.start

    def describe(self) -> str:
        where = ", in another container or on another host" if self.elsewhere() else ""
        return f"run {self.run} (user {self.user}, pid {self.pid}{where})"


def current_user() -> str:
    """Who runs niclab: the sudo caller rather than root when there is one."""
    if sudo_user := os.environ.get("SUDO_USER"):
        return sudo_user
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def lease_dir(state_dir: Path) -> Path:
    return state_dir / "leases"


def holder(state_dir: Path, pci: str) -> Holder | None:
    """The card's recorded holder, live or stale; None if there is no readable record."""
    try:
        return Holder(**json.loads((lease_dir(state_dir) / f"{pci}.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def locked(state_dir: Path, pci: str) -> bool:
    """Whether some process (here, in a container, anywhere sharing the state directory) holds the card's flock."""
    try:
        fd = os.open(lease_dir(state_dir) / f"{pci}.lock", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops our probe's shared lock
    return False


def _write_holder(path: Path, record: Holder) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(asdict(record)))
    os.replace(temp, path)


def _try_take(state_dir: Path, pci: str, record: Holder) -> tuple[int | None, Holder | None]:
    """(fd of the held lock, None) on success, else (None, the holder's record if there is one)."""
    directory = lease_dir(state_dir)
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / f"{pci}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None, holder(state_dir, pci)
    previous = holder(state_dir, pci)
    if previous is not None and previous.pid != os.getpid() and previous.alive():
        os.close(fd)  # closing drops the flock
        return None, previous
    _write_holder(directory / f"{pci}.json", record)
    return fd, None


@contextmanager
def lease(
    state_dir: Path,
    pci: str,
    run: str,
    wait: bool = False,
    timeout: float | None = None,
    progress: Progress | None = None,
    *,
    card: str | None = None,
    interval: float = 0.5,
) -> Iterator[Holder]:
    """Hold the card for the block. Held by another run: wait (polling) if `wait`, else raise.

    `card` is the inventory id used in messages; `timeout` (seconds, None: forever) bounds the wait.
    """
    name = f"card {card} ({pci})" if card else f"card {pci}"
    record = Holder(run, current_user(), os.getpid(), process_start_time(os.getpid()), time.time(), pid_namespace())
    deadline = None if timeout is None else time.monotonic() + timeout
    told: object = _NOBODY  # the holder last named in a progress message
    while True:
        fd, other = _try_take(state_dir, pci, record)
        if fd is not None:
            break
        who = other.describe() if other is not None else "a process that has not recorded itself yet"
        if not wait:
            raise NiclabError(f"{name} is leased to {who}; wait for it with --wait, or end that run")
        if deadline is not None and time.monotonic() >= deadline:
            raise NiclabError(f"{name} is still leased to {who} after {timeout:g} s of waiting; end that run")
        if progress is not None and other != told:
            progress(f"waiting for {name}, held by {who}")
            told = other
        time.sleep(interval)
    try:
        yield record
    finally:
        if holder(state_dir, pci) == record:
            (lease_dir(state_dir) / f"{pci}.json").unlink(missing_ok=True)
        os.close(fd)  # drops the flock; the lock file stays (unlinking it would race with a waiter)


@contextmanager
def leases(
    state_dir: Path,
    pcis: Sequence[str],
    run: str,
    wait: bool = False,
    timeout: float | None = None,
    progress: Progress | None = None,
    *,
    cards: Mapping[str, str] | None = None,
    interval: float = 0.5,
) -> Iterator[list[Holder]]:
    """Hold several cards: taken in sorted PCI order, so two runs never wait on each other; released in reverse.

    `cards` maps a PCI address to its inventory id, for messages. `timeout` bounds each card's wait.
    """
    with ExitStack() as stack:
        held = [
            stack.enter_context(
                lease(state_dir, pci, run, wait, timeout, progress, card=(cards or {}).get(pci), interval=interval)
            )
            for pci in sorted(set(pcis))
        ]
        yield held
