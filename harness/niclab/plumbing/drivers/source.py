"""A module source directory from a scenario (untrusted): hashed and copied whole, or refused in one line."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.base.treewalk import shown_path, walk_untrusted

MAX_BYTES = 64 << 20  # a driver's source is a few MB (e1000e: 1.5 MB; a vendor tarball's tree: ~10 MB)
MAX_FILES = 5000
FIX = "name a directory that holds only the module's source"
LINK_FIX = "replace the link by its file"


def _entries(root: Path, where: str) -> list[tuple[str, os.stat_result]]:
    if root.is_symlink() or not root.is_dir():
        raise NiclabError(f"{where}: not a directory; fix: name the directory with the module's Kbuild or Makefile")
    return list(walk_untrusted(root, where, MAX_BYTES, MAX_FILES, FIX, LINK_FIX))


def _read(root: Path, path: str, where: str) -> bytes:
    try:
        fd = os.open(root / path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise NiclabError(f"{where}: cannot read {shown_path(path)} ({exc.strerror}); fix: make it readable") from None
    with os.fdopen(fd, "rb") as data:
        if not stat.S_ISREG(os.fstat(data.fileno()).st_mode):
            raise NiclabError(f"{where}: {shown_path(path)} changed while it was read; fix: try again")
        return data.read(MAX_BYTES + 1)


def source_hash(root: Path, where: str) -> str:
    """sha256 of the tree: every entry's relative path and kind, a file's content, a link's target."""
    digest = hashlib.sha256()
    for path, info in _entries(root, where):
        name = os.fsencode(path)
        if stat.S_ISDIR(info.st_mode):
            digest.update(b"d " + name + b"\0")
        elif stat.S_ISLNK(info.st_mode):
            digest.update(b"l " + name + b"\0" + os.fsencode(os.readlink(root / path)) + b"\0")
        else:
            data = _read(root, path, where)
            digest.update(b"f " + name + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def copy_source(root: Path, out: Path, where: str) -> str:
    """Copy the tree to `out` (files with their executable bit, links as links) and return the copy's hash."""
    out.mkdir(parents=True)
    for path, info in _entries(root, where):
        target = out / path
        if stat.S_ISDIR(info.st_mode):
            target.mkdir()
        elif stat.S_ISLNK(info.st_mode):
            target.symlink_to(os.readlink(root / path))
        else:
            target.write_bytes(_read(root, path, where))
            target.chmod(0o755 if info.st_mode & 0o111 else 0o644)
    return source_hash(out, where)


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
