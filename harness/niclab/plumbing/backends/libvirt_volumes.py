"""The guest image's kernel and initramfs as volumes of the libvirt pool `niclab`, on the domain's host.

libvirt's QEMU runs as its own user, maybe on another machine, and cannot read the user's cache: the files are
uploaded once per host and image (named by the image id), and a marker volume written last says an upload
finished, so a killed upload is done again (docs/lab.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from niclab.base.errors import NiclabError
from niclab.base.node import Progress
from niclab.plumbing.image import Image

POOL = "niclab"
POOL_PATH = "/var/lib/libvirt/niclab"  # outside the default pool's directory (images/), where it would list as a volume


def pool_xml() -> str:
    return (
        f"<pool type='dir'><name>{POOL}</name><target><path>{POOL_PATH}</path>"
        "<permissions><mode>0755</mode></permissions></target></pool>"
    )


def volume_xml(name: str, size: int) -> str:
    return (
        f"<volume><name>{name}</name><capacity unit='bytes'>{size}</capacity>"
        "<target><format type='raw'/><permissions><mode>0644</mode></permissions></target></volume>"
    )


def _pool(conn: Any) -> Any:
    import libvirt

    try:
        pool = conn.storagePoolLookupByName(POOL)
    except libvirt.libvirtError:
        try:
            pool = conn.storagePoolCreateXML(pool_xml(), libvirt.VIR_STORAGE_POOL_CREATE_WITH_BUILD)
        except libvirt.libvirtError as exc:  # another run made it meanwhile
            try:
                pool = conn.storagePoolLookupByName(POOL)
            except libvirt.libvirtError:
                raise NiclabError(
                    f"cannot create the libvirt storage pool {POOL} ({POOL_PATH}) on {conn.getURI()}: "
                    f"{exc.get_error_message()}"
                ) from None
    if not pool.isActive():
        pool.create(0)
    pool.refresh(0)
    return pool


def _lookup(pool: Any, name: str) -> Any | None:
    import libvirt

    try:
        return pool.storageVolLookupByName(name)
    except libvirt.libvirtError:
        return None


def _upload(conn: Any, pool: Any, name: str, path: Path) -> Any:
    old = _lookup(pool, name)
    if old is not None:
        old.delete(0)
    size = path.stat().st_size
    volume = pool.createXML(volume_xml(name, size), 0)
    stream = conn.newStream(0)
    volume.upload(stream, 0, size, 0)
    with open(path, "rb") as handle:
        stream.sendAll(lambda _stream, nbytes, f: f.read(nbytes), handle)
    stream.finish()
    return volume


def image_volumes(conn: Any, image: Image, progress: Progress) -> tuple[str, str]:
    """The kernel's and the initramfs's paths on the connection's host, uploading them if needed."""
    import libvirt

    pool = _pool(conn)
    names = {"kernel": f"{image.id}-vmlinuz", "initrd": f"{image.id}-initrd"}
    marker = f"{image.id}-complete"
    if _lookup(pool, marker) is None:
        progress(f"uploading image {image.id} to libvirt pool {POOL} on {conn.getURI()}")
        try:
            _upload(conn, pool, names["kernel"], image.kernel)
            _upload(conn, pool, names["initrd"], image.initrd)
            pool.createXML(volume_xml(marker, 0), 0)
        except libvirt.libvirtError as exc:
            if _lookup(pool, marker) is None:  # not another run finishing the same upload
                raise NiclabError(f"uploading image {image.id} to {conn.getURI()}: {exc.get_error_message()}") from None
        pool.refresh(0)
    paths = []
    for name in (names["kernel"], names["initrd"]):
        volume = _lookup(pool, name)
        if volume is None:
            raise NiclabError(f"volume {name} vanished from pool {POOL} on {conn.getURI()}; run again")
        paths.append(volume.path())
    return paths[0], paths[1]
