"""What a built .ko says of itself, and which of a build's modules drives the card."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.model.driver_choice import DriverChoice
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


def module_key(name: str) -> str:
    """modprobe treats - and _ alike."""
    return name.replace("-", "_")


def read_built(path: Path) -> BuiltModule:
    data = path.read_bytes()
    try:
        info = read_modinfo(data)
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise NiclabError(f"{path}: not a kernel module ({exc}); fix: remove it and build again") from None
    return BuiltModule(
        name=module_key(info.name or path.name.split(".", 1)[0]),
        file=path,
        version=info.version,
        srcversion=info.srcversion,
        build_id=build_id(data),
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
