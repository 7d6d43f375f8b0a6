"""The built lab image drives every real card of the issue: its driver from the image's own modules.alias,
and the firmware that driver names in the image. Builds the image (or takes it from the cache); boots nothing."""

from __future__ import annotations

import gzip
import stat
import sys

import pytest

from niclab.plumbing.image import Image, ensure_image
from niclab.plumbing.image.store import FIRMWARE_ARCHIVE, LAB_RECIPE
from niclab.plumbing.lab.drivers import DriverTable
from tests.realcards import FIRMWARE, REAL_CARDS


def cpio_members(data: bytes) -> dict[str, tuple[int, bytes]]:
    """name -> (mode, content) of a newc archive."""
    out, at = {}, 0
    while at + 110 <= len(data):
        header = data[at : at + 110]
        mode, size, name_size = int(header[14:22], 16), int(header[54:62], 16), int(header[94:102], 16)
        name = data[at + 110 : at + 110 + name_size - 1].decode()
        at += (110 + name_size + 3) & ~3
        out[name] = (mode, data[at : at + size])
        at += (size + 3) & ~3
        if name == "TRAILER!!!":
            break
    return out


@pytest.fixture(scope="module")
def lab_image() -> Image:
    return ensure_image(LAB_RECIPE, progress=lambda m: print(f"[image] {m}", file=sys.stderr))


def test_every_real_card_gets_its_driver_from_the_images_modules_alias(lab_image):
    table = DriverTable(lab_image)
    modules = cpio_members(gzip.decompress((lab_image.directory / "modules.cpio.gz").read_bytes()))
    shipped = {name.rsplit("/", 1)[-1].removesuffix(".ko").replace("-", "_") for name in modules}
    for pci_id, module in REAL_CARDS.items():
        found = table.resolve(pci_id, 0x020000)
        assert found.module == module, f"{pci_id}: {found.modules}"
        assert module in shipped or found.builtin, f"{module}.ko is not in the image"


def test_the_firmware_each_driver_names_is_in_the_image(lab_image):
    firmware = lab_image.manifest["module_firmware"]
    archive = cpio_members(gzip.decompress((lab_image.directory / FIRMWARE_ARCHIVE).read_bytes()))
    for module, wanted in FIRMWARE.items():
        named = firmware[module]
        chosen = [name for name in named if name.startswith(wanted)]
        assert chosen and all(named[name] for name in chosen), f"{module}: {named}"
        for name in chosen:
            mode, content = archive[f"usr/lib/firmware/{name}"]
            if stat.S_ISLNK(mode):  # ice.pkg -> ice-1.3.x.pkg: the file it names is there too
                target = f"usr/lib/firmware/{name.rsplit('/', 1)[0]}/{content.decode()}"
                mode, content = archive[target.replace("/./", "/")]
            assert stat.S_ISREG(mode) and content, name
    drivers = DriverTable(lab_image)
    assert drivers.resolve("10ec:8168").firmware == firmware["r8169"]
    assert drivers.resolve("8086:10fb").firmware == {}  # ixgbe loads none
    present = {name for files in firmware.values() for name, ok in files.items() if ok}
    assert lab_image.manifest["firmware_files"] >= len(present)


def test_the_lab_image_carries_micros_userspace_and_every_ethernet_module(lab_image):
    m = lab_image.manifest
    assert m["module_dirs"][0] == "kernel/drivers/net/ethernet" and m["module_count"] > 150
    assert m["min_memory_mib"] * 2**20 > m["unpacked_bytes"] + m["initrd_bytes"] + 96 * 2**20
    userspace = cpio_members(gzip.decompress(lab_image.userspace.read_bytes()))
    assert {"init", "usr/sbin/qemu-ga", "usr/bin/netperf", "usr/bin/iperf3", "etc/niclab/boot"} <= set(userspace)
