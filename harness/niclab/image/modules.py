"""Pick kernel modules and their dependencies out of a kernel's modules.dep."""

from __future__ import annotations

import posixpath


def module_name(path: str) -> str:
    """kernel/drivers/net/ethernet/8390/ne2k-pci.ko -> ne2k_pci (modprobe treats - and _ alike)."""
    base = posixpath.basename(path)
    for suffix in (".ko.xz", ".ko.zst", ".ko.gz", ".ko"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return base.replace("-", "_")


def parse_modules_dep(text: str) -> dict[str, list[str]]:
    """path -> the paths it depends on, as depmod wrote them."""
    deps: dict[str, list[str]] = {}
    for line in text.splitlines():
        if ":" in line:
            path, _, rest = line.partition(":")
            deps[path.strip()] = rest.split()
    return deps


def closure(deps: dict[str, list[str]], wanted: list[str]) -> list[str]:
    """The module paths for `wanted` names and everything they depend on, sorted."""
    by_name = {module_name(path): path for path in deps}
    missing = [name for name in wanted if name.replace("-", "_") not in by_name]
    if missing:
        raise KeyError(", ".join(missing))
    chosen: set[str] = set()
    todo = [by_name[name.replace("-", "_")] for name in wanted]
    while todo:
        path = todo.pop()
        if path not in chosen:
            chosen.add(path)
            todo.extend(deps.get(path, []))
    return sorted(chosen)


def filter_modules_dep(deps: dict[str, list[str]], chosen: list[str]) -> str:
    return "".join(f"{path}: {' '.join(deps[path])}\n".replace(": \n", ":\n") for path in chosen)


def filter_aliases(text: str, chosen: list[str]) -> str:
    names = {module_name(path) for path in chosen}
    kept = [
        line for line in text.splitlines() if line.startswith("alias ") and line.split()[-1].replace("-", "_") in names
    ]
    return "".join(line + "\n" for line in kept)
