import shutil

from niclab.model import nics
from niclab.plumbing.image.recipe import load_recipe


def test_recipe_loads_and_hash_follows_every_file(repo, tmp_path):
    shutil.copytree(repo / "images" / "micro", tmp_path / "micro")
    recipe = load_recipe(tmp_path / "micro")
    before = recipe.input_hash()
    assert before == load_recipe(tmp_path / "micro").input_hash()
    (tmp_path / "micro" / "rootfs" / "etc" / "niclab" / "boot").write_text("#!/bin/sh\n")
    assert load_recipe(tmp_path / "micro").input_hash() != before


def test_every_catalog_driver_is_in_the_image(repo):
    recipe = load_recipe(repo / "images" / "micro")
    wanted = {m.replace("-", "_") for m in recipe.modules}
    for model in nics.CATALOG:
        assert model.module.replace("-", "_") in wanted, f"{model.name} needs module {model.module}"


def test_image_carries_the_benchmark_tools(repo):
    recipe = load_recipe(repo / "images" / "micro")
    names = {path.rsplit("/", 1)[-1] for path in recipe.binaries}
    assert {
        "netperf",
        "netserver",
        "NPtcp",
        "iperf3",
        "bw_tcp",
        "lat_tcp",
        "lat_udp",
        "tc",
        "ip",
        "ethtool",
        "qemu-ga",
    } <= names
    assert {"sch_netem", "bonding"} <= set(recipe.modules)


def test_source_builds_run_inside_the_throw_away_root(repo):
    from niclab.plumbing.image.rootfs import mmdebstrap_command

    recipe = load_recipe(repo / "images" / "micro")
    fio = next(b for b in recipe.builds if b.source == "fio")
    assert "libc6-dev" in fio.needs and "/usr/bin/fio" in recipe.binaries
    command = mmdebstrap_command(recipe, "http://mirror.invalid/debian", repo / "root.tar")
    include = next(word for word in command if word.startswith("--include="))
    assert {"apt", "dpkg-dev", "gcc", "make"} <= set(include.split("=", 1)[1].split(","))
    hook = next(word for word in command if word.startswith("--customize-hook="))
    assert 'chroot "$1"' in hook and "apt-get source -q fio" in hook
    assert command[-1] == "deb-src http://mirror.invalid/debian bookworm main non-free non-free-firmware"
    assert command[-3:-1] == [str(repo / "root.tar"), "http://mirror.invalid/debian"]


def test_the_default_kernel_is_the_micro_recipes_suite(repo):
    # A scenario's kernel of DEFAULT_SUITE boots the image as built, with no other kernel: they must be one.
    from niclab.model.kernel_choice import DEFAULT_SUITE, SUITES

    recipe = load_recipe(repo / "images" / "micro")
    assert recipe.suite == DEFAULT_SUITE
    assert DEFAULT_SUITE in SUITES


def test_the_images_hold_what_every_benchmark_declares(repo):
    # The recipes stay the image's hashed inputs; this keeps them in step with the benchmarks' declarations.
    from niclab.model import bench

    micro, debian = load_recipe(repo / "images" / "micro"), load_recipe(repo / "images" / "debian")
    micro_modules = {m.replace("-", "_") for m in micro.modules}
    for plugin in bench.REGISTRY.values():
        need = plugin.guest
        built = {b.source for b in micro.builds}
        assert set(need.packages) <= set(micro.packages) | built, f"micro image lacks {plugin.name}'s packages"
        assert set(need.packages) <= set(debian.packages), f"debian image lacks {plugin.name}'s packages"
        assert set(need.programs) <= set(micro.binaries), f"micro initramfs lacks {plugin.name}'s programs"
        assert {m.name for m in need.modules} <= micro_modules, f"micro image lacks {plugin.name}'s modules"
