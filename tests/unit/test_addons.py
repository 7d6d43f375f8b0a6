"""Add-ons: an archive behind any image's initramfs, on the nodes whose scenario's benchmarks ask for it."""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import tarfile
from pathlib import Path
from typing import ClassVar

import pytest

from niclab.base.errors import NiclabError
from niclab.model import bench
from niclab.model.bench import GuestNeeds
from niclab.model.bench.ping import Ping
from niclab.model.scenario.template import parse
from niclab.model.topology import NodeSpec
from niclab.plumbing.backends.qemu import Attachment, QemuBackend
from niclab.plumbing.image.addon import addon_entries, addon_recipe
from niclab.plumbing.image.addons import with_addons
from niclab.plumbing.image.cpio import CpioWriter, Entry
from niclab.plumbing.image.kernels import node_images
from niclab.plumbing.image.layer import archive_bytes
from niclab.plumbing.image.recipe import load_recipe
from niclab.plumbing.image.store import Image, load_image, recipe
from niclab.plumbing.image.tartree import TarTree

ADDON = "kselftest"


class NeedsTheAddon(Ping):
    """A benchmark that exists only in this test: ping, asking for the kselftest add-on."""

    name: ClassVar[str] = "needs-addon"
    guest: ClassVar[GuestNeeds] = GuestNeeds(addons=(ADDON,))


@pytest.fixture
def plugin(monkeypatch):
    monkeypatch.setitem(bench.REGISTRY, NeedsTheAddon.name, NeedsTheAddon())


def scenario(benchmarks: str) -> str:
    return f"name: t\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1000\nbenchmarks:\n{benchmarks}"


def test_every_node_of_a_scenario_carries_the_addons_its_benchmarks_ask_for(plugin):
    plain = parse(scenario("  - ping: {count: 3}\n"), "t.yaml").cells[0].topology
    assert [spec.addons for spec in plain.nodes] == [(), ()]
    both = parse(scenario("  - ping: {count: 3}\n  - needs-addon: {count: 3}\n"), "t.yaml").cells[0].topology
    assert [spec.addons for spec in both.nodes] == [(ADDON,), (ADDON,)]
    assert both != plain  # a rig booted without the add-on is not handed to a cell that needs it


def archive(entries: list[Entry]) -> bytes:
    """A gzipped newc archive, as an image's initrd.img holds one after the other."""
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as packed:
        writer = CpioWriter(packed)
        for entry in entries:
            writer.add(entry)
        writer.close()
    return buffer.getvalue()


USERSPACE = [Entry("etc/passwd", stat.S_IFREG | 0o644, b"root:x:0:0:root:/root:/bin/sh\n")]
MODULES = [Entry("usr/lib/modules/6.1/modules.alias", stat.S_IFREG | 0o644, b"alias pci:v00008086d0000100Esv* e1000\n")]
ADDED = [Entry("usr/bin/python3", stat.S_IFREG | 0o755, b"\x7fELF" + b"\0" * 3 * 2**20)]


@pytest.fixture
def base(tmp_path, monkeypatch) -> Image:
    """A stand-in for the built micro image (two archives), and the kselftest add-on built in the cache."""
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    store = tmp_path / "cache" / "images"
    directory = store / "micro-0123456789abcdef"
    directory.mkdir(parents=True)
    (directory / "initrd.img").write_bytes(archive(USERSPACE) + archive(MODULES))
    (directory / "vmlinuz").write_bytes(b"not a real kernel")
    (directory / "modules.alias").write_bytes(MODULES[0].data)
    manifest = {"recipe": "micro", "input_hash": "0123456789abcdef", "suite": "bookworm", "cmdline": "quiet"}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    addon = store / f"{ADDON}-{recipe(ADDON).input_hash()}"
    addon.mkdir()
    (addon / "addon.cpio.gz").write_bytes(archive(ADDED))
    (addon / "manifest.json").write_text(
        json.dumps(
            {"recipe": ADDON, "addon": True, "input_hash": recipe(ADDON).input_hash(), "programs_memory_mib": 64}
        ),
    )
    image = load_image(directory)
    assert image is not None
    return image


def test_a_node_with_an_addon_boots_the_image_with_its_archive_behind_the_initramfs(base, plugin):
    topology = parse(scenario("  - needs-addon: {count: 3}\n"), "t.yaml").cells[0].topology
    nodes = (*topology.nodes, NodeSpec("c", 2, 1, 256, ()))
    progress: list[str] = []
    images = node_images(nodes, base, progress.append)
    derived = images["a"]
    assert images["b"] == derived and images["c"] == base  # c asks for nothing
    assert derived.id == f"micro-0123456789abcdef+{ADDON}-{recipe(ADDON).input_hash()}"
    assert derived.initrd.read_bytes() == base.initrd.read_bytes() + archive(ADDED)
    assert derived.manifest["addons"] == {ADDON: f"{ADDON}-{recipe(ADDON).input_hash()}"}
    assert derived.manifest["unpacked_bytes"] == archive_bytes(derived.initrd) > 3 * 2**20
    assert derived.manifest["min_memory_mib"] == 256  # 3 MiB unpacked + 128 MiB to boot + 64 MiB of programs
    assert os.path.samefile(derived.kernel, base.kernel)  # the same kernel, and its alias table beside it
    assert (derived.directory / "modules.alias").read_bytes() == MODULES[0].data
    assert node_images(nodes, base, progress.append)["a"].directory == derived.directory
    assert sum(line.startswith("adding ") for line in progress) == 1  # built once


def test_an_image_that_asks_more_memory_keeps_it_and_a_disk_image_takes_no_addon(base):
    lab = {**base.manifest, "min_memory_mib": 512}
    (base.directory / "manifest.json").write_text(json.dumps(lab))
    image = load_image(base.directory)
    assert image is not None
    assert with_addons(image, [ADDON]).manifest["min_memory_mib"] == 512
    assert with_addons(image, []) is image
    disk = Image("debian", "0", base.directory, "quiet", {**lab, "disk": {"size_mib": 4096}})
    with pytest.raises(NiclabError, match="boots from its disk"):
        with_addons(disk, [ADDON])


def test_qemu_gives_a_node_the_memory_its_image_needs():
    spec = NodeSpec("a", 0, 1, 256, ())
    image = Image("micro", "0", Path("/images/micro-0"), "quiet", {"min_memory_mib": 320})
    plan = QemuBackend()._plan(spec, image, "tcg", dict[tuple[str, int, int], Attachment]())
    assert plan.node.memory_mib == 320
    plain = QemuBackend()._plan(spec, Image("micro", "0", Path("/images/micro-0"), "quiet", {}), "tcg", {})
    assert plain.node.memory_mib == 256


def root_tar(path: Path) -> Path:
    """A guest root with Python's tree: modules, tests, bytecode, a symlink in it and one out of it."""
    files = {
        "usr/bin/python3.11": b"python",
        "usr/lib/python3.11/os.py": b"# os",
        "usr/lib/python3.11/json/__init__.py": b"# json",
        "usr/lib/python3.11/test/test_os.py": b"# a test",
        "usr/lib/python3.11/__pycache__/os.cpython-311.pyc": b"bytecode",
        "etc/python3.11/sitecustomize.py": b"# site",
    }
    links = {
        "usr/bin/python3": "python3.11",
        "usr/lib/python3.11/sitecustomize.py": "/etc/python3.11/sitecustomize.py",
        "usr/lib/python3.11/gone.py": "/nowhere/gone.py",
    }
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mode = len(data), 0o755 if "bin" in name else 0o644
            tar.addfile(info, io.BytesIO(data))
        for name, target in links.items():
            info = tarfile.TarInfo(f"./{name}")
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path


def test_an_addons_archive_holds_its_programs_and_trees_but_what_it_leaves_out(tmp_path, repo):
    (tmp_path / "py" / "rootfs/usr/lib/niclab").mkdir(parents=True)
    (tmp_path / "py" / "rootfs/usr/lib/niclab/up").write_text("#!/bin/sh\n")
    (tmp_path / "py" / "rootfs/usr/lib/niclab/up").chmod(0o755)
    (tmp_path / "py" / "recipe.toml").write_text(
        'addon = true\nsuite = "bookworm"\npackages = ["python3"]\nbinaries = ["/usr/bin/python3"]\n'
        'trees = ["/usr/lib/python3.11"]\ntree_exclude = ["test", "__pycache__"]\nmemory_mib = 64\n'
    )
    wanted = load_recipe(tmp_path / "py")
    with TarTree(root_tar(tmp_path / "root.tar")) as root:
        entries = {e.name: e for e in addon_entries(root, wanted)}
    assert entries["usr/bin/python3.11"].data == b"python"
    assert entries["usr/bin/python3"].data == b"/usr/bin/python3.11"  # the link the program was named by
    assert entries["usr/lib/python3.11/os.py"].data == b"# os"
    assert "usr/lib/python3.11/json/__init__.py" in entries
    assert entries["usr/lib/python3.11/sitecustomize.py"].data == b"/etc/python3.11/sitecustomize.py"
    assert entries["etc/python3.11/sitecustomize.py"].data == b"# site"
    assert not any("/test/" in name or "__pycache__" in name or "gone" in name for name in entries)
    assert entries["usr/lib/niclab/up"].mode == stat.S_IFREG | 0o755
    assert not {"dev", "proc", "tmp", "usr/bin/busybox"} & set(entries)  # only what it adds: no base of its own


def test_the_kselftest_recipe_is_an_addon_and_an_image_recipe_is_not_one(repo):
    wanted = addon_recipe(ADDON)
    assert wanted.addon and "/usr/lib/python3.11" in wanted.trees and "/usr/sbin/sshd" in wanted.binaries
    assert (wanted.rootfs_overlay / "usr/lib/niclab/sshd-up").stat().st_mode & 0o111
    with pytest.raises(NiclabError, match="is an image, not an add-on"):
        addon_recipe("micro")
    # the micro image is not built again when only the add-ons' code changes
    assert not {p.name for p in recipe("micro").builder_sources()} & {"addon.py", "addons.py"}


def test_an_addon_recipe_with_an_images_key_is_refused(tmp_path):
    (tmp_path / "x").mkdir()
    text = 'addon = true\nsuite = "bookworm"\npackages = []\nmodules = ["e1000"]\n'
    (tmp_path / "x" / "recipe.toml").write_text(text)
    with pytest.raises(NiclabError, match=r"recipe.toml: an add-on \(addon = true\) has no 'modules'"):
        load_recipe(tmp_path / "x")


def test_the_unpacked_size_counts_every_archive_of_an_initrd(tmp_path):
    path = tmp_path / "initrd.img"
    path.write_bytes(archive(USERSPACE) + archive(ADDED))
    assert archive_bytes(path) == len(USERSPACE[0].data) + len(ADDED[0].data)
    assert gzip.decompress(path.read_bytes()).count(b"TRAILER!!!") == 2
