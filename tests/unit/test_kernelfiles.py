import io
import tarfile

import pytest

from niclab.base.errors import NiclabError
from niclab.plumbing.image.kernelfiles import from_build_tree, from_root, module_set
from niclab.plumbing.image.modinfo import read_modinfo
from niclab.plumbing.image.modules import module_name
from niclab.plumbing.image.tartree import TarTree
from tests.unit.kmodfake import MODULES, fake_build_tree, fake_module, xz


def test_module_name_normalizes_dashes():
    assert module_name("kernel/drivers/net/ethernet/8390/ne2k-pci.ko") == "ne2k_pci"
    assert module_name("x/sch_netem.ko.xz") == "sch_netem"


def test_modinfo_is_read_from_the_elf_section():
    info = read_modinfo(fake_module("bonding", ("tls", "x"), ("rtnl-link-bond",), ("miimon", "mode")))
    assert (info.name, info.depends, info.aliases, info.params) == (
        "bonding",
        ("tls", "x"),
        ("rtnl-link-bond",),
        ("miimon", "mode"),
    )


def _files(module_set_):
    return {e.name: e.data for e in module_set_.entries}


def test_a_build_tree_gives_the_modules_asked_for_with_their_dependencies(tmp_path):
    kernel = from_build_tree(fake_build_tree(tmp_path / "linux"))
    assert kernel.version == "6.99.0-test"
    assert kernel.read_kernel() == b"not a real kernel"
    chosen = module_set(kernel, ["ne2k-pci", "bonding", "virtio_console"])
    assert chosen.loaded == ["8390", "bonding", "ne2k_pci", "tls"]
    assert chosen.missing == ["virtio_console"] and chosen.builtin == []
    files = _files(chosen)
    base = "usr/lib/modules/6.99.0-test"
    assert f"{base}/kernel/drivers/net/ethernet/8390/ne2k-pci.ko" in files
    assert files[f"{base}/modules.dep"].decode().splitlines() == [
        "kernel/drivers/net/ethernet/8390/8390.ko:",
        "kernel/drivers/net/bonding/bonding.ko: kernel/net/tls/tls.ko",
        "kernel/drivers/net/ethernet/8390/ne2k-pci.ko: kernel/drivers/net/ethernet/8390/8390.ko",
        "kernel/net/tls/tls.ko:",
    ]
    assert files[f"{base}/modules.alias"] == b"alias rtnl-link-bond bonding\n"
    dirs = [e.name for e in chosen.entries if e.mode & 0o040000]  # the kernel's unpacker makes no parents
    assert {"usr", "usr/lib", "usr/lib/modules", base, f"{base}/kernel/net/tls"} <= set(dirs)


def test_modules_dep_lists_the_deepest_dependency_last(tmp_path):
    modules = {
        "a.ko": ("a", ("b", "c"), ()),
        "b.ko": ("b", ("c",), ()),
        "c.ko": ("c", (), ()),
    }
    kernel = from_build_tree(fake_build_tree(tmp_path / "t", modules))
    dep = _files(module_set(kernel, ["a"]))["usr/lib/modules/6.99.0-test/modules.dep"].decode()
    assert dep.splitlines()[0] == "kernel/a.ko: kernel/b.ko kernel/c.ko"  # modprobe loads from the end: c, b, a


def test_a_built_in_module_is_not_missing(tmp_path):
    tree = fake_build_tree(tmp_path / "t", builtin="kernel/drivers/virtio/virtio_pci.ko\n")
    chosen = module_set(from_build_tree(tree), ["virtio_pci", "e1000"])
    assert (chosen.loaded, chosen.builtin, chosen.missing) == (["e1000"], ["virtio_pci"], [])
    assert _files(chosen)["usr/lib/modules/6.99.0-test/modules.builtin"] == b"kernel/drivers/virtio/virtio_pci.ko\n"


def test_a_tree_that_was_not_built_is_refused_with_what_to_run(tmp_path):
    tree = fake_build_tree(tmp_path / "t")
    (tree / "arch/x86/boot/bzImage").unlink()
    with pytest.raises(NiclabError, match=r"no arch/x86/boot/bzImage; .* \(make bzImage\)"):
        from_build_tree(tree)
    tree = fake_build_tree(tmp_path / "u")
    (tree / "net/tls/tls.ko").unlink()
    with pytest.raises(NiclabError, match=r"modules.order lists net/tls/tls.o but net/tls/tls.ko is not there"):
        from_build_tree(tree)


def test_a_debian_root_gives_its_compressed_modules_unpacked(tmp_path):
    version = "6.12.1+deb13-amd64"
    base = f"usr/lib/modules/{version}"
    files = {f"boot/vmlinuz-{version}": b"kernel", f"boot/config-{version}": b"CONFIG_E1000=m\n"}
    for path, (name, depends, aliases) in MODULES.items():
        files[f"{base}/kernel/{path}.xz"] = xz(fake_module(name, depends, aliases))
    tar_path = tmp_path / "root.tar"
    with tarfile.open(tar_path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with TarTree(tar_path) as root:
        kernel = from_root(root)
        assert (kernel.version, kernel.config) == (version, "CONFIG_E1000=m\n")
        chosen = module_set(kernel, ["bonding"])
    entries = _files(chosen)
    unpacked = entries[f"{base}/kernel/drivers/net/bonding/bonding.ko"]
    assert read_modinfo(unpacked).name == "bonding"  # not .ko.xz: busybox's modprobe cannot unpack it
    assert entries[f"{base}/modules.dep"].decode().startswith("kernel/drivers/net/bonding/bonding.ko: kernel/net/tls")
