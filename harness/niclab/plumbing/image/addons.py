"""An image with add-ons: the image's initramfs followed by each add-on's archive.

The kernel takes the archives in turn as one initramfs, a later entry replacing an earlier one, so an add-on
goes behind any image as it is; the image's kernel files stay the same (hard links). Built once under the
store's lock in <cache>/images/<image folder>+<addon id>[+...]/, its manifest with `addons` and a
`min_memory_mib` that holds them (docs/architecture.md, "What only some benchmarks need is an add-on").
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Collection, Iterable
from functools import partial
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.base.filelock import locked
from niclab.base.node import Progress
from niclab.plumbing.image.addon import Addon, ensure_addon
from niclab.plumbing.image.drivers import memory_floor_mib
from niclab.plumbing.image.layer import archive_bytes
from niclab.plumbing.image.store import Image, building, load_image, mark_used

OWN = ("initrd.img", "manifest.json")  # the files a derived image writes; the others are the image's


def with_addons(image: Image, names: Iterable[str], progress: Progress = print) -> Image:
    """`image` with the add-ons `names` behind its initramfs (built first if the cache lacks them); `image`
    itself when there are none."""
    wanted = sorted(set(names))
    if not wanted:
        return image
    if image.disk is not None:
        raise NiclabError(
            f"image {image.id} boots from its disk, so an add-on ({', '.join(wanted)}) behind its initramfs would "
            "be gone after the switch to the disk: give the node the micro or the lab image"
        )
    addons = [ensure_addon(name, progress) for name in wanted]
    target = image.directory.parent / "+".join([image.directory.name, *(a.id for a in addons)])
    return derived_image(
        target,
        f"adding {', '.join(a.id for a in addons)} to image {image.id}",
        partial(_derive, image, addons),
        progress,
    )


def derived_image(target: Path, doing: str, derive: Callable[[Path], dict], progress: Progress) -> Image:
    """The image in `target`, derived from another: found in the cache, or made once under the store's lock,
    saying `doing` first: `derive(work)` writes the folder's files (behind_initrd) and returns its manifest."""
    if (existing := load_image(target)) is not None:
        return mark_used(existing)
    if not os.access(target.parent, os.W_OK):
        raise NiclabError(f"{target.parent} has no image {target.name}, and this user cannot build one there")
    with locked(target.parent / ".lock"):
        if (existing := load_image(target)) is not None:
            return existing
        progress(doing)
        with building(target) as work:
            manifest = derive(work)
            (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    derived = load_image(target)
    assert derived is not None
    return derived


def behind_initrd(image: Image, parts: Iterable[Path], work: Path, own: Collection[str] = OWN) -> tuple[int, int]:
    """Into `work`: the image's files (linked) but those named in `own`, and an initrd.img that is the image's
    followed by `parts` (gzipped cpio archives); its size packed and unpacked."""
    for path in sorted(image.directory.iterdir()):
        if path.is_file() and path.name not in own:
            link_file(path, work / path.name)
    with open(work / "initrd.img", "wb") as out:
        for part in (image.initrd, *parts):
            with open(part, "rb") as data:
                shutil.copyfileobj(data, out)
    return (work / "initrd.img").stat().st_size, archive_bytes(work / "initrd.img")


def _derive(image: Image, addons: list[Addon], work: Path) -> dict:
    """The image's files (linked) and its initrd followed by the add-ons' archives in `work`; the manifest."""
    initrd, unpacked = behind_initrd(image, (a.archive for a in addons), work)
    programs = sum(int(a.manifest.get("programs_memory_mib", 0)) for a in addons)
    floor = max(int(image.manifest.get("min_memory_mib", 0)), memory_floor_mib(unpacked, initrd, programs))
    ids = "+".join(a.id for a in addons)
    return {
        **image.manifest,
        "variant": f"{image.variant}+{ids}" if image.variant else ids,
        "addon_base_image": image.id,
        "addons": {a.name: a.id for a in addons},
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "initrd_bytes": initrd,
        "unpacked_bytes": unpacked,
        "min_memory_mib": floor,
    }


def link_file(source: Path, target: Path) -> None:
    """A hard link to the image's file (the same kernel, not a copy of it); a copy across file systems."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
