"""A rig you can step into, with real guests: `niclab up` leaves a cell's rig running, `exec` and `console` reach
its nodes, `status` lists it, `down` ends it; nothing is left after `down`, Ctrl-C or a terminal that goes away."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from niclab.base.procs import process_start_time
from tests.integration.processes import niclab, qemus_under, wait_for_line, wait_no_qemu


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Path]:
    """The rigs' runtime directory, the test's own; what a failed test left up is stopped after it."""
    path = tmp_path / "rt"
    path.mkdir(mode=0o700)
    yield path
    env = {**os.environ, "XDG_RUNTIME_DIR": str(path)}
    subprocess.run([sys.executable, "-m", "niclab", "down"], env=env, capture_output=True, timeout=120)


def cli(runtime: Path, image, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "NICLAB_IMAGE": str(image.directory)}
    return subprocess.run(
        [sys.executable, "-m", "niclab", *args], env=env, input=stdin, capture_output=True, timeout=120
    )


def read_until(fd: int, text: bytes, seconds: float = 30) -> bytes:
    seen = b""
    deadline = time.monotonic() + seconds
    while text not in seen and time.monotonic() < deadline:
        if select.select([fd], [], [], 1)[0]:
            seen += os.read(fd, 4096)
    return seen


def keeper_of(runtime: Path, name: str) -> int:
    return json.loads((runtime / "niclab" / "rigs" / name / "rig.json").read_text())["pid"]


def gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while process_start_time(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    return process_start_time(pid) is None


def test_a_rig_up_is_stepped_into_with_exec_and_console_and_down_leaves_nothing(image, repo, runtime):
    up = cli(runtime, image, "up", str(repo / "scenarios" / "two-node.yaml"), "--cell", "nic=e1000", "--name", "t")
    assert up.returncode == 0, up.stderr.decode()[-3000:]
    assert "rig t is up: cell nic=e1000" in up.stdout.decode() and "network up and checked" in up.stderr.decode()
    keeper = keeper_of(runtime, "t")
    assert len(qemus_under(runtime)) == 2

    [shown] = json.loads(cli(runtime, image, "status", "--json").stdout)
    assert (shown["name"], shown["state"], shown["nodes"], shown["gone"]) == ("t", "up", ["a", "b"], {})

    ping = cli(runtime, image, "exec", "a", "--", "ping -c 1 -W 5 198.18.0.2 | tail -2")
    assert ping.returncode == 0 and b"1 received" in ping.stdout, ping
    assert cli(runtime, image, "exec", "b", "--", "exit 7").returncode == 7
    assert cli(runtime, image, "exec", "b", "--", "hostname").stdout == b"b\n"

    # the console without a terminal: stdin is sent, what the node says is printed until it is quiet
    said = cli(runtime, image, "console", "b", stdin=b"echo niclab-$((6*7)); hostname\n").stdout
    assert b"niclab-42" in said and b"\nb\r\n" in said, said
    # and with one: a prompt naming the node, Ctrl-] leaves
    leader, follower = pty.openpty()
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    attached = subprocess.Popen(
        [sys.executable, "-m", "niclab", "console", "a"], stdin=follower, stdout=follower, stderr=follower, env=env
    )
    os.close(follower)
    seen = read_until(leader, b"Ctrl-] leaves it")  # the terminal is raw from then on: Enter is not lost
    os.write(leader, b"\r")
    seen += read_until(leader, b"a:/# ")
    assert b"a:/# " in seen, seen
    os.write(leader, b"\x1d")
    assert attached.wait(10) == 0
    os.close(leader)

    down = cli(runtime, image, "down", "t")
    assert down.returncode == 0 and b"stopped rig t (cell nic=e1000; nodes a, b)" in down.stdout
    assert gone(keeper) and wait_no_qemu(runtime, 5) == []
    assert not (runtime / "niclab" / "rigs" / "t").exists()
    assert cli(runtime, image, "status").stdout.startswith(b"no rig is up")


@pytest.mark.parametrize("how", ["SIGINT", "SIGHUP"])
def test_an_up_interrupted_or_whose_terminal_goes_away_leaves_nothing(image, repo, runtime, how):
    env = {"XDG_RUNTIME_DIR": str(runtime), "NICLAB_IMAGE": str(image.directory), "NICLAB_COLD_BOOT": "1"}
    proc = niclab("up", str(repo / "scenarios" / "two-node.yaml"), "--cell", "nic=e1000", "--name", "t", env=env)
    wait_for_line(proc, "booting 2 guests", 120)
    keeper = keeper_of(runtime, "t")
    deadline = time.monotonic() + 10
    while not qemus_under(runtime) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert qemus_under(runtime), "no guest was running at the moment of the signal"
    proc.send_signal(getattr(signal, how))
    _out, err = proc.communicate(timeout=90)
    assert proc.returncode == 1 and "interrupted; rig t was stopped" in err and "Traceback" not in err, err
    assert gone(keeper, 5) and wait_no_qemu(runtime, 5) == []
    assert not (runtime / "niclab" / "rigs" / "t").exists()
