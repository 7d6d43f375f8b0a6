"""Does a node's kernel have what the scenario needs? Asked before anything boots.

Each need is a kernel module, built in or loadable (a build tree's .config decides); a missing one is named by
its config option and how to turn it on. A scenario's `driver:` is built here too (`check_drivers`): a failed
build, a module that would not bind its card, or a card a built-in module drives stops the run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from niclab.base.errors import NiclabError
from niclab.base.problems import did_you_mean
from niclab.model import bench, nics
from niclab.model.driver_choice import DriverChoice, module_key
from niclab.model.kernel_choice import KernelChoice
from niclab.model.lab.modalias import NETWORK_CLASS, Alias, PciDevice, drivers_for, parse_builtin_aliases
from niclab.model.scenario import Cell, Scenario
from niclab.model.scenario.template import cell_id
from niclab.plumbing.drivers.build import ensure_driver
from niclab.plumbing.image import Image
from niclab.plumbing.image.kernels import pin_kernel_image

#: module -> (its config option, what niclab uses it for)
CONFIG_OF = {
    "virtio_pci": ("VIRTIO_PCI", "the guest agent's channel and virtio NICs"),
    "virtio_console": ("VIRTIO_CONSOLE", "the guest agent's channel"),
    "sch_netem": ("NET_SCH_NETEM", "netem impairments and the between-cell reset"),
    "bonding": ("BONDING", "bonded links"),
    "e1000": ("E1000", "the e1000 NICs"),
    "e1000e": ("E1000E", "the e1000e NIC"),
    "e100": ("E100", "the Intel 8255x NICs"),
    "8139cp": ("8139CP", "the rtl8139 NIC"),
    "tulip": ("TULIP", "the tulip NIC"),
    "pcnet32": ("PCNET32", "the pcnet NIC"),
    "ne2k_pci": ("NE2K_PCI", "the ne2k_pci NIC"),
    "vmxnet3": ("VMXNET3", "the vmxnet3 NIC"),
    "virtio_net": ("VIRTIO_NET", "the virtio NICs"),
}
_ETHERNET = ("NETDEVICES", "ETHERNET")
#: option -> the menus and options it depends on (Kconfig): olddefconfig drops it while one of them is off
DEPENDS = {
    "NET_SCH_NETEM": ("NET_SCHED",),
    "BONDING": ("NETDEVICES", "NET_CORE"),
    "E1000": (*_ETHERNET, "NET_VENDOR_INTEL"),
    "E1000E": (*_ETHERNET, "NET_VENDOR_INTEL"),
    "E100": (*_ETHERNET, "NET_VENDOR_INTEL"),
    "8139CP": (*_ETHERNET, "NET_VENDOR_REALTEK"),
    "TULIP": (*_ETHERNET, "NET_VENDOR_DEC", "NET_TULIP"),
    "PCNET32": (*_ETHERNET, "NET_VENDOR_AMD"),
    "NE2K_PCI": (*_ETHERNET, "NET_VENDOR_8390"),
    "VMXNET3": ("NETDEVICES",),
    "VIRTIO_NET": ("NETDEVICES", "NET_CORE"),
    "VIRTIO_PCI": ("VIRTIO_MENU",),
}
#: Built in, whatever the scenario: the guest cannot start without them.
CORE = {
    "BLK_DEV_INITRD": "the initramfs",
    "RD_GZIP": "the initramfs is gzip-compressed",
    "DEVTMPFS": "/dev in the guest",
}
ALWAYS = ("virtio_pci", "virtio_console", "sch_netem", "bonding")


def needed_modules(scenario: Scenario) -> list[str]:
    """The modules every node of the scenario needs: the agent's channel, netem, bonding, its NICs' drivers,
    and those its benchmarks declare."""
    needs = list(ALWAYS)
    for link in scenario.links:
        for node in link.between:
            module = nics.get(link.model_for(node)).module.replace("-", "_")
            if module not in needs:
                needs.append(module)
    for spec in scenario.benchmarks:
        needs += [m.name for m in bench.get(spec.tool).guest.modules if m.name not in needs]
    return needs


def config_of(module: str) -> tuple[str, str, tuple[str, ...]]:
    """(config option, what niclab uses it for, the options it depends on) of a module."""
    declared = bench.kernel_modules().get(module)
    if declared is not None:
        return declared.option, declared.why, declared.depends
    option, why = CONFIG_OF.get(module, (module.upper(), f"module {module}"))
    return option, why, DEPENDS.get(option, ())


def config_values(text: str) -> dict[str, str]:
    """CONFIG_X=y lines as {X: y}; `# CONFIG_X is not set` lines are left out, like options never named."""
    return {m[1]: m[2] for m in re.finditer(r"^CONFIG_([A-Za-z0-9_]+)=(.*)$", text, re.MULTILINE)}


@dataclass(frozen=True)
class Missing:
    option: str  # NET_SCH_NETEM
    why: str  # what niclab needs it for
    state: str  # "is not set", or "=m, but sch_netem.ko was not built"
    depends: tuple[str, ...] = ()  # options it depends on that are off too (NET_SCHED)

    def describe(self) -> str:
        off = f"; it depends on {', '.join(f'CONFIG_{d}' for d in self.depends)}, off too" if self.depends else ""
        return f"CONFIG_{self.option} {self.state} ({self.why}{off})"


def missing(image: Image, needs: Sequence[str]) -> list[Missing]:
    """What of `needs` (and the core options) the image's kernel lacks, by config option."""
    config_path = image.directory / "config"
    values = config_values(config_path.read_text()) if config_path.is_file() else None
    have = set(image.manifest.get("modules", [])) | set(image.manifest.get("builtin_modules", []))
    found = []
    if values is not None:
        found += [Missing(opt, why, "is not set, it must be y") for opt, why in CORE.items() if values.get(opt) != "y"]
    for module in needs:
        if module in have:
            continue
        option, why, depends = config_of(module)
        value = (values or {}).get(option)
        if value == "m":
            state = f"=m, but {module}.ko was not built (run `make modules`)"
        elif value == "y":
            state = "=y, but modules.builtin does not list it (rebuild the tree)"
        else:
            state = "is not set"
        off = tuple(d for d in depends if values is not None and values.get(d) != "y")
        found.append(Missing(option, why, state, off))
    return found


def with_kernel(cells: Sequence[Cell], choice: KernelChoice) -> list[Cell]:
    """The cells with every node on `choice` (`run --kernel-build DIR`), whatever kernel the scenario names."""
    out: dict[str, Cell] = {}
    for cell in cells:
        nodes = {name: options.model_copy(update={"kernel": None}) for name, options in cell.scenario.nodes.items()}
        scenario = cell.scenario.model_copy(update={"kernel": choice, "nodes": nodes})
        params = cell.params
        if "kernel" in params:  # a kernel axis: its cells name the kernel they boot, the same one now
            params = {**params, "kernel": {"build": choice.build}}
        cid = cell_id(params) if params else cell.id
        out.setdefault(cid, Cell(cid, params, scenario))  # kernel=bookworm and =trixie are one cell now
    return list(out.values())


def check_kernels(cells: Sequence[Cell], progress: Callable[[str], None]) -> None:
    """Build (or find) the image of every kernel the cells boot; refuse a kernel that lacks what they need,
    and a module parameter its driver does not take. Boots nothing."""
    needs: dict[KernelChoice | None, list[str]] = {}
    users: dict[KernelChoice | None, str] = {}
    params: dict[tuple[KernelChoice | None, str, str], str] = {}  # (kernel, module, parameter) -> who asks
    for cell in cells:
        for node in cell.scenario.nodes:
            choice = cell.scenario.kernel_of(node)
            wanted = needs.setdefault(choice, [])
            wanted += [m for m in needed_modules(cell.scenario) if m not in wanted]
            users.setdefault(choice, f"cell {cell.id}, node {node}")
            provided = {module_key(c.name) for _, c in cell.scenario.drivers(node) if c.name}
            for module, name in cell.scenario.module_params(node):
                if module_key(module) not in provided:  # a driver's own module has its own parameters
                    params.setdefault((choice, module, name), f"cell {cell.id}, node {node}")
    problems = []
    for choice, wanted in needs.items():
        image = pin_kernel_image(choice, progress)
        lacking = missing(image, wanted) if choice is not None else []  # the recipe's own kernel has them all
        if lacking:
            problems.append(_lacking(choice, image, lacking, users[choice]))
        known = image.manifest.get("module_params", {})
        for (kernel, module, name), who in params.items():
            if kernel == choice and module in known and name not in known[module]:
                hint = did_you_mean(name, known[module])
                problems.append(
                    f"the {module} driver of kernel {image.manifest.get('kernel_version')} ({who}) has no parameter "
                    f"{name!r}; {hint + ' ' if hint else ''}it takes: {', '.join(known[module]) or 'none'} "
                    "(modinfo's parm)"
                )
    problems += check_drivers(cells, progress)
    if problems:
        raise NiclabError("\n".join(problems))


def check_drivers(cells: Sequence[Cell], progress: Callable[[str], None]) -> list[str]:
    """Build (or find) every driver the cells' `driver:` settings ask for, for the kernel of each node that
    boots it (a failed build raises, naming the module and its log); what would not bind its card: a module
    without an alias for the card's PCI ID, a card the kernel drives with a module built into it."""
    problems: list[str] = []
    done: set[tuple[KernelChoice | None, DriverChoice, str]] = set()
    for cell in cells:
        for spec in cell.scenario.topology().nodes:
            for pci_id, choice in spec.drivers:
                if (spec.kernel, choice, pci_id) in done:
                    continue
                done.add((spec.kernel, choice, pci_id))
                model = next(
                    p.model for p in spec.ports if p.driver == choice and nics.get(p.model).pci_id.lower() == pci_id
                )
                where = f"driver {choice} ({cell.id}, node {spec.name}'s {model} card, {pci_id})"
                image = pin_kernel_image(spec.kernel, progress)
                card = PciDevice.parse(pci_id, NETWORK_CLASS)
                builtin = [a.module for a in _kernel_aliases(image) if a.builtin and drivers_for(card, [a])]
                if builtin:
                    problems.append(
                        f"{where}: kernel {image.manifest.get('kernel_version')} has {builtin[0]} built in, so it "
                        f"binds the card before any module loads; build the kernel with {builtin[0]} as a module (=m)"
                    )
                    continue
                built = ensure_driver(choice, spec.kernel, image, progress)
                aliases = [
                    Alias(a, module_key(m.name))
                    for m in built.modules
                    if module_key(m.name) == module_key(built.driver)
                    for a in m.aliases
                ]
                if not drivers_for(card, aliases):
                    problems.append(
                        f"{where}: module {built.driver} has no alias for the card's PCI ID, so it would not bind "
                        "it; give the link a driver for that card"
                    )
    return problems


def _kernel_aliases(image: Image) -> list[Alias]:
    """The modules built into the image's kernel, by their aliases (modules.builtin.modinfo beside it)."""
    path = image.directory / "modules.builtin.modinfo"
    return parse_builtin_aliases(path.read_bytes()) if path.is_file() else []


def _lacking(choice: KernelChoice | None, image: Image, lacking: list[Missing], who: str) -> str:
    if choice is not None and choice.build:
        depends = [d for m in lacking for d in m.depends]
        switches = [f"-e {d}" for d in dict.fromkeys(depends)]
        switches += [f"-e {m.option}" if m.option in CORE else f"-m {m.option}" for m in lacking]
        # a tree built with O= has the source behind its `source` link, scripts/config there
        script = "source/scripts/config" if (Path(choice.build) / "source").is_dir() else "scripts/config"
        fix = f"  turn them on: cd {choice.build} && {script} --file .config {' '.join(switches)} "
        fix += "&& make olddefconfig bzImage modules; then run again"
    else:
        fix = f"  {choice or 'this'} kernel does not have them: choose another kernel"
    return (
        f"kernel {choice} ({image.manifest.get('kernel_version')}, for {who}) lacks what the scenario needs:\n"
        + "".join(f"  {m.describe()}\n" for m in lacking)
        + fix
    )
