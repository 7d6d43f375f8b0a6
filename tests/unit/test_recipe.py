import shutil

from niclab import nics
from niclab.image.recipe import load_recipe


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
    assert {"netperf", "netserver", "NPtcp", "iperf3", "bw_tcp", "lat_tcp", "lat_udp", "tc", "ip",
            "ethtool", "qemu-ga"} <= names
    assert {"sch_netem", "bonding"} <= set(recipe.modules)
