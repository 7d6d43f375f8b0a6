"""What a built .ko says of itself, and which of a build's modules drives the card."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.model.driver_choice import MODULE_RE, DriverChoice, module_key
from niclab.plumbing.image.elf import build_id
from niclab.plumbing.image.modinfo import read_modinfo


@dataclass(frozen=True)
class BuiltModule:
    name: str  # module name as the kernel knows it (from .modinfo name=, else the file name), - -> _
    file: Path  # the .ko (uncompressed) in the build's cache dir
    version: str  # modinfo version= ("" if none)
    srcversion: str  # modinfo srcversion= ("" if none)
    build_id: str  # hex of the ELF .note.gnu.build-id ("" if none)
    vermagic: str
    aliases: tuple[str, ...]
    depends: tuple[str, ...]


__all__ = ["BuiltModule", "choose_driver", "module_key", "read_built"]


def read_built(path: Path, where: str) -> BuiltModule:
    """What the .ko at `path` (of the build `where` names) says of itself; NiclabError in one line if it is not a
    module, or names itself or what it depends on with anything but a module name (those names become paths of
    the guest's image and words of its shell commands)."""
    data = path.read_bytes()
    try:
        info = read_modinfo(data)
        note = build_id(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise NiclabError(
            f"{where}: {path} is not a kernel module ({exc}); fix: remove {path.parent} and build again"
        ) from None
    name = info.name or path.name.split(".", 1)[0]
    for what, value in [("name", name)] + [("depends", d) for d in info.depends]:
        if not MODULE_RE.fullmatch(value):
            raise NiclabError(
                f"{where}: {path} gives {what}={value[:60]!r}, not a module name (letters, digits, _ and -, at most "
                f"56); fix: correct its MODULE_* macros or the Makefile that names it"
            )
    for alias in info.aliases:
        if not alias or any(not 32 < ord(c) < 127 for c in alias):
            raise NiclabError(
                f"{where}: {path} gives alias={alias[:60]!r}, which has blanks, control or non-ASCII characters; "
                "fix: correct its MODULE_DEVICE_TABLE or MODULE_ALIAS"
            )
    return BuiltModule(
        name=module_key(name),
        file=path,
        version=info.version,
        srcversion=info.srcversion,
        build_id=note,
        vermagic=info.vermagic,
        aliases=info.aliases,
        depends=tuple(module_key(d) for d in info.depends),
    )


def choose_driver(choice: DriverChoice, modules: tuple[BuiltModule, ...]) -> str:
    """The module that drives the card: `name:` if given (it must be among them), else the only one."""
    names = [m.name for m in modules]
    if not names:
        raise NiclabError(f"driver {choice}: the build made no module (no .ko file); fix: check its Makefile")
    if choice.name:
        if module_key(choice.name) in names:
            return module_key(choice.name)
        raise NiclabError(
            f"driver {choice}: no module {choice.name} among those it built ({', '.join(names)}); "
            "fix: set `name:` to one of them"
        )
    if choice.kind == "named":
        return module_key(choice.source)
    if len(names) == 1:
        return names[0]
    raise NiclabError(f"driver {choice}: it builds {', '.join(names)}; fix: say which one drives the card with `name:`")
