"""Read a root file system straight from a tar archive, following its symlinks.

The image build reads the guest root that mmdebstrap wrote as a tar, so it
never unpacks 400 MB of Debian onto the host nor needs root to do it.
"""

from __future__ import annotations

import posixpath
import tarfile
from pathlib import Path


def _normalize(name: str) -> str:
    """An archive name ("./usr/bin/x", "usr/bin/x", ".") as an absolute path."""
    path = posixpath.normpath("/" + name)
    return "/" + path.lstrip("/")


class TarTree:
    def __init__(self, path: Path):
        self._tar = tarfile.open(path)
        self._members: dict[str, tarfile.TarInfo] = {}
        for member in self._tar.getmembers():
            self._members[_normalize(member.name)] = member
        self._members.setdefault("/", tarfile.TarInfo("."))
        self._members["/"].type = tarfile.DIRTYPE

    def close(self) -> None:
        self._tar.close()

    def __enter__(self) -> TarTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def resolve(self, path: str, _depth: int = 0) -> str:
        """The path with every symlink followed, like realpath inside the root."""
        if _depth > 40:
            raise OSError(f"too many levels of symbolic links at {path}")
        parts = [p for p in path.split("/") if p]
        current = "/"
        for i, part in enumerate(parts):
            if part == "..":
                current = posixpath.dirname(current)
                continue
            candidate = posixpath.join(current, part)
            member = self._members.get(candidate)
            if member is not None and member.issym():
                target = member.linkname
                if not target.startswith("/"):
                    target = posixpath.join(current, target)
                rest = "/".join(parts[i + 1 :])
                return self.resolve(posixpath.join(target, rest) if rest else target, _depth + 1)
            current = candidate
        return posixpath.normpath(current)

    def member(self, path: str) -> tarfile.TarInfo | None:
        member = self._members.get(self.resolve(path))
        if member is not None and member.islnk():  # hard link: the content lives at its target
            return self._members.get(_normalize(member.linkname))
        return member

    def exists(self, path: str) -> bool:
        return self.member(path) is not None

    def read(self, path: str) -> bytes:
        member = self.member(path)
        if member is None or not member.isfile():
            raise FileNotFoundError(f"{path} is not a file in the guest root")
        handle = self._tar.extractfile(member)
        assert handle is not None
        return handle.read()

    def mode(self, path: str) -> int:
        member = self.member(path)
        if member is None:
            raise FileNotFoundError(path)
        return member.mode

    def listdir(self, path: str) -> list[str]:
        """The names in a directory, also those a tar without directory entries only implies."""
        base = self.resolve(path).rstrip("/") + "/"
        return sorted(
            {name[len(base) :].split("/")[0] for name in self._members if name.startswith(base) and name != base}
        )

    def files_under(self, path: str) -> list[str]:
        """Every regular file below `path` (after its symlinks), as paths relative to it, sorted."""
        base = self.resolve(path).rstrip("/") + "/"
        return sorted(name[len(base) :] for name, m in self._members.items() if name.startswith(base) and m.isfile())

    def names_under(self, path: str) -> list[str]:
        """Every file and symlink below `path` (after its symlinks; not directories), relative to it, sorted."""
        base = self.resolve(path).rstrip("/") + "/"
        return sorted(name[len(base) :] for name, m in self._members.items() if name.startswith(base) and not m.isdir())
