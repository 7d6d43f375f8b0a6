"""Read a kernel module's .modinfo section: its name, what it depends on, the devices it drives.

This is what depmod reads to write modules.dep and modules.alias. Reading it
here lets the image build pick modules out of any kernel (a Debian package's,
a developer's build tree) without depmod or root on the host.
"""

from __future__ import annotations

import gzip
import lzma
import shutil
import subprocess
from dataclasses import dataclass

from niclab.base.errors import NiclabError
from niclab.plumbing.image.elf import section

COMPRESSED = {".xz": "xz", ".zst": "zstd", ".gz": "gzip"}


@dataclass(frozen=True)
class ModInfo:
    name: str
    depends: tuple[str, ...]
    aliases: tuple[str, ...]
    params: tuple[str, ...]  # parameter names (parm=name:description)
    firmware: tuple[str, ...] = ()  # files it may ask the kernel to load, relative to /lib/firmware
    version: str = ""  # MODULE_VERSION, if the module has one
    srcversion: str = ""  # a checksum of its source (only with MODULE_VERSION, unless the kernel asks for all)
    vermagic: str = ""  # the kernel release and options it was built for


def decompress(data: bytes, suffix: str) -> bytes:
    """A module as the kernel loads it: .ko.xz, .ko.zst and .ko.gz unpacked (busybox's modprobe cannot)."""
    if suffix == ".xz":
        return lzma.decompress(data)
    if suffix == ".gz":
        return gzip.decompress(data)
    if suffix == ".zst":
        if shutil.which("zstd") is None:
            raise NiclabError(
                "the kernel's modules are zstd-compressed, and zstd is not installed (apt-get install zstd)"
            )
        return subprocess.run(["zstd", "-dcq"], input=data, capture_output=True, check=True).stdout
    return data


def read_modinfo(data: bytes) -> ModInfo:
    """The .modinfo of an uncompressed module (key=value strings, NUL-separated)."""
    fields: dict[str, list[str]] = {}
    for item in section(data, ".modinfo").split(b"\0"):
        key, sep, value = item.decode(errors="replace").partition("=")
        if sep:
            fields.setdefault(key, []).append(value)
    depends = tuple(d for d in ",".join(fields.get("depends", [])).split(",") if d)
    params = tuple(dict.fromkeys(p.partition(":")[0] for p in fields.get("parm", [])))
    return ModInfo(
        name=(fields.get("name") or [""])[0],
        depends=depends,
        aliases=tuple(fields.get("alias", [])),
        params=params,
        firmware=tuple(dict.fromkeys(fields.get("firmware", []))),
        version=(fields.get("version") or [""])[0],
        srcversion=(fields.get("srcversion") or [""])[0],
        vermagic=(fields.get("vermagic") or [""])[0],
    )
