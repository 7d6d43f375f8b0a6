"""Which module drives a link's card (`driver:` in a scenario): the kernel's own, another, or one built."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KINDS = ("named", "module", "kernel-source", "dkms")
MODULE_NAME = re.compile(r"[A-Za-z0-9_-]{1,56}")


@dataclass(frozen=True)
class DriverChoice:
    kind: str = ""  # "", "named", "module", "kernel-source", "dkms"
    source: str = ""  # named: the module; module: absolute dir; kernel-source: path in the kernel tree; dkms: package
    name: str = ""  # the module that drives the card (named: == source; else optional)

    def __str__(self) -> str:
        if not self.kind:
            return "in-tree"
        if self.kind == "named":
            return self.source
        return f"{self.kind}:{self.source}" + (f" as {self.name}" if self.name else "")

    @property
    def is_default(self) -> bool:
        return not self.kind

    @property
    def slug(self) -> str:
        """For cache directory names: [a-z0-9-] and a short hash of the whole choice."""
        words = re.sub(r"[^a-z0-9]+", "-", f"{self.kind}-{Path(self.source).name}-{self.name}".lower()).strip("-")
        return f"{words[:40].strip('-')}-{hashlib.sha256(str(self).encode()).hexdigest()[:8]}"


def parse_driver(value: Any, base: Path | None = None) -> DriverChoice:
    if value is None or value == "in-tree":
        return DriverChoice()
    if isinstance(value, str) and MODULE_NAME.fullmatch(value):
        return DriverChoice("named", value, value)
    if isinstance(value, dict) and len(set(value) & {"module", "kernel-source", "dkms"}) == 1:
        (kind,) = set(value) & {"module", "kernel-source", "dkms"}
        source = str(value[kind])
        if kind == "module":
            source = str(((base or Path.cwd()) / source).resolve())
        return DriverChoice(kind, source, str(value.get("name", "")))
    raise ValueError("driver is in-tree, a module name, {module: DIR}, {kernel-source: PATH} or {dkms: PKG}")
