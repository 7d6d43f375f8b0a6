"""Rename the module a kernel source directory's Makefile builds (`{kernel-source: ..., name: NEW}`).

`obj-$(CONFIG_E1000E) += e1000e.o` becomes `obj-m += e1000e_vendor.o`, and the lists of its objects
(`e1000e-objs :=`, `e1000e-y +=`, `e1000e-$(CONFIG_X) +=`) become the new module's. Kbuild names the module
after its object, so the .ko's name= and every message of the module follow.

Run as `python -m niclab.plumbing.drivers.makefile DIR NEW` by the build's hook, inside the build root.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

OBJ_LINE = re.compile(r"^(\s*)obj-(?:\$\(CONFIG_[A-Za-z0-9_]+\)|[ym])(\s*[:+]?=\s*)(.*)$")
OBJECT = re.compile(r"([A-Za-z0-9_-]+)\.o\b")


def modules_of(text: str) -> list[str]:
    """The modules the Makefile's obj- lines name (a `dir/` entry is a subdirectory, not a module)."""
    found: list[str] = []
    for line in _joined(text):
        if match := OBJ_LINE.match(line):
            found += [m for m in OBJECT.findall(match.group(3)) if m not in found]
    return found


def _joined(text: str) -> list[str]:
    return text.replace("\\\n", " ").splitlines()


def rename_module(text: str, new: str, old: str = "", directory: str = "") -> str:
    """The Makefile with module `old` (the only one it builds, else the one named as `directory`) renamed `new`;
    ValueError says which modules it has."""
    modules = modules_of(text)
    if not old:
        if len(modules) == 1:
            old = modules[0]
        elif directory in modules:
            old = directory
        else:
            raise ValueError(
                f"its Makefile builds {', '.join(modules) or 'no module'}; fix: build a directory with one module"
            )
    elif old not in modules:
        raise ValueError(f"its Makefile builds no module {old} (it builds {', '.join(modules) or 'none'})")
    escaped = re.escape(old)
    obj = re.compile(rf"^(\s*)obj-(?:\$\(CONFIG_[A-Za-z0-9_]+\)|[ym])(\s*[:+]?=\s*){escaped}\.o\s*$", re.M)
    objs = re.compile(rf"^(\s*){escaped}-(objs|y)(\s*[:+]?=)", re.M)
    conditional = re.compile(rf"^(\s*){escaped}-(\$\(CONFIG_[A-Za-z0-9_]+\))(\s*[:+]?=)", re.M)
    out, count = obj.subn(rf"\1obj-m\2{new}.o", text)
    if count == 0:  # the module shares its obj- line with others: take it out there, add its own line
        out = re.sub(rf"(^\s*obj-[^\n]*?)\s{escaped}\.o\b", r"\1", text, flags=re.M)
        out += f"\nobj-m += {new}.o\n"
    out = objs.sub(rf"\1{new}-y\3", out)
    out = conditional.sub(rf"\1{new}-\2\3", out)
    return out


def main(argv: list[str]) -> int:
    directory, new = Path(argv[0]), argv[1]
    makefile = directory / "Makefile"
    try:
        text = makefile.read_text()
        makefile.write_text(rename_module(text, new, directory=directory.name))
    except (OSError, ValueError) as exc:
        print(f"niclab-driver: renaming the module of {directory.name} to {new}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
