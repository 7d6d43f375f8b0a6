"""An image whose cards bind another driver: the node's image with the built modules behind its initramfs.

A scenario's `driver:` (model.driver_choice) is built for the node's kernel
(plumbing.drivers.build); this puts the result into the node's image the way an
add-on goes in (image.addons): one more gzipped cpio archive after the
image's initrd.img. It carries the modules under
usr/lib/modules/<kernel>/updates/niclab/ and the image's modules.dep and
modules.alias rewritten: the new modules added, and the aliases of the
default module it replaces left out. The guest's boot script loads a driver
for each device by its modalias (busybox modprobe reads modules.alias), so
the card binds the new module and the default one is never tried. A module
of the same name as the default (a vendor's e1000e) replaces its line.

Layout: <cache>/images/<image folder>+drv-<hash>/, built once under the
store's lock; the hash is of the modules' contents and what they replace.
Its manifest is the image's with `drivers`: default module -> the driver
module, each module's build id, how the scenario asked, where it came from
and its source's hash. The cell reads these back from the guest
(netconf.modules) to prove which module drives the card.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.base.filelock import locked
from niclab.base.node import Progress
from niclab.model import nics
from niclab.model.topology import NodeSpec, Topology
from niclab.plumbing.drivers.build import BuiltDriver, ensure_driver
from niclab.plumbing.image.addons import link_file
from niclab.plumbing.image.assemble import Tree
from niclab.plumbing.image.cpio import Entry, read_entries
from niclab.plumbing.image.drivers import memory_floor_mib
from niclab.plumbing.image.layer import archive_bytes
from niclab.plumbing.image.modules import module_name
from niclab.plumbing.image.store import Image, building, load_image, mark_used, write_cpio

ARCHIVE = "drivers.cpio.gz"
OWN = ("initrd.img", "manifest.json", "modules.alias", ARCHIVE)  # what a derived image writes itself
UPDATES = "updates/niclab"  # where the modules go, below the kernel's modules directory


@dataclass(frozen=True)
class AskedModule:
    """The module a port's card must be bound to, and what proves it is the one niclab built."""

    module: str  # the module that drives the card (as the kernel names it: - as _)
    build_id: str  # the GNU build id of its .ko in the image ("" if it has none)
    choice: str  # how the scenario asked for it (module:/src/e1000e-vendor, dkms:r8168-dkms)
    origin: str  # where it came from
    source_hash: str  # sha256 of the source it was built from
    replaces: str  # the default module kept from binding the card
    version: str = ""  # its modinfo version, if it has one
    srcversion: str = ""  # its modinfo srcversion, if it has one

    @classmethod
    def from_manifest(cls, entry: Mapping) -> AskedModule:
        return cls(**{k: str(entry.get(k, "")) for k in cls.__dataclass_fields__})


def _norm(name: str) -> str:
    return name.replace("-", "_")


def with_drivers(image: Image, drivers: Mapping[str, BuiltDriver], progress: Progress = print) -> Image:
    """`image` with each default module (key) replaced by the built driver (value); `image` when there are none."""
    if not drivers:
        return image
    if image.disk is not None:
        raise NiclabError(
            f"image {image.id} boots from its disk, so modules behind its initramfs would be gone after the switch "
            "to the disk: give the node the micro or the lab image"
        )
    for built in drivers.values():
        if built.kernel_version != image.manifest.get("kernel_version"):
            raise NiclabError(
                f"driver {built.choice} was built for kernel {built.kernel_version}, and image {image.id} boots "
                f"{image.manifest.get('kernel_version')}: build it for the node's kernel"
            )
    digest = hashlib.sha256()
    for default in sorted(drivers):
        built = drivers[default]
        digest.update(f"{_norm(default)}>{built.driver}\n".encode())
        for module in sorted(built.modules, key=lambda m: m.name):
            digest.update(f"{module.name} {hashlib.sha256(module.file.read_bytes()).hexdigest()}\n".encode())
    target = image.directory.parent / f"{image.directory.name}+drv-{digest.hexdigest()[:12]}"
    if (existing := load_image(target)) is not None:
        return mark_used(existing)
    if not os.access(target.parent, os.W_OK):
        raise NiclabError(f"{target.parent} has no image {target.name}, and this user cannot build one there")
    with locked(target.parent / ".lock"):
        if (existing := load_image(target)) is not None:
            return existing
        progress(f"adding driver {', '.join(b.driver for b in drivers.values())} to image {image.id}")
        with building(target) as work:
            manifest = _derive(image, drivers, work, target.name.rsplit("+", 1)[1])
            (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    derived = load_image(target)
    assert derived is not None
    return derived


def _last(entries: list[Entry], name: str) -> bytes | None:
    found = [e for e in entries if e.name == name]
    return found[-1].data if found else None


def driver_entries(image: Image, drivers: Mapping[str, BuiltDriver]) -> tuple[list[Entry], str]:
    """The archive's entries (the modules, modules.dep, modules.alias) and the new modules.alias text."""
    version = str(image.manifest.get("kernel_version", ""))
    base = f"usr/lib/modules/{version}"
    entries = list(read_entries(gzip.decompress(image.initrd.read_bytes())))
    dep_text = _last(entries, f"{base}/modules.dep")
    alias_text = _last(entries, f"{base}/modules.alias")
    if dep_text is None or alias_text is None:
        raise NiclabError(f"image {image.id} has no modules.dep and modules.alias for kernel {version} in its initrd")
    deps: dict[str, tuple[str, list[str]]] = {}  # module -> (its path, the paths it needs first)
    for line in dep_text.decode(errors="replace").splitlines():
        path, sep, first = line.partition(":")
        if sep:
            deps[module_name(path)] = (path.strip(), first.split())
    replaced = {_norm(default) for default in drivers}
    added: dict[str, tuple[str, bytes]] = {}  # module -> (path, content)
    new_aliases: list[str] = []
    for built in drivers.values():
        for module in built.modules:
            name = _norm(module.name)
            path = f"{UPDATES}/{name}.ko"
            added[name] = (path, module.file.read_bytes())
            deps[name] = (path, [])
            new_aliases += [f"alias {alias} {name}" for alias in module.aliases]
    replaced |= set(added)  # a module of a default's own name replaces it: its old aliases go too
    for built in drivers.values():
        for module in built.modules:
            needs: list[str] = []
            for dep in module.depends:
                if _norm(dep) not in deps:
                    raise NiclabError(
                        f"driver {built.choice}: module {module.name} needs {dep}, which kernel {version} of image "
                        f"{image.id} does not carry"
                    )
                dep_path, dep_needs = deps[_norm(dep)]
                for item in [*dep_needs, dep_path]:  # what the dependency needs comes first, as depmod writes it
                    if item not in needs:
                        needs.append(item)
            deps[_norm(module.name)] = (deps[_norm(module.name)][0], needs)
    dep_lines = "".join(f"{path}:{''.join(' ' + n for n in needs)}\n" for path, needs in deps.values())
    kept = [
        line
        for line in alias_text.decode(errors="replace").splitlines()
        if not (m := re.fullmatch(r"alias\s+\S+\s+(\S+)", line)) or _norm(m[1]) not in replaced
    ]
    aliases = "".join(line + "\n" for line in [*kept, *sorted(set(new_aliases))])
    tree = Tree()  # with the directories above each file: the kernel's unpacker makes none itself
    for path, data in added.values():
        tree.add(Entry(f"{base}/{path}", stat.S_IFREG | 0o644, data))
    tree.add(Entry(f"{base}/modules.dep", stat.S_IFREG | 0o644, dep_lines.encode()))
    tree.add(Entry(f"{base}/modules.alias", stat.S_IFREG | 0o644, aliases.encode()))
    return tree.sorted_entries(), aliases


def _derive(image: Image, drivers: Mapping[str, BuiltDriver], work: Path, tag: str) -> dict:
    entries, aliases = driver_entries(image, drivers)
    write_cpio(work / ARCHIVE, entries)
    for path in sorted(image.directory.iterdir()):
        if path.is_file() and path.name not in OWN:
            link_file(path, work / path.name)
    (work / "modules.alias").write_text(aliases)  # what the lab's driver table reads: the guest's own
    with open(work / "initrd.img", "wb") as out:
        for part in (image.initrd, work / ARCHIVE):
            out.write(part.read_bytes())
    initrd = (work / "initrd.img").stat().st_size
    unpacked = archive_bytes(work / "initrd.img")
    floor = max(int(image.manifest.get("min_memory_mib", 0)), memory_floor_mib(unpacked, initrd))
    return {
        **image.manifest,
        "variant": f"{image.variant}+{tag}" if image.variant else tag,
        "driver_base_image": image.id,
        "drivers": {
            _norm(default): {
                "module": _norm(built.driver),
                "build_id": next((m.build_id for m in built.modules if _norm(m.name) == _norm(built.driver)), ""),
                "version": next((m.version for m in built.modules if _norm(m.name) == _norm(built.driver)), ""),
                "srcversion": next((m.srcversion for m in built.modules if _norm(m.name) == _norm(built.driver)), ""),
                "choice": str(built.choice),
                "origin": built.origin,
                "source_hash": built.source_hash,
                "replaces": _norm(default),
                "modules": {m.name: m.build_id for m in built.modules},
            }
            for default, built in sorted(drivers.items())
        },
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "initrd_bytes": initrd,
        "unpacked_bytes": unpacked,
        "min_memory_mib": floor,
    }


def asked_modules(spec: NodeSpec, image: Image, defaults: Mapping[tuple[str, int, int], str]) -> dict:
    """Port.key -> AskedModule, for the node's ports whose card must bind a driver of the image's `drivers`.
    `defaults`: Port.key -> the default module of its card (the catalog's, or the lab table's)."""
    table = image.manifest.get("drivers", {})
    out: dict[tuple[str, int, int], AskedModule] = {}
    for port in spec.ports:
        if port.driver is None:
            continue
        entry = table.get(_norm(defaults.get(port.key, "")))
        if entry is None:
            raise NiclabError(
                f"image {image.id} has no driver for {spec.name}'s {port.model} card ({port.driver}): "
                "it was built without it"
            )
        out[port.key] = AskedModule.from_manifest(entry)
    return out


def driver_images(nodes: Iterable[NodeSpec], images: Mapping[str, Image], progress: Progress) -> dict[str, Image]:
    """Each node's image with the drivers its `driver:` settings ask for (built for its kernel first, if the
    cache lacks them: the run's checks built them before anything booted)."""
    out = dict(images)
    for spec in nodes:
        if spec.drivers:
            built = {
                default: ensure_driver(choice, spec.kernel, images[spec.name], progress)
                for default, choice in spec.drivers
            }
            out[spec.name] = with_drivers(images[spec.name], built, progress)
    return out


def rig_modules(topology: Topology, images: Mapping[str, Image]) -> dict[tuple[str, int, int], AskedModule]:
    """Port.key -> the module its card must bind, for the ports a `driver:` gives another driver (Rig.modules)."""
    defaults = {p.key: nics.get(p.model).module for p in topology.ports if p.driver is not None}
    return {
        key: asked for spec in topology.nodes for key, asked in asked_modules(spec, images[spec.name], defaults).items()
    }
