"""Kernel module names as modprobe sees them."""

from __future__ import annotations

import posixpath


def module_name(path: str) -> str:
    """kernel/drivers/net/ethernet/8390/ne2k-pci.ko -> ne2k_pci (modprobe treats - and _ alike)."""
    base = posixpath.basename(path)
    for suffix in (".ko.xz", ".ko.zst", ".ko.gz", ".ko"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base.replace("-", "_")
