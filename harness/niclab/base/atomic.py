"""Write a file whole or not at all, and never through a symlink planted where it goes.

`replacing(path)` writes a fresh mkstemp file beside the target and renames it over the target, so a symlink
there is replaced, never followed, and a failure leaves the target as it was. The new file gets the mode a
plain open() would give it, not mkstemp's 0600 (docs/architecture.md, "Trust").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from niclab.base.errors import NiclabError


def _umask() -> int:
    """The process's umask, read without changing it (Linux says it in /proc/self/status)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and put back (a moment other threads could see)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def replacing(path: Path, mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """A file object to write `path`'s new content to ("w" or "wb", open()'s keyword arguments). A failure
    to make or place the file is a NiclabError naming `path` (never the temp file) and the fix."""
    try:
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:200]}.", suffix=".tmp")
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    try:
        with os.fdopen(fd, mode, **kwargs) as sink:
            os.fchmod(sink.fileno(), 0o666 & ~_umask())
            yield sink
        try:
            os.replace(temp, path)
        except OSError as exc:
            raise _cannot_write(path, exc) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _cannot_write(path: Path, exc: OSError) -> NiclabError:
    if isinstance(exc, IsADirectoryError) or path.is_dir():
        fix = "remove that directory, or write elsewhere (--out)"
    elif isinstance(exc, FileNotFoundError):
        fix = f"create {path.parent} first, or write elsewhere (--out)"
    else:
        fix = "write elsewhere (--out)"
    return NiclabError(f"cannot write {path}: {exc.strerror or exc}; {fix}")


def write_text(path: Path, text: str) -> Path:
    """`path` holds `text` (UTF-8), written as `replacing` does."""
    with replacing(path, encoding="utf-8") as sink:
        sink.write(text)
    return path


@contextmanager
def building(target: Path) -> Iterator[Path]:
    """A temporary directory beside `target` to build in, renamed into place when the block ends well (so a
    half-built image is never found) and removed when it does not."""
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield work
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
