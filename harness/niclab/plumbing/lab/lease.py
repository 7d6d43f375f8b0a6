"""Card leases: two runs never hold the same card.

An exclusive flock on <state_dir>/leases/<HOST.PCI>.lock (0600), held for the run, and a holder record beside
it (run, user, PID), both through the checked state directory. The kernel drops the flock when its holder
dies, however; the stale record is then taken over, and a live holder's record counts even with the flock
free (a deleted lock file). docs/architecture.md, "A card is leased on its own host" and "Failure handling".
"""

from __future__ import annotations

import fcntl
import os
import pwd
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from niclab.base.errors import NiclabError
from niclab.base.node import Progress
from niclab.base.procs import pid_namespace, process_start_time
from niclab.model.lab.inventory import HOST_NAME
from niclab.plumbing.lab.statedir import StateDir, UnsafeFile, shown
from niclab.plumbing.lab.vfio import PCI_ADDRESS

_NOBODY = object()
LEASES = "leases"
# What a lease is named by: HOST.PCI (passthrough.lease_key), or a bare PCI address; it becomes a file name.
LEASE_KEY = re.compile(rf"(?:{HOST_NAME.pattern}\.)?{PCI_ADDRESS.pattern}")
_TEXT = 1024


class Holder(BaseModel):
    """Who holds a card: the record beside its lock file."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    run: str = Field(max_length=_TEXT)
    user: str = Field(max_length=_TEXT)
    pid: int = Field(gt=0)
    start: int | None  # the PID's start time (clock ticks since boot): tells a reused PID apart
    since: float = Field(allow_inf_nan=False)
    at: str | None = Field(None, max_length=_TEXT)  # procs.pid_namespace() of the holder

    def elsewhere(self) -> bool:
        """Whether the holder ran in another container or on another host (its PID cannot be checked here)."""
        return self.at is not None and self.at != pid_namespace()

    def alive(self) -> bool:
        """Whether the holder's process runs, as far as this namespace can tell (never for one elsewhere:
        there the lease's flock alone decides, see `locked`)."""
        return not self.elsewhere() and self.start is not None and process_start_time(self.pid) == self.start

    def describe(self) -> str:
        where = ", in another container or on another host" if self.elsewhere() else ""
        return f"run {shown(self.run)} (user {shown(self.user)}, pid {self.pid}{where})"


def current_user() -> str:
    """Who runs niclab: the sudo caller rather than root when there is one."""
    if sudo_user := os.environ.get("SUDO_USER"):
        return sudo_user
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def check_key(key: str) -> str:
    """The lease key, if it is one (HOST.PCI): it becomes a file name in the state directory."""
    if not LEASE_KEY.fullmatch(key):
        raise NiclabError(
            f"lease name {shown(key)} is not HOST.PCI (a lab host name and a PCI address as sysfs names it): "
            "check the inventory's host names and pci"
        )
    return key


def keys(state: StateDir) -> list[str]:
    """The lease keys that have a holder record."""
    return [name[: -len(".json")] for name in state.sub(LEASES).names() if name.endswith(".json")
            and LEASE_KEY.fullmatch(name[: -len(".json")])]  # fmt: skip


def holder(state: StateDir, key: str) -> Holder | None:
    """The card's recorded holder, live or stale; None if there is no readable record."""
    try:
        data = state.sub(LEASES).read(f"{check_key(key)}.json")
    except UnsafeFile:
        return None  # not one niclab wrote: replaced (never followed) when a run takes the card
    if data is None:
        return None
    try:
        return Holder.model_validate_json(data)
    except ValidationError:
        return None


def locked(state: StateDir, key: str) -> bool:
    """Whether some process (here, in a container, anywhere sharing the state directory) holds the card's flock."""
    fd = state.sub(LEASES).open_lock(f"{check_key(key)}.lock", create=False)
    if fd is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops our probe's shared lock
    return False


def _try_take(state: StateDir, key: str, record: Holder) -> tuple[int | None, Holder | None]:
    """(fd of the held lock, None) on success, else (None, the holder's record if there is one)."""
    directory = state.sub(LEASES)
    fd = directory.open_lock(f"{key}.lock")
    assert fd is not None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None, holder(state, key)
    previous = holder(state, key)
    if previous is not None and previous.pid != os.getpid() and previous.alive():
        os.close(fd)  # closing drops the flock
        return None, previous
    try:
        directory.write(f"{key}.json", record.model_dump_json().encode())
    except BaseException:
        os.close(fd)
        raise
    return fd, None


T = TypeVar("T")


def own_record(run: str) -> Holder:
    """The holder record of this process for run `run`."""
    return Holder(
        run=run,
        user=current_user(),
        pid=os.getpid(),
        start=process_start_time(os.getpid()),
        since=time.time(),
        at=pid_namespace(),
    )


def card_name(key: str, card: str | None) -> str:
    """How messages name the card leased by `key`: its inventory id and key, or the key alone."""
    return f"card {card} ({check_key(key)})" if card else f"card {check_key(key)}"


def take_waiting(
    try_take: Callable[[], tuple[T | None, Holder | None]],
    name: str,
    who: Callable[[Holder | None], str],
    wait: bool,
    timeout: float | None,
    progress: Progress | None,
    interval: float,
    told: object = _NOBODY,
) -> T:
    """What `try_take` gives once it takes the lease (it returns what holds it, or the other holder's record).
    Held by another: raise, or with `wait` poll every `interval` s up to `timeout` (None: forever), saying each
    new holder once (`told`: the holder taken as said already). A lease here or on another host alike.

    A lock with no holder record is a holder between its lock and its record (taking) or its record and its
    unlock (releasing): said only when a second poll finds it so too, not as a new holder at every hand-over.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    unrecorded = False  # the previous poll found a lock with no record
    while True:
        taken, other = try_take()
        if taken is not None:
            return taken
        named = who(other)
        if not wait:
            raise NiclabError(f"{name} is leased to {named}; wait for it with --wait, or end that run")
        if deadline is not None and time.monotonic() >= deadline:
            raise NiclabError(f"{name} is still leased to {named} after {timeout:g} s of waiting; end that run")
        if progress is not None and other != told and (other is not None or unrecorded):
            progress(f"waiting for {name}, held by {named}")
            told = other
        unrecorded = other is None
        time.sleep(interval)


@contextmanager
def lease(
    state: StateDir,
    key: str,
    run: str,
    wait: bool = False,
    timeout: float | None = None,
    progress: Progress | None = None,
    *,
    card: str | None = None,
    interval: float = 0.5,
) -> Iterator[Holder]:
    """Hold the card named by `key` (HOST.PCI) for the block. Held by another run: wait (polling) if `wait`,
    else raise.

    `card` is the inventory id used in messages; `timeout` (seconds, None: forever) bounds the wait.
    """
    record = own_record(run)
    fd = take_waiting(
        lambda: _try_take(state, key, record),
        card_name(key, card),
        lambda other: other.describe() if other is not None else "a process that has not recorded itself yet",
        wait,
        timeout,
        progress,
        interval,
    )
    try:
        yield record
    finally:
        if holder(state, key) == record:
            state.sub(LEASES).unlink(f"{key}.json")
        os.close(fd)  # drops the flock; the lock file stays (unlinking it would race with a waiter)


@contextmanager
def leases(
    state: StateDir,
    keys: Sequence[str],
    run: str,
    wait: bool = False,
    timeout: float | None = None,
    progress: Progress | None = None,
    *,
    cards: Mapping[str, str] | None = None,
    interval: float = 0.5,
) -> Iterator[list[Holder]]:
    """Hold several cards: taken in sorted order, so two runs never wait on each other; released in reverse.

    `cards` maps a lease key to its card's inventory id, for messages. `timeout` bounds each card's wait.
    """
    with ExitStack() as stack:
        held = [
            stack.enter_context(
                lease(state, key, run, wait, timeout, progress, card=(cards or {}).get(key), interval=interval)
            )
            for key in sorted(set(keys))
        ]
        yield held
