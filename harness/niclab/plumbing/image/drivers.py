"""A lab image's drivers: every module under some directories of a kernel, and the firmware they name.

`module_dirs` puts every module below them into the image; `firmware = "modules"` copies only the firmware
files those modules name (and what the names resolve to), not all of Debian's (docs/lab.md, "The lab image").
"""

from __future__ import annotations

import posixpath
import stat
from dataclasses import dataclass

from niclab.base.errors import NiclabError
from niclab.plumbing.image.assemble import MERGED_USR, Tree
from niclab.plumbing.image.cpio import Entry
from niclab.plumbing.image.kernelfiles import KernelFiles, ModuleSet
from niclab.plumbing.image.tartree import TarTree

FIRMWARE_DIRS = ("/usr/lib/firmware", "/lib/firmware")
FIRMWARE_SUFFIXES = ("", ".xz", ".zst")  # the kernel's loader takes a compressed file under the name plus suffix


def modules_under(kernel: KernelFiles, directories: tuple[str, ...]) -> dict[str, list[str]]:
    """Each of `directories` (relative to the kernel's modules directory) -> the names of the modules below it."""
    return {
        directory: sorted(name for name, path in kernel.modules.items() if path.startswith(directory.strip("/") + "/"))
        for directory in directories
    }


def every_module_under(kernel: KernelFiles, directories: tuple[str, ...], origin: str) -> list[str]:
    """modules_under, all in one list; a directory with no module is an error of the recipe (`origin`)."""
    names: list[str] = []
    for directory, found in modules_under(kernel, directories).items():
        if not found:
            raise NiclabError(
                f"image build: kernel {kernel.version} has no module under {directory} (module_dirs of {origin})"
            )
        names += [name for name in found if name not in names]
    return names


@dataclass(frozen=True)
class FirmwareSet:
    entries: list[Entry]  # usr/lib/firmware/...: files, and symlinks where a name resolves elsewhere
    present: dict[str, dict[str, bool]]  # module -> each file it names -> whether the image has it
    files: int  # regular files copied
    bytes: int  # their size


def _merged(path: str) -> str:
    """Where a root's path lands in the merged-/usr initramfs: a root only extracted from packages (a layer's,
    layer.py) has /lib/firmware as a directory of its own, not a link to /usr/lib/firmware."""
    top, _, rest = path.lstrip("/").partition("/")
    return posixpath.join(MERGED_USR[top], rest) if top in MERGED_USR and rest else path.lstrip("/")


def _safe(name: str) -> bool:
    return bool(name) and not name.startswith("/") and ".." not in name.split("/") and "\0" not in name


def firmware_set(root: TarTree, named: dict[str, list[str]]) -> FirmwareSet:
    """The firmware files the modules name (module -> names), as found in the guest root."""
    tree = Tree()
    present: dict[str, dict[str, bool]] = {}
    for module in sorted(named):
        present[module] = {}
        for name in named[module]:
            found = next(
                (
                    f"{directory}/{name}{suffix}"
                    for directory in FIRMWARE_DIRS
                    for suffix in FIRMWARE_SUFFIXES
                    if _safe(name) and root.exists(f"{directory}/{name}{suffix}")
                ),
                None,
            )
            present[module][name] = found is not None
            if found is None:
                continue
            resolved = _merged(root.resolve(found))
            if not tree.has(resolved):
                tree.add(Entry(resolved, stat.S_IFREG | 0o644, root.read(found)))
            wanted = "usr/lib/firmware/" + name + found[found.rindex(name) + len(name) :]
            if wanted != resolved and not tree.has(wanted):
                tree.add(
                    Entry(wanted, stat.S_IFLNK | 0o777, posixpath.relpath(resolved, posixpath.dirname(wanted)).encode())
                )
    files = [e for e in tree.entries.values() if stat.S_ISREG(e.mode)]
    return FirmwareSet(tree.sorted_entries(), present, len(files), sum(len(e.data) for e in files))


def unpacked_bytes(entries: list[Entry]) -> int:
    """What an archive's files take once the kernel has unpacked it into its RAM file system."""
    return sum(len(e.data) for e in entries if stat.S_ISREG(e.mode))


# Beside the initramfs, unpacked and still packed: the kernel, the programs and the benchmarks' buffers. The lab
# image (110 MiB unpacked, 32 MiB packed) failed to unpack in 224 MiB and booted in 256 MiB under TCG.
BOOT_MEMORY_MIB = 128


def lab_facts(
    module_dirs: tuple[str, ...], modules: ModuleSet, firmware: FirmwareSet | None, unpacked: int, initrd: int
) -> dict:
    """The manifest's part for an image with a directory's modules and their firmware: what it carries, what
    each module's firmware is and whether the image has it, and the memory a guest needs to unpack it."""
    return {
        "module_dirs": list(module_dirs),
        "module_count": len(modules.loaded),
        "module_firmware": {
            m: (firmware.present[m] if firmware else dict.fromkeys(names, False))
            for m, names in modules.firmware.items()
        },
        "firmware_files": firmware.files if firmware else 0,
        "firmware_bytes": firmware.bytes if firmware else 0,
        "unpacked_bytes": unpacked,
        # the initramfs unpacked into RAM, its packed copy until then, and what a guest needs beside them
        "min_memory_mib": memory_floor_mib(unpacked, initrd),
    }


def memory_floor_mib(unpacked: int, initrd: int, more_mib: int = 0) -> int:
    """The guest memory an initramfs needs (in 64 MiB steps): unpacked into RAM, its packed copy until then,
    what a guest needs beside them, and `more_mib` its programs take (an add-on's)."""
    return 64 * -(-((unpacked + initrd) // 2**20 + BOOT_MEMORY_MIB + more_mib) // 64)
