"""Write a file whole or not at all, and never through a symlink planted where it goes.

`replacing(path)` writes to a fresh temp file that mkstemp makes in the
target's directory (O_EXCL: never an existing file, nor a symlink), then
renames it over the target: os.replace swaps the name, so a symlink at the
target is replaced itself, never followed. A failure removes the temp file
and leaves the target as it was. The new file gets the mode a plain open()
would give it (0666 less the umask), not mkstemp's 0600.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def replacing(path: Path, mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """A file object to write `path`'s new content to ("w" or "wb", open()'s keyword arguments)."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:200]}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **kwargs) as sink:
            os.fchmod(sink.fileno(), 0o666 & ~_umask())
            yield sink
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def write_text(path: Path, text: str) -> Path:
    """`path` holds `text` (UTF-8), written as `replacing` does."""
    with replacing(path, encoding="utf-8") as sink:
        sink.write(text)
    return path
