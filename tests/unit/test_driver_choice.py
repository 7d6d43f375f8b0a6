"""Which module drives a card (`driver:`): every form parse_driver takes, every one it refuses, slugs and names."""

import re

import pytest

from niclab.model.driver_choice import DriverChoice, DriverError, module_key, parse_driver


@pytest.fixture
def source(tmp_path):
    """An out-of-tree module's source directory (a Makefile) beside the scenario's."""
    (tmp_path / "e1000e-vendor").mkdir()
    (tmp_path / "e1000e-vendor" / "Makefile").write_text("obj-m += e1000e_vendor.o\n")
    (tmp_path / "scenarios").mkdir()
    return tmp_path


def refusal(value, base=None) -> DriverError:
    with pytest.raises(DriverError) as caught:
        parse_driver(value, base)
    return caught.value


def test_in_tree_or_nothing_is_the_kernels_own_module():
    for value in ("in-tree", None):
        choice = parse_driver(value)
        assert choice == DriverChoice() and choice.is_default
        assert str(choice) == "in-tree" and choice.slug == "in-tree"


def test_a_module_name_is_another_in_tree_module():
    choice = parse_driver("8139too")
    assert choice == DriverChoice("named", "8139too", "8139too")
    assert not choice.is_default and str(choice) == "8139too"
    assert parse_driver("r8169_vendor-2").source == "r8169_vendor-2"


def test_a_module_source_is_relative_to_the_scenarios_directory(source, monkeypatch):
    monkeypatch.chdir(source / "scenarios")
    expected = DriverChoice("module", str(source / "e1000e-vendor"))
    assert parse_driver({"module": "../e1000e-vendor"}, source / "scenarios") == expected
    assert parse_driver({"module": "e1000e-vendor"}, source) == expected
    assert parse_driver({"module": "../e1000e-vendor"}) == expected  # without a base: the working directory
    assert str(expected) == f"module:{source / 'e1000e-vendor'}"
    named = parse_driver({"module": str(source / "e1000e-vendor"), "name": "e1000e_vendor"})
    assert named == DriverChoice("module", str(source / "e1000e-vendor"), "e1000e_vendor")
    assert str(named) == f"module:{source / 'e1000e-vendor'} as e1000e_vendor"


def test_a_kbuild_file_is_as_good_as_a_makefile(tmp_path):
    (tmp_path / "Kbuild").write_text("obj-m += x.o\n")
    assert parse_driver({"module": "."}, tmp_path).source == str(tmp_path)


def test_a_folder_of_the_kernels_source_and_a_dkms_package():
    tree = parse_driver({"kernel-source": "drivers/net/ethernet/intel/e1000e/", "name": "e1000e_vendor"})
    assert tree == DriverChoice("kernel-source", "drivers/net/ethernet/intel/e1000e", "e1000e_vendor")
    assert str(tree) == "kernel-source:drivers/net/ethernet/intel/e1000e as e1000e_vendor"
    dkms = parse_driver({"dkms": "r8168-dkms"})
    assert dkms == DriverChoice("dkms", "r8168-dkms") and str(dkms) == "dkms:r8168-dkms"
    assert parse_driver({"dkms": "r8168-dkms", "name": "r8168"}).name == "r8168"


def test_a_choice_passes_through():
    choice = DriverChoice("dkms", "r8168-dkms")
    assert parse_driver(choice) is choice


@pytest.mark.parametrize(
    "value,message",
    [
        ("intree", "unknown driver 'intree'; did you mean 'in-tree'?"),
        ("In_Tree", "did you mean 'in-tree'?"),
        ("module:../x", "driver 'module:../x' is written as a mapping: {module: ../x}"),
        ("dkms:r8168-dkms", "is written as a mapping: {dkms: r8168-dkms}"),
        ("../x", "an out-of-tree module's source directory is written {module: ../x}"),
        ("./x", "is written {module: ./x}"),
        ("e1000e.ko", "write the module's name without .ko (e1000e)"),
        ("e1000e.ko.xz", "without .ko (e1000e)"),
        ("two words", "'two words' is not a module name (letters, digits, _ and -, at most 56)"),
        ("x" * 57, "is not a module name"),
        ("", "is not a module name"),
        (["e1000e"], "a driver is in-tree, another in-tree module's name (8139too), {module: DIR}"),
        (7, "not 7"),
        ({}, "the driver is an empty mapping: write {module: DIR}"),
        ({"name": "x"}, "the driver names no source"),
        ({"module": "/", "dkms": "x-dkms"}, "has one source, not both module and dkms"),
        ({"kernel-source": ""}, "kernel-source is a folder of the kernel's own source"),
        ({"dkms": ["r8168-dkms"]}, "dkms is a Debian DKMS package, e.g. r8168-dkms, not ['r8168-dkms']"),
        ({"dkms": "R8168"}, "dkms 'R8168' is not a Debian package name"),
        ({"dkms": "r8168 dkms"}, "is not a Debian package name"),
        ({"dkms": "r8168-dkms", "name": "r 8168"}, "name 'r 8168' is not a module name"),
        ({"dkms": "r8168-dkms", "name": 8168}, "name 8168 is not a module name"),
        ({"kernel-source": "/usr/src/linux/drivers/net"}, "is a folder of the kernel's source tree under drivers/"),
        ({"kernel-source": "net/core"}, "under drivers/"),
        ({"kernel-source": "drivers/../net/core"}, "'..' is not a folder name of the kernel's tree"),
        ({"kernel-source": "drivers/net/$(x)"}, "'$(x)' is not a folder name"),
    ],
)
def test_refusals_say_what_is_wrong_and_the_fix(value, message):
    assert message in str(refusal(value))


@pytest.mark.parametrize(
    "value,key,at_key,hint",
    [
        ({"modul": "../x"}, "modul", True, "did you mean 'module'?"),
        ({"dmks": "r8168-dkms"}, "dmks", True, "did you mean 'dkms'?"),
        ({"kernel_source": "drivers/x"}, "kernel_source", True, "did you mean 'kernel-source'?"),
        ({"module": "/", "nmae": "x"}, "nmae", True, "did you mean 'name'?"),
        ({"dkms": "R8168"}, "dkms", False, ""),
        ({"dkms": "r8168-dkms", "name": "a b"}, "name", False, ""),
    ],
)
def test_a_refusal_names_the_key_it_is_about(value, key, at_key, hint):
    refused = refusal(value)
    assert (refused.key, refused.at_key) == (key, at_key)
    assert hint in str(refused)


def test_a_module_directory_must_be_there_and_have_a_kbuild_or_makefile(tmp_path):
    refused = refusal({"module": "missing"}, tmp_path)
    assert str(refused) == f"driver module 'missing': no such directory ({tmp_path / 'missing'})"
    assert refused.key == "module"
    (tmp_path / "empty").mkdir()
    assert str(refusal({"module": "empty"}, tmp_path)).startswith(
        "driver module 'empty': neither a Kbuild nor a Makefile in it; {module: DIR} is the source directory"
    )
    (tmp_path / "file").write_text("")
    assert "no such directory" in str(refusal({"module": "file"}, tmp_path))
    assert "not a usable path" in str(refusal({"module": "~nosuchuser/x"}, tmp_path))
    assert "not a usable path" in str(refusal({"module": "a\0b"}, tmp_path))


def test_a_slug_is_readable_short_and_tells_every_choice_apart():
    choices = [
        DriverChoice("named", "8139too", "8139too"),
        DriverChoice("module", "/src/a/e1000e-vendor"),
        DriverChoice("module", "/src/b/e1000e-vendor"),
        DriverChoice("module", "/src/a/e1000e-vendor", "e1000e_vendor"),
        DriverChoice("kernel-source", "drivers/net/ethernet/intel/e1000e", "e1000e_vendor"),
        DriverChoice("dkms", "r8168-dkms"),
        DriverChoice("dkms", "r8168-dkms", "r8168"),
        DriverChoice("module", "/src/" + "Very_Long.Name" * 10),
    ]
    slugs = [choice.slug for choice in choices]
    assert len(set(slugs)) == len(slugs)
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", slug) and len(slug) <= 53 for slug in slugs)
    assert slugs[1].startswith("module-e1000e-vendor-") and slugs[5].startswith("dkms-r8168-dkms-")
    assert slugs[0] == DriverChoice("named", "8139too", "8139too").slug  # stable: a cache directory's name


def test_module_names_compare_as_modprobe_does():
    assert module_key("e1000e-vendor") == module_key("e1000e_vendor") == "e1000e_vendor"
