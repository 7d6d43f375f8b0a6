"""A fake `ssh` for the lab's remote-host code: first on PATH, it checks its arguments as real ssh would be
given them by niclab, logs them, and runs the remote command here with `sh -c`.

Each lab host's / is a directory of its own (NICLAB_REMOTE_ROOT=<dir>/{host}, read by HostShell), so the
snapshot and lease scripts run against fake trees, with the host's bin/ first on PATH (a fake `ip`). What
each host does is set in the environment: FAKE_SSH_DEAD (hosts whose ssh fails as real ssh does, status
255), FAKE_SSH_HANG (hosts that never answer). Every call is one JSON line (its argv) in FAKE_SSH_LOG.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

SCRIPT = r"""
import json, os, stat, sys, time

argv = sys.argv[1:]
with open(os.environ["FAKE_SSH_LOG"], "a") as log:
    log.write(json.dumps(argv) + "\n")

def die(text):
    sys.stderr.write("fake ssh: " + text + "\n")
    sys.exit(254)

options, control = {}, None
i = 0
while i < len(argv):
    word = argv[i]
    if word == "--":
        i += 1
        break
    if not word.startswith("-"):
        break
    if word == "-T":
        i += 1
        continue
    if word not in ("-o", "-p", "-l", "-i", "-O"):
        die("unexpected option " + word)
    if i + 1 >= len(argv):
        die("option " + word + " needs a value")
    value = argv[i + 1]
    if word == "-o":
        name, _, setting = value.partition("=")
        options[name] = setting
    else:
        options[word] = value
    i += 2
rest = argv[i:]
if not rest or rest[0].startswith("-"):
    die("no destination")
host, command = rest[0], rest[1:]
for name, setting in (("BatchMode", "yes"), ("ControlMaster", "auto")):
    if options.get(name) != setting:
        die(name + " is not " + setting)
for name in ("ConnectTimeout", "ServerAliveInterval", "ControlPersist"):
    if not options.get(name, "").isdigit():
        die(name + " missing")
path = options.get("ControlPath", "")
directory = os.path.dirname(path)
if not path.endswith("/%C") or stat.S_IMODE(os.lstat(directory).st_mode) != 0o700:
    die("ControlPath " + path + " is not %C in a 0700 directory")
if "-O" in options:
    sys.exit(0 if options["-O"] == "exit" else 255)
if host in os.environ.get("FAKE_SSH_DEAD", "").split(","):
    sys.stderr.write("ssh: connect to host " + host + " port 22: Connection refused\n")
    sys.exit(255)
if host in os.environ.get("FAKE_SSH_HANG", "").split(","):
    time.sleep(3600)
if len(command) != 1:
    die("the remote command is not one word (ssh would join them with spaces)")
root = os.environ.get("NICLAB_REMOTE_ROOT", "").replace("{host}", host)
if root and os.path.isdir(os.path.join(root, "bin")):  # the host's own programs (ip, uname) first
    os.environ["PATH"] = os.path.join(root, "bin") + ":" + os.environ["PATH"]
os.execvp("sh", ["sh", "-c", command[0]])
"""


def install(bin_dir: Path, log: Path) -> Path:
    """Write the fake ssh into `bin_dir` (to put first on PATH); its calls go to `log`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / "ssh"
    path.write_text(f"#!{sys.executable}\n{SCRIPT}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    log.touch()
    return path


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def use(monkeypatch, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    """Put the fake ssh first on PATH, the control sockets and each host's / under `tmp_path`; the log's path."""
    log = tmp_path / "ssh.log"
    install(tmp_path / "sshbin", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'sshbin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_LOG", str(log))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("NICLAB_REMOTE_ROOT", str(tmp_path / "hosts" / "{host}"))
    for name in ("FAKE_SSH_DEAD", "FAKE_SSH_HANG"):
        monkeypatch.delenv(name, raising=False)
    return log


def host_root(tmp_path: Path, host: str) -> Path:
    """A fake host's / (with var/lib, where its leases go)."""
    root = tmp_path / "hosts" / host
    (root / "var" / "lib").mkdir(parents=True, exist_ok=True)
    return root


def program(root: Path, name: str, script: str) -> None:
    """A program of the fake host at `root` (a sh script), found before this machine's."""
    path = root / "bin" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def quiet_ip(root: Path) -> None:
    """An `ip -j` on the fake host that shows no address and no route."""
    program(root, "ip", "echo '[]'\n")
