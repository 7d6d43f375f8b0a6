"""One OpenSSH connection per lab host, for what libvirt does not do: sysfs, routes, leases.

`ssh_target` reads a host's libvirt URI as libvirt's ssh transport does, so ~/.ssh/config applies; a local
URI runs the commands here. `HostShell` runs PATH's `ssh` in BatchMode with timeouts, keepalives and a
private ControlMaster; each command is a POSIX `sh -c` script with its values as quoted arguments, a timeout
and an output cap (docs/lab.md, "Remote hosts: libvirt and OpenSSH").
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from urllib.parse import parse_qsl, unquote, urlsplit

from niclab.base.errors import NiclabError
from niclab.base.paths import runtime_dir
from niclab.base.procs import OutputTimedOut, OutputTooLarge, collect
from niclab.base.text import said

SSH = "ssh"  # looked up on PATH, as libvirt's ssh transport does
CONNECT_TIMEOUT_S = 10
ALIVE_INTERVAL_S = 5  # with ServerAliveCountMax=3: a host gone quiet is given up after 15 s
PERSIST_S = 60  # the master outlives a command this long; leaving the block ends it at once
COMMAND_TIMEOUT_S = 60.0
OUTPUT_LIMIT = 4 << 20  # a command's standard output; a host's sysfs snapshot is a few hundred KiB
ROOT_ENV = "NICLAB_REMOTE_ROOT"  # tests: the directory a remote host's / is read under, {host} its name
_SOCKET_ROOM = 104 - 1 - 40 - 17 - 10  # sun_path, "/", %C (40 hex digits), ssh's suffix while it binds, a shell's dir


@dataclass(frozen=True)
class SshTarget:
    """How ssh reaches a lab host, read from its libvirt URI."""

    host: str  # as the URI names it (an alias of ~/.ssh/config is fine): never resolved here
    user: str | None = None
    port: int | None = None
    keyfile: str | None = None
    no_verify: bool = False

    def options(self) -> list[str]:
        """ssh's options for the target, as libvirt's ssh transport gives them."""
        found: list[str] = []
        if self.port is not None:
            found += ["-p", str(self.port)]
        if self.user is not None:
            found += ["-l", self.user]
        if self.keyfile is not None:
            found += ["-i", self.keyfile]
        if self.no_verify:
            found += ["-o", "StrictHostKeyChecking=no"]
        return found

    def shown(self) -> str:
        """The ssh command line that reaches the host, for a fix: `ssh -p 2222 -l root rig2`."""
        return shlex.join([SSH, *self.options(), self.host])


def ssh_target(uri: str) -> SshTarget | None:
    """Where ssh goes for a lab host's libvirt URI; None for a URI of this machine.

    The URI has passed the inventory's check (model.lab.inventory.check_uri): a plain user and host, no
    parameter that runs a program."""
    parts = urlsplit(uri)
    if "://" in uri and uri.split("://", 1)[1].startswith("/"):
        return None  # qemu:///system, qemu+unix:///system: this machine
    host = parts.hostname
    if not host:
        raise NiclabError(f"the libvirt URI {uri} names no host to reach over ssh; write qemu+ssh://root@HOST/system")
    if ":" in host:  # an IPv6 address, its brackets dropped as ssh wants it
        host = host.strip("[]")
    params = {unquote(name).lower(): value for name, value in parse_qsl(parts.query, keep_blank_values=True)}
    keyfile = params.get("keyfile") or None
    if keyfile is not None and (not keyfile.isprintable() or not keyfile.strip()):
        raise NiclabError(f"the libvirt URI {uri} has an odd keyfile=; give the key's path on one line")
    return SshTarget(
        host=host,
        user=parts.username,
        port=parts.port if parts.scheme == "qemu+ssh" else None,  # a qemu+tls port is libvirt's, not sshd's
        keyfile=keyfile,
        no_verify=params.get("no_verify", "0") not in ("", "0"),
    )


def control_dir() -> Path | None:
    """The private directory of niclab's ssh control sockets (created 0700; refused unless it is ours and
    no one else's); None when its path leaves no room for a socket's name."""
    path = runtime_dir() / "ssh"
    if len(str(path)) > _SOCKET_ROOM:
        return None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise NiclabError(f"cannot make the ssh control directory {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise NiclabError(
            f"{path} is not a private directory of yours (a symbolic link, another owner, or open to others): "
            f"it would hold the control sockets of niclab's ssh connections; fix: remove it (rm -r {path})"
        )
    return path


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: bytes
    stderr: str


class HostShell:
    """Commands on lab host `name` (libvirt URI `uri`): over one ssh connection, or here for a local URI.

    with HostShell("rig2", "qemu+ssh://root@rig2/system") as shell:
        text = shell.run('cat "$1"', "/proc/cmdline").stdout
    """

    def __init__(self, name: str, uri: str, *, controls: Path | None = None):
        self.name = name
        self.uri = uri
        self.target = ssh_target(uri)
        self._controls = controls
        self._temp: Path | None = None
        self._used = False
        # What the host's commands read and write under: "" (its /) but in tests, where a fake host's
        # /sys, /proc and /var/lib/niclab lie in a directory of this machine.
        self.root = os.environ.get(ROOT_ENV, "").replace("{host}", name) if self.target is not None else ""

    @property
    def remote(self) -> bool:
        return self.target is not None

    def __enter__(self) -> HostShell:
        if self.target is not None:
            self._control_dir()
        return self

    def _control_dir(self) -> Path:
        """This shell's own directory for its master's socket, removed by close(): a master is never shared
        with another shell (of this run's threads, or of another niclab), whose `-O exit` would end this
        shell's sessions, a lease held on the host among them."""
        if self._controls is None:
            shared = control_dir()
            self._controls = self._temp = Path(
                tempfile.mkdtemp(prefix="s", dir=shared) if shared else tempfile.mkdtemp(prefix="niclab-ssh-")
            )
        return self._controls

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """End the host's ssh master (a no-op when none was started)."""
        if self.target is not None and self._used:
            self._used = False
            try:
                subprocess.run(
                    [SSH, *self._ssh_options(), "-O", "exit", "--", self.target.host],
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=CONNECT_TIMEOUT_S,
                )
            except (OSError, subprocess.TimeoutExpired):
                pass  # the master is gone already, or ends by itself after ControlPersist
        if self._temp is not None:
            shutil.rmtree(self._temp, ignore_errors=True)
            self._temp = self._controls = None

    # -- building commands -------------------------------------------------------------------------

    def _ssh_options(self) -> list[str]:
        assert self.target is not None
        controls = self._control_dir()
        return [
            "-T",
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={CONNECT_TIMEOUT_S}",
            "-o",
            f"ServerAliveInterval={ALIVE_INTERVAL_S}",
            "-o",
            "ServerAliveCountMax=3",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={controls}/%C",
            "-o",
            f"ControlPersist={PERSIST_S}",
            *self.target.options(),
        ]

    def argv(self, script: str, *args: str) -> list[str]:
        """The command that runs the POSIX sh `script` on the host, with `args` as its $1, $2, …"""
        words = ["sh", "-c", script, "niclab", *args]
        if self.target is None:
            return words
        self._used = True
        return [SSH, *self._ssh_options(), "--", self.target.host, shlex.join(words)]

    def fix(self) -> str:
        if self.target is None:
            return "check that sh runs here"
        return f"check that `{self.target.shown()} true` works from this machine (keys, ~/.ssh/config), as virsh needs"

    def unanswered(self, why: str) -> NiclabError:
        return NiclabError(f"lab host {self.name} ({self.uri}) does not answer over ssh: {why}; {self.fix()}")

    # -- running -----------------------------------------------------------------------------------

    def run(
        self,
        script: str,
        *args: str,
        timeout: float = COMMAND_TIMEOUT_S,
        limit: int = OUTPUT_LIMIT,
        what: str = "a command",
    ) -> Result:
        """Run `script` to its end: at most `timeout` seconds and `limit` bytes of output, else NiclabError.
        ssh's own failure (status 255) is the host not answering."""
        argv = self.argv(script, *args)
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
            )
        except OSError as exc:
            raise NiclabError(f"cannot run {argv[0]} for lab host {self.name}: {exc.strerror}") from None
        try:
            out, err = collect(proc, timeout, limit)
        except OutputTimedOut:
            raise self._timed_out(what, timeout) from None
        except OutputTooLarge:
            raise NiclabError(
                f"lab host {self.name} ({self.uri}): {what} printed more than {limit >> 10} KiB; refused "
                "(check what runs there)"
            ) from None
        stderr = _line(err.decode(errors="replace"))
        if proc.returncode == 255 and self.target is not None:
            raise self.unanswered(stderr or "ssh failed without saying why")
        return Result(proc.returncode, out, stderr)

    def _timed_out(self, what: str, timeout: float) -> NiclabError:
        return NiclabError(
            f"lab host {self.name} ({self.uri}) did not answer: {what} took longer than {timeout:g} s; {self.fix()}"
        )

    def runner(self, argv: list[str]) -> str:
        """A hostnet.Runner: `argv` run on the host (exec "$@"), its output as text; a failure is a NiclabError."""
        result = self.run('exec "$@"', *argv, what=shlex.join(argv))
        if result.returncode != 0:
            raise NiclabError(
                f"lab host {self.name}: {shlex.join(argv)} failed: {result.stderr or f'status {result.returncode}'}"
            )
        return result.stdout.decode(errors="replace")

    def spawn(self, script: str, *args: str) -> subprocess.Popen[bytes]:
        """Start `script` on the host and leave it running, its stdin a pipe (closing it ends the script if it
        reads stdin: the lease protocol's way of ending with niclab, however niclab ends)."""
        argv = self.argv(script, *args)
        try:
            return subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
            )
        except OSError as exc:
            raise NiclabError(f"cannot run {argv[0]} for lab host {self.name}: {exc.strerror}") from None


def _line(text: str) -> str:
    """The last meaningful line of a command's stderr, printable: the other host wrote it."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return said(last, last=False)
