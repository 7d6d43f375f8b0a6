"""Rigs held up between commands: where each one's record and control socket live, and how to ask its keeper.

`niclab up` starts a keeper (niclab.run.keeper), a process of its own session that holds one cell's rig and
answers on a unix socket in the rig's directory; `status`, `exec`, `console` and `down` find the rig here
(docs/architecture.md, "A rig you can step into"). The directory is the user's own (mode 0700, under niclab's
runtime directory); a record that is not the user's, or not what a keeper writes, is refused in one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from niclab.base import jsonbound
from niclab.base.atomic import write_text
from niclab.base.errors import NiclabError, UsageError
from niclab.base.paths import runtime_dir
from niclab.base.procs import pid_namespace, process_start_time
from niclab.base.text import said
from niclab.plumbing.guest import unix_connect

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
RECORD = "rig.json"
CONTROL = "control"  # the keeper's socket
MAX_MESSAGE = 16 << 20  # a request or a reply (an exec's output is bounded by the guest agent's own limit)


class HeldRigError(NiclabError):
    """A held rig cannot be found, reached or asked."""


class HeldRig(BaseModel):
    """A rig's record (rig.json), written by its keeper as it starts and again once the rig is up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    pid: int  # the keeper's
    start_time: int  # the keeper's, in clock ticks since boot: a PID reused by another process is not it
    where: str = ""  # the keeper's host, PID namespace and boot: elsewhere its PID names another process
    scenario: str  # the scenario file, as given
    cell: str
    backend: str
    state: Literal["starting", "up"]
    since: float  # time.time() when it came up (or started)
    nodes: list[str] = []
    consoles: dict[str, str] = {}  # node -> the unix socket of its serial console
    serial_logs: dict[str, str] = {}  # node -> its serial log
    workdir: str = ""  # the guests' work directory (logs, sockets)

    @property
    def alive(self) -> bool:
        return self.where == here() and process_start_time(self.pid) == self.start_time

    @property
    def elsewhere(self) -> bool:
        """Kept by a keeper of another host, PID namespace or boot (a runtime directory others share)."""
        return self.where != here()


def here() -> str:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "?"
    return f"{pid_namespace()}/{boot}"


@dataclass(frozen=True)
class Found:
    """A rig directory as `status` shows it: its record, or why it has none that can be trusted."""

    name: str
    path: Path
    record: HeldRig | None
    problem: str = ""


def rigs_dir() -> Path:
    return runtime_dir() / "rigs"


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise UsageError(
            f"rig name {name!r}: use letters, digits, '.', '_' and '-' (at most 63, a letter or digit first)"
        )
    return name


def default_name(scenario_name: str) -> str:
    """The scenario's name, made a rig name (`up --name` gives another)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", scenario_name).strip("-.")[:63]
    return name if NAME.fullmatch(name) else "rig"


def _own_dir(path: Path, what: str, fix: str = "") -> None:
    """Refuse a directory that is a symlink, not the user's, or open to others."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise HeldRigError(f"{path}: {what} is gone") from None
    if not stat.S_ISDIR(info.st_mode):
        raise HeldRigError(f"{path}: {what} is not a directory; {fix or f'remove it (rm {path})'}")
    if info.st_uid != os.geteuid():
        raise HeldRigError(
            f"{path}: {what} belongs to uid {info.st_uid}, not you; run niclab as that user"
            + (f", or {fix}" if fix else "")
        )
    if info.st_mode & 0o077:
        raise HeldRigError(f"{path}: others may open {what}; {fix or f'remove it (rm -r {path})'}")


def read_record(path: Path) -> HeldRig:
    """The record in a rig directory; a HeldRigError naming it if it is not one of the user's keepers'."""
    _own_dir(path, "the rig's directory")
    file = path / RECORD
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO there does not hang us
    except FileNotFoundError:
        raise HeldRigError(f"{path}: no {RECORD} (a keeper that did not start); `niclab down` removes it") from None
    except OSError as exc:
        raise HeldRigError(f"{file}: {exc.strerror}; remove {path}") from None
    with os.fdopen(fd, "rb") as source:
        info = os.fstat(source.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise HeldRigError(f"{file} is not a file of yours; remove {path}")
        data = source.read(1 << 20)
    try:
        return HeldRig.model_validate(jsonbound.loads(data))
    except (ValueError, ValidationError) as exc:
        raise HeldRigError(f"{file} is not a rig's record ({said(str(exc), 120)}); remove {path}") from None


def write_record(path: Path, record: HeldRig) -> None:
    write_text(path / RECORD, record.model_dump_json(indent=1) + "\n")


def found() -> list[Found]:
    """Every rig directory of the user's, by name."""
    root = rigs_dir()
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    result = []
    for name in names:
        path = root / name
        if not path.exists() and not path.is_symlink():
            continue  # removed meanwhile (a keeper that ended)
        try:
            result.append(Found(name, path, read_record(path)))
        except HeldRigError as exc:
            result.append(Found(name, path, None, str(exc)))
    return result


def claim(name: str) -> Path:
    """Make the directory of a new rig NAME (mode 0700); a rig of that name that is still held is refused,
    one whose keeper is gone is cleared first."""
    root = rigs_dir()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    _own_dir(root, "the rigs' directory", "set XDG_RUNTIME_DIR to a directory of yours")
    path = root / check_name(name)
    if path.exists() or path.is_symlink():
        try:
            record = read_record(path)
        except HeldRigError:
            record = None
        if record is not None and record.elsewhere:
            raise UsageError(f"a rig named {name} is held elsewhere ({record.where}): choose another with --name")
        if record is not None and record.alive:
            raise UsageError(
                f"a rig named {name} is {record.state} (cell {record.cell}): `niclab down {name}`, or `up --name`"
            )
        remove(path)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        raise UsageError(f"a rig named {name} is starting: `niclab down {name}`, or `up --name`") from None
    return path


def remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def find(name: str | None) -> tuple[HeldRig, Path]:
    """The rig NAME, or the only rig held when no name is given; up and its keeper alive."""
    if name is not None:
        path = rigs_dir() / check_name(name)
        if not path.exists():
            raise HeldRigError(
                f"no rig named {name} is up; `niclab status` lists them, `niclab up SCENARIO` starts one"
            )
        record = read_record(path)
    else:
        held = [f for f in found() if f.record is not None and f.record.alive]
        if not held:
            raise HeldRigError("no rig is up: start one with `niclab up SCENARIO`")
        if len(held) > 1:
            names = ", ".join(f.name for f in held)
            raise UsageError(f"{len(held)} rigs are up ({names}): name one with --rig")
        path, record = held[0].path, held[0].record  # type: ignore[assignment]
    if not record.alive:
        raise HeldRigError(
            f"rig {record.name}: its keeper (pid {record.pid}) is gone; `niclab down {record.name}` clears it"
        )
    if record.state != "up":
        raise HeldRigError(f"rig {record.name} is still starting; wait for `niclab up` to finish")
    return record, path


def ask(path: Path, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send the keeper of the rig at `path` one request and return its reply (a HeldRigError if it has none)."""
    name = path.name
    try:
        sock = unix_connect(path / CONTROL, timeout)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise HeldRigError(f"rig {name}: its keeper does not answer ({why}); `niclab down {name}`") from None
    with sock:
        try:
            sock.sendall(json.dumps(request).encode() + b"\n")
            reply = read_message(sock)
        except (OSError, ValueError) as exc:
            raise HeldRigError(f"rig {name}: its keeper did not reply ({said(str(exc), 120)})") from None
    if reply is None:
        raise HeldRigError(f"rig {name}: its keeper closed the connection without a reply")
    if "error" in reply:
        raise HeldRigError(f"rig {name}: {reply['error']}")
    return reply


def read_message(sock: socket.socket) -> dict[str, Any] | None:
    """One JSON object on a line, at most MAX_MESSAGE bytes; None at the end of the stream."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            if chunks:
                raise ValueError("the message has no end")
            return None
        end = chunk.find(b"\n")
        chunks.append(chunk if end < 0 else chunk[:end])
        size += len(chunks[-1])
        if size > MAX_MESSAGE:
            raise ValueError(f"a message longer than {MAX_MESSAGE} bytes")
        if end >= 0:
            message = jsonbound.loads(b"".join(chunks))
            if not isinstance(message, dict):
                raise ValueError("the message is not an object")
            return message


def end(record: HeldRig, path: Path, grace: float = 60.0) -> bool:
    """Ask the keeper to stop its rig and wait for it to be gone (SIGTERM if it does not answer, SIGKILL to
    its process group after `grace`: its guests die with it). False if it was already gone."""
    if record.elsewhere:
        raise HeldRigError(f"rig {record.name} is held elsewhere ({record.where}): stop it there")
    if not record.alive:
        remove(path)
        return False
    try:
        ask(path, {"op": "down"}, timeout=10.0)
    except HeldRigError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while record.alive and time.monotonic() < deadline:
        time.sleep(0.1)
    if record.alive:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while record.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        if record.alive:
            raise HeldRigError(f"rig {record.name}: its keeper (pid {record.pid}) does not end, even killed")
        remove(path)
        raise KeeperKilled(
            f"rig {record.name}: its keeper did not stop in {grace:.0f} s and was killed: its QEMUs die with it; "
            "a lab's domains may be left: `niclab down --lab LAB_YAML`"
        )
    remove(path)
    return True


class KeeperKilled(HeldRigError):
    """The keeper had to be killed: what it started itself died with it, a lab's domains may not have."""


class RigStatus(BaseModel):
    """One rig as `niclab status` shows it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    state: Literal["starting", "up", "gone", "not answering", "unreadable", "elsewhere"]
    cell: str = ""
    scenario: str = ""
    backend: str = ""
    nodes: list[str] = []
    gone: dict[str, str] = {}  # node -> why it is gone
    since: float | None = None
    keeper: int | None = None
    problem: str = ""


def status() -> list[RigStatus]:
    """Every rig of the user's; the keepers of those up are asked which of their nodes are gone."""
    result = []
    for rig in found():
        record = rig.record
        if record is None:
            result.append(RigStatus(name=rig.name, state="unreadable", problem=rig.problem))
            continue
        shown = RigStatus(
            name=record.name,
            state="elsewhere" if record.elsewhere else record.state if record.alive else "gone",
            cell=record.cell,
            scenario=record.scenario,
            backend=record.backend,
            nodes=record.nodes,
            since=record.since,
            keeper=record.pid,
        )
        if shown.state == "up":
            try:
                gone = ask(rig.path, {"op": "status"}, timeout=10.0).get("gone")
                shown.gone = {str(k): str(v) for k, v in gone.items()} if isinstance(gone, dict) else {}
            except HeldRigError as exc:
                shown.state, shown.problem = "not answering", str(exc)
        elif shown.state == "gone":
            shown.problem = f"its keeper (pid {record.pid}) is gone; `niclab down {record.name}` clears it"
        result.append(shown)
    return result
