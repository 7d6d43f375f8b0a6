"""What a Vagrant rig keeps between vagrant commands, beside Vagrant's own state.

It lives in <dotfile>/niclab/ (Vagrant's `.vagrant/` or $VAGRANT_DOTFILE_PATH),
so two rigs from two directories, or a test's rig beside a user's, never share
UDP ports, domain names or check results.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

from niclab.base.filelock import locked as file_locked


def state_dir(dotfile: Path) -> Path:
    path = dotfile / "niclab"
    path.mkdir(parents=True, exist_ok=True)
    return path


def locked(state: Path) -> AbstractContextManager[None]:
    """One niclab command at a time changes the state (machines come up in parallel)."""
    return file_locked(state / ".lock")


def _free_udp_ports(count: int) -> list[int]:
    """Ports the kernel hands out on 127.0.0.1, all held at once so they differ."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def udp_ports(state: Path, keys: list[str]) -> dict[str, int]:
    """A UDP port on 127.0.0.1 per cable end; the same ones on every later call (the Vagrantfile is read
    by every vagrant command), new ones only for ends not seen before."""
    path = state / "ports.json"
    with locked(state):
        try:
            saved: dict[str, int] = json.loads(path.read_text())
        except (OSError, ValueError):
            saved = {}
        missing = [key for key in keys if key not in saved]
        if missing:
            saved.update(zip(missing, _free_udp_ports(len(missing)), strict=True))
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
            os.replace(tmp, path)
    return {key: saved[key] for key in keys}


def domain_prefix(dotfile: Path) -> str:
    """libvirt domain names unique to this rig's directory: niclab-<hash>-a, niclab-<hash>-b."""
    digest = hashlib.sha256(str(dotfile.resolve()).encode()).hexdigest()[:8]
    return f"niclab-{digest}-"
