"""What a cell proves of a card a scenario's `driver:` gave another driver: the module asked, and its build.

The driver layer (plumbing.drivers.layer) writes one per driver into its image's manifest;
the backends hand them to the cell as Rig.modules, and plumbing.netconf.modules checks the guest against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class AskedModule:
    """The module a port's card must be bound to, and what proves it is the one niclab built."""

    module: str  # the module that drives the card (as the kernel names it: - as _)
    build_id: str  # the GNU build id of its .ko in the image ("" if it has none)
    choice: str  # how the scenario asked for it (kernel-source:drivers/... as e1000e_vendor, dkms:r8168-dkms)
    origin: str  # where it came from
    source_hash: str  # sha256 of the source it was built from
    replaces: str  # the modules whose aliases for the card's PCI ID the image left out (the kernel's own driver)
    version: str = ""  # its modinfo version, if it has one
    srcversion: str = ""  # its modinfo srcversion, if it has one

    @classmethod
    def from_manifest(cls, entry: Mapping) -> AskedModule:
        return cls(**{k: str(entry.get(k, "")) for k in cls.__dataclass_fields__})
