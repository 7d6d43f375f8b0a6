"""Saved guest states: a guest of each kind boots once, with no cards; later guests of that kind are restored.

The key is everything that shapes the state: the image (kernel, initramfs, add-ons, driver layers), the
kernel words that stay on its command line, vCPUs, memory, accelerator, QEMU and its firmware, and FORMAT
(the saved guest's devices, qemu_cmd). A state lives in `<image>/states/<key>/`, so it goes with its image.
It is loaded only when it is this user's (or root's), writable by nobody else, and the file QEMU will read
is the one whose SHA-256 was recorded when it was made (docs/architecture.md, "Guests are restored").
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from niclab.base.atomic import building, write_text
from niclab.base.errors import NiclabError
from niclab.base.filelock import locked
from niclab.base.node import Progress
from niclab.base.paths import cache_dir
from niclab.base.procs import Supervisor
from niclab.model.topology import NodeSpec
from niclab.plumbing.backends.boot import BootError, tail
from niclab.plumbing.backends.qemu_cmd import VmPlan, qemu_argv
from niclab.plumbing.backends.qmp import Qmp, QmpError
from niclab.plumbing.guest import AgentError, AgentNode, GuestAgent
from niclab.plumbing.image import Image

FORMAT = 1  # the saved guest's devices and how it is saved: bump when qemu_cmd's restored argv changes
STATE = "state"  # QEMU's migration stream
META = "state.json"  # the key, the kernel command line, the stream's size, SHA-256 and stat
SAVED_NODE = "saved"  # the node name the saved guest boots with (its hostname is set after each restore)
SAVE_TIMEOUT_S = 120.0


class SavedGuestDown(BootError):
    """The guest booted to be saved did not come up: the same guest would not boot cold either."""


class RefusedState(NiclabError):
    """A saved state that is not loaded: damaged, planted, or of another key. One line: where, why, the fix."""


@dataclass(frozen=True)
class StateKey:
    """What a saved state must match to be restored in place of a boot."""

    image: Image
    cpus: int
    memory_mib: int
    accel: str
    qemu: tuple[tuple[str, str], ...]  # QEMU's version, binary and firmware, as the backend identifies them
    words: tuple[str, ...] = ()  # the node's kernel words that stay on the command line

    def fields(self) -> dict:
        files = {
            name: f"{p.stat().st_size}:{p.stat().st_mtime_ns}"
            for name, p in (("kernel", self.image.boot_kernel), ("initrd", self.image.initrd))
        }
        return {
            "format": FORMAT,
            "image": self.image.id,
            "files": files,
            "cpus": self.cpus,
            "memory_mib": self.memory_mib,
            "accel": self.accel,
            "qemu": dict(self.qemu),
            "words": list(self.words),
        }

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.fields(), sort_keys=True).encode()).hexdigest()[:16]

    @property
    def directory(self) -> Path:
        return states_root(self.image) / self.digest

    @property
    def append(self) -> str:
        """The saved guest's kernel command line, which every restore of it gives QEMU again."""
        return " ".join([self.image.cmdline, *self.words, f"niclab.node={SAVED_NODE}"])


def states_root(image: Image) -> Path:
    """Where an image's saved states live: beside it, so they go with it; in this user's cache when the image's
    directory is not this user's (an image another user built, NICLAB_IMAGE elsewhere)."""
    try:
        own = image.directory.stat().st_uid == os.geteuid() and os.access(image.directory, os.W_OK)
    except OSError:
        own = False
    return image.directory / "states" if own else cache_dir() / "states" / image.directory.name


@dataclass(frozen=True)
class SavedState:
    """A state verified for loading: its key's digest, the open file QEMU inherits, what was recorded."""

    key: str
    fd: int
    meta: dict


def module_words(cmdline: tuple[str, ...], image: Image) -> tuple[dict[str, list[str]], tuple[str, ...]]:
    """The node's kernel words split: `module.param=value` words of the image's loadable modules (module ->
    "param=value", set in /etc/modprobe.d after the restore, before the cards' drivers load), and the rest (kept
    on the command line, so in the key: a built-in's parameter, a kernel word like `printk.time=1`)."""
    loadable = {m.replace("-", "_") for m in image.manifest.get("modules", []) or []}
    loadable |= {m.replace("-", "_") for m in image.manifest.get("drivers", {}) or {}}
    moved: dict[str, list[str]] = {}
    kept: list[str] = []
    for word in cmdline:
        name, sep, value = word.partition("=")
        module, dot, param = name.partition(".")
        if sep and dot and param and module.replace("-", "_") in loadable:
            moved.setdefault(module.replace("-", "_"), []).append(f"{param}={value}")
        else:
            kept.append(word)
    return moved, tuple(kept)


def loaded_before(saved: SavedState, params: dict[str, list[str]]) -> list[str]:
    """The modules among `params` that the saved guest had loaded already: their parameters cannot be set."""
    loaded = {str(m).replace("-", "_") for m in saved.meta.get("modules", [])}
    return sorted(set(params) & loaded)


# -- loading --------------------------------------------------------------------------------------------------


def _trusted(path: Path, st: os.stat_result) -> str | None:
    """Why `path` may not be loaded by this user (None if it may): another owner, or writable by others."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"belongs to uid {st.st_uid}, not to this user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"may be written by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def sha256_of(fd: int) -> str:
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, 1 << 22, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


_verified: dict[tuple[int, ...], str] = {}  # this process's verdicts: stat identity -> SHA-256 found


def open_state(key: StateKey) -> SavedState | None:
    """The key's saved state opened for QEMU to read (None if there is none yet); RefusedState if there is one
    that must not be loaded. The file is checked through the descriptor QEMU inherits, so what was checked is
    what QEMU reads."""
    directory = key.directory
    if not directory.is_dir():
        return None
    fix = f"remove {directory} (niclab makes it again), or boot cold (--cold-boot)"
    for path in (directory.parent, directory, directory / META):
        try:
            st = path.lstat()
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode) or (why := _trusted(path, st)) is not None:
            cure = fix if path != directory.parent else f"chmod go-w {path} if it is yours, or remove it"
            raise RefusedState(f"saved state {directory}: not loaded: {path} {why or 'is a symbolic link'}; {cure}")
    try:
        meta = json.loads((directory / META).read_text())
        recorded = meta["sha256"], list(meta["stat"]), meta["fields"]
    except (OSError, ValueError, KeyError, TypeError):
        raise RefusedState(f"saved state {directory}: not loaded: {META} is unreadable or incomplete; {fix}") from None
    if recorded[2] != json.loads(json.dumps(key.fields())):
        raise RefusedState(f"saved state {directory}: not loaded: it was made for another key; {fix}")
    try:
        fd = os.open(directory / STATE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise RefusedState(f"saved state {directory}: not loaded: {exc.strerror}; {fix}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (why := _trusted(directory / STATE, st)) is not None:
            where = directory / STATE
            raise RefusedState(f"saved state {directory}: not loaded: {where} {why or 'is not a regular file'}; {fix}")
        identity = tuple(_identity(st))
        if list(identity) != recorded[1] and _verified.get(identity) is None:
            try:  # changed since it was made (copied, touched): read it whole
                _verified[identity] = sha256_of(fd)
            except OSError as exc:
                raise RefusedState(f"saved state {directory}: not loaded: reading it: {exc.strerror}; {fix}") from None
        found = recorded[0] if list(identity) == recorded[1] else _verified[identity]
        if found != recorded[0]:
            raise RefusedState(
                f"saved state {directory}: not loaded: its {STATE} is not the one saved (SHA-256 {found[:16]}…, "
                f"recorded {str(recorded[0])[:16]}…); {fix}"
            )
    except BaseException:
        os.close(fd)
        raise
    return SavedState(key.digest, fd, meta)


# -- making ---------------------------------------------------------------------------------------------------


def saving_plan(key: StateKey) -> VmPlan:
    """The plan of the guest that boots to be saved: no cards, SeaBIOS (qboot has no room for vmgenid)."""
    return VmPlan(
        node=NodeSpec(SAVED_NODE, 0, key.cpus, key.memory_mib, ()),
        accel=key.accel,
        kernel=str(key.image.boot_kernel),
        initrd=str(key.image.initrd),
        cmdline=key.image.cmdline,
        nics=(),
        serial_log="saved.serial.log",
        qmp_socket="saved.qmp",
        agent_socket="saved.qga",
        append=key.append,
        vmgenid=True,
    )


MODULES = 'cut -d" " -f1 /proc/modules | tr "\\n" " "; sync'  # what the saved guest has loaded, its files written


def make_state(key: StateKey, binary: str, progress: Progress, boot_timeout: float, workdir: Path) -> None:
    """Boot a guest of `key` with no cards up to its agent and save its state into the image's states/, under a
    lock (another run making the same state waits, then finds it made). NiclabError if it could not: why, and
    where the guest's console is."""
    try:
        _make_state(key, binary, progress, boot_timeout, workdir)
    except OSError as exc:
        raise NiclabError(f"cannot save a guest's state in {key.directory.parent}: {exc.strerror or exc}") from None


def _make_state(key: StateKey, binary: str, progress: Progress, boot_timeout: float, workdir: Path) -> None:
    directory = key.directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    if directory.parent.stat().st_uid == os.geteuid():
        os.chmod(directory.parent, 0o755)  # whatever the umask: open_state refuses a states/ others may write
    with locked(directory.parent / f".{key.digest}.lock"):
        if (directory / META).is_file():
            return
        started = time.monotonic()
        progress(
            f"booting a guest to save its state (image {key.image.id}, {key.cpus} vCPU, {key.memory_mib} MiB, "
            f"{key.accel}); later guests of its kind are restored from it"
        )
        # QEMU runs in the cell's work directory (its console log is kept there with the others'); it writes the
        # state beside where it goes, renamed into place when whole
        running = workdir / "saving"
        shutil.rmtree(running, ignore_errors=True)
        running.mkdir(mode=0o700, parents=True)
        with building(directory) as work:
            with Supervisor(running) as supervisor:
                child = supervisor.start(
                    "qemu-saved", qemu_argv(binary, saving_plan(key)), cwd=running, log=running / "qemu.log"
                )
                try:
                    booted, modules = _boot_and_save(child.exit_reason, running, work / STATE, started + boot_timeout)
                except SavedGuestDown as exc:
                    waited = f"waited {time.monotonic() - started:.0f} s of {boot_timeout:.0f} under {key.accel}"
                    raise SavedGuestDown(
                        f"guest(s) did not come up: {exc} ({waited}), booted to save its state for image "
                        f"{key.image.id}\n--- the end of {running / 'saved.serial.log'}:\n"
                        f"{tail(running / 'saved.serial.log')}",
                        f"{exc} ({waited})",
                    ) from None
                except NiclabError as exc:
                    raise NiclabError(f"saving the state of a guest of image {key.image.id}: {exc}") from None
                try:
                    child.popen.wait(10)
                except subprocess.TimeoutExpired:
                    pass  # the supervisor ends it
            os.chmod(work / STATE, 0o644)
            os.chmod(work, 0o755)
            fd = os.open(work / STATE, os.O_RDONLY)
            try:
                digest = sha256_of(fd)
            finally:
                os.close(fd)
            meta: dict[str, Any] = {
                "fields": key.fields(),
                "append": key.append,
                "sha256": digest,
                "bytes": (work / STATE).stat().st_size,
                "modules": modules.split(),
                "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "boot_seconds": round(booted, 2),
                "save_seconds": round(time.monotonic() - started - booted, 2),
            }
        # the stat open_state compares with is the file's where it is now
        meta["stat"] = _identity((directory / STATE).stat())
        write_text(directory / META, json.dumps(meta, indent=2) + "\n")
        os.chmod(directory / META, 0o644)
        stale = _prune(key)
        progress(
            f"saved a guest's state for image {key.image.id} ({key.cpus} vCPU, {key.memory_mib} MiB, {key.accel}): "
            f"{meta['bytes'] / 2**20:.0f} MiB in {time.monotonic() - started:.1f} s, key {key.digest}"
            + (f"; removed {stale} saved for another QEMU" if stale else "")
        )


def _prune(key: StateKey) -> int:
    """Remove this user's states of the key's image saved for another QEMU (its update left them unusable);
    how many. Run under the new state's lock, after it was made."""
    removed = 0
    for directory in key.directory.parent.iterdir():
        try:
            if directory == key.directory or not directory.is_dir() or directory.stat().st_uid != os.geteuid():
                continue
            fields = json.loads((directory / META).read_text())["fields"]
            if fields.get("qemu") == dict(key.qemu):
                continue
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        shutil.rmtree(directory, ignore_errors=True)
        removed += 1
    return removed


def _boot_and_save(alive: Callable[[], str | None], running: Path, target: Path, deadline: float) -> tuple[float, str]:
    """Wait for the saved guest's agent, note its modules, stop it and write its state to `target`; QEMU quits.
    (seconds to the agent, the modules loaded)."""
    started = time.monotonic()
    agent = GuestAgent(SAVED_NODE, running / "saved.qga")
    try:
        try:
            agent.connect(deadline, alive)
        except AgentError as exc:
            raise SavedGuestDown(str(exc)) from None
        booted = time.monotonic() - started
        modules = AgentNode(SAVED_NODE, agent).run(MODULES, timeout=30).stdout
    except AgentError as exc:
        raise NiclabError(str(exc)) from None
    finally:
        agent.close()
    # QEMU writes the state into a file niclab opened and handed it (getfd): the migration is complete when QEMU
    # says so (an `exec:` writer can be ended by QEMU before it flushed)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        with Qmp(SAVED_NODE, running / "saved.qmp", time.monotonic() + 10, alive) as qmp:
            qmp.execute("stop")
            qmp.send_fd("state", fd)
            qmp.execute("migrate", {"uri": "fd:state"})
            qmp.wait_migration(time.monotonic() + SAVE_TIMEOUT_S, alive)
            qmp.execute("quit")
        os.fsync(fd)
    except QmpError as exc:
        raise NiclabError(f"saving its state failed: {exc}") from None
    finally:
        os.close(fd)
    return booted, modules


# -- listing --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateInfo:
    key: str
    directory: Path
    bytes: int
    made_at: str
    cpus: int
    memory_mib: int
    accel: str
    qemu: str


def states_of(image_dir: Path) -> list[StateInfo]:
    """The saved states of the image in `image_dir`, beside it or in this user's cache, as their records say (for
    `niclab image ls`)."""
    found = []
    places = (image_dir / "states", cache_dir() / "states" / image_dir.name)
    for directory in sorted(d for place in places for d in place.glob("*")):
        try:
            meta = json.loads((directory / META).read_text())
            fields = meta["fields"]
            found.append(
                StateInfo(
                    directory.name,
                    directory,
                    int(meta["bytes"]),
                    str(meta["made_at"]),
                    int(fields["cpus"]),
                    int(fields["memory_mib"]),
                    str(fields["accel"]),
                    str(fields["qemu"].get("version", "?")),
                )
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return found
