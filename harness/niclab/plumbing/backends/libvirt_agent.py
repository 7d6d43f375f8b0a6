"""The guest agent of a libvirt domain, reached through libvirt (virDomainQemuAgentCommand).

libvirt owns the agent's socket, on a host that may be remote: the commands and their checks are
GuestAgent's, only the transport differs. A call that fails because the host stopped answering names the
host (docs/lab.md, "Remote hosts").
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from niclab.base import jsonbound
from niclab.plumbing.guest import AgentError, GuestAgent, excerpt


class LibvirtAgent(GuestAgent):
    def __init__(self, node: str, domain: Any, host: str = ""):
        super().__init__(node, Path("/nonexistent"))
        self._domain = domain
        self._host = host  # how errors name the domain's host: "host l1b (qemu+ssh://root@l1b/system)"

    def connect(self, deadline: float, alive: Callable[[], str | None]) -> float:
        """Wait until the agent answers guest-ping through libvirt; returns when it did."""
        while True:
            self.still_waiting(deadline, alive)
            try:
                self.call("guest-ping", timeout=2)
                return time.monotonic()
            except AgentError:
                time.sleep(0.5)

    def close(self) -> None:
        pass

    def call(self, command: str, arguments: dict | None = None, timeout: float = 30.0) -> Any:
        import libvirt
        import libvirt_qemu

        message: dict = {"execute": command}
        if arguments:
            message["arguments"] = arguments
        try:
            text = libvirt_qemu.qemuAgentCommand(self._domain, json.dumps(message), max(1, math.ceil(timeout)), 0)
        except libvirt.libvirtError as exc:
            if self._host and not connection_alive(self._domain):
                raise AgentError(
                    f"node {self.node}: {self._host} stopped answering: {command}: {exc.get_error_message()}"
                ) from None
            raise AgentError(f"{self.node}: {command}: {exc.get_error_message()}") from None
        try:
            reply = jsonbound.loads(text)
        except (TypeError, ValueError):
            raise AgentError(
                f"{self.node}: {command}: the guest agent's reply is not JSON: {excerpt(str(text))}"
            ) from None
        if not isinstance(reply, dict) or "return" not in reply:
            raise AgentError(f'{self.node}: {command}: the guest agent\'s reply has no "return": {excerpt(str(text))}')
        return reply["return"]


def connection_alive(domain: Any) -> bool:
    """Whether the libvirt connection of `domain` is still open (keepalives close one whose host went away)."""
    try:
        return bool(domain.connect().isAlive())
    except Exception:
        return False
