"""Held rigs (`niclab up/status/exec/console/down`): records, names, the keeper's answers, the console's filter."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from niclab.base.errors import UsageError
from niclab.base.procs import process_start_time
from niclab.base.text import TerminalFilter
from niclab.model.topology import NodeSpec, Topology
from niclab.plumbing.backends.base import Rig
from niclab.run import held, keeper
from niclab.ui.cli import console
from niclab.ui.cli.main import main
from tests.helpers import FakeNode, answer


@pytest.fixture(autouse=True)
def runtime(tmp_path, monkeypatch):
    """Each test's own runtime directory: its rigs are nobody else's."""
    (tmp_path / "rt").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "rt"))
    return tmp_path / "rt" / "niclab" / "rigs"


def record(name="r", pid=None, state="up", **extra) -> held.HeldRig:
    pid = os.getpid() if pid is None else pid
    return held.HeldRig(
        name=name,
        pid=pid,
        start_time=process_start_time(pid) or 1,
        where=held.here(),
        scenario="two-node.yaml",
        cell="nic=e1000",
        backend="qemu",
        state=state,
        since=time.time(),
        nodes=["a", "b"],
        **extra,
    )


def a_gone_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


# -- names and records ----------------------------------------------------------


@pytest.mark.parametrize("name", ["two-node", "a", "x_1.2"])
def test_a_rig_name_is_a_plain_word(name):
    assert held.check_name(name) == name


@pytest.mark.parametrize("name", ["", "../x", "a/b", "-a", ".hidden", "x" * 64, "a b", "é"])
def test_a_name_that_could_leave_the_rigs_directory_is_refused(name):
    with pytest.raises(UsageError, match="letters, digits"):
        held.check_name(name)


def test_the_default_name_is_the_scenarios_made_a_plain_word():
    assert held.default_name("two-node") == "two-node"
    assert held.default_name("NIC shoot-out (1999)") == "NIC-shoot-out-1999"
    assert held.default_name("///") == "rig"


def test_a_claimed_directory_is_the_users_alone_and_a_live_rig_is_not_claimed_twice(runtime):
    path = held.claim("r")
    assert path == runtime / "r" and oct(path.stat().st_mode & 0o777) == "0o700"
    held.write_record(path, record())
    with pytest.raises(UsageError, match=r"a rig named r is up .*niclab down r"):
        held.claim("r")


def test_a_rig_whose_keeper_is_gone_is_cleared_when_its_name_is_claimed_again():
    path = held.claim("r")
    held.write_record(path, record(pid=a_gone_pid()))
    (path / "work").mkdir()
    assert held.claim("r") == path and list(path.iterdir()) == []


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: p.mkdir(mode=0o755), "others may open the rig's directory"),
        (lambda p: (p.parent.parent / "x").mkdir(mode=0o700) or p.symlink_to(p.parent.parent / "x"), "not a directory"),
        (lambda p: p.mkdir(mode=0o700) or (p / "rig.json").write_text("{not json"), "not a rig's record"),
        (lambda p: p.mkdir(mode=0o700) or (p / "rig.json").write_text('{"name": "r"}'), "not a rig's record"),
        (lambda p: p.mkdir(mode=0o700), "no rig.json"),
    ],
    ids=["open to others", "a symlink", "garbage", "a record with fields missing", "no record"],
)
def test_a_rig_directory_that_is_not_a_keepers_is_refused_in_one_line(runtime, make, said):
    runtime.mkdir(parents=True, mode=0o700)
    make(runtime / "r")
    with pytest.raises(held.HeldRigError, match=said) as caught:
        held.find("r")
    assert "\n" not in str(caught.value)
    [shown] = held.status()
    assert shown.state == "unreadable" and said in shown.problem


def test_without_a_name_the_only_rig_up_is_found_and_two_need_one():
    with pytest.raises(held.HeldRigError, match="no rig is up: start one with `niclab up SCENARIO`"):
        held.find(None)
    held.write_record(held.claim("one"), record("one"))
    assert held.find(None)[0].name == "one"
    held.write_record(held.claim("two"), record("two"))
    with pytest.raises(UsageError, match="2 rigs are up \\(one, two\\): name one with --rig"):
        held.find(None)


def test_a_rig_still_starting_or_whose_keeper_is_gone_cannot_be_stepped_into():
    held.write_record(held.claim("starting"), record("starting", state="starting"))
    with pytest.raises(held.HeldRigError, match="still starting"):
        held.find("starting")
    held.write_record(held.claim("dead"), record("dead", pid=a_gone_pid()))
    with pytest.raises(held.HeldRigError, match=r"keeper .* is gone; `niclab down dead` clears it"):
        held.find("dead")
    states = {rig.name: rig.state for rig in held.status()}
    assert states == {"starting": "starting", "dead": "gone"}


# -- the keeper's answers -----------------------------------------------------------------------


def session(**nodes: FakeNode) -> SimpleNamespace:
    topology = Topology(tuple(NodeSpec(name, i, 1, 256, ()) for i, name in enumerate(nodes)), ())
    gone: dict[str, str] = {}
    rig = Rig(topology, dict(nodes), {}, gone=lambda: gone)
    return SimpleNamespace(rig=rig, node=rig.node, gone=gone)


def test_exec_runs_a_shell_line_in_the_node_and_answers_its_status_and_output():
    a = FakeNode("a", {"ip -br addr": answer("link0 UP 198.18.0.1/24\n", 0), "false": answer("", 1, "no\n")})
    held_session = session(a=a)
    reply = keeper.answer({"op": "exec", "node": "a", "command": "ip -br addr", "timeout": 5}, held_session)
    assert reply == {"exit": 0, "stdout": "link0 UP 198.18.0.1/24\n", "stderr": ""}
    assert keeper.answer({"op": "exec", "node": "a", "command": "false"}, held_session)["exit"] == 1
    assert a.commands == ["ip -br addr", "false"]


@pytest.mark.parametrize(
    ("request_", "said"),
    [
        ({"op": "exec", "node": "z", "command": "true"}, "no node 'z' in this rig (nodes: a)"),
        ({"op": "exec", "node": "a", "command": ["ls"]}, "a line for the node's /bin/sh"),
        ({"op": "exec", "node": "a", "command": " "}, "a line for the node's /bin/sh"),
        ({"op": "exec", "node": "a", "command": "true", "timeout": -1}, "a timeout is 0 to"),
        ({"op": "exec", "node": "a", "command": "true", "timeout": "1"}, "a timeout is 0 to"),
        ({"op": "reboot"}, "unknown request 'reboot'"),
        ({"op": "\x1b]0;x\x07"}, "unknown request '\\\\x1b]0;x\\\\x07'"),
    ],
)
def test_a_request_that_is_not_one_is_answered_with_why(request_, said):
    a = FakeNode("a")
    assert said in keeper.answer(request_, session(a=a))["error"]
    assert a.commands == []


def test_a_node_that_is_gone_runs_nothing_and_status_names_it():
    held_session = session(a=FakeNode("a"), b=FakeNode("b"))
    held_session.gone["b"] = "QEMU was killed by SIGKILL"
    assert keeper.answer({"op": "exec", "node": "b", "command": "true"}, held_session) == {
        "error": "node b is gone: QEMU was killed by SIGKILL"
    }
    assert keeper.answer({"op": "status"}, held_session) == {
        "nodes": ["a", "b"],
        "gone": {"b": "QEMU was killed by SIGKILL"},
    }


def test_the_keeper_answers_on_its_socket_until_down_and_a_request_that_is_not_json_gets_why(tmp_path):
    held_session = session(a=FakeNode("a", {"hostname": answer("a\n")}))
    path = held.claim("r")
    with keeper.listening(path / held.CONTROL) as server:
        assert oct((path / held.CONTROL).stat().st_mode & 0o777) == "0o700"
        serving = threading.Thread(target=keeper.serve, args=(server, held_session))
        serving.start()
        garbage = socket.socket(socket.AF_UNIX)
        garbage.connect(str(path / held.CONTROL))
        garbage.sendall(b"[1, 2]\n")
        assert json.loads(garbage.makefile().readline()) == {
            "error": "a request that is not one: the message is not an object"
        }
        assert held.ask(path, {"op": "exec", "node": "a", "command": "hostname"}, 5) == {
            "exit": 0,
            "stdout": "a\n",
            "stderr": "",
        }
        with pytest.raises(held.HeldRigError, match="rig r: no node 'x'"):
            held.ask(path, {"op": "exec", "node": "x", "command": "true"}, 5)
        assert held.ask(path, {"op": "down"}, 5) == {"down": True}
        serving.join(5)
        assert not serving.is_alive()


def test_a_keeper_that_does_not_answer_is_one_line_naming_the_fix(tmp_path):
    path = held.claim("r")
    with pytest.raises(held.HeldRigError, match=r"rig r: its keeper does not answer .*`niclab down r`"):
        held.ask(path, {"op": "status"}, 1)


# -- the command line ---------------------------------------------------------------------------


def test_up_holds_one_cell_and_names_the_cells_when_several_match(repo, capsys):
    assert main(["up", str(repo / "scenarios" / "nic-shootout.yaml")]) == 2
    err = capsys.readouterr().err
    assert "up holds one cell's rig, and 5 match (nic=rtl8139, nic=i82559er" in err and "--cell" in err


def test_exec_and_console_name_the_nodes_a_rig_has(capsys):
    held.write_record(held.claim("r"), record())
    assert main(["exec", "z", "--", "true"]) == 2
    assert "rig r has no node 'z' (nodes: a, b)" in capsys.readouterr().err
    assert main(["console", "z"]) == 2
    assert main(["exec", "a"]) == 2
    assert "give the command after the node" in capsys.readouterr().err


def test_a_backend_without_a_console_socket_says_where_the_console_goes(capsys):
    held.write_record(held.claim("r"), record(serial_logs={"a": "/w/a.serial.log"}))
    assert main(["console", "a"]) == 1
    err = capsys.readouterr().err
    assert "gives no console to attach to: node a's console is copied to /w/a.serial.log" in err


def test_exec_sends_one_word_as_a_shell_line_and_several_quoted_and_exits_with_the_commands_status(monkeypatch, capfd):
    asked = []

    def ask(path, request, timeout):
        asked.append(request["command"])
        return {"exit": 3, "stdout": "out\n", "stderr": "err\n"}

    held.write_record(held.claim("r"), record())
    monkeypatch.setattr(held, "ask", ask)
    assert main(["exec", "a", "--", "ip -s link | head"]) == 3
    assert main(["exec", "a", "--", "echo", "a b", "$HOME"]) == 3
    assert main(["exec", "a", "--rig", "r", "--timeout", "5", "--", "ip", "-br", "--", "addr"]) == 3
    assert asked == ["ip -s link | head", "echo 'a b' '$HOME'", "ip -br -- addr"]
    assert capfd.readouterr().out == "out\nout\nout\n"  # as the node printed it: stdout is not a terminal


def test_down_by_name_stops_only_that_rig_and_clears_one_whose_keeper_is_gone(capsys):
    held.write_record(held.claim("dead"), record("dead", pid=a_gone_pid()))
    held.write_record(held.claim("other"), record("other", pid=a_gone_pid()))
    assert main(["down", "dead"]) == 0
    assert "cleared rig dead: its keeper" in capsys.readouterr().out
    assert [rig.name for rig in held.status()] == ["other"]
    assert main(["down", "nope"]) == 1
    assert "no rig named nope" in capsys.readouterr().err


# -- the console --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pieces", "shown"),
    [
        ([b"a:/# ls\r\n"], b"a:/# ls\r\n"),
        ([b"\x1b[1;3", b"2mred\x1b[0m", b"\x1b[K\x1b[2D"], b"\x1b[1;32mred\x1b[0m\x1b[K\x1b[2D"),
        ([b"\x1b]0;title\x07"], b"\\x1b]0;title\\x07"),  # OSC: the window's title
        ([b"\x1b]52;c;aGk=\x07"], b"\\x1b]52;c;aGk=\\x07"),  # OSC 52: the clipboard
        ([b"\x1b[?1049h"], b"\\x1b[?1049h"),  # a private mode
        ([b"\x1bc"], b"\\x1bc"),  # reset
        (["é\u202e".encode()[:1], "é\u202e".encode()[1:]], "é\\u202e".encode()),  # split UTF-8, bidi override
        ([b"\xc2\x9b31m"], b"\\x9b31m"),  # C1 CSI
        ([b"\x1b[" + b"1;" * 40 + b"m"], b"\\x1b[" + b"1;" * 15 + b"1" + b";1" * 24 + b";m"),
    ],
    ids=["text", "colours and cursor", "title", "clipboard", "private mode", "reset", "bidi", "c1", "too long"],
)
def test_the_console_passes_what_a_shell_needs_and_escapes_the_other_controls(pieces, shown):
    seen = TerminalFilter()
    assert b"".join(seen.feed(piece) for piece in pieces) == shown


def test_without_a_terminal_the_console_sends_stdin_then_prints_until_the_guest_is_quiet(monkeypatch):
    monkeypatch.setattr(console, "QUIET_S", 0.2)
    guest, line = socket.socketpair()
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    os.write(stdin_w, b"hostname\n")
    os.close(stdin_w)

    def a_guest() -> None:
        assert guest.recv(100) == b"hostname\n"
        guest.sendall(b"a\r\n\x1b]0;pwned\x07a:/# ")

    answering = threading.Thread(target=a_guest)
    answering.start()
    started = time.monotonic()
    console.relay(line.fileno(), stdin_r, out_w, interactive=False)
    answering.join()
    assert time.monotonic() - started < 5
    os.close(out_w)
    assert os.read(out_r, 1000) == b"a\r\n\\x1b]0;pwned\\x07a:/# "


def test_ctrl_close_bracket_leaves_the_console_and_sends_what_came_before_it():
    guest, line = socket.socketpair()
    stdin_r, stdin_w = os.pipe()
    os.write(stdin_w, b"ls\x1dnot sent")
    console.relay(line.fileno(), stdin_r, os.open(os.devnull, os.O_WRONLY), interactive=True)
    guest.setblocking(False)
    assert guest.recv(100) == b"ls"


def test_a_rig_directory_path_of_any_length_takes_a_control_socket(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    path = held.claim("r")
    assert len(os.fsencode(path / held.CONTROL)) > 108
    with keeper.listening(path / held.CONTROL):
        with pytest.raises(held.HeldRigError, match=r"did not reply|closed the connection"):
            held.ask(path, {"op": "status"}, 0.5)
    assert Path(path / held.CONTROL).exists()


def test_a_keeper_whose_directory_is_taken_away_stops_its_rig(monkeypatch):
    monkeypatch.setattr(keeper, "CHECK_S", 0.1)
    path = held.claim("r")
    with keeper.listening(path / held.CONTROL) as server:
        started = time.monotonic()
        keeper.serve(server, session(a=FakeNode("a")), still_ours=lambda: False)  # a logout removed it
    assert time.monotonic() - started < 3


def test_a_fifo_in_place_of_the_record_is_refused_without_waiting_on_it():
    path = held.claim("r")
    os.mkfifo(path / held.RECORD)
    with pytest.raises(held.HeldRigError, match="is not a file of yours"):
        held.read_record(path)


def test_an_exec_output_too_large_to_send_is_cut_to_its_end_and_says_so():
    huge = "x" * (keeper.MAX_OUTPUT + 10) + "the end\n"
    reply = keeper.answer(
        {"op": "exec", "node": "a", "command": "cat"}, session(a=FakeNode("a", {"cat": answer(huge)}))
    )
    assert reply["stdout"].startswith("[niclab: the first 18 characters are left out]\n")
    assert reply["stdout"].endswith("the end\n") and len(json.dumps(reply)) < held.MAX_MESSAGE


def test_exec_keeps_the_words_on_both_sides_of_the_dashes_and_refuses_a_timeout_that_is_not_one(monkeypatch, capsys):
    asked = []
    held.write_record(held.claim("r"), record())
    monkeypatch.setattr(held, "ask", lambda path, request, timeout: asked.append(request["command"]) or {"exit": 0})
    assert main(["exec", "a", "ls", "--", "-l"]) == 0
    assert asked == ["ls -l"]
    for bad in ("nan", "inf", "-1", "0", "soon"):
        with pytest.raises(SystemExit):
            main(["exec", "a", "--timeout", bad, "--", "true"])
    assert "is not a number of seconds" in capsys.readouterr().err


def test_a_second_console_on_a_node_is_refused_while_one_is_attached(tmp_path):
    lock = tmp_path / "console.a.lock"
    with console.attached(lock, "a"):
        with pytest.raises(held.HeldRigError, match="node a's console is attached elsewhere"):
            with console.attached(lock, "a"):
                pass
    with console.attached(lock, "a"):  # free again once the first has left
        pass
