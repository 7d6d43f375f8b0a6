"""A fake kernel build tree: Debian's packaged kernel repacked the way `make bzImage modules` lays out a tree.

Building a kernel from source is too slow here, so the tests take Debian's
vmlinuz, .config and modules (those the micro image uses, unpacked) and put
them where a built tree has them: arch/x86/boot/bzImage, .config,
include/config/kernel.release, modules.order (as 6.2+ writes it, with .o)
and each .ko beside its sources' path. niclab reads it like any tree.
"""

from __future__ import annotations

from pathlib import Path

from niclab.plumbing.image.kernelfiles import from_root, module_set
from niclab.plumbing.image.mirror import debian_mirror
from niclab.plumbing.image.rootfs import kernel_command, run_mmdebstrap
from niclab.plumbing.image.store import recipe
from niclab.plumbing.image.tartree import TarTree


def repack_debian_kernel(
    tree: Path, scratch: Path, suite: str = "bookworm", leave_out: dict[str, str] | None = None
) -> str:
    """Write a fake build tree of `suite`'s kernel at `tree`, without the modules (and config options) named in
    `leave_out` ({module: CONFIG option}); returns the kernel's release."""
    scratch.mkdir(parents=True, exist_ok=True)
    tar = scratch / f"{suite}-kernel.tar"
    if not tar.is_file():
        run_mmdebstrap(kernel_command(suite, debian_mirror("bookworm"), tar), scratch / "mmdebstrap.log", print)
    with TarTree(tar) as root:
        kernel = from_root(root)
        wanted = [m for m in recipe().modules if m.replace("-", "_") not in (leave_out or {})]
        modules = module_set(kernel, wanted)
        (tree / "arch/x86/boot").mkdir(parents=True)
        (tree / "arch/x86/boot/bzImage").write_bytes(kernel.read_kernel())
        assert kernel.config is not None
        config = kernel.config
    for option in (leave_out or {}).values():
        config = config.replace(f"CONFIG_{option}=m\n", f"# CONFIG_{option} is not set\n")
    (tree / ".config").write_text(config)
    (tree / "include/config").mkdir(parents=True)
    (tree / "include/config/kernel.release").write_text(kernel.version + "\n")
    prefix = f"usr/lib/modules/{kernel.version}/"
    order = []
    for entry in modules.entries:
        rel = entry.name.removeprefix(prefix)
        if rel.startswith("kernel/") and rel.endswith(".ko"):
            path = tree / rel.removeprefix("kernel/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(entry.data)
            order.append(rel.removeprefix("kernel/")[: -len(".ko")] + ".o")
        elif rel in ("modules.builtin", "modules.builtin.modinfo"):
            (tree / rel).write_bytes(entry.data)
    (tree / "modules.order").write_text("".join(line + "\n" for line in order))
    return kernel.version
