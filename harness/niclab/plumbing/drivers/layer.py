"""An image whose cards bind another driver: the node's image with the built modules behind its initramfs.

One more gzipped cpio archive, as an add-on goes in: the modules under updates/niclab/, modules.dep and
modules.alias rewritten so the cards' PCI IDs match only the new module. Built once under the store's lock in
<cache>/images/<image folder>+drv-<hash>/; its manifest's `drivers` is what the cell proves
(plumbing.netconf.modules; docs/scenarios.md, "Drivers: one card, two drivers").
"""

from __future__ import annotations

import hashlib
import stat
import time
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.base.node import Progress
from niclab.model.driver_choice import DriverChoice, module_key
from niclab.model.lab.modalias import NETWORK_CLASS, PciDevice, drivers_for, parse_aliases
from niclab.model.topology import NodeSpec, Topology
from niclab.plumbing.drivers.asked import AskedModule
from niclab.plumbing.drivers.build import BuiltDriver, ensure_driver
from niclab.plumbing.image.addons import behind_initrd, derived_image
from niclab.plumbing.image.assemble import Tree
from niclab.plumbing.image.cpio import Entry, read_entries, read_initrd
from niclab.plumbing.image.drivers import memory_floor_mib
from niclab.plumbing.image.layer import archive_bytes
from niclab.plumbing.image.modules import module_name
from niclab.plumbing.image.store import Image, write_cpio

ARCHIVE = "drivers.cpio.gz"
OWN = ("initrd.img", "manifest.json", "modules.alias", ARCHIVE)  # what a derived image writes itself
UPDATES = "updates/niclab"  # where the modules go, below the kernel's modules directory


def with_drivers(image: Image, drivers: Mapping[str, BuiltDriver], progress: Progress = print) -> Image:
    """`image` whose cards of each PCI ID (key: 8086:10d3) bind the built driver (value); `image` when there are
    none. Two IDs may name one driver."""
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
        digest.update(
            f"{module_key(default)}>{built.driver} {built.choice} {built.origin} {built.source_hash}\n".encode()
        )
        for module in sorted(built.modules, key=lambda m: m.name):
            digest.update(f"{module.name} {hashlib.sha256(module.file.read_bytes()).hexdigest()}\n".encode())
    target = image.directory.parent / f"{image.directory.name}+drv-{digest.hexdigest()[:12]}"
    doing = f"adding driver {', '.join(sorted({b.driver for b in drivers.values()}))} to image {image.id}"
    return derived_image(target, doing, partial(_derive, image, drivers, tag=target.name.rsplit("+", 1)[1]), progress)


def _last(entries: list[Entry], name: str) -> bytes | None:
    found = [e for e in entries if e.name == name]
    return found[-1].data if found else None


def driver_entries(image: Image, drivers: Mapping[str, BuiltDriver]) -> tuple[list[Entry], str, dict[str, list[str]]]:
    """The archive's entries (the modules, modules.dep, modules.alias), the new modules.alias text, and for
    each PCI ID the modules whose aliases for it were left out."""
    version = str(image.manifest.get("kernel_version", ""))
    base = f"usr/lib/modules/{version}"
    entries = list(read_entries(read_initrd(image.initrd)))
    dep_text = _last(entries, f"{base}/modules.dep")
    alias_text = _last(entries, f"{base}/modules.alias")
    if dep_text is None or alias_text is None:
        raise NiclabError(f"image {image.id} has no modules.dep and modules.alias for kernel {version} in its initrd")
    deps: dict[str, tuple[str, list[str]]] = {}  # module -> (its path, the paths it needs, nearest first)
    for line in dep_text.decode(errors="replace").splitlines():
        path, sep, first = line.partition(":")
        if sep:
            deps[module_name(path)] = (path.strip(), first.split())
    added: dict[str, tuple[str, bytes, str]] = {}  # module -> (path, content, the driver that brought it)
    direct: dict[str, list[str]] = {}  # an added module -> the modules it needs itself
    new_aliases: list[str] = []
    for built in dict.fromkeys(drivers.values()):
        own = {module_key(m.name) for m in built.modules}  # what its modules may need of each other
        for module in built.modules:
            name = module_key(module.name)
            data = module.file.read_bytes()
            if name in added and added[name][1] != data:
                raise NiclabError(
                    f"drivers {added[name][2]} and {built.choice} both build a module {name}, not the same one: "
                    "a node loads one module of a name; give one of them another name"
                )
            added[name] = (f"{UPDATES}/{name}.ko", data, str(built.choice))
            direct[name] = [module_key(dep) for dep in module.depends]
            new_aliases += [f"alias {alias} {name}" for alias in module.aliases]
            for dep in module.depends:
                if module_key(dep) not in deps and module_key(dep) not in own:
                    raise NiclabError(
                        f"driver {built.choice}: module {module.name} needs {dep}, which kernel {version} of image "
                        f"{image.id} does not carry"
                    )
    for name, (path, _, _) in added.items():
        deps[name] = (path, [])
    for name in added:
        deps[name] = (deps[name][0], _needs(name, direct, deps, ()))
    dep_lines = "".join(f"{path}:{''.join(' ' + n for n in needs)}\n" for path, needs in deps.values())
    cards = {pci_id: PciDevice.parse(pci_id, NETWORK_CLASS) for pci_id in drivers}
    replaced: dict[str, list[str]] = {pci_id: [] for pci_id in drivers}
    kept = []
    for line in alias_text.decode(errors="replace").splitlines():
        found = parse_aliases(line)
        if found and found[0].module in added:  # a module of the same name as one added: the added one's go in
            continue
        taken = [pci_id for pci_id, card in cards.items() if found and drivers_for(card, found)]
        if taken and found[0].module not in added:
            for pci_id in taken:
                if found[0].module not in replaced[pci_id]:
                    replaced[pci_id].append(found[0].module)
            continue
        kept.append(line)
    aliases = "".join(line + "\n" for line in [*kept, *sorted(set(new_aliases))])
    tree = Tree()  # with the directories above each file: the kernel's unpacker makes none itself
    for path, data, _ in added.values():
        tree.add(Entry(f"{base}/{path}", stat.S_IFREG | 0o644, data))
    tree.add(Entry(f"{base}/modules.dep", stat.S_IFREG | 0o644, dep_lines.encode()))
    tree.add(Entry(f"{base}/modules.alias", stat.S_IFREG | 0o644, aliases.encode()))
    return tree.sorted_entries(), aliases, replaced


def _needs(
    name: str, direct: Mapping[str, list[str]], deps: Mapping[str, tuple[str, list[str]]], seen: tuple[str, ...]
) -> list[str]:
    """An added module's modules.dep entry: the paths of all it needs, nearest first, as depmod writes them
    (busybox modprobe loads the list from its end, so a module any other needs comes after it)."""
    if name in seen:
        raise NiclabError(f"module {name} needs itself through {' -> '.join((*seen, name))}")
    order: list[str] = []
    for dep in direct[name]:
        path, further = deps[dep]
        for item in [path, *(_needs(dep, direct, deps, (*seen, name)) if dep in direct else further)]:
            if item in order:
                order.remove(item)  # needed by a nearer one too: it loads before both
            order.append(item)
    return order


def _derive(image: Image, drivers: Mapping[str, BuiltDriver], work: Path, *, tag: str) -> dict:
    entries, aliases, replaced = driver_entries(image, drivers)
    write_cpio(work / ARCHIVE, entries)
    initrd, unpacked = behind_initrd(image, [work / ARCHIVE], work, OWN)
    (work / "modules.alias").write_text(aliases)  # what the lab's driver table reads: the guest's own
    # the image's own floor is measured to the edge (the lab image's); what the layer adds is held twice while
    # the kernel unpacks it (3 MiB of an unstripped module made a 320 MiB lab guest fail to unpack)
    added = archive_bytes(work / ARCHIVE)
    floor = max(
        int(image.manifest.get("min_memory_mib", 0)) + (64 if added > 2**20 else 0),
        memory_floor_mib(unpacked, initrd),
    )
    table: dict[str, dict] = {}
    for pci_id, built in sorted(drivers.items()):
        entry = table.setdefault(str(built.choice), _entry(built))
        entry["pci_ids"].append(pci_id)
        entry["replaces"] = ", ".join(dict.fromkeys([*filter(None, entry["replaces"].split(", ")), *replaced[pci_id]]))
    return {
        **image.manifest,
        "variant": f"{image.variant}+{tag}" if image.variant else tag,
        "driver_base_image": image.id,
        "drivers": table,
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "initrd_bytes": initrd,
        "unpacked_bytes": unpacked,
        "min_memory_mib": floor,
    }


def _entry(built: BuiltDriver) -> dict:
    """A driver's part of the manifest: what the cell proves against (AskedModule's fields) and its modules."""
    driver = next((m for m in built.modules if module_key(m.name) == module_key(built.driver)), None)
    return {
        "module": module_key(built.driver),
        "build_id": driver.build_id if driver else "",
        "version": driver.version if driver else "",
        "srcversion": driver.srcversion if driver else "",
        "choice": str(built.choice),
        "origin": built.origin,
        "source_hash": built.source_hash,
        "replaces": "",
        "pci_ids": [],
        "modules": {m.name: m.build_id for m in built.modules},
    }


def asked_modules(spec: NodeSpec, image: Image) -> dict[tuple[str, int, int], AskedModule]:
    """Port.key -> AskedModule, for the node's ports whose card must bind a driver of the image's `drivers`."""
    table = image.manifest.get("drivers", {})
    out: dict[tuple[str, int, int], AskedModule] = {}
    for port in spec.ports:
        if port.driver is None:
            continue
        entry = table.get(str(port.driver))
        if entry is None:
            raise NiclabError(
                f"image {image.id} has no driver {port.driver} for {spec.name}'s {port.model} card: "
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
            built: dict[DriverChoice, BuiltDriver] = {}
            for _, choice in spec.drivers:
                if choice not in built:
                    built[choice] = ensure_driver(choice, spec.kernel, images[spec.name], progress)
            out[spec.name] = with_drivers(
                images[spec.name], {pci_id: built[choice] for pci_id, choice in spec.drivers}, progress
            )
    return out


def rig_modules(topology: Topology, images: Mapping[str, Image]) -> dict[tuple[str, int, int], AskedModule]:
    """Port.key -> the module its card must bind, for the ports a `driver:` gives another driver (Rig.modules)."""
    return {key: asked for spec in topology.nodes for key, asked in asked_modules(spec, images[spec.name]).items()}
