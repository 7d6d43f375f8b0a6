"""The qemu-ga command channel against a scripted fake agent on a real unix socket.

The fake speaks the wire protocol qemu-ga 7.2 speaks: one JSON request per line, one JSON reply per
line, in order; a 0xFF byte resets its parser, and guest-sync-delimited is answered with 0xFF and
then `{"return": id}`.
"""

from __future__ import annotations

import base64
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from niclab.plumbing.guest import AgentError, AgentNode, GuestAgent


@dataclass
class Hangup:
    """What a script returns to send `data` and then close the connection."""

    data: bytes = b""


Script = Callable[[int, dict], "bytes | Hangup | None"]


def reply(value) -> bytes:
    return json.dumps({"return": value}).encode() + b"\n"


def sync_reply(request: dict) -> bytes:
    return b"\xff" + reply(request["arguments"]["id"])


class FakeAgent:
    """A qemu-ga on a listening unix socket, one client at a time (as QEMU's chardev accepts).

    `script(connection, request)` answers each request: bytes to send (b"" to stay silent), a
    Hangup, or None for the default: guest-sync-delimited answered as qemu-ga does, anything else
    left unanswered.
    """

    def __init__(self, path: Path, script: Script):
        self.path, self.script = path, script
        self.requests: list[tuple[int, dict]] = []
        self.connections = 0
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(4)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def commands(self) -> list[str]:
        return [request["execute"] for _, request in self.requests]

    def close(self) -> None:
        self._server.close()
        self.path.unlink(missing_ok=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            index, self.connections = self.connections, self.connections + 1
            with conn:
                self._handle(conn, index)

    def _handle(self, conn: socket.socket, index: int) -> None:
        buffer = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                line = line.rpartition(b"\xff")[2].strip()  # 0xFF resets qemu-ga's parser
                if not line:
                    continue
                request = json.loads(line)
                self.requests.append((index, request))
                answer = self.script(index, request)
                if answer is None:
                    answer = sync_reply(request) if request["execute"] == "guest-sync-delimited" else b""
                try:
                    conn.sendall(answer.data if isinstance(answer, Hangup) else answer)
                except OSError:
                    return
                if isinstance(answer, Hangup):
                    return


@pytest.fixture
def serve(tmp_path):
    """serve(script) -> (a connected GuestAgent "n1", the FakeAgent)."""
    made: list[tuple[GuestAgent, FakeAgent]] = []

    def start(script: Script) -> tuple[GuestAgent, FakeAgent]:
        fake = FakeAgent(tmp_path / "n1.qga", script)
        agent = GuestAgent("n1", fake.path)
        agent.sync_timeout = 0.2
        made.append((agent, fake))
        agent.connect(time.monotonic() + 2, lambda: None)
        return agent, fake

    yield start
    for agent, fake in made:
        agent.close()
        fake.close()


def answers(table: dict[str, object]) -> Script:
    """A script that answers each command by name with a fixed return value."""

    def script(index: int, request: dict) -> bytes | None:
        if request["execute"] in table:
            return reply(table[request["execute"]])
        return None

    return script


def test_a_command_gets_its_answer(serve):
    agent, fake = serve(answers({"guest-ping": {}, "guest-info": {"version": "7.2.22"}}))
    assert agent.call("guest-ping") == {}
    assert agent.call("guest-info") == {"version": "7.2.22"}
    assert fake.commands() == ["guest-sync-delimited", "guest-ping", "guest-info"]


def test_connect_drops_stale_lines_before_the_sync_answer(serve):
    def script(index: int, request: dict) -> bytes | None:
        if request["execute"] == "guest-sync-delimited":
            return b'{"return": "stale"}\nnot json\n{"return": 1' + sync_reply(request)
        return reply("fresh")

    agent, _ = serve(script)
    assert agent.call("guest-info") == "fresh"


def test_a_late_reply_is_not_taken_as_the_answer_to_the_next_command(serve):
    held: list[bytes] = []

    def script(index: int, request: dict) -> bytes | None:
        if request["execute"] == "slow":
            held.append(reply("slow's answer"))  # sent only with whatever comes next
            return b""
        late = b"".join(held)
        held.clear()
        if request["execute"] == "guest-sync-delimited":
            return late + sync_reply(request)
        return late + reply(f"{request['execute']}'s answer")

    agent, fake = serve(script)
    started = time.monotonic()
    with pytest.raises(AgentError, match=r"^n1: no answer to slow in 0 s$"):
        agent.call("slow", timeout=0.1)
    assert time.monotonic() - started < 1.0  # the timeout raises at once; the resync waits for the next call
    assert agent.call("quick") == "quick's answer"
    assert agent.call("next") == "next's answer"
    assert fake.commands() == ["guest-sync-delimited", "slow", "guest-sync-delimited", "quick", "next"]


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        pytest.param(b"this is not json\n", r"not JSON: 'this is not json'$", id="garbage"),
        pytest.param(b"[1, 2, 3]\n", r"JSON that is not an object: '\[1, 2, 3\]'$", id="list"),
        pytest.param(b"42\n", r"JSON that is not an object: '42'$", id="number"),
        pytest.param(b'{"return": "\x80\x81"}\n', r"not UTF-8: '{\"return\": \"\\\\x80\\\\x81\"}'$", id="not-utf8"),
        pytest.param(b"[" * 100_000 + b"\n", r"not JSON: '\[\[\[\[.* …$", id="too-deep"),
        pytest.param(
            b'{"retrun": 1}\n',
            r"guest-info: the guest agent's reply has neither \"return\" nor \"error\": "
            r"'{\"retrun\": 1}'$",
            id="neither-return-nor-error",
        ),
    ],
)
def test_a_malformed_reply_is_an_agent_error_and_the_channel_recovers(serve, line, complaint):
    sent: list[str] = []

    def script(index: int, request: dict) -> bytes | None:
        if request["execute"] == "guest-info":
            sent.append("bad")
            return line if len(sent) == 1 else reply("good")
        return None

    agent, fake = serve(script)
    with pytest.raises(AgentError, match=r"^n1: .*" + complaint):
        agent.call("guest-info")
    assert agent.call("guest-info") == "good"
    assert fake.commands()[-2:] == ["guest-sync-delimited", "guest-info"]


def test_an_error_reply_is_an_agent_error_with_its_description(serve):
    errors = [b'{"error": {"class": "GenericError", "desc": "No such file"}}\n', b'{"error": "odd"}\n']

    def script(index: int, request: dict) -> bytes | None:
        return None if request["execute"] == "guest-sync-delimited" else errors.pop(0)

    agent, fake = serve(script)
    with pytest.raises(AgentError, match=r"^n1: guest-file-open: No such file$"):
        agent.call("guest-file-open", {"path": "/nope"})
    with pytest.raises(AgentError, match=r"^n1: guest-file-open: odd$"):
        agent.call("guest-file-open", {"path": "/nope"})
    assert fake.commands().count("guest-sync-delimited") == 1  # an error is an answer: no resync


def test_many_empty_lines_before_a_reply_are_skipped_without_recursion(serve):
    agent, _ = serve(
        lambda index, request: (
            None if request["execute"] == "guest-sync-delimited" else b"\n" * 5000 + b"\xff\n" + reply("after blanks")
        )
    )
    assert agent.call("guest-info") == "after blanks"


@pytest.mark.parametrize(
    ("hangup", "complaint"),
    [
        pytest.param(Hangup(), r"^n1: the guest agent closed the connection$", id="eof"),
        pytest.param(
            Hangup(b'{"return": {"pid"'),
            r"^n1: the guest agent closed the connection in the middle of a reply: "
            r"'{\"return\": {\"pid\"'$",
            id="partial-line-then-eof",
        ),
    ],
)
def test_a_closed_connection_is_an_agent_error(serve, hangup, complaint):
    agent, _ = serve(lambda index, request: None if request["execute"] == "guest-sync-delimited" else hangup)
    with pytest.raises(AgentError, match=complaint):
        agent.call("guest-exec", {"path": "true"})


def test_a_reset_connection_is_an_agent_error(tmp_path):
    path = tmp_path / "n1.qga"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def agent_that_resets() -> None:
        conn, _ = server.accept()
        with conn:
            request = conn.recv(65536).rpartition(b"\xff")[2]
            conn.sendall(sync_reply(json.loads(request)))
            conn.recv(1)  # closing with the rest of the command unread resets the connection

    thread = threading.Thread(target=agent_that_resets, daemon=True)
    thread.start()
    agent = GuestAgent("n1", path)
    try:
        agent.connect(time.monotonic() + 2, lambda: None)
        with pytest.raises(AgentError, match=r"^n1: lost the guest agent connection \(.*reset by peer\)$"):
            agent.call("guest-ping")
    finally:
        agent.close()
        server.close()
        thread.join(2)


def test_a_silent_agent_is_reconnected_and_synced_again(serve):
    seen_first: list[dict] = []

    def script(index: int, request: dict) -> bytes | None:
        if index == 0:  # answers the first sync, then hangs (say, on a stuck command)
            seen_first.append(request)
            return None if len(seen_first) == 1 else b""
        return reply("on the new connection") if request["execute"] == "guest-ping" else None

    agent, fake = serve(script)
    with pytest.raises(AgentError, match="no answer to guest-ping"):
        agent.call("guest-ping", timeout=0.05)
    assert agent.call("guest-ping") == "on the new connection"
    assert fake.connections == 2
    assert [(i, r["execute"]) for i, r in fake.requests] == [
        (0, "guest-sync-delimited"),
        (0, "guest-ping"),
        (0, "guest-sync-delimited"),
        (1, "guest-sync-delimited"),
        (1, "guest-ping"),
    ]


def test_a_resync_that_fails_on_a_new_connection_too_is_an_agent_error(serve):
    syncs: list[int] = []

    def script(index: int, request: dict) -> bytes | None:
        if request["execute"] == "guest-sync-delimited":
            syncs.append(index)
            return None if len(syncs) == 1 else b""
        return b""

    agent, fake = serve(script)
    with pytest.raises(AgentError, match="no answer"):
        agent.call("guest-ping", timeout=0.05)
    with pytest.raises(AgentError, match=r"^n1: the guest agent is out of step .* even on a new connection$"):
        agent.call("guest-ping")
    assert fake.connections == 2 and syncs == [0, 0, 1]
    fake.close()  # the guest is gone: the next command says so instead of hanging or asserting
    with pytest.raises(AgentError, match=r"^n1: lost the guest agent connection and could not reconnect"):
        agent.call("guest-ping")


def test_a_guest_command_round_trip_through_guest_exec(serve):
    polls: list[int] = []

    def script(index: int, request: dict) -> bytes | None:
        if request["execute"] == "guest-exec":
            return reply({"pid": 4242})
        if request["execute"] == "guest-exec-status":
            assert request["arguments"] == {"pid": 4242}
            polls.append(1)
            if len(polls) < 3:
                return reply({"exited": False})
            return reply(
                {
                    "exited": True,
                    "exitcode": 3,
                    "out-data": base64.b64encode(b"hello\n").decode(),
                    "err-data": base64.b64encode(b"\xffwarning\n").decode(),
                }
            )
        return None

    agent, fake = serve(script)
    result = AgentNode("n1", agent).run(["ethtool", "-i", "link0"], check=False)
    assert (result.node, result.argv, result.returncode) == ("n1", ("ethtool", "-i", "link0"), 3)
    assert result.stdout == "hello\n" and result.stderr == "\ufffdwarning\n"
    exec_request = fake.requests[1][1]
    assert exec_request == {
        "execute": "guest-exec",
        "arguments": {"path": "setsid", "arg": ["ethtool", "-i", "link0"], "capture-output": True},
    }
    assert len(polls) == 3


def test_a_killed_command_reports_128_plus_the_signal(serve):
    agent, _ = serve(answers({"guest-exec-status": {"exited": True, "signal": 9}}))
    result = agent.status(7, ("sleep", "9"), time.monotonic())
    assert result is not None and result.returncode == 137 and result.stdout == ""


def start(agent: GuestAgent):
    return agent.start(("true",))


def status(agent: GuestAgent):
    return agent.status(1, ("true",), 0.0)


def read(agent: GuestAgent):
    return agent.read_file("/etc/x")


FILE = {"guest-file-open": 3, "guest-file-close": {}}


@pytest.mark.parametrize(
    ("table", "run", "complaint"),
    [
        pytest.param(
            {"guest-exec": {}}, start, r"guest-exec: the guest agent's pid is not an integer: 'null'", id="exec-no-pid"
        ),
        pytest.param(
            {"guest-exec": [1]}, start, r"guest-exec: the guest agent's reply is not an object: '\[1\]'", id="exec-list"
        ),
        pytest.param(
            {"guest-exec": {"pid": True}},
            start,
            r"guest-exec: the guest agent's pid is not an integer: 'true'",
            id="exec-bool-pid",
        ),
        pytest.param(
            {"guest-exec-status": "done"},
            status,
            r"guest-exec-status: the guest agent's reply is not an object: '\"done\"'",
            id="status-string",
        ),
        pytest.param(
            {"guest-exec-status": {"exited": True, "exitcode": "0"}},
            status,
            r"guest-exec-status: the guest agent's exitcode is not an integer: '\"0\"'",
            id="status-exitcode",
        ),
        pytest.param(
            {"guest-exec-status": {"exited": True, "signal": None}},
            status,
            r"guest-exec-status: the guest agent's signal is not an integer: 'null'",
            id="status-signal",
        ),
        pytest.param(
            {"guest-exec-status": {"exited": True, "exitcode": 0, "out-data": "é"}},
            status,
            r"guest-exec-status: the guest agent's out-data is not base64",
            id="status-out-data",
        ),
        pytest.param(
            {"guest-exec-status": {"exited": True, "exitcode": 0, "err-data": 5}},
            status,
            r"guest-exec-status: the guest agent's err-data is not base64: '5'",
            id="status-err-data",
        ),
        pytest.param(
            FILE | {"guest-file-read": None},
            read,
            r"guest-file-read: the guest agent's reply is not an object: 'null'",
            id="read-null",
        ),
        pytest.param(
            FILE | {"guest-file-read": {"buf-b64": "a"}},
            read,
            r"guest-file-read: the guest agent's buf-b64 is not base64: '\"a\"'",
            id="read-bad-base64",
        ),
    ],
)
def test_a_reply_of_the_wrong_shape_is_an_agent_error(serve, table, run, complaint):
    agent, _ = serve(answers(table))
    with pytest.raises(AgentError, match=r"^n1: " + complaint):
        run(agent)


def test_files_go_in_and_out_in_base64(serve):
    written: list[bytes] = []

    def script(index: int, request: dict) -> bytes | None:
        command, arguments = request["execute"], request.get("arguments", {})
        if command == "guest-file-open":
            return reply(5)
        if command == "guest-file-write":
            written.append(base64.b64decode(arguments["buf-b64"]))
            return reply({"count": len(written[-1]), "eof": False})
        if command == "guest-file-read":  # as qemu-ga reads: at most `count` bytes from where it is
            data = b"".join(written)
            chunk = data[read[0] : read[0] + arguments["count"]]
            read[0] += len(chunk)
            return reply({"count": len(chunk), "buf-b64": base64.b64encode(chunk).decode(), "eof": not chunk})
        if command == "guest-file-close":
            return reply({})
        return None

    read = [0]
    agent, fake = serve(script)
    data = bytes(range(256)) * 300  # more than one 48 KiB chunk
    agent.write_file("/tmp/blob", data)
    assert agent.read_file("/tmp/blob") == data
    assert fake.commands().count("guest-file-write") == 2
    assert fake.commands().count("guest-file-read") == 3  # 48 KiB, the rest, and eof


def file_agent(serve, read: Callable[[dict], bytes]):
    """An agent whose guest-file-read answers `read(arguments)` in base64, never eof."""

    def script(index: int, request: dict) -> bytes | None:
        command, arguments = request["execute"], request.get("arguments", {})
        if command == "guest-file-open":
            return reply(5)
        if command == "guest-file-read":
            data = read(arguments)
            return reply({"count": len(data), "buf-b64": base64.b64encode(data).decode(), "eof": False})
        if command == "guest-file-close":
            return reply({})
        return None

    return serve(script)


def test_a_guest_that_never_says_eof_is_read_up_to_the_byte_bound(serve):
    """The agent answered every read and never said eof: 256 MiB in 9 s, unbounded. Now one line, at the
    bound, having asked for at most one byte past it."""
    asked: list[int] = []
    agent, _fake = file_agent(serve, lambda arguments: asked.append(arguments["count"]) or b"x" * arguments["count"])
    with pytest.raises(AgentError, match=r"^n1: /proc/endless is larger than the 1 MiB niclab reads of it$"):
        agent.read_file("/proc/endless", limit=1 << 20)
    assert sum(asked) == (1 << 20) + 1


def test_a_read_answered_with_more_than_was_asked_is_refused(serve):
    agent, _fake = file_agent(serve, lambda arguments: b"y" * (arguments["count"] + 1))
    with pytest.raises(AgentError, match=r"guest-file-read of /f: 49153 bytes sent, 49152 asked"):
        agent.read_file("/f")


def test_a_read_that_trickles_forever_ends_at_its_deadline(serve):
    def slow(arguments: dict) -> bytes:
        time.sleep(0.05)
        return b"z"

    agent, _fake = file_agent(serve, slow)
    started = time.monotonic()
    with pytest.raises(AgentError, match=r"^n1: reading /f took more than 1 s; gave up$"):
        agent.read_file("/f", seconds=1)
    assert time.monotonic() - started < 3


def test_a_reply_line_longer_than_the_bound_is_refused(serve, monkeypatch):
    from niclab.plumbing import guest

    monkeypatch.setattr(guest, "MAX_LINE_BYTES", 1 << 20)

    def script(index: int, request: dict) -> bytes | None:
        if request["execute"] == "guest-info":
            return b'{"return": "' + b"a" * (3 << 20)  # no end, and no newline
        return None

    agent, _fake = serve(script)
    with pytest.raises(AgentError, match=r"^n1: the guest agent sent a line longer than the 1 MiB niclab reads$"):
        agent.call("guest-info", timeout=10)


SIGPIPE_CHILD = """
import signal, sys, time
from pathlib import Path
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # as a CLI piped into `head` may run
from niclab.plumbing.guest import AgentError, GuestAgent
agent = GuestAgent("n1", Path(sys.argv[1]))
agent.sync_timeout = 0.2
agent.connect(time.monotonic() + 5, lambda: None)
for _ in range(2):
    try:
        agent.call("guest-ping", timeout=5)
    except AgentError as exc:
        print(exc, flush=True)
"""


def test_writing_to_a_closed_agent_raises_instead_of_sigpipe(tmp_path):
    def script(index: int, request: dict) -> bytes | Hangup | None:
        if request["execute"] == "guest-ping":
            fake.close()  # no reconnecting either: the guest is gone
            return Hangup()
        return None

    fake = FakeAgent(tmp_path / "n1.qga", script)
    try:
        child = subprocess.run(
            [sys.executable, "-c", SIGPIPE_CHILD, str(fake.path)],
            check=False,
            capture_output=True,
            text=True,
            timeout=20,
        )
    finally:
        fake.close()
    assert child.returncode != -signal.SIGPIPE, "the write on the closed socket raised SIGPIPE"
    assert child.returncode == 0, child.stderr
    # The second call's resync writes on the socket the agent closed (EPIPE), then cannot reconnect.
    assert child.stdout.splitlines() == [
        "n1: the guest agent closed the connection",
        "n1: lost the guest agent connection and could not reconnect ([Errno 2] No such file or directory)",
    ]
