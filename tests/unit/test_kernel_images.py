"""The image for another kernel (a build tree here), and the check of what a scenario needs from a kernel."""

from __future__ import annotations

import gzip
import json
import os
import shutil

import pytest

from niclab.base.errors import NiclabError
from niclab.model.kernel_choice import KernelChoice
from niclab.model.scenario.template import parse
from niclab.plumbing.image.kernels import kernel_image, node_images
from niclab.plumbing.image.store import Image
from niclab.plumbing.kernel_check import check_kernels, config_values, missing, needed_modules
from tests.unit.kmodfake import MODULES, fake_build_tree, fake_module

USERSPACE = b"userspace archive"


@pytest.fixture
def base(tmp_path, monkeypatch) -> Image:
    """A stand-in for the built micro image: its manifest and its userspace archive."""
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    directory = tmp_path / "cache" / "images" / "micro-0123456789abcdef"
    directory.mkdir(parents=True)
    (directory / "userspace.cpio.gz").write_bytes(USERSPACE)
    manifest = {"recipe": "micro", "input_hash": "0123456789abcdef", "suite": "bookworm", "cmdline": "quiet"}
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return Image("micro", "0123456789abcdef", directory, "quiet", manifest)


def test_a_build_trees_image_is_the_userspace_followed_by_its_modules(base, tmp_path):
    tree = fake_build_tree(tmp_path / "linux")
    progress: list[str] = []
    image = kernel_image(KernelChoice(build=str(tree)), progress.append, base)
    assert image.id.startswith("micro-0123456789abcdef+build-")
    assert image.kernel.read_bytes() == b"not a real kernel" and image.boot_kernel == image.kernel  # no PVH entry
    initrd = image.initrd.read_bytes()
    assert initrd.startswith(USERSPACE)  # the same programs; the modules come after
    modules = gzip.decompress(initrd[len(USERSPACE) :])
    assert b"usr/lib/modules/6.99.0-test/kernel/drivers/net/ethernet/intel/e1000/e1000.ko" in modules
    assert (
        image.manifest["kernel_origin"] == f"kernel build {tree}" and image.manifest["kernel_version"] == "6.99.0-test"
    )
    assert image.manifest["module_params"]["e1000"] == ["debug"]
    assert "virtio_console" in image.manifest["missing_modules"]
    assert (image.directory / "config").read_text().startswith("CONFIG_E1000=m")
    # Found again while the tree is unchanged; built again once a module was rebuilt.
    assert kernel_image(KernelChoice(build=str(tree)), progress.append, base).directory == image.directory
    assert sum("taking the kernel" in line for line in progress) == 1
    ko = tree / "drivers/net/bonding/bonding.ko"
    ko.write_bytes(fake_module("bonding", ("tls",)))
    os.utime(ko, ns=(1, 1))
    kernel_image(KernelChoice(build=str(tree)), progress.append, base)
    assert sum("taking the kernel" in line for line in progress) == 2


def test_each_build_of_a_tree_is_its_own_image_and_a_run_keeps_the_one_it_pinned(base, tmp_path, monkeypatch):
    from niclab.plumbing.image import kernels

    monkeypatch.setattr(kernels, "_pinned", {})
    tree = fake_build_tree(tmp_path / "linux")
    choice = KernelChoice(build=str(tree))
    pinned = kernels.pin_kernel_image(choice, print, base)
    seen = [pinned.directory]
    for i in range(4):  # the developer rebuilds a module four times while the run goes on
        ko = tree / "drivers/net/bonding/bonding.ko"
        os.utime(ko, ns=(i + 2, i + 2))
        assert kernel_image(choice, print, base) is pinned  # the run still boots what it checked
        monkeypatch.setattr(kernels, "_pinned", {})
        seen.append(kernel_image(choice, print, base).directory)  # a new run takes the new build
        monkeypatch.setattr(kernels, "_pinned", {(base.id, choice): pinned})
    assert len(set(seen)) == 5 and all(path.name == kernels.load_image(path).id for path in seen)
    # Images of earlier builds go once idle (not booted for an hour) and beyond the newest three.
    for path in seen[:-1]:
        os.utime(path, (1, 1))
    os.utime(tree / "drivers/net/bonding/bonding.ko", ns=(9, 9))
    monkeypatch.setattr(kernels, "_pinned", {})
    newest = kernel_image(choice, print, base).directory
    kept = sorted(p for p in base.directory.parent.glob(f"{base.id}+{choice.slug}-*"))
    assert len(kept) == kernels.KEEP_BUILDS and {newest, seen[-1]} <= set(kept)
    # The image of a tree that is gone goes too, once idle; another tree's stays.
    other = fake_build_tree(tmp_path / "other")
    gone = kernel_image(KernelChoice(build=str(other)), print, base).directory
    os.utime(gone, (1, 1))
    os.utime(tree / "drivers/net/bonding/bonding.ko", ns=(10, 10))
    monkeypatch.setattr(kernels, "_pinned", {})
    kernel_image(choice, print, base)
    assert gone.is_dir()  # its tree is still there
    shutil.rmtree(other)
    os.utime(tree / "drivers/net/bonding/bonding.ko", ns=(11, 11))
    kernel_image(choice, print, base)
    assert not gone.exists()


def test_the_recipes_own_kernel_is_the_base_image(base):
    assert kernel_image(None, print, base) is base
    assert kernel_image(KernelChoice(suite="bookworm"), print, base) is base


def test_nodes_get_their_own_kernels_image(base, tmp_path):
    tree = fake_build_tree(tmp_path / "linux")
    scenario = (
        parse(
            f"name: s\nnodes:\n  a: {{}}\n  b: {{kernel: {{build: {tree}}}}}\n"
            "links:\n  - between: [a, b]\n    nic: e1000\n",
            "s.yaml",
        )
        .cells[0]
        .scenario
    )
    images = node_images(scenario.topology().nodes, base, print)
    assert images["a"] is base and "+build-" in images["b"].id


def test_what_a_tree_lacks_is_named_by_its_config_option(base, tmp_path):
    modules = {k: v for k, v in MODULES.items() if "bonding" not in k and "netem" not in k}
    config = "CONFIG_E1000=m\nCONFIG_BONDING=y\nCONFIG_NET_SCH_NETEM=m\nCONFIG_DEVTMPFS=y\n"
    tree = fake_build_tree(tmp_path / "linux", modules, config)
    image = kernel_image(KernelChoice(build=str(tree)), print, base)
    found = {m.option: m.state for m in missing(image, ["e1000", "bonding", "sch_netem", "virtio_console"])}
    assert "e1000" not in found and "E1000" not in found
    assert found["BONDING"] == "=y, but modules.builtin does not list it (rebuild the tree)"
    assert found["VIRTIO_CONSOLE"] == "is not set"
    assert found["NET_SCH_NETEM"] == "=m, but sch_netem.ko was not built (run `make modules`)"
    assert found["BLK_DEV_INITRD"] == "is not set, it must be y" and "DEVTMPFS" not in found


def test_check_kernels_refuses_before_boot_with_the_fix(base, tmp_path, monkeypatch):
    modules = {k: v for k, v in MODULES.items() if "netem" not in k}
    tree = fake_build_tree(tmp_path / "linux", modules, config="CONFIG_E1000=m\nCONFIG_BONDING=m\n")
    monkeypatch.setattr(
        "niclab.plumbing.kernel_check.pin_kernel_image", lambda choice, progress: kernel_image(choice, progress, base)
    )
    text = f"name: s\nkernel: {{build: {tree}}}\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1000\n"
    cells = parse(text, "s.yaml").cells
    with pytest.raises(NiclabError) as caught:
        check_kernels(cells, print)
    message = str(caught.value)
    assert f"kernel build:{tree} (6.99.0-test, for cell default, node a) lacks what the scenario needs:" in message
    assert (
        "  CONFIG_NET_SCH_NETEM is not set (netem impairments and the between-cell reset; "
        "it depends on CONFIG_NET_SCHED, off too)\n" in message
    )
    switches = "-e VIRTIO_MENU -e NET_SCHED -e BLK_DEV_INITRD -e RD_GZIP -e DEVTMPFS -m VIRTIO_PCI"
    assert f"cd {tree} && scripts/config --file .config {switches}" in message
    # A tree built with O=: its source is behind the `source` link, and scripts/config with it.
    (tree / "source").symlink_to(tmp_path)
    with pytest.raises(NiclabError, match=f"cd {tree} && source/scripts/config --file .config -e VIRTIO_MENU"):
        check_kernels(cells, print)


def test_a_module_parameter_the_driver_lacks_is_refused_with_those_it_has(base, tmp_path, monkeypatch):
    tree = fake_build_tree(tmp_path / "linux")
    monkeypatch.setattr(
        "niclab.plumbing.kernel_check.pin_kernel_image", lambda choice, progress: kernel_image(choice, progress, base)
    )
    monkeypatch.setattr("niclab.plumbing.kernel_check.missing", lambda image, needs: [])
    text = (
        f"name: s\nkernel: {{build: {tree}}}\nnodes: [a, b]\nlinks:\n  - between: [a, b]\n    nic: e1000\n"
        "    module_params: {debg: 1}\n"
    )
    with pytest.raises(
        NiclabError,
        match=r"the e1000 driver of kernel 6.99.0-test \(cell default, node a\) has no "
        r"parameter 'debg'; did you mean 'debug'\? it takes: debug \(modinfo's parm\)",
    ):
        check_kernels(parse(text, "s.yaml").cells, print)


def test_needed_modules_follow_the_scenario():
    text = "name: s\nnodes: [a, b, c]\nlinks:\n  - between: [a, b]\n    nic: {a: e1000, b: ne2k_pci}\n"
    text += "  - between: [b, c]\n    nic: virtio\nbenchmarks: [nfs]\n"
    scenario = parse(text, "s.yaml").cells[0].scenario
    assert needed_modules(scenario) == [
        "virtio_pci",
        "virtio_console",
        "sch_netem",
        "bonding",
        "e1000",
        "ne2k_pci",
        "virtio_net",
        "nfsd",
        "nfsv4",
    ]


def test_config_values_leave_out_options_not_set():
    assert config_values('CONFIG_A=y\n# CONFIG_B is not set\nCONFIG_C=m\nCONFIG_D="x"\n') == {
        "A": "y",
        "C": "m",
        "D": '"x"',
    }


def test_a_kernels_image_of_a_plain_base_holds_its_archives_plain_too(base, tmp_path):
    import stat

    from niclab.plumbing.image.cpio import Entry, plain_archives, read_entries
    from niclab.plumbing.image.store import write_cpio

    write_cpio(base.userspace, [Entry("init", stat.S_IFREG | 0o755, b"#!/bin/sh\n")])
    base.manifest["initramfs"] = "plain"  # a base built from a recipe with initramfs = "plain" (micro)
    (base.directory / "manifest.json").write_text(json.dumps(base.manifest))
    image = kernel_image(KernelChoice(build=str(fake_build_tree(tmp_path / "linux"))), lambda _: None, base)
    initrd = image.initrd.read_bytes()
    assert initrd.startswith(gzip.decompress(base.userspace.read_bytes()))  # plain: no gzip header to inflate
    names = [e.name for e in read_entries(plain_archives(initrd))]
    assert names[0] == "init" and any(n.endswith("/e1000.ko") for n in names), names
    assert image.manifest["initramfs"] == "plain"
