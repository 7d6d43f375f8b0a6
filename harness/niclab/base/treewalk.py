"""Walk a directory someone else made (a scenario's, a developer's) without trusting it.

Links that leave it, devices, sockets, pipes and trees over a size or file-count cap are refused with one
line naming the place and the fix; every component is opened from the folder above it, never through a link
(`open_beneath`). docs/architecture.md, "Trust".
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from niclab.base.errors import NiclabError


def shown_path(path: str) -> str:
    """A path of an untrusted tree for a message: any byte that is not UTF-8 text escaped."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def walk_untrusted(
    root: Path, where: str, max_bytes: int, max_files: int, fix: str, link_fix: str
) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under `root` (relative path, lstat), depth first in name order; `fix` ends the size and count
    messages, `link_fix` the one of a link that leaves the tree. Each folder is opened from the one above it
    (never through a link), so a folder swapped for a link while it is walked is refused, not followed."""
    total = count = 0
    real_root = os.path.realpath(root)
    try:
        top = os.open(root, _DIR)
    except OSError as exc:
        raise NiclabError(f"{where}: cannot read {root} ({exc.strerror})") from None
    pending = [("", top)]
    try:
        while pending:
            rel, fd = pending.pop()
            try:
                try:
                    entries = sorted(os.scandir(fd), key=lambda e: e.name)
                except OSError as exc:
                    raise NiclabError(f"{where}: cannot read {shown_path(rel) or '.'} ({exc.strerror})") from None
                for entry in entries:
                    path = f"{rel}/{entry.name}" if rel else entry.name
                    try:
                        info = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
                    except OSError as exc:
                        raise NiclabError(f"{where}: cannot read {shown_path(path)} ({exc.strerror})") from None
                    count += 1
                    if count > max_files:
                        raise NiclabError(f"{where}: more than {max_files} files; fix: {fix}")
                    if stat.S_ISLNK(info.st_mode):
                        target = os.readlink(entry.name, dir_fd=fd)
                        inside = os.path.normpath(os.path.join(os.path.dirname(path), target))
                        real = os.path.realpath(root / path)  # through the tree's other links (`d -> .`)
                        leaves = os.path.isabs(target) or inside == ".." or inside.startswith("../")
                        if leaves or os.path.commonpath([real_root, real]) != real_root:
                            raise NiclabError(
                                f"{where}: {shown_path(path)} is a symbolic link to {shown_path(target)}, outside "
                                f"the directory; fix: {link_fix}"
                            )
                    elif stat.S_ISDIR(info.st_mode):
                        try:
                            pending.append((path, os.open(entry.name, _DIR, dir_fd=fd)))
                        except OSError as exc:
                            raise NiclabError(
                                f"{where}: cannot read {shown_path(path)} ({exc.strerror}); fix: {fix}"
                            ) from None
                    elif stat.S_ISREG(info.st_mode):
                        total += info.st_size
                        if total > max_bytes:
                            raise NiclabError(f"{where}: more than {max_bytes >> 20} MB; fix: {fix}")
                    else:
                        raise NiclabError(
                            f"{where}: {shown_path(path)} is not a file, directory or link; fix: remove it"
                        )
                    yield path, info
            finally:
                os.close(fd)
    finally:
        for _, fd in pending:
            os.close(fd)


def open_beneath(root: Path, relative: str) -> int:
    """The regular file `relative` under `root`, opened one component at a time from `root`, none a link: its
    descriptor (the caller closes it). OSError (ELOOP, ENOTDIR …) when a component is a link or not what it
    should be, as when a step still running swapped a folder for a link."""
    fd = os.open(root, _DIR)
    try:
        *folders, name = relative.split("/")
        for folder in folders:
            inner = os.open(folder, _DIR, dir_fd=fd)
            os.close(fd)
            fd = inner
        found = os.open(name, _FILE, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(found).st_mode):
        os.close(found)
        raise OSError(f"{relative} is not a regular file")
    return found
