"""niclab's state directory (card journals in vfio/, leases in leases/), opened so nothing in it steers root.

The directory is checked as it is opened (no link, its owner's and writable by nobody else, nor its ancestors
unless sticky), and everything in it is reached through its fd: O_NOFOLLOW and O_NONBLOCK, regular files of
that user, records size-capped and written whole (O_EXCL temp, fsync, rename), lock files 0600. A refusal is
one line with its fix (docs/architecture.md, "Trust"; docs/lab.md, "Who may write where").
"""

from __future__ import annotations

import errno
import os
import pwd
import secrets
import stat
import threading
from pathlib import Path
from types import TracebackType

from niclab.base.errors import NiclabError

RECORD_LIMIT = 64 * 1024  # journal entries and holder records are a few hundred bytes
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_GROUP_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH
_INTERMEDIATE_MODE = 0o755  # ancestors made as mkdir -p would, never group- or other-writable


class UnsafeFile(NiclabError):
    """A file in the state directory niclab will not use: `problem` says why, `fix` what to do."""

    def __init__(self, path: Path, problem: str, fix: str):
        super().__init__(f"{shown(str(path))} {problem}; fix: {fix}")
        self.path = path
        self.problem = problem
        self.fix = fix


def shown(text: str) -> str:
    """A name read from a directory, fit for one line: as is if printable, else quoted with escapes."""
    return text if text.isprintable() else repr(text)


def _who(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _trusted() -> str:
    euid = os.geteuid()
    return "root" if euid == 0 else f"you (uid {euid})"


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _check_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise NiclabError(f"internal error: {name!r} is not a file name in the state directory")


class StateDir:
    """An open, checked directory of niclab's state: a context manager holding an O_DIRECTORY|O_NOFOLLOW fd.

    `named_by` is what chose the directory, for the fix of a refusal ("NICLAB_STATE", "--state").
    """

    def __init__(self, path: Path, *, named_by: str = "NICLAB_STATE"):
        self.path = Path(os.path.abspath(path))
        self.named_by = named_by
        self._fd: int | None = None
        self._subs: dict[str, StateDir] = {}
        self._subs_lock = threading.Lock()  # a run's threads share it (leases taken while others wait)
        self._label = "state directory"

    # -- opening -----------------------------------------------------------------------------------

    def __enter__(self) -> StateDir:
        self._fd = self._open_top()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        for sub in self._subs.values():
            sub.close()
        self._subs.clear()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise NiclabError(f"internal error: state directory {self.path} used outside its `with` block")
        return self._fd

    def sub(self, name: str) -> StateDir:
        """The subdirectory `name` (created 0700 if missing), checked like the state directory; open as long as
        this one is."""
        with self._subs_lock:
            if name not in self._subs:
                _check_name(name)
                sub = StateDir(self.path / name, named_by=self.named_by)
                sub._label = "directory"
                sub._fd = sub._open_at(self.fd, name, create_mode=0o700)
                self._subs[name] = sub
            return self._subs[name]

    def _open_top(self) -> int:
        if self.path == Path("/"):
            raise NiclabError(f"the state directory cannot be /: point {self.named_by} at a directory of niclab's")
        parent = Path(os.path.realpath(self.path.parent))  # ancestors resolved: what they are now is checked
        fd = os.open("/", _DIR_FLAGS)
        try:
            walked = Path("/")
            self._check_ancestor(fd, walked)
            for part in parent.parts[1:]:
                child = self._open_at(fd, part, create_mode=_INTERMEDIATE_MODE, ancestor=walked / part)
                os.close(fd)
                fd, walked = child, walked / part
                self._check_ancestor(fd, walked)
            return self._open_at(fd, self.path.name, create_mode=0o700)
        finally:
            os.close(fd)

    def _open_at(self, parent_fd: int, name: str, *, create_mode: int, ancestor: Path | None = None) -> int:
        """Open parent_fd/name as a directory without following a symbolic link, creating it if missing;
        `ancestor` is its path when it is an ancestor (checked by the caller), else it is this directory."""
        path = ancestor or self.path
        label = "the state directory's parent" if ancestor is not None else self._label
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except FileNotFoundError:
            try:
                os.mkdir(name, create_mode, dir_fd=parent_fd)
            except FileExistsError:
                pass  # made meanwhile: opened and checked below like any other
            except OSError as exc:
                raise NiclabError(
                    f"cannot create {label} {path}: {exc.strerror}; fix: create it (mode 0700, owned by "
                    f"{'root' if os.geteuid() == 0 else 'you'}) or point {self.named_by} at another directory"
                ) from None
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
            except OSError as exc:
                raise self._refusal(parent_fd, name, label, path, exc) from None
        except OSError as exc:
            raise self._refusal(parent_fd, name, label, path, exc) from None
        if ancestor is None:
            try:
                self._check_own(fd, path, label)
            except BaseException:
                os.close(fd)
                raise
        return fd

    def _refusal(self, parent_fd: int, name: str, label: str, path: Path, exc: OSError) -> NiclabError:
        try:
            info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except OSError:
            return NiclabError(f"cannot open {label} {path}: {exc.strerror}")
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(name, dir_fd=parent_fd)
            return NiclabError(
                f"{label} {path} is a symbolic link to {shown(target)}: point {self.named_by} at a real directory"
                if label == "state directory"
                else f"{label} {path} is a symbolic link to {shown(target)}: niclab follows none in its state "
                f"directory; fix: remove it (rm {path})"
            )
        if not stat.S_ISDIR(info.st_mode):
            return NiclabError(
                f"{label} {path} is {_kind(info.st_mode)}, not a directory; fix: remove it "
                f"or point {self.named_by} at a directory"
            )
        return NiclabError(f"cannot open {label} {path}: {exc.strerror}")

    def _check_own(self, fd: int, path: Path, label: str) -> None:
        """The state directory and its subdirectories: whoever runs niclab owns them, nobody else writes them."""
        info = os.fstat(fd)
        euid = os.geteuid()
        who = "root" if euid == 0 else "you"
        why = "root acts on the card journals kept there" if euid == 0 else "niclab acts on the records kept there"
        if info.st_uid != euid:
            fix = (
                f"chown root: {path} && chmod 0700 {path}"
                if euid == 0
                else f"point {self.named_by} at a directory of your own"
            )
            raise NiclabError(f"{label} {path} is owned by {_who(info.st_uid)}, not {_trusted()}: {why}; fix: {fix}")
        if info.st_mode & _GROUP_OTHER_WRITE:
            raise NiclabError(
                f"{label} {path} is writable by others than {who} (mode {stat.S_IMODE(info.st_mode):04o}): "
                f"{why}; fix: chmod 0700 {path}"
            )
        if stat.S_IMODE(info.st_mode) & 0o077:  # 0755, as niclab once made it: others could open lock files
            os.fchmod(fd, stat.S_IMODE(info.st_mode) & 0o700)

    def _check_ancestor(self, fd: int, path: Path) -> None:
        """An ancestor: root's or the user's, and writable by nobody else unless sticky (so no one can swap it)."""
        info = os.fstat(fd)
        euid = os.geteuid()
        owners = "root" if euid == 0 else f"root or you (uid {euid})"
        if info.st_uid not in (0, euid):
            raise NiclabError(
                f"state directory {self.path}: its parent {path} is owned by {_who(info.st_uid)}, who could swap "
                f"the directory under {_trusted()}; fix: keep the state directory in directories of {owners} "
                f"(e.g. /var/lib/niclab), or chown root: {path}"
            )
        if info.st_mode & _GROUP_OTHER_WRITE and not info.st_mode & stat.S_ISVTX:
            raise NiclabError(
                f"state directory {self.path}: its parent {path} is writable by others "
                f"(mode {stat.S_IMODE(info.st_mode):04o}, not sticky), who could swap the directory under "
                f"{_trusted()}; fix: chmod go-w {path}, or point {self.named_by} elsewhere"
            )

    # -- files ---------------------------------------------------------------------------------------

    def names(self) -> list[str]:
        """The directory's entries, sorted (hidden ones included)."""
        return sorted(os.listdir(self.fd))

    def read(self, name: str, limit: int = RECORD_LIMIT) -> bytes | None:
        """The record `name` (None if there is none): a regular file of the user, at most `limit` bytes."""
        _check_name(name)
        try:
            fd = os.open(name, os.O_RDONLY | _FILE_FLAGS, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._file_refusal(name, exc) from None
        try:
            info = os.fstat(fd)
            self._check_file(name, info)
            if info.st_size > limit:
                raise UnsafeFile(
                    self.path / name,
                    f"is larger than {limit // 1024} KiB ({info.st_size} bytes): not a record niclab wrote",
                    f"remove it (rm {self.path / name})",
                )
            data = os.read(fd, limit + 1)
        finally:
            os.close(fd)
        if len(data) > limit:
            raise UnsafeFile(
                self.path / name, f"is larger than {limit // 1024} KiB", f"remove it (rm {self.path / name})"
            )
        return data

    def write(self, name: str, data: bytes) -> None:
        """Replace the record `name` with `data` durably: a crash leaves the old record or the new one, whole."""
        _check_name(name)
        temp = f".{name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)  # replaces a symbolic link, never follows
        except BaseException as exc:
            try:
                os.unlink(temp, dir_fd=self.fd)
            except OSError:
                pass
            if isinstance(exc, IsADirectoryError):
                raise UnsafeFile(self.path / name, "is a directory", f"remove it (rm -r {self.path / name})") from None
            raise
        self.sync()

    def unlink(self, name: str) -> None:
        """Remove the entry `name` (a symbolic link itself, never its target); no entry is fine."""
        _check_name(name)
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            return
        except IsADirectoryError:
            raise UnsafeFile(self.path / name, "is a directory", f"remove it (rm -r {self.path / name})") from None
        self.sync()

    def sync(self) -> None:
        os.fsync(self.fd)

    def open_lock(self, name: str, *, create: bool = True) -> int | None:
        """An fd of the lock file `name` to flock (None if it is missing and not `create`): 0600, a regular file
        of the user; an existing one of the user's that others could read is made 0600."""
        _check_name(name)
        flags = os.O_RDWR | _FILE_FLAGS | (os.O_CREAT if create else 0)
        try:
            fd = os.open(name, flags, 0o600, dir_fd=self.fd)
        except FileNotFoundError:
            if create:
                raise
            return None
        except OSError as exc:
            raise self._file_refusal(name, exc) from None
        try:
            info = os.fstat(fd)
            self._check_file(name, info)
            if stat.S_IMODE(info.st_mode) & 0o077:
                os.fchmod(fd, 0o600)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _check_file(self, name: str, info: os.stat_result) -> None:
        path = self.path / name
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFile(path, f"is {_kind(info.st_mode)}, not a regular file", f"remove it (rm -r {path})")
        if info.st_uid != os.geteuid():
            raise UnsafeFile(
                path, f"is owned by {_who(info.st_uid)}, not {_trusted()}: it was not written by niclab here",
                f"remove it (rm {path})",
            )  # fmt: skip
        if info.st_mode & _GROUP_OTHER_WRITE:
            raise UnsafeFile(
                path,
                f"is writable by others than {'root' if os.geteuid() == 0 else 'you'} "
                f"(mode {stat.S_IMODE(info.st_mode):04o}): it may not be what niclab wrote",
                f"remove it (rm {path})",
            )
        if info.st_nlink != 1:
            raise UnsafeFile(
                path, f"has {info.st_nlink} hard links: another name reaches the same file", f"remove it (rm {path})"
            )

    def _file_refusal(self, name: str, exc: OSError) -> NiclabError:
        path = self.path / name
        if exc.errno == errno.ELOOP:
            try:
                target = os.readlink(name, dir_fd=self.fd)
            except OSError:
                target = "?"
            return UnsafeFile(
                path,
                f"is a symbolic link to {shown(target)}: niclab follows none in its state directory",
                f"remove it (rm {path})",
            )
        if exc.errno == errno.EISDIR:
            return UnsafeFile(path, "is a directory, not a regular file", f"remove it (rm -r {path})")
        return NiclabError(f"cannot open {path}: {exc.strerror}")
