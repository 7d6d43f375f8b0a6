"""`niclab nics`: the emulated NIC models a scenario can name."""

from __future__ import annotations

import argparse

from niclab.ui.console import EXIT_OK


def cmd_nics(args: argparse.Namespace) -> int:
    from niclab.model import nics
    from niclab.plumbing.backends.qemu_nics import qemu_nic

    print(f"{'model':<34}{'driver':<12}{'max MTU':>8}  {'PCI ID':<11}card")
    for model in nics.CATALOG:
        print(f"{model.name:<34}{model.driver:<12}{model.max_mtu:>8}  {model.pci_id:<11}{model.card}")
    notes = [model for model in nics.CATALOG if model.notes]
    if notes:
        print()
        for model in notes:
            properties = qemu_nic(model.name).properties
            qemu = f" (QEMU: {properties})" if properties else ""
            print(f"{model.name}: {model.notes}{qemu}")
    return EXIT_OK


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    nics = verbs.add_parser(
        "nics",
        help="list the emulated NIC models",
        description="The NIC models a scenario can name, their drivers and limits.",
    )
    nics.set_defaults(func=cmd_nics)
