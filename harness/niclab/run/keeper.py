"""The keeper of a held rig (`niclab up`): one cell's rig up, configured and checked, held until `niclab down`.

It is a process of its own session, so a terminal that closes does not end it. It tells the `niclab up` that
started it how the rig comes up (`tell`), writes the rig's record (niclab.run.held), then answers requests on
the rig's control socket, one at a time: `exec` (a line for a node's /bin/sh), `status` (the nodes that are gone) and
`down`. SIGTERM ends it as `down` does: its guests are stopped on the way out and its directory is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from niclab.base.errors import NiclabError
from niclab.base.node import CommandResult
from niclab.base.procs import process_start_time
from niclab.base.text import said
from niclab.model.scenario import Cell
from niclab.plumbing.backends import Backend
from niclab.run.held import CONTROL, HeldRig, HeldRigError, here, read_message, read_record, remove, write_record
from niclab.run.session import Session

Tell = Callable[[str, str], None]  # what, text: ("progress", a line), ("ready", the record as JSON)
MAX_EXEC_S = 24 * 3600.0
MAX_OUTPUT = 1 << 20  # characters of each stream of an exec's output (at most 4 bytes each in UTF-8)
CHECK_S = 5.0  # how often a keeper with nothing to do checks that its directory is still its own


def keep(cell: Cell, backend: Backend, path: Path, scenario: str, tell: Tell) -> None:
    """Bring the cell's rig up in `path` (a directory held.claim made), then serve until asked to stop."""
    record = HeldRig(
        name=path.name,
        pid=os.getpid(),
        start_time=process_start_time(os.getpid()) or 0,
        where=here(),
        scenario=scenario,
        cell=cell.id,
        backend=backend.name,
        state="starting",
        since=time.time(),
    )
    try:
        write_record(path, record)
        with (
            listening(path / CONTROL) as server,
            Session(cell, backend, path / "work", progress=lambda line: tell("progress", line)) as session,
        ):
            rig = session.rig
            assert rig is not None
            workdir = path / "work"
            record = record.model_copy(
                update={
                    "state": "up",
                    "since": time.time(),
                    "nodes": [spec.name for spec in rig.topology.nodes],
                    "consoles": {node: str(sock) for node, sock in rig.serial_sockets.items()},
                    "serial_logs": {node: str(workdir / f"{node}.serial.log") for node in rig.nodes},
                    "workdir": str(workdir),
                }
            )
            write_record(path, record)
            came_up = True
            tell("ready", record.model_dump_json())
            serve(server, session, lambda: _still_ours(path))
    finally:
        if came_up:  # else `up` reads keeper.log (why it did not come up), then removes the directory
            remove(path)


def _still_ours(path: Path) -> bool:
    """The rig's directory is still there and names this keeper (a logout that removed the runtime
    directory, or a person, may have taken it: nothing could find the rig any more)."""
    try:
        return read_record(path).pid == os.getpid()
    except HeldRigError:
        return False


@contextlib.contextmanager
def listening(path: Path) -> Iterator[socket.socket]:
    """The control socket, only the user's (the directory is 0700; the socket too)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dir_fd = os.open(path.parent, os.O_PATH)
    try:
        old = os.umask(0o077)
        try:
            server.bind(f"/proc/self/fd/{dir_fd}/{path.name}")  # a path of any length
        finally:
            os.umask(old)
        server.listen(8)
        yield server
    finally:
        os.close(dir_fd)
        server.close()


def serve(server: socket.socket, session: Session, still_ours: Callable[[], bool] = lambda: True) -> None:
    """Answer requests, each in a thread of its own (an `exec` that runs long holds up no other), until one
    is `down` or the rig's directory is no longer this keeper's (checked every CHECK_S)."""
    down = threading.Event()
    server.settimeout(0.5)  # a `down` answered in a thread is seen soon
    checked = time.monotonic()
    while not down.is_set():
        try:
            conn, _ = server.accept()
        except TimeoutError:
            if time.monotonic() - checked > CHECK_S:
                checked = time.monotonic()
                if not still_ours():
                    return
            continue
        threading.Thread(target=_one, args=(conn, session, down), daemon=True).start()


def _one(conn: socket.socket, session: Session, down: threading.Event) -> None:
    with conn:
        conn.settimeout(10.0)  # a client that says nothing does not hold a thread
        try:
            request = read_message(conn)
        except (OSError, ValueError) as exc:
            _reply(conn, {"error": f"a request that is not one: {said(str(exc), 120)}"})
            return
        if request is None:
            return
        reply = answer(request, session)
        _reply(conn, reply)
        if reply.get("down"):
            down.set()


def _reply(conn: socket.socket, reply: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.settimeout(30.0)
        conn.sendall(json.dumps(reply, ensure_ascii=False).encode() + b"\n")


def answer(request: dict[str, Any], session: Session) -> dict[str, Any]:
    """The reply to one request; a request that is not one gets {"error": why}."""
    rig = session.rig
    assert rig is not None
    op = request.get("op")
    if op == "down":
        return {"down": True}
    if op == "status":
        return {"nodes": list(rig.nodes), "gone": rig.gone()}
    if op != "exec":
        return {"error": f"unknown request {said(str(op), 40)!r} (exec, status, down)"}
    node, command, timeout = request.get("node"), request.get("command"), request.get("timeout", 60.0)
    if not isinstance(node, str) or node not in rig.nodes:
        return {"error": f"no node {said(str(node), 40)!r} in this rig (nodes: {', '.join(rig.nodes)})"}
    if not isinstance(command, str) or not command.strip():
        return {"error": "a command is a line for the node's /bin/sh"}
    if not isinstance(timeout, int | float) or not 0 < timeout <= MAX_EXEC_S:
        return {"error": f"a timeout is 0 to {MAX_EXEC_S:.0f} s"}
    if why := rig.gone().get(node):
        return {"error": f"node {node} is gone: {why}"}
    try:
        result: CommandResult = session.node(node).run(command, timeout=float(timeout), check=False)
    except NiclabError as exc:
        return {"error": f"node {node}: {exc}"}
    return {"exit": result.returncode, "stdout": _capped(result.stdout), "stderr": _capped(result.stderr)}


def _capped(text: str) -> str:
    """At most MAX_OUTPUT characters of a command's output (its end), saying so: the reply stays under
    held.MAX_MESSAGE whatever the guest printed."""
    if len(text) <= MAX_OUTPUT:
        return text
    return f"[niclab: the first {len(text) - MAX_OUTPUT} characters are left out]\n" + text[-MAX_OUTPUT:]
