"""Walk a directory someone else made (a scenario's, a developer's) without trusting it.

Symbolic links that leave it (as written, or once resolved through its other
links), devices, sockets and pipes are refused, and so is a tree over a size or
file-count cap: one line naming the place and the fix.
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


def walk_untrusted(
    root: Path, where: str, max_bytes: int, max_files: int, fix: str, link_fix: str
) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under `root` (relative path, lstat), depth first in name order; `fix` ends the size and count
    messages, `link_fix` the one of a link that leaves the tree."""
    total = count = 0
    real_root = os.path.realpath(root)
    pending = [""]
    while pending:
        rel = pending.pop()
        try:
            entries = sorted(os.scandir(root / rel), key=lambda e: e.name)
        except OSError as exc:
            raise NiclabError(f"{where}: cannot read {rel or '.'} ({exc.strerror})") from None
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError as exc:
                raise NiclabError(f"{where}: cannot read {shown_path(path)} ({exc.strerror})") from None
            count += 1
            if count > max_files:
                raise NiclabError(f"{where}: more than {max_files} files; fix: {fix}")
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(root / path)
                inside = os.path.normpath(os.path.join(os.path.dirname(path), target))
                real = os.path.realpath(root / path)  # through the tree's other links (`d -> .` makes d/d/.. leave)
                leaves = os.path.isabs(target) or inside == ".." or inside.startswith("../")
                if leaves or os.path.commonpath([real_root, real]) != real_root:
                    raise NiclabError(
                        f"{where}: {shown_path(path)} is a symbolic link to {shown_path(target)}, outside the "
                        f"directory; fix: {link_fix}"
                    )
            elif stat.S_ISDIR(info.st_mode):
                pending.append(path)
            elif stat.S_ISREG(info.st_mode):
                total += info.st_size
                if total > max_bytes:
                    raise NiclabError(f"{where}: more than {max_bytes >> 20} MB; fix: {fix}")
            else:
                raise NiclabError(f"{where}: {shown_path(path)} is not a file, directory or link; fix: remove it")
            yield path, info
