"""Which module drives a card (`driver:` on a link): the kernel's own, another in-tree one, or one built for it.

A choice is made per link or per end and can be a matrix axis; niclab.plumbing.drivers builds the module for
the node's kernel (docs/scenarios.md, "Drivers: one card, two drivers").
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from niclab.base.problems import did_you_mean, shown

DEFAULT = "in-tree"  # what a scenario writes for the kernel's own module for the card
#: The keys of a driver written as a mapping: where the module comes from, and (optionally) which one drives the card.
SOURCES = ("module", "kernel-source", "dkms")
KEYS = (*SOURCES, "name")
MODULE_RE = re.compile(r"[A-Za-z0-9_-]{1,56}")  # modprobe takes - and _ alike (module_key)
PACKAGE_RE = re.compile(r"[a-z0-9][a-z0-9+.-]{1,99}")  # a Debian package name
TREE_PART_RE = re.compile(r"[A-Za-z0-9_+,-][A-Za-z0-9_.+,-]{0,99}")  # a folder of the kernel's source tree
FORMS = (
    "a driver is in-tree, another in-tree module's name (8139too), {module: DIR} (an out-of-tree module's "
    "source), {kernel-source: drivers/...} (a folder of the kernel's own source) or {dkms: PACKAGE}"
)


@dataclass(frozen=True)
class DriverChoice:
    """The kernel's default module for the card (kind ""), or which other module drives it."""

    kind: str = ""  # "", "named", "module", "kernel-source", "dkms"
    source: str = ""  # named: the module; module: absolute dir; kernel-source: path in the kernel tree; dkms: package
    name: str = ""  # the module that drives the card (named: == source; else optional)

    def __str__(self) -> str:
        if not self.kind:
            return DEFAULT
        if self.kind == "named":
            return self.source
        return f"{self.kind}:{self.source}" + (f" as {self.name}" if self.name else "")

    @property
    def is_default(self) -> bool:
        return not self.kind

    @property
    def slug(self) -> str:
        """Its part of a cache directory's name: a readable start ([a-z0-9-]) and a hash of the whole choice."""
        if not self.kind:
            return DEFAULT
        tail = PurePosixPath(self.source).name if self.kind in ("module", "kernel-source") else self.source
        readable = re.sub(r"[^a-z0-9]+", "-", f"{self.kind}-{tail}-{self.name}".lower()).strip("-")[:40].strip("-")
        digest = hashlib.sha256(f"{self.kind}\0{self.source}\0{self.name}".encode()).hexdigest()[:12]
        return f"{readable}-{digest}"


class DriverError(ValueError):
    """Why a driver setting is refused; `key`: the mapping's key it is about ("" for the whole value)."""

    def __init__(self, message: str, key: str = "", at_key: bool = False):
        super().__init__(message)
        self.key = key
        self.at_key = at_key


def module_key(name: str) -> str:
    """A module name as modprobe compares it: 8139-too and 8139_too are one module."""
    return name.replace("-", "_")


def parse_driver(value: Any, base: Path | None = None) -> DriverChoice:
    """`in-tree`, `8139too`, `{module: ../x}` (relative to `base`, the scenario's directory), `{kernel-source: PATH}`
    or `{dkms: PACKAGE}`, each mapping optionally with `name:`; DriverError (a ValueError) says why not."""
    if isinstance(value, DriverChoice):
        return value
    if value is None:
        return DriverChoice()
    if isinstance(value, str):
        return _named(value)
    if isinstance(value, dict):
        return _mapping(value, base)
    raise DriverError(f"{FORMS}, not {shown(value)}")


def _named(value: str) -> DriverChoice:
    if value == DEFAULT:
        return DriverChoice()
    if re.sub(r"[\s_-]", "", value.lower()) == "intree":
        raise DriverError(f"unknown driver {shown(value)}; did you mean '{DEFAULT}'? {FORMS}")
    kind, colon, rest = value.partition(":")
    if colon and kind in SOURCES:
        raise DriverError(f"driver {shown(value)} is written as a mapping: {{{kind}: {rest.strip() or '...'}}}")
    if "/" in value or value.startswith("."):
        raise DriverError(
            f"driver {shown(value)} is not a module name; an out-of-tree module's source directory is written "
            f"{{module: {value}}}"
        )
    if value.endswith((".ko", ".ko.xz", ".ko.zst", ".ko.gz")):
        raise DriverError(f"driver {shown(value)}: write the module's name without .ko ({value.split('.', 1)[0]})")
    if not MODULE_RE.fullmatch(value):
        raise DriverError(f"driver {shown(value)} is not a module name (letters, digits, _ and -, at most 56); {FORMS}")
    return DriverChoice("named", value, value)


def _mapping(value: dict, base: Path | None) -> DriverChoice:
    for key in value:
        if key not in KEYS:
            hint = did_you_mean(key, KEYS)
            raise DriverError(
                f"unknown key {shown(key)} in a driver; {hint + ' ' if hint else ''}{FORMS}, each mapping "
                "optionally with name: (the module that drives the card)",
                str(key),
                at_key=True,
            )
    sources = [key for key in SOURCES if key in value]
    if len(sources) != 1:
        given = (
            f"has one source, not both {sources[0]} and {sources[1]}"
            if len(sources) > 1
            else ("names no source" if value else "is an empty mapping")
        )
        raise DriverError(
            f"the driver {given}: write {{module: DIR}}, {{kernel-source: drivers/...}} or {{dkms: PACKAGE}}, "
            "each optionally with name: (the module that drives the card)"
        )
    (kind,) = sources
    name = value.get("name")
    if name is not None and not (isinstance(name, str) and MODULE_RE.fullmatch(name)):
        raise DriverError(
            f"name {shown(name)} is not a module name (letters, digits, _ and -, at most 56): it says which module "
            "drives the card",
            "name",
        )
    raw = value[kind]
    if not isinstance(raw, str) or not raw.strip():
        raise DriverError(f"{kind} is a {_WANTED[kind]}, not {shown(raw)}", kind)
    source = {"module": _module_dir, "kernel-source": _tree_path, "dkms": _package}[kind](raw, base)
    return DriverChoice(kind, source, name or "")


_WANTED = {
    "module": "directory with the module's source (a Kbuild or Makefile)",
    "kernel-source": "folder of the kernel's own source, e.g. drivers/net/ethernet/intel/e1000e",
    "dkms": "Debian DKMS package, e.g. r8168-dkms",
}


def _module_dir(raw: str, base: Path | None) -> str:
    try:
        folder = ((base or Path.cwd()) / Path(raw).expanduser()).resolve()
    except (RuntimeError, OSError, ValueError) as exc:  # ~nosuchuser, a symlink loop, a NUL byte
        raise DriverError(f"driver module {shown(raw)}: not a usable path ({exc})", "module") from None
    if not folder.is_dir():
        raise DriverError(f"driver module {shown(raw)}: no such directory ({folder})", "module")
    if not any((folder / name).is_file() for name in ("Kbuild", "Makefile")):
        raise DriverError(
            f"driver module {shown(raw)}: neither a Kbuild nor a Makefile in it; {{module: DIR}} is the source "
            "directory of an out-of-tree module, built with the kernel's make M=DIR",
            "module",
        )
    return str(folder)


def _tree_path(raw: str, base: Path | None) -> str:
    path = PurePosixPath(raw.strip())
    if path.is_absolute() or not path.parts or path.parts[0] != "drivers":
        raise DriverError(
            f"kernel-source {shown(raw)} is a folder of the kernel's source tree under drivers/, "
            "e.g. drivers/net/ethernet/intel/e1000e",
            "kernel-source",
        )
    for part in path.parts:
        if part == ".." or not TREE_PART_RE.fullmatch(part):
            raise DriverError(
                f"kernel-source {shown(raw)}: {shown(part)} is not a folder name of the kernel's tree "
                "(letters, digits and _ . + , -; no ..)",
                "kernel-source",
            )
    return str(path)


def _package(raw: str, base: Path | None) -> str:
    if not PACKAGE_RE.fullmatch(raw):
        raise DriverError(
            f"dkms {shown(raw)} is not a Debian package name (lowercase letters, digits and + . -), e.g. r8168-dkms",
            "dkms",
        )
    return raw
