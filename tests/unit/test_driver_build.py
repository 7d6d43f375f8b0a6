"""plumbing.drivers without a build: source hashing, the Makefile rename, the build's first error, the mmdebstrap
command lines, the choice of the driver module, the cache."""

import json
import os
import re
import shlex
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

import pytest

from niclab.base.errors import NiclabError
from niclab.model import driver_choice
from niclab.model.driver_choice import DriverChoice
from niclab.model.kernel_choice import KernelChoice
from niclab.plumbing.drivers import build as build_mod
from niclab.plumbing.drivers import commands
from niclab.plumbing.drivers import modules as drivers_modules
from niclab.plumbing.drivers.buildlog import first_error
from niclab.plumbing.drivers.makefile import main as makefile_main
from niclab.plumbing.drivers.makefile import modules_of, rename_module
from niclab.plumbing.drivers.modules import BuiltModule, choose_driver, read_built
from niclab.plumbing.drivers.source import copy_source, source_hash
from niclab.plumbing.image import mirror as mirror_mod
from niclab.plumbing.image.elf import build_id
from niclab.plumbing.image.store import Image

KVER = "6.1.0-50-amd64"

# drivers/net/ethernet/intel/e1000e/Makefile of Linux 6.1
E1000E_MAKEFILE = """\
# SPDX-License-Identifier: GPL-2.0
# Copyright(c) 1999 - 2018 Intel Corporation.

#
# Makefile for the Intel(R) PRO/1000 ethernet driver
#

subdir-ccflags-y += -I$(src)

obj-$(CONFIG_E1000E) += e1000e.o

e1000e-objs := 82571.o ich8lan.o 80003es2lan.o \\
\t       mac.o manage.o nvm.o phy.o \\
\t       param.o ethtool.o netdev.o ptp.o

"""


def module_tree(root: Path) -> Path:
    root.mkdir()
    (root / "Makefile").write_text("obj-m += hello.o\n")
    (root / "hello.c").write_text("int x;\n")
    (root / "sub").mkdir()
    (root / "sub/part.h").write_text("#define A 1\n")
    return root


def test_the_same_tree_hashes_the_same_and_one_byte_changes_it(tmp_path):
    one = module_tree(tmp_path / "one")
    two = module_tree(tmp_path / "two")
    assert source_hash(one, "x") == source_hash(two, "x")
    (two / "sub/part.h").write_text("#define A 2\n")
    assert source_hash(one, "x") != source_hash(two, "x")
    copy = tmp_path / "copy"
    assert copy_source(one, copy, "x") == source_hash(one, "x")
    assert (copy / "sub/part.h").read_text() == "#define A 1\n"


def test_a_symlink_leaving_the_source_is_refused(tmp_path):
    tree = module_tree(tmp_path / "src")
    (tree / "passwd.h").symlink_to("/etc/passwd")
    with pytest.raises(NiclabError, match=r"driver x: passwd.h is a symbolic link to /etc/passwd, outside"):
        source_hash(tree, "driver x")
    (tree / "passwd.h").unlink()
    os.mkfifo(tree / "pipe")
    with pytest.raises(NiclabError, match="pipe is not a file, directory or link"):
        copy_source(tree, tmp_path / "copy", "driver x")


def test_e1000e_is_renamed_in_its_makefile():
    assert modules_of(E1000E_MAKEFILE) == ["e1000e"]
    renamed = rename_module(E1000E_MAKEFILE, "e1000e_vendor", directory="e1000e")
    assert "obj-m += e1000e_vendor.o" in renamed
    assert "e1000e_vendor-y := 82571.o ich8lan.o 80003es2lan.o \\\n\t       mac.o" in renamed
    assert "CONFIG_E1000E" not in renamed and "e1000e-objs" not in renamed and "e1000e.o" not in renamed


def test_a_makefile_of_several_modules_needs_the_one_to_rename():
    text = "obj-$(CONFIG_R8169) += r8169.o\nobj-$(CONFIG_8139TOO) += 8139too.o\nr8169-y += r8169_main.o\n"
    with pytest.raises(ValueError, match="builds r8169, 8139too"):
        rename_module(text, "r8169_vendor", directory="realtek")
    renamed = rename_module(text, "r8169_vendor", old="r8169")
    assert "obj-m += r8169_vendor.o" in renamed and "r8169_vendor-y += r8169_main.o" in renamed
    assert "obj-$(CONFIG_8139TOO) += 8139too.o" in renamed


GCC_LOG = """\
make: Entering directory '/usr/src/linux-headers-6.1.0-50-amd64'
  CC [M]  /build/src/hello.c
/build/src/hello.c: In function 'hello_init':
/build/src/hello.c:12:5: error: 'foo' undeclared (first use in this function)
   12 |     foo = 1;
/build/src/hello.c:13:5: error: expected ';' before '}' token
make[2]: *** [scripts/Makefile.build:250: /build/src/hello.o] Error 1
"""


def test_the_first_compiler_error_is_what_a_failed_build_says():
    assert first_error(GCC_LOG) == "hello.c:12:5: error: 'foo' undeclared (first use in this function)"
    assert first_error("make: *** No rule to make target 'modules'.  Stop.\n\n") == (
        "make: *** No rule to make target 'modules'.  Stop."
    )


def hooks(command: list[str]) -> list[str]:
    return [arg.removeprefix("--customize-hook=") for arg in command if arg.startswith("--customize-hook=")]


def test_a_module_source_is_copied_in_and_built_against_the_headers(tmp_path):
    command = commands.build_command(DriverChoice("module", "/x/hello"), KVER, "bookworm", "http://m/debian", tmp_path)
    assert command[:2] == ["mmdebstrap", "--variant=apt"]
    assert f"--include=linux-headers-{KVER},make,kmod" in command
    assert command[-3:] == ["bookworm", "/dev/null", "deb http://m/debian bookworm main contrib non-free"]
    steps = hooks(command)
    assert steps[1] == f"copy-in {tmp_path / 'src'} /build"
    assert f"make -C /lib/modules/{KVER}/build M=/build/src modules" in steps[2]
    assert steps[-1] == f"copy-out /build/out {tmp_path}"


def test_kernel_source_fetches_the_headers_version_and_renames(tmp_path):
    choice = DriverChoice("kernel-source", "drivers/net/ethernet/intel/e1000e", "e1000e_vendor")
    command = commands.build_command(choice, KVER, "bookworm-backports", "http://m/debian", tmp_path)
    assert f"--include=linux-headers-{KVER}/bookworm-backports,make,kmod,xz-utils" in command
    assert command[-2:] == [
        "deb http://m/debian bookworm main contrib non-free",
        "deb http://m/debian bookworm-backports main contrib non-free",
    ]
    fetch, rename, make = hooks(command)[1:4]
    script = shlex.split(fetch)[-1]
    assert f"dpkg-query -W -f='${{source:Version}}' linux-headers-{KVER}" in script
    assert 'apt-get download -q linux-source-6.1="$want"' in script
    assert "tar -xJ -C /build linux-source-6.1/drivers/net/ethernet/intel/e1000e" in script
    assert shlex.split(rename) == [
        sys.executable,
        "-m",
        "niclab.plumbing.drivers.makefile",
        "$1/build/src",
        "e1000e_vendor",
        "e1000e",
    ]
    assert "M=/build/src modules" in make


def test_dkms_unpacks_the_package_and_builds_it_for_the_kernel(tmp_path):
    command = commands.build_command(DriverChoice("dkms", "r8168-dkms"), KVER, "bookworm", "http://m/debian", tmp_path)
    assert f"--include=linux-headers-{KVER},make,kmod,dkms" in command
    script = shlex.split(hooks(command)[1])[-1]
    for step in ("apt-get download -q r8168-dkms", "dpkg-deb -x r8168-dkms_*.deb /", f"-k {KVER}", "make.log"):
        assert step in script
    assert "dpkg -i" not in script  # no maintainer script runs


def test_named_fetches_that_kernels_package():
    command = commands.named_command(KVER, "sid", "http://m/debian", Path("/w/k.tar"))
    assert "--variant=extract" in command and f"--include=linux-image-{KVER}" in command
    assert '--aptopt=Acquire::Check-Valid-Until "false"' in command


def built(name: str) -> BuiltModule:
    return BuiltModule(name, Path(f"/{name}.ko"), "", "", "", "", (), ())


def test_the_driver_module_among_several():
    one = (built("r8168"),)
    several = (built("r8168"), built("helper"))
    assert choose_driver(DriverChoice("dkms", "r8168-dkms"), one) == "r8168"
    assert choose_driver(DriverChoice("module", "/x", "helper"), several) == "helper"
    with pytest.raises(NiclabError, match="it builds r8168, helper; fix: say which one drives the card with `name:`"):
        choose_driver(DriverChoice("module", "/x"), several)
    with pytest.raises(NiclabError, match=r"no module other among those it built \(r8168, helper\)"):
        choose_driver(DriverChoice("module", "/x", "other"), several)


def fake_ko(name: str) -> bytes:
    """A minimal ELF64 with a .modinfo and a build-id note: what read_built reads of a module."""
    modinfo = f"name={name}\0alias=pci:v000010ECd00008168sv*\0vermagic={KVER} SMP mod_unload\0".encode()
    note = struct.pack("<III", 4, 4, 3) + b"GNU\0" + bytes.fromhex("deadbeef")
    names = b"\0.modinfo\0.note.gnu.build-id\0.shstrtab\0"
    body_at = 64
    offsets = [body_at, body_at + len(modinfo), body_at + len(modinfo) + len(note)]
    shoff = offsets[2] + len(names)
    header = (
        b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 4, 3)
    )
    sections = bytes(64)
    for name_at, offset, size in (
        (1, offsets[0], len(modinfo)),
        (10, offsets[1], len(note)),
        (29, offsets[2], len(names)),
    ):
        sections += struct.pack("<IIQQQQIIQQ", name_at, 1, 0, 0, offset, size, 0, 0, 1, 0)
    return header + modinfo + note + names + sections


def test_the_build_id_note_is_read():
    assert build_id(fake_ko("r8168")) == "deadbeef"
    with pytest.raises(ValueError, match="not a little-endian ELF64"):
        build_id(b"\x7fELF" + bytes(60))


def test_a_second_ensure_driver_does_not_build(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    image = Image("micro", "x", tmp_path, "", {"kernel_version": KVER, "suite": "bookworm", "modules": []})
    runs = []

    def fake_mmdebstrap(command, log, progress):
        runs.append(command)
        work = Path(shlex.split(hooks(command)[-1])[-1])
        (work / "out/ko").mkdir(parents=True)
        (work / "out/src").mkdir()
        (work / "out/src/dkms.conf").write_text('PACKAGE_NAME="r8168"\n')
        (work / "out/ko/r8168.ko").write_bytes(fake_ko("r8168"))
        (work / "out/build.log").write_text("built\n")
        (work / "out/status").write_text("0\n")
        (work / "out/source-version").write_text("8.051.02-2\n")

    monkeypatch.setattr(build_mod, "run_mmdebstrap", fake_mmdebstrap)
    monkeypatch.setattr(build_mod, "debian_mirror", lambda suite: "http://m/debian")
    choice = DriverChoice("dkms", "r8168-dkms")
    first = build_mod.ensure_driver(choice, None, image, lambda line: None)
    again = build_mod.ensure_driver(choice, KernelChoice(suite="bookworm"), image, lambda line: None)
    assert len(runs) == 1 and again == first
    assert first.driver == "r8168" and first.origin == "Debian bookworm r8168-dkms 8.051.02-2"
    assert first.modules[0].build_id == "deadbeef" and first.modules[0].aliases == ("pci:v000010ECd00008168sv*",)
    assert json.loads((first.directory / "driver.json").read_text())["kernel_version"] == KVER


def test_a_failed_build_is_one_line_and_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    image = Image("micro", "x", tmp_path, "", {"kernel_version": KVER, "suite": "bookworm"})
    source = module_tree(tmp_path / "hello")

    def fake_mmdebstrap(command, log, progress):
        work = Path(shlex.split(hooks(command)[-1])[-1])
        (work / "out/ko").mkdir(parents=True)
        (work / "out/build.log").write_text(GCC_LOG)
        (work / "out/status").write_text("2\n")

    monkeypatch.setattr(build_mod, "run_mmdebstrap", fake_mmdebstrap)
    monkeypatch.setattr(build_mod, "debian_mirror", lambda suite: "http://m/debian")
    with pytest.raises(NiclabError) as caught:
        build_mod.ensure_driver(DriverChoice("module", str(source)), None, image, lambda line: None)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"driver module:{source} for kernel {KVER}: the build failed: hello.c:12:5: error:")
    log = Path(message.rpartition("whole log: ")[2])
    assert log.read_text() == GCC_LOG
    assert [p.name for p in (tmp_path / "cache/drivers").iterdir() if not p.name.startswith(".lock")] == [log.name]


def test_headers_gone_from_the_mirror_say_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    image = Image("micro", "x", tmp_path, "", {"kernel_version": KVER, "suite": "bookworm"})

    def fake_mmdebstrap(command, log, progress):
        log.write_text(f"E: Unable to locate package linux-headers-{KVER}\n")
        raise NiclabError("mmdebstrap failed (exit 1)")

    monkeypatch.setattr(build_mod, "run_mmdebstrap", fake_mmdebstrap)
    monkeypatch.setattr(build_mod, "debian_mirror", lambda suite: "http://m/debian")
    with pytest.raises(NiclabError, match=rf"no longer has linux-headers-{KVER} .*fix: `niclab image build --force`"):
        build_mod.ensure_driver(DriverChoice("dkms", "r8168-dkms"), None, image, lambda line: None)


def test_a_build_trees_kernel_source_is_built_with_the_tree_on_the_host(tmp_path, monkeypatch, request):
    """A fake tree whose `make M=DIR modules` makes DIR/<the object Makefile's obj-m names>.ko from a template."""
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    shared = Path(tempfile.mkdtemp(prefix="niclab-test-tree-"))  # as root the build runs as nobody, who reads it
    shared.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    tree = shared / "linux"
    driver_dir = tree / "drivers/net/ethernet/intel/e1000e"
    driver_dir.mkdir(parents=True)
    (driver_dir / "Makefile").write_text(E1000E_MAKEFILE)
    (driver_dir / "netdev.c").write_text("int x;\n")
    (tree / "template.ko").write_bytes(fake_ko("e1000e_vendor"))
    (tree / "Makefile").write_text(
        "modules:\n\tgrep -q '^obj-m += e1000e_vendor.o' $(M)/Makefile\n\tcp template.ko $(M)/e1000e_vendor.ko\n"
        "\t@echo built by uid $$(id -u)\n"
    )
    image = Image("micro", "x", tmp_path, "", {"kernel_version": "6.9.0", "suite": "bookworm"})
    choice = DriverChoice("kernel-source", "drivers/net/ethernet/intel/e1000e", "e1000e_vendor")
    built = build_mod.ensure_driver(choice, KernelChoice(build=str(tree)), image, lambda line: None)
    assert built.driver == "e1000e_vendor" and built.origin == f"build tree {tree} {choice.source}"
    assert built.modules[0].file.read_bytes() == fake_ko("e1000e_vendor")
    # the scenario's Makefiles never run as root: as root, nobody builds
    assert f"built by uid {65534 if os.geteuid() == 0 else os.geteuid()}" in built.log.read_text()
    (tree / "Makefile").write_text("modules:\n\t@echo 'netdev.c:3:1: error: nope'; false\n")
    monkeypatch.setattr(build_mod, "_key", lambda *args: "another")
    with pytest.raises(NiclabError, match=r"the build failed: netdev.c:3:1: error: nope; whole log: "):
        build_mod.ensure_driver(choice, KernelChoice(build=str(tree)), image, lambda line: None)


def test_as_root_a_tree_nobody_can_read_is_refused_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    tree = tmp_path / "private" / "linux"  # pytest's folders are their owner's alone
    driver_dir = tree / "drivers/net/ethernet/intel/e1000e"
    driver_dir.mkdir(parents=True)
    (driver_dir / "Makefile").write_text(E1000E_MAKEFILE)
    (tree / "template.ko").write_bytes(fake_ko("e1000e"))
    (tree / "Makefile").write_text("modules:\n\tcp template.ko $(M)/e1000e.ko\n")
    (tmp_path / "private").chmod(0o700)
    image = Image("micro", "x", tmp_path, "", {"kernel_version": "6.9.0", "suite": "bookworm"})
    choice = DriverChoice("kernel-source", "drivers/net/ethernet/intel/e1000e")
    if os.geteuid() == 0:
        with pytest.raises(NiclabError, match=rf"who cannot read {tree}/Makefile; fix: let others read the tree"):
            build_mod.ensure_driver(choice, KernelChoice(build=str(tree)), image, lambda line: None)
    else:  # a user's build runs as that user, who reads the tree
        assert (
            build_mod.ensure_driver(choice, KernelChoice(build=str(tree)), image, lambda line: None).driver == "e1000e"
        )


def module_with(name: str, depends: str = "") -> bytes:
    """fake_ko with another name= (the same length keeps its offsets) and, if given, a depends= in place of alias."""
    data = fake_ko("r" * len(name)).replace(b"name=" + b"r" * len(name), b"name=" + name.encode())
    if depends:
        alias = b"alias=pci:v000010ECd00008168sv*"
        data = data.replace(alias, (b"depends=" + depends.encode()).ljust(len(alias), b","))
    return data


def test_a_cut_module_in_the_cache_is_one_line(tmp_path):
    (tmp_path / "r8168.ko").write_bytes(fake_ko("r8168")[:-40])
    with pytest.raises(
        NiclabError, match=rf"^driver x: {tmp_path}/r8168.ko is not a kernel module \(.*\); fix: remove"
    ):
        read_built(tmp_path / "r8168.ko", "driver x")


def test_a_module_naming_itself_or_its_dependencies_with_a_path_is_refused(tmp_path):
    path = tmp_path / "m.ko"
    path.write_bytes(module_with("ok_name", depends="tls,8021q"))
    assert read_built(path, "driver x").depends == ("tls", "8021q")
    for name, depends in (("../../x", ""), ("a b;rm", ""), ("good", "tls,../x"), ("good", "a$(id)")):
        path.write_bytes(module_with(name, depends))
        with pytest.raises(NiclabError, match=rf"^driver x: {path} gives (name|depends)=.*not a module name"):
            read_built(path, "driver x")


def test_the_module_key_is_the_models():
    assert drivers_modules.module_key is driver_choice.module_key


def test_a_module_of_one_source_file_gets_a_list_of_that_file():
    renamed = rename_module("obj-$(CONFIG_E100) += e100.o\n", "e100_vendor")
    assert renamed == "obj-m += e100_vendor.o\ne100_vendor-y := e100.o\n"


def test_a_continued_obj_line_keeps_its_other_objects():
    text = "obj-$(CONFIG_NET_VENDOR_X) += a.o \\\n\t\told.o \\\n\t\tb.o\nold-y := one.o two.o\n"
    renamed = rename_module(text, "new", old="old")
    assert modules_of(renamed) == ["a", "b", "new"]
    assert "old.o" not in renamed and "new-y := one.o two.o" in renamed
    assert "obj-$(CONFIG_NET_VENDOR_X) += a.o" in renamed
    only = rename_module("obj-$(CONFIG_X) += \\\n\told.o\n", "new")
    assert only == "obj-m += new.o\nnew-y := old.o\n"


def test_the_makefile_is_rewritten_only_as_a_regular_file(tmp_path):
    (tmp_path / "e1000e").mkdir()
    (tmp_path / "e1000e/Makefile").write_text(E1000E_MAKEFILE)
    assert makefile_main([str(tmp_path / "e1000e"), "e1000e_vendor"]) == 0
    assert "obj-m += e1000e_vendor.o" in (tmp_path / "e1000e/Makefile").read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text(E1000E_MAKEFILE)
    for make in (
        lambda path: path.symlink_to(elsewhere),
        lambda path: os.mkfifo(path),
        lambda path: path.write_text("obj-m += x.o\n" + "#" * (1 << 20)),
    ):
        folder = tmp_path / "drv"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        make(folder / "Makefile")
        assert makefile_main([str(folder), "new"]) == 1
    assert elsewhere.read_text() == E1000E_MAKEFILE


def test_root_copies_only_regular_modules_and_stops_a_long_build():
    script = commands.make_script(KVER)
    alone = "unshare --pid --fork --kill-child"  # what the build leaves running ends with it
    assert f"timeout -k 10 {commands.MAKE_TIMEOUT} {alone} chroot --userspec=65534:65534 / make" in script
    assert "find /build/src -type f -name '*.ko' -exec cp -P {} /build/out/ko/" in script
    dkms = commands.dkms_script(DriverChoice("dkms", "r8168-dkms"), KVER, "bookworm")
    assert f'timeout -k 10 {commands.MAKE_TIMEOUT} {alone} dkms build -m "$M"' in dkms
    assert "-path '*/module/*' -type f -name '*.ko*' -exec cp -P {} /build/out/ko/" in dkms


def test_a_build_stopped_by_its_timeout_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    image = Image("micro", "x", tmp_path, "", {"kernel_version": KVER, "suite": "bookworm"})

    def fake_mmdebstrap(command, log, progress):
        work = Path(shlex.split(hooks(command)[-1])[-1])
        (work / "out/ko").mkdir(parents=True)
        (work / "out/build.log").write_text("  CC [M]  /build/src/hello.o\n")
        (work / "out/status").write_text("124\n")

    monkeypatch.setattr(build_mod, "run_mmdebstrap", fake_mmdebstrap)
    monkeypatch.setattr(build_mod, "debian_mirror", lambda suite: "http://m/debian")
    with pytest.raises(
        NiclabError, match=rf"^driver dkms:r8168-dkms for kernel {KVER}: the build timed out after 1800 s"
    ):
        build_mod.ensure_driver(DriverChoice("dkms", "r8168-dkms"), None, image, lambda line: None)


def shared_tree(request, makefile: str) -> Path:
    """A build tree with this top Makefile, where nobody (who builds as root) can read."""
    shared = Path(tempfile.mkdtemp(prefix="niclab-test-tree-"))
    shared.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    tree = shared / "linux"
    tree.mkdir()
    (tree / "Makefile").write_text(makefile)
    (tree / "template.ko").write_bytes(fake_ko("hello"))
    source = module_tree(shared / "hello")
    for path in (source, *source.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return tree


def test_a_host_build_that_leaves_a_fifo_or_a_link_as_a_module_is_refused(tmp_path, monkeypatch, request):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    image = Image("micro", "x", tmp_path, "", {"kernel_version": "6.9.0", "suite": "bookworm"})
    tree = shared_tree(request, "modules:\n\tmkfifo $(M)/hello.ko\n")
    choice = DriverChoice("module", str(tree.parent / "hello"))
    with pytest.raises(NiclabError, match=r": hello.ko is not a file, directory or link; fix: remove it"):
        build_mod.ensure_driver(choice, KernelChoice(build=str(tree)), image, lambda line: None)
    (tree / "Makefile").write_text("modules:\n\tln -s /etc/passwd $(M)/hello.ko\n")
    with pytest.raises(NiclabError, match=r": hello.ko is a symbolic link to /etc/passwd, outside the directory"):
        build_mod.ensure_driver(choice, KernelChoice(build=str(tree)), image, lambda line: None)
    (tree / "Makefile").write_text("modules:\n\tmkdir $(M)/sub; touch $(M)/sub/x; ln -s sub/x $(M)/hello.ko\n")
    with pytest.raises(NiclabError, match=r"the build left hello.ko, which cannot be read as a file"):
        build_mod.ensure_driver(choice, KernelChoice(build=str(tree)), image, lambda line: None)


def test_a_host_build_past_its_time_is_killed_with_its_children(tmp_path, monkeypatch, request):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(build_mod, "MAKE_TIMEOUT", 2)
    image = Image("micro", "x", tmp_path, "", {"kernel_version": "6.9.0", "suite": "bookworm"})
    tree = shared_tree(request, "modules:\n\t@sleep 120 & echo child $$!; sleep 120\n")
    choice = DriverChoice("module", str(tree.parent / "hello"))
    started = time.monotonic()
    with pytest.raises(NiclabError, match=r"the build timed out after 2 s; whole log: ") as caught:
        build_mod.ensure_driver(choice, KernelChoice(build=str(tree)), image, lambda line: None)
    assert time.monotonic() - started < 30
    log = Path(str(caught.value).rpartition("whole log: ")[2]).read_text()
    child = int(log.split("child ")[1].split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{child}").exists():
        if "\nState:\tZ" in Path(f"/proc/{child}/status").read_text(errors="replace"):
            break
        time.sleep(0.1)
    else:
        assert not Path(f"/proc/{child}").exists(), "make's child outlived the timeout"


def test_a_build_trees_patched_driver_folder_is_another_build(tmp_path, monkeypatch, request):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    tree = shared_tree(request, "modules:\n\tcp template.ko $(M)/e1000e.ko\n")
    driver_dir = tree / "drivers/net/ethernet/intel/e1000e"
    driver_dir.mkdir(parents=True)
    (driver_dir / "Makefile").write_text(E1000E_MAKEFILE)
    (driver_dir / "netdev.c").write_text("int x;\n")
    (tree / "template.ko").write_bytes(fake_ko("e1000e"))
    for path in (tree, *tree.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    image = Image("micro", "x", tmp_path, "", {"kernel_version": "6.9.0", "suite": "bookworm"})
    choice = DriverChoice("kernel-source", "drivers/net/ethernet/intel/e1000e")
    first = build_mod.ensure_driver(choice, KernelChoice(build=str(tree)), image, lambda line: None)
    (driver_dir / "netdev.c").write_text("int x = 1;  /* the developer's patch */\n")
    second = build_mod.ensure_driver(choice, KernelChoice(build=str(tree)), image, lambda line: None)
    assert second.directory != first.directory


def test_a_source_changed_during_its_build_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    image = Image("micro", "x", tmp_path, "", {"kernel_version": KVER, "suite": "bookworm"})
    source = module_tree(tmp_path / "hello")

    real_copy = build_mod.copy_source

    def edited_then_copied(root, out, where):
        (source / "hello.c").write_text("int y;\n")  # edited after the key was taken, before the copy
        return real_copy(root, out, where)

    def fake_mmdebstrap(command, log, progress):
        work = Path(shlex.split(hooks(command)[-1])[-1])
        (work / "out/ko").mkdir(parents=True)
        shutil.copytree(work / "src", work / "out/src")
        (work / "out/ko/hello.ko").write_bytes(fake_ko("hello"))
        (work / "out/build.log").write_text("built\n")
        (work / "out/status").write_text("0\n")

    monkeypatch.setattr(build_mod, "copy_source", edited_then_copied)
    monkeypatch.setattr(build_mod, "run_mmdebstrap", fake_mmdebstrap)
    monkeypatch.setattr(build_mod, "debian_mirror", lambda suite: "http://m/debian")
    with pytest.raises(NiclabError, match=r"the source of driver module:.* changed while it was built; run again$"):
        build_mod.ensure_driver(DriverChoice("module", str(source)), None, image, lambda line: None)
    assert not [p for p in (tmp_path / "cache/drivers").iterdir() if not p.name.startswith(".") and p.is_dir()]


def test_a_link_that_leaves_the_tree_through_another_link_is_refused(tmp_path):
    tree = module_tree(tmp_path / "src")
    (tree / "d").symlink_to(".")
    source_hash(tree, "driver x")  # a link to the tree itself stays in it
    (tree / "e").symlink_to("d/d/../../secret")
    with pytest.raises(NiclabError, match=r"driver x: e is a symbolic link to d/d/../../secret, outside the directory"):
        source_hash(tree, "driver x")


def test_a_trixie_kernels_driver_is_built_from_the_mirror_the_images_own_suite_came_from(tmp_path, monkeypatch):
    """The host's apt names a source for bookworm only: trixie's headers come from that mirror, as trixie's
    kernel did (image.kernels), in a trixie root."""
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    (apt / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"
    )
    monkeypatch.setattr(build_mod, "debian_mirror", lambda suite: mirror_mod.debian_mirror(suite, apt))
    image = Image("micro", "x", tmp_path, "", {"kernel_version": "6.12.117+deb13-amd64", "suite": "bookworm"})
    commands: list[list[str]] = []

    def fake_mmdebstrap(command, log, progress):
        commands.append(command)
        work = Path(shlex.split(hooks(command)[-1])[-1])
        (work / "out/ko").mkdir(parents=True)
        (work / "out/src").mkdir()
        (work / "out/ko/r8168.ko").write_bytes(fake_ko("r8168"))
        (work / "out/build.log").write_text("built\n")
        (work / "out/status").write_text("0\n")
        (work / "out/source-version").write_text("8.055.00-1\n")

    monkeypatch.setattr(build_mod, "run_mmdebstrap", fake_mmdebstrap)
    built = build_mod.ensure_driver(DriverChoice("dkms", "r8168-dkms"), KernelChoice(suite="trixie"), image, print)
    assert built.origin == "Debian trixie r8168-dkms 8.055.00-1"
    (command,) = commands
    assert "trixie" in command and "deb http://mirror.invalid/debian trixie main contrib non-free" in command


def test_a_host_build_leaves_nothing_running(tmp_path, monkeypatch, request):
    """A driver's Makefile that runs `setsid sleep 123 &` (built as nobody, as root) left it running past the
    build, free to race root's walk of what it built. The build's reaper ends it first."""
    monkeypatch.setenv("NICLAB_CACHE", str(tmp_path / "cache"))
    image = Image("micro", "x", tmp_path, "", {"kernel_version": "6.9.0", "suite": "bookworm"})
    tree = shared_tree(request, "modules:\n\tsetsid sleep 123 > /dev/null 2>&1 < /dev/null & echo left $$!; exit 1\n")
    choice = DriverChoice("module", str(tree.parent / "hello"))
    with pytest.raises(NiclabError, match="whole log: ") as caught:
        build_mod.ensure_driver(choice, KernelChoice(build=str(tree)), image, lambda line: None)
    log = Path(str(caught.value).rpartition("whole log: ")[2]).read_text()
    with pytest.raises(ProcessLookupError):  # ended and reaped before ensure_driver returned
        os.kill(int(re.findall(r"^left (\d+)$", log, re.MULTILINE)[-1]), 0)
