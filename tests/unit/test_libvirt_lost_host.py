"""A lab host that goes away mid-run: libvirt's keepalives close its connection, and what then fails (the guest
agent's calls, the rig's check for gone nodes) names the host instead of hanging or blaming the guest."""

from __future__ import annotations

import libvirt
import libvirt_qemu
import pytest

from niclab.plumbing.backends import libvirt as backend
from niclab.plumbing.backends.libvirt_agent import LibvirtAgent
from niclab.plumbing.guest import AgentError
from niclab.plumbing.libvirt_conn import batch_uri

HOST = "host l1b (qemu+ssh://root@l1b/system)"


class ClosedError(libvirt.libvirtError):
    def __init__(self) -> None:
        Exception.__init__(self, "internal error: client socket is closed")

    def get_error_message(self) -> str:
        return "internal error: client socket is closed"


class Conn:
    def __init__(self, alive: bool):
        self.alive = alive

    def isAlive(self) -> int:
        return int(self.alive)


class Domain:
    def __init__(self, alive: bool, running: bool = False):
        self.conn, self.running = Conn(alive), running

    def connect(self) -> Conn:
        return self.conn

    def isActive(self) -> bool:
        if not self.conn.alive:
            raise ClosedError()
        return self.running


@pytest.fixture
def closed_agent_channel(monkeypatch):
    def fail(domain, command, timeout, flags):
        raise ClosedError()

    monkeypatch.setattr(libvirt_qemu, "qemuAgentCommand", fail)


def test_an_agent_call_on_a_host_that_stopped_answering_names_the_host(closed_agent_channel):
    agent = LibvirtAgent("b", Domain(alive=False), HOST)
    with pytest.raises(AgentError) as caught:
        agent.call("guest-exec", {"path": "/bin/true"})
    assert str(caught.value) == (
        f"node b: {HOST} stopped answering: guest-exec: internal error: client socket is closed"
    )


def test_an_agent_call_that_fails_on_a_live_connection_is_the_guests_error(closed_agent_channel):
    agent = LibvirtAgent("b", Domain(alive=True), HOST)
    with pytest.raises(AgentError, match=r"^b: guest-exec: internal error"):
        agent.call("guest-exec")


def test_a_node_whose_host_stopped_answering_is_gone_with_the_host_named():
    assert backend.gone_why(Domain(alive=False), HOST) == f"{HOST} stopped answering: its libvirt connection is closed"
    assert backend.gone_why(Domain(alive=True), HOST) == "its domain is no longer running"
    assert backend.gone_why(Domain(alive=True, running=True), HOST) is None


@pytest.mark.parametrize(
    ("uri", "opened"),
    [
        ("qemu:///system", "qemu:///system"),
        ("qemu+ssh://root@l1a/system", "qemu+ssh://root@l1a/system?no_tty=1"),
        ("qemu+ssh://root@rig2/system?keyfile=/k/id", "qemu+ssh://root@rig2/system?keyfile=/k/id&no_tty=1"),
        ("qemu+ssh://rig2/system?No_Tty=0", "qemu+ssh://rig2/system?No_Tty=0"),  # the inventory's own choice
        ("qemu+tls://rig3/system", "qemu+tls://rig3/system"),
    ],
)
def test_libvirt_opens_an_ssh_uri_without_a_terminal_so_a_prompt_fails_at_once(uri, opened):
    assert batch_uri(uri) == opened
