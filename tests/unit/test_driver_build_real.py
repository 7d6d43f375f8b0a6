"""Real driver builds for the micro image's kernel (Debian bookworm's), none booted: the proof that a DKMS package,
a directory of the kernel's own source renamed, and a failing module source go through mmdebstrap as they should.
Each takes about a minute (a root with the kernel's headers); the image and the driver cache are the session's (built
once: tests/integration/test_drivers.py boots the same e1000e_vendor build)."""

import re
import sys
import time
from pathlib import Path

import pytest

from niclab.base.errors import NiclabError
from niclab.model.driver_choice import DriverChoice
from niclab.plumbing.drivers.build import BuiltDriver, ensure_driver, store
from niclab.plumbing.image.elf import NoSection, section
from niclab.plumbing.image.store import Image, ensure_image


def say(line: str) -> None:
    print(f"[driver] {line}", file=sys.stderr)


@pytest.fixture(scope="module")
def image() -> Image:
    return ensure_image(progress=say)


def timed(choice: DriverChoice, image: Image) -> BuiltDriver:
    started = time.monotonic()
    built = ensure_driver(choice, None, image, say)
    say(f"{choice}: {time.monotonic() - started:.1f} s")
    return built


def test_a_dkms_package_of_the_suite_is_built_for_the_images_kernel(image):
    choice = DriverChoice("dkms", "r8168-dkms")
    built = timed(choice, image)
    kver = image.manifest["kernel_version"]
    assert built.kernel_version == kver and built.driver == "r8168"
    (module,) = [m for m in built.modules if m.name == "r8168"]
    assert any(alias.startswith("pci:v000010ECd00008168") for alias in module.aliases)
    assert module.vermagic.startswith(f"{kver} ") and module.build_id and module.version
    assert built.origin.startswith("Debian bookworm r8168-dkms ")
    assert module.file.is_file() and built.log.is_file()
    started = time.monotonic()
    assert timed(choice, image) == built  # cached: no second build
    assert time.monotonic() - started < 5


def test_a_module_that_does_not_compile_says_the_compilers_first_error(image, tmp_path):
    source = tmp_path / "broken"
    source.mkdir()
    (source / "Kbuild").write_text("obj-m += broken.o\n")
    (source / "broken.c").write_text(
        "#include <linux/module.h>\nstatic int __init broken_init(void)\n{\n\treturn foo;\n}\n"
        'module_init(broken_init);\nMODULE_LICENSE("GPL");\n'
    )
    choice = DriverChoice("module", str(source))
    with pytest.raises(NiclabError) as caught:
        timed(choice, image)
    message = str(caught.value)
    assert "\n" not in message
    assert re.search(r"the build failed: broken\.c:4:\d+: error: .foo. undeclared .*; whole log: ", message)
    log = Path(message.rpartition("whole log: ")[2])
    assert "broken.c:4" in log.read_text()
    assert not [p for p in store().glob(f"*{choice.slug}*") if p.is_dir()]  # nothing cached


def test_a_kernel_source_directory_is_built_under_another_name(image):
    choice = DriverChoice("kernel-source", "drivers/net/ethernet/intel/e1000e", "e1000e_vendor")
    built = timed(choice, image)
    assert [m.name for m in built.modules] == ["e1000e_vendor"] and built.driver == "e1000e_vendor"
    (module,) = built.modules
    assert any(alias.startswith("pci:v00008086d000010D3") for alias in module.aliases)
    assert built.origin.startswith("Debian linux-source-6.1 ") and built.origin.endswith(" " + choice.source)
    with pytest.raises(NoSection):  # stripped of its debug information, as Debian's modules are
        section(module.file.read_bytes(), ".debug_info")
    assert module.build_id and module.file.stat().st_size < 1 << 20
