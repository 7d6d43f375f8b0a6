"""The disk kind of image recipe (images/debian): what it asks of mmdebstrap and of the host's tools."""

import shutil
import subprocess
from pathlib import Path

from niclab.base.paths import SOURCE_ROOT
from niclab.plumbing.image.disk import commands
from niclab.plumbing.image.recipe import load_recipe
from niclab.plumbing.image.rootfs import disk_hooks, mmdebstrap_command

IMAGES = SOURCE_ROOT / "images"


def test_a_disk_recipe_has_a_disk_and_its_initramfs_has_its_own_overlay():
    debian, micro = load_recipe(IMAGES / "debian"), load_recipe(IMAGES / "micro")
    assert debian.disk is not None and micro.disk is None
    assert debian.disk.size_mib >= 2048
    assert debian.initrd_overlay == IMAGES / "debian" / "initrd"
    assert micro.initrd_overlay == micro.rootfs_overlay == IMAGES / "micro" / "rootfs"
    assert {"virtio_pci", "virtio_blk", "ext4"} <= set(debian.modules)
    assert debian.binaries == ()


def test_the_disk_root_gets_the_overlay_then_the_customize_script():
    debian = load_recipe(IMAGES / "debian")
    command = mmdebstrap_command(debian, "http://mirror.invalid/debian", Path("/tmp/root.tar"))
    hooks = [arg for arg in command if arg.startswith("--customize-hook=")]
    assert hooks == disk_hooks(debian)
    assert hooks[0] == f'--customize-hook=tar -C {debian.rootfs_overlay} -c . | tar -C "$1" -x --no-same-owner'
    assert hooks[1] == f'--customize-hook=sh {debian.directory / "customize.sh"} "$1"'
    assert disk_hooks(load_recipe(IMAGES / "micro")) == []


def test_the_disk_is_written_from_the_tar_then_made_ext4_then_qcow2():
    debian = load_recipe(IMAGES / "debian")
    assert debian.disk is not None
    steps = commands(debian.disk, Path("root.tar"), Path("disk.raw"), Path("disk.qcow2"))
    assert [step[0] for step in steps] == ["genext2fs", "tune2fs", "e2fsck", "qemu-img"]
    genext2fs = steps[0]
    assert genext2fs[genext2fs.index("-b") + 1] == str(debian.disk.size_mib * 256)  # 4 KiB blocks
    assert genext2fs[-3:] == ["-a", "root.tar", "disk.raw"]
    assert steps[-1][-2:] == ["disk.raw", "disk.qcow2"]


def test_the_recipes_shell_scripts_parse():
    for script in (IMAGES / "debian" / "initrd" / "init", IMAGES / "debian" / "customize.sh"):
        checked = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
        assert checked.returncode == 0, (script, checked.stderr)
        assert script.stat().st_mode & 0o111, f"{script} must be executable"


def test_a_change_in_the_initramfs_overlay_changes_the_image_hash(tmp_path):
    copy = tmp_path / "debian"
    shutil.copytree(IMAGES / "debian", copy)
    before = load_recipe(copy).input_hash()
    (copy / "initrd" / "init").write_text((copy / "initrd" / "init").read_text() + "# changed\n")
    assert load_recipe(copy).input_hash() != before


def test_the_vagrant_user_gets_vagrants_well_known_public_key():
    key = (IMAGES / "debian" / "vagrant.pub").read_text().split()
    assert key[0] == "ssh-rsa" and " ".join(key[2:]) == "vagrant insecure public key"


def test_the_initramfs_loads_the_modules_the_recipe_puts_in_it():
    debian = load_recipe(IMAGES / "debian")
    init = (debian.initrd_overlay / "init").read_text()
    loop = next(line for line in init.splitlines() if line.startswith("for module in"))
    assert loop.split(" in ", 1)[1].split(";")[0].split() == list(debian.modules)
