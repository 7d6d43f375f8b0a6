"""Rename the module a kernel source directory's Makefile builds (`{kernel-source: ..., name: NEW}`).

`obj-$(CONFIG_E1000E) += e1000e.o` becomes `obj-m += e1000e_vendor.o` and its object lists the new module's:
Kbuild names a module after its object. Run as `python -m niclab.plumbing.drivers.makefile DIR NEW [FOLDER]`
by the build's mmdebstrap hook on Debian's linux-source before anything is built there; the file is opened
only as a regular file of at most MAX_BYTES, never through a link.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

OBJ_LINE = re.compile(r"^(\s*)obj-(?:\$\(CONFIG_[A-Za-z0-9_]+\)|[ym])(\s*[:+]?=\s*)(.*)$", re.S)
OBJECT = re.compile(r"([A-Za-z0-9_-]+)\.o\b")
MAX_BYTES = 1 << 20  # a kernel Makefile is a few kB


def modules_of(text: str) -> list[str]:
    """The modules the Makefile's obj- lines name (a `dir/` entry is a subdirectory, not a module)."""
    found: list[str] = []
    for line in _logical_lines(text):
        if match := OBJ_LINE.match(line.replace("\\\n", " ")):
            found += [m for m in OBJECT.findall(match.group(3)) if m not in found]
    return found


def _logical_lines(text: str) -> list[str]:
    """The Makefile's lines with each continued line (ending in a backslash) joined to the next, newlines kept:
    "".join of them is the text."""
    lines: list[str] = []
    current = ""
    for physical in text.splitlines(keepends=True):
        current += physical
        if not physical.rstrip("\n").endswith("\\"):
            lines.append(current)
            current = ""
    return [*lines, current] if current else lines


def rename_module(text: str, new: str, old: str = "", directory: str = "") -> str:
    """The Makefile with module `old` (the only one it builds, else the one named as `directory`) renamed `new`;
    ValueError says which modules it has."""
    modules = modules_of(text)
    if not old:
        if len(modules) == 1:
            old = modules[0]
        elif directory in modules:
            old = directory
        else:
            raise ValueError(
                f"its Makefile builds {', '.join(modules) or 'no module'}; fix: build a directory with one module"
            )
    elif old not in modules:
        raise ValueError(f"its Makefile builds no module {old} (it builds {', '.join(modules) or 'none'})")
    escaped = re.escape(old)
    composite = re.search(rf"^\s*{escaped}-(objs|y|m)\s*[:+]?=", text, re.M) is not None
    token = re.compile(rf"(?<![A-Za-z0-9_./$(-]){escaped}\.o(?![A-Za-z0-9_])")
    out: list[str] = []
    for line in _logical_lines(text):
        match = OBJ_LINE.match(line)
        if match is None or not token.search(match.group(3)):
            out.append(line)
            continue
        indent = match.group(1)
        own = f"{indent}obj-m += {new}.o\n" + ("" if composite else f"{new}-y := {old}.o\n")
        rest = token.sub("", match.group(3))
        if not rest.replace("\\\n", " ").strip():  # the module was the line's only object: the line is its own
            out.append(own)
        else:  # the module shares its obj- line with others: take it out there, its own line follows
            kept = line[: match.start(3)] + rest
            out.append(kept if kept.endswith("\n") else kept + "\n")
            out.append(own)
    renamed = "".join(out)
    renamed = re.sub(rf"^(\s*){escaped}-(objs|y|m)(\s*[:+]?=)", rf"\1{new}-y\3", renamed, flags=re.M)
    return re.sub(rf"^(\s*){escaped}-(\$\(CONFIG_[A-Za-z0-9_]+\))(\s*[:+]?=)", rf"\1{new}-\2\3", renamed, flags=re.M)


def rewrite_makefile(directory: Path, new: str, folder: str = "") -> None:
    """Rename the module of directory/Makefile in place: a regular file, opened without following a link, of at
    most MAX_BYTES. OSError or ValueError (in words) if it cannot be."""
    path = directory / "Makefile"
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "r+b") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file")
        data = file.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise ValueError(f"{path} is over {MAX_BYTES >> 20} MiB: not a module's Makefile")
        renamed = rename_module(data.decode("utf-8", "surrogateescape"), new, directory=folder or directory.name)
        file.seek(0)
        file.truncate()
        file.write(renamed.encode("utf-8", "surrogateescape"))


def main(argv: list[str]) -> int:
    directory, new = Path(argv[0]), argv[1]
    folder = argv[2] if len(argv) > 2 else directory.name
    try:
        rewrite_makefile(directory, new, folder)
    except (OSError, ValueError) as exc:
        print(f"niclab-driver: renaming the module of {folder} to {new}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
